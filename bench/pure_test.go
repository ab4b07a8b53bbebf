package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"single", []float64{7}, 0.99, 7},
		{"p50 odd", []float64{5, 1, 3}, 0.5, 3},
		{"p50 even is lower middle", []float64{4, 1, 3, 2}, 0.5, 2},
		{"p0 is min", []float64{4, 1, 3, 2}, 0, 1},
		{"p100 is max", []float64{4, 1, 3, 2}, 1, 4},
		{"p99 of 100", seq(1, 100), 0.99, 99},
		{"p99 of 1000", seq(1, 1000), 0.99, 990},
		{"p90 of 10", seq(1, 10), 0.9, 9},
		{"q above 1 clamps", []float64{1, 2}, 1.5, 2},
		{"q below 0 clamps", []float64{1, 2}, -1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.xs, tt.q); got != tt.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.xs, tt.q, got, tt.want)
			}
		})
	}
	if got := percentile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("percentile(nil) = %v, want NaN", got)
	}
	xs := []float64{3, 1, 2}
	percentile(xs, 0.5)
	if xs[0] != 3 || xs[1] != 1 || xs[2] != 2 {
		t.Errorf("percentile modified its input: %v", xs)
	}
}

func seq(from, to int) []float64 {
	var out []float64
	for i := from; i <= to; i++ {
		out = append(out, float64(i))
	}
	return out
}

func TestDurPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 1000; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Microsecond)
	}
	got := durPercentiles(ds, 0.5, 0.99, 1)
	want := []float64{500e3, 990e3, 1000e3}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("quantile %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

func TestSummarize(t *testing.T) {
	s := summarize([]float64{5, 1, math.NaN(), 4, 2, 3})
	if s.N != 5 || s.Median != 3 || s.Min != 1 || s.Max != 5 || s.Q1 != 2 || s.Q3 != 4 {
		t.Errorf("summarize = %+v, want N 5, median 3, min 1, max 5, Q1 2, Q3 4", s)
	}
	if s := summarize([]float64{1, 2, 3, 4}); s.Median != 2.5 {
		t.Errorf("median of 1..4 = %v, want 2.5", s.Median)
	}
	if s := summarize(nil); s.N != 0 || !math.IsNaN(s.Median) {
		t.Errorf("summarize(nil) = %+v, want N 0 and NaN median", s)
	}
}

func TestRatios(t *testing.T) {
	got := ratios([]float64{2, 9, 5}, []float64{1, 3})
	if len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Errorf("ratios = %v, want [2 3]", got)
	}
}

func TestHistBuckets(t *testing.T) {
	// Every value falls in a bucket whose bounds contain it, and bucket
	// bounds tile the line without gaps.
	prevHi := int64(-1)
	for i := 0; i < histBuckets; i++ {
		lo, hi := histBounds(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, want %d", i, lo, prevHi+1)
		}
		if histIndex(lo) != i || histIndex(hi) != i {
			t.Fatalf("bucket %d [%d,%d]: index(lo) %d, index(hi) %d", i, lo, hi, histIndex(lo), histIndex(hi))
		}
		if lo >= histExact && float64(hi-lo+1)/float64(lo) > 1.0/histSub+1e-9 {
			t.Fatalf("bucket %d [%d,%d] is wider than 1/%d of its start", i, lo, hi, histSub)
		}
		prevHi = hi
	}
	if got := histIndex(math.MaxInt64); got != histBuckets-1 {
		t.Errorf("index(MaxInt64) = %d, want last bucket %d", got, histBuckets-1)
	}
	if got := histIndex(-5); got != 0 {
		t.Errorf("index(-5) = %d, want 0", got)
	}
}

func TestHistQuantile(t *testing.T) {
	var h hist
	if !math.IsNaN(h.quantile(0.5)) {
		t.Error("empty histogram: want NaN")
	}
	exact := make([]float64, 0, 100000)
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		v := int64(r.ExpFloat64() * 50000) // ns, long tail
		h.record(v)
		exact = append(exact, float64(v))
	}
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999} {
		want := percentile(exact, q)
		got := h.quantile(q)
		if math.Abs(got-want) > 0.035*want+1 {
			t.Errorf("q%v: got %v, want %v within 3.5%%", q, got, want)
		}
	}
	if got, want := h.quantile(1), percentile(exact, 1); got != want {
		t.Errorf("q1: got %v, want max %v", got, want)
	}
	var a, b hist
	for i := int64(1); i <= 100; i++ {
		if i%2 == 0 {
			a.record(i)
		} else {
			b.record(i)
		}
	}
	a.merge(&b)
	if a.n != 100 || a.max != 100 || a.quantile(0.5) != 50 {
		t.Errorf("merged: n %d, max %d, p50 %v; want 100, 100, 50", a.n, a.max, a.quantile(0.5))
	}
}

func TestTableMarkdown(t *testing.T) {
	tb := table{
		Header: []string{"Row", "p50", "note"},
		Align:  []byte{'l', 'r'},
		Rows: [][]string{
			{"ours | L1", "63 ns", "a\nb"},
			{"short"},
		},
	}
	got := tb.markdown()
	want := "" +
		"| Row        |   p50 | note |\n" +
		"| ---------- | ----: | ---- |\n" +
		"| ours \\| L1 | 63 ns | a b  |\n" +
		"| short      |       |      |\n"
	if got != want {
		t.Errorf("markdown:\n%s\nwant:\n%s", got, want)
	}
	if got := (table{}).markdown(); got != "" {
		t.Errorf("empty table: got %q, want empty", got)
	}
	centred := table{Header: []string{"x"}, Align: []byte{'c'}}.markdown()
	if !strings.Contains(centred, "| :-: |") {
		t.Errorf("centred column: got %q, want a :-: rule", centred)
	}
}

func TestFormatting(t *testing.T) {
	tests := []struct{ got, want string }{
		{fmtDur(63.24), "63.2 ns"},
		{fmtDur(999), "999 ns"},
		{fmtDur(57_340), "57.3 µs"},
		{fmtDur(3_214_000), "3.21 ms"},
		{fmtDur(1.5e9), "1.50 s"},
		{fmtDur(math.NaN()), "–"},
		{fmtSpreadDur(spread{Median: 57_300, Min: 55_000, Max: 60_100, N: 5}), "57.3 µs (55.0–60.1)"},
		{fmtSpreadDur(spread{Median: 80, N: 1}), "80.0 ns"},
		{fmtSpread(spread{Median: 1.25, Min: 1.21, Max: 1.3, N: 3}, "×"), "1.25× (1.21–1.30)"},
		{fmtCount(1234567), "1,234,567"},
		{fmtCount(-1000), "-1,000"},
		{fmtCount(12), "12"},
		{fmtBytes(512), "512 B"},
		{fmtBytes(40 * 1024), "40.0 KiB"},
		{fmtBytes(6.3 * (1 << 30)), "6.30 GiB"},
		{sig3(0.004), "0.004"},
		{sig3(0.0004), "0.0004"},
		{sig3(1234), "1234"},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: got %q, want %q", i, tt.got, tt.want)
		}
	}
}

func TestBarChartSVG(t *testing.T) {
	c := barChart{
		Title: "Per-read cost <in-process> & co",
		Unit:  "ns/op",
		Bars: []bar{
			{Label: "sync.Map", Value: 20, Series: 1},
			{Label: "ours", Value: 80, Lo: 70, Hi: 90},
			{Label: "peer \"x\"", Value: 40, Series: 2},
			{Label: "broken", Value: math.NaN(), Caption: "n/a: no batch API"},
		},
		Note: "median of 5 runs",
	}
	out := c.svg()
	checkXML(t, out)
	for _, s := range []string{"&lt;in-process&gt; &amp; co", "peer &#34;x&#34;", "n/a: no batch API", "median of 5 runs", "80.0 ns/op"} {
		if !strings.Contains(out, s) {
			t.Errorf("svg lacks %q", s)
		}
	}
	// Bars are proportional to their values on a linear axis from 0.
	w := rectWidths(out)
	if len(w) != 3 {
		t.Fatalf("got %d bars, want 3 (the n/a one has none): %v", len(w), w)
	}
	if math.Abs(w[1]/w[0]-4) > 0.05 || math.Abs(w[2]/w[0]-2) > 0.05 {
		t.Errorf("bar widths %v are not in the ratio 1:4:2", w)
	}
	if c.svg() != out {
		t.Error("svg output is not deterministic")
	}
	// The label column grows with the longest label.
	long := barChart{Bars: []bar{{Label: strings.Repeat("x", 60), Value: 1}}}
	if w := long.labelWidth(); w < 60*6 {
		t.Errorf("label column for 60 characters is %d px wide", w)
	}
	if !strings.Contains(long.svg(), fmt.Sprintf(`width="%d"`, long.labelWidth()+svgPlotW+svgRightW)) {
		t.Error("svg width does not follow the label column")
	}
}

func TestBarChartLog(t *testing.T) {
	c := barChart{Unit: "ns", Log: true, Bars: []bar{{Label: "a", Value: 50}, {Label: "b", Value: 50_000}, {Label: "zero", Value: 0}}}
	lo, hi := c.domain()
	if lo != 10 || hi != 100_000 {
		t.Errorf("log domain = [%v, %v], want [10, 100000]", lo, hi)
	}
	out := c.svg()
	checkXML(t, out)
	w := rectWidths(out)
	if len(w) != 2 {
		t.Fatalf("got %d bars, want 2: %v", len(w), w)
	}
	// 50 and 50,000 are three decades apart: on a four-decade axis the
	// second bar is 3/4 of the plot longer than the first.
	plotW := float64(svgPlotW)
	if got := w[1] - w[0]; math.Abs(got-0.75*plotW) > 1 {
		t.Errorf("log bars differ by %v px, want %v", got, 0.75*plotW)
	}
	for _, tick := range []string{">10<", ">100<", ">1k<", ">10k<", ">100k<"} {
		if !strings.Contains(out, tick) {
			t.Errorf("log axis lacks tick %s", tick)
		}
	}
	empty := barChart{Title: "nothing"}.svg()
	checkXML(t, empty)
}

func TestNiceCeil(t *testing.T) {
	for _, tt := range []struct{ in, want float64 }{{0.7, 1}, {1, 1}, {1.2, 2}, {2.2, 2.5}, {3, 5}, {7, 10}, {420, 500}, {0, 1}} {
		if got := niceCeil(tt.in); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("niceCeil(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if got := tickLabel(1500); got != "1.5k" {
		t.Errorf("tickLabel(1500) = %q, want 1.5k", got)
	}
	if got := tickLabel(2e6); got != "2M" {
		t.Errorf("tickLabel(2e6) = %q, want 2M", got)
	}
}

func checkXML(t *testing.T, s string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("svg is not well-formed XML: %v\n%s", err, s)
		}
	}
}

var rectWidth = regexp.MustCompile(`<rect x="[0-9.]+" y="[0-9]+" width="([0-9.]+)"`)

func rectWidths(svg string) []float64 {
	var out []float64
	for _, m := range rectWidth.FindAllStringSubmatch(svg, -1) {
		f, _ := strconv.ParseFloat(m[1], 64)
		out = append(out, f)
	}
	return out
}

func TestParseInfo(t *testing.T) {
	a := parseInfo("# Commandstats\r\ncmdstat_get:calls=10,usec=50,usec_per_call=5.00\r\ncmdstat_info:calls=3,usec=9\r\n" +
		"cmdstat_client|tracking:calls=1,usec=2\r\n# Stats\r\ntotal_net_output_bytes:1000\r\n# CPU\r\nused_cpu_user:1.5\r\nused_cpu_sys:0.5\r\n")
	if a["total_net_output_bytes"] != "1000" || a["used_cpu_sys"] != "0.5" {
		t.Fatalf("parseInfo: got %v", a)
	}
	calls := commandCalls(a)
	if calls["get"] != 10 || calls["info"] != 3 || calls["client|tracking"] != 1 || len(calls) != 3 {
		t.Errorf("commandCalls = %v, want get 10, info 3, client|tracking 1", calls)
	}
	before := serverCounters{calls: calls, netOut: 1000, cpu: 2, available: true}
	after := serverCounters{calls: map[string]int64{"get": 15, "info": 9, "mget": 2, "client|tracking": 1}, netOut: 5000, cpu: 2.5, available: true}
	d := before.delta(after)
	if d.commands != 7 || d.byCommand["get"] != 5 || d.byCommand["mget"] != 2 || d.netOut != 4000 || d.cpu != 0.5 {
		t.Errorf("delta = %+v, want 7 commands (get 5, mget 2; info excluded), 4000 bytes, 0.5 s", d)
	}
	if got, want := d.describe(), "GET 5, MGET 2"; got != want {
		t.Errorf("describe = %q, want %q", got, want)
	}
	if d := (serverCounters{}).delta(after); d.available {
		t.Error("delta from an unavailable snapshot is available")
	}
}

func TestDedupeLines(t *testing.T) {
	got := dedupeLines("a\n\nb\na\n  a  \n")
	want := []countedLine{{"a", 3}, {"b", 1}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("dedupeLines = %v, want %v", got, want)
	}
}

func TestLessOrMore(t *testing.T) {
	if got := lessOrMore(100, 4); got != "25.0× less" {
		t.Errorf("lessOrMore(100, 4) = %q", got)
	}
	if got := lessOrMore(100, 125); got != "1.25× more" {
		t.Errorf("lessOrMore(100, 125) = %q", got)
	}
}

func TestLessTimes(t *testing.T) {
	if got := lessTimes(100, 4); got != "25.0×" {
		t.Errorf("lessTimes(100, 4) = %q", got)
	}
	if got := lessTimes(100, 0); got != "≥100×" {
		t.Errorf("lessTimes(100, 0) = %q", got)
	}
}

func TestDurTicks(t *testing.T) {
	c := barChart{Dur: true, Log: true, Bars: []bar{{Label: "a", Value: 50}, {Label: "b", Value: 5e6}}}
	out := c.svg()
	for _, tick := range []string{">10 ns<", ">100 ns<", ">1 µs<", ">10 µs<", ">100 µs<", ">1 ms<", ">10 ms<"} {
		if !strings.Contains(out, tick) {
			t.Errorf("duration axis lacks tick %s", tick)
		}
	}
}

func TestTallyReads(t *testing.T) {
	ms := time.Millisecond
	// The event runs from 100 to 200 ms, the window after it to 300 ms; B
	// reconciled at 250 ms, C never did (its reconciliation is "after").
	recon := [2]time.Duration{250 * ms, 300 * ms}
	reads := []outageRead{
		{reader: 0, at: 50 * ms, took: 1 * ms, stale: true}, // before the event: not counted
		{reader: 0, at: 100 * ms, took: 2 * ms, stale: true},
		{reader: 1, at: 199 * ms, took: 3 * ms},
		{reader: 0, at: 200 * ms, took: 4 * ms, stale: true}, // after, before B reconciled
		{reader: 0, at: 250 * ms, took: 5 * ms, stale: true}, // after B reconciled
		{reader: 0, at: 260 * ms, took: 6 * ms, failed: true},
		{reader: 1, at: 270 * ms, took: 7 * ms, stale: true}, // C never reconciled
		{reader: 0, at: 300 * ms, took: 8 * ms, stale: true}, // past the window
	}
	got := tallyReads(reads, 100*ms, 200*ms, 300*ms, recon)
	if got.during != 2 || got.after != 4 {
		t.Errorf("during, after = %d, %d; want 2, 4", got.during, got.after)
	}
	if got.staleBefore != 3 || got.staleAfter != 1 || got.checkedAfter != 2 || got.failed != 1 {
		t.Errorf("staleBefore %d, staleAfter %d, checkedAfter %d, failed %d; want 3, 1, 2, 1",
			got.staleBefore, got.staleAfter, got.checkedAfter, got.failed)
	}
	if want := []float64{float64(2 * ms), float64(3 * ms)}; fmt.Sprint(got.latDuring) != fmt.Sprint(want) {
		t.Errorf("latDuring = %v, want %v", got.latDuring, want)
	}
	if len(got.latAfter) != 4 {
		t.Errorf("latAfter has %d values, want 4", len(got.latAfter))
	}
}

func TestLossProgress(t *testing.T) {
	tests := []struct {
		before, now            uint64
		wantSeen, wantReconcil bool
	}{
		{3, 3, false, false},
		{3, 4, true, false},
		{3, 5, true, true},
		{3, 7, true, true},
	}
	for _, tt := range tests {
		seen, rec := lossProgress(hybrid.Stats{Bus: hybrid.BusStats{Losses: tt.before}}, hybrid.Stats{Bus: hybrid.BusStats{Losses: tt.now}})
		if seen != tt.wantSeen || rec != tt.wantReconcil {
			t.Errorf("lossProgress(Bus.Losses %d -> %d) = %v, %v; want %v, %v", tt.before, tt.now, seen, rec, tt.wantSeen, tt.wantReconcil)
		}
	}
}

func TestOutageIndex(t *testing.T) {
	for _, i := range []int{0, 7, 999} {
		if got, err := outageIndex(outageKey(i)); err != nil || got != i {
			t.Errorf("outageIndex(%q) = %d, %v; want %d", outageKey(i), got, err, i)
		}
	}
	for _, k := range []string{"", "k", "x1", "k-1", "k1000", "k01", "k1a"} {
		if _, err := outageIndex(k); err == nil {
			t.Errorf("outageIndex(%q): no error", k)
		}
	}
}

func TestFmtSince(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-1, "–"},
		{0, "< 1.00 ms"},
		{999 * time.Microsecond, "< 1.00 ms"},
		{3250 * time.Microsecond, "3.25 ms"},
	}
	for _, tt := range tests {
		if got := fmtSince(tt.d, time.Millisecond); got != tt.want {
			t.Errorf("fmtSince(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
	if got := pair(1234, int64(0)); got != "1,234 / 0" {
		t.Errorf("pair(1234, 0) = %q", got)
	}
}

func TestTimeToAll(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	tests := []struct {
		name string
		ends [][][]time.Duration // [instance][caller][key]
		want time.Duration
	}{
		{"none", nil, 0},
		{"one caller", [][][]time.Duration{{ms(3, 9, 1)}}, 9 * time.Millisecond},
		{"first caller per key counts", [][][]time.Duration{{ms(3, 9, 1), ms(8, 2, 7)}}, 3 * time.Millisecond},
		{"slowest instance counts", [][][]time.Duration{{ms(3, 9), ms(8, 2)}, {ms(5, 4), ms(6, 6)}}, 5 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := timeToAll(tt.ends); got != tt.want {
				t.Errorf("timeToAll = %v, want %v", got, tt.want)
			}
		})
	}
}
