package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"time"

	"github.com/go-redis/cache/v9"
)

const configRate = 2730 // requests per second, as in the published measurement

type cfgRow struct {
	name   string
	series int
	na     string
	// open returns the request and, for ours, a counter of bytes the cache
	// read from Redis.
	open     func() (op func() error, l2Bytes func() int64, closeFn func(), err error)
	paced    *phase
	heap0    uint64 // HeapInuse when the phase started
	l2Read   int64
	fullRuns []*phase
}

func scenarioConfig(ctx context.Context, e *env) (*section, error) {
	cfg, raw := makeConfig(40 << 10)
	dur := pick(e, 5*time.Second, 60*time.Second)
	windows := pick(e, 5, 6)
	fullDur := pick(e, 300*time.Millisecond, 2*time.Second)
	const goroutines = 50
	sec := &section{id: 4, title: "The config object"}
	sec.intro = fmt.Sprintf("One %s JSON configuration document (generated: services, endpoints, rate limits, feature flags), "+
		"read at a fixed %s requests/s for %v per row (an open-loop pacer hands requests to 16 workers; requests more than half a "+
		"second late are dropped and counted), either from Redis on every request (GET + json.Unmarshal) or through a cache. "+
		"The rows run one after another, each after a forced GC; each is measured as a whole and in %d windows (the ranges are "+
		"the windows' min–max). CPU is the process's user+system time (getrusage), allocation is MemStats.TotalAlloc, GC pauses "+
		"MemStats.PauseTotalNs, peak heap the largest HeapInuse sampled every 100 ms, bytes from Redis the server's "+
		"total_net_output_bytes delta less the harness's own INFO replies. Then each row runs closed-loop with %d goroutines for "+
		"%v, %d times, interleaved.", fmtBytes(float64(len(raw))), fmtCount(configRate), dur, windows, goroutines, fullDur, e.reps)

	rawKey := e.k("cfg-raw") + "app"
	if err := e.rdb.Set(ctx, rawKey, raw, 0).Err(); err != nil {
		return nil, err
	}
	oursSpec := spec{kind: nameOurs, prefix: e.k("cfg-ours"), f: fmtJSON}
	if err := seedOurs(ctx, e, oursSpec, []string{"app"}, []*Config{cfg}); err != nil {
		return nil, err
	}
	gcPrefix := e.k("cfg-gocache")
	if err := seedRaw(ctx, e.rdb, gcPrefix, []string{"app"}, []*Config{cfg}, cache.New(&cache.Options{Redis: e.rdb}).Marshal); err != nil {
		return nil, err
	}
	peer := func(s spec) func() (func() error, func() int64, func(), error) {
		return func() (func() error, func() int64, func(), error) {
			c, err := open[*Config](e, s)
			if err != nil {
				return nil, nil, nil, err
			}
			return func() error {
				_, ok, err := c.Get(ctx, "app")
				if err == nil && !ok {
					err = missing("app", nil)
				}
				return err
			}, nil, c.Close, nil
		}
	}
	const redisRow = "Redis per request: GET + json.Unmarshal"
	rows := []*cfgRow{
		{name: "no-op (harness floor)", series: 1, open: func() (func() error, func() int64, func(), error) {
			return func() error { return nil }, nil, func() {}, nil
		}},
		{name: redisRow, series: 1, open: func() (func() error, func() int64, func(), error) {
			return func() error {
				b, err := e.rdb.Get(ctx, rawKey).Bytes()
				if err != nil {
					return err
				}
				var c Config
				return json.Unmarshal(b, &c)
			}, nil, func() {}, nil
		}},
		{name: "hybridcache GetOrCreate (JSON codec)", series: 0, open: func() (func() error, func() int64, func(), error) {
			o, err := openOurs[*Config](e, oursSpec)
			if err != nil {
				return nil, nil, nil, err
			}
			return func() error {
				_, err := o.c.GetOrCreate(ctx, "app", noLoad[*Config])
				return err
			}, o.remote.bytesRead.Load, o.Close, nil
		}},
		{name: "go-redis/cache Get (local TinyLFU, msgpack)", series: 2, open: peer(spec{kind: nameGoCache, prefix: gcPrefix, f: fmtMsgpack})},
		{name: "rueidis DoCache + json.Unmarshal", series: 3, open: peer(spec{kind: nameRueidis, prefix: e.k("cfg-raw"), f: fmtJSON})},
		{name: "go-redis CSC Get + json.Unmarshal", series: 4, open: peer(spec{kind: nameCSC, prefix: e.k("cfg-raw"), f: fmtJSON})},
	}

	// Paced phase, row by row.
	for _, r := range rows {
		e.progressf("    %s at %d req/s for %v", r.name, configRate, dur)
		op, l2b, closeFn, err := r.open()
		if err != nil {
			r.na = err.Error()
			continue
		}
		for range 3 { // fill the cache, dial connections
			if err := op(); err != nil {
				r.na = "warm-up failed: " + err.Error()
				break
			}
		}
		if r.na != "" {
			closeFn()
			continue
		}
		settle()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		r.heap0 = ms.HeapInuse
		var l2Before int64
		if l2b != nil {
			l2Before = l2b()
		}
		r.paced = runPaced(ctx, e.rdb, configRate, dur, windows, op)
		if l2b != nil {
			r.l2Read = l2b() - l2Before
		}
		closeFn()
		if r.paced.errors > 0 {
			e.note("scenario 4, %s: %d requests failed, first: %v", r.name, r.paced.errors, r.paced.firstErr)
		}
	}
	// Closed loop, interleaved.
	for rep := range e.reps {
		e.progressf("    full load, run %d/%d", rep+1, e.reps)
		for k := range rows {
			r := rows[(k+rep)%len(rows)]
			if r.na != "" || r.name == "no-op (harness floor)" {
				continue
			}
			op, _, closeFn, err := r.open()
			if err != nil {
				r.na = err.Error()
				continue
			}
			_ = op()
			timeEvery := 1
			if r.series == 0 {
				timeEvery = 8 // a clock read per call would weigh on a ~100 ns hit
			}
			settle()
			r.fullRuns = append(r.fullRuns, runFull(ctx, e.rdb, goroutines, fullDur, timeEvery, op))
			closeFn()
		}
	}

	var base *cfgRow
	for _, r := range rows {
		if r.name == redisRow && r.na == "" {
			base = r
		}
	}
	perReq := func(u usage, f func(usage) float64) float64 { return u.perRequest(f(u)) }
	cpuOf := func(u usage) float64 { return float64(u.cpu) }
	allocOf := func(u usage) float64 { return float64(u.alloc) }
	winSpread := func(p *phase, f func(usage) float64) spread {
		var xs []float64
		for _, w := range p.windows {
			if w.requests > 0 {
				xs = append(xs, perReq(w, f))
			}
		}
		return summarize(xs)
	}
	var t table
	t.Header = []string{"Row", "achieved req/s", "CPU per request", "CPU s/min (of one core)", "allocated per request", "allocated /min",
		"GC pauses /min (GCs)", "peak HeapInuse (at start)", "from Redis /min", "Redis server CPU s/min", "p99 latency"}
	t.Align = []byte{'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'}
	for _, r := range rows {
		if r.na != "" {
			t.Rows = append(t.Rows, []string{r.name, "n/a: " + r.na})
			continue
		}
		p := r.paced
		u := p.total
		cpuSpread := winSpread(p, cpuOf)
		allocSpread := winSpread(p, allocOf)
		fromRedis := "n/a: server shared"
		if u.srvOK && e.ownRedis {
			fromRedis = fmtBytes(u.perMinute(float64(u.netOut)))
		}
		redisCPU := "n/a"
		if u.srvOK && e.ownRedis {
			redisCPU = sig3(u.perMinute(u.redisCPU))
		}
		rate := float64(u.requests) / u.wall.Seconds()
		achieved := fmtCount(rate)
		if p.dropped > 0 {
			achieved += fmt.Sprintf(" (%s dropped)", fmtCount(float64(p.dropped)))
		}
		t.Rows = append(t.Rows, []string{
			r.name, achieved,
			fmtSpreadDur(cpuSpread),
			fmt.Sprintf("%s (%.1f%%)", sig3(u.perMinute(u.cpu.Seconds())), 100*u.cpu.Seconds()/u.wall.Seconds()),
			fmtBytes(allocSpread.Median) + fmt.Sprintf(" (%s–%s)", fmtBytes(allocSpread.Min), fmtBytes(allocSpread.Max)),
			fmtBytes(u.perMinute(float64(u.alloc))),
			fmt.Sprintf("%s ms (%s)", sig3(u.perMinute(float64(u.gcPause)/1e6)), fmtCount(u.perMinute(float64(u.numGC)))),
			fmt.Sprintf("%s (%s)", fmtBytes(float64(p.peakHeap)), fmtBytes(float64(r.heap0))),
			fromRedis, redisCPU, fmtDur(p.lat.quantile(0.99)),
		})
	}
	sec.add(fmt.Sprintf("**At %s requests/s for %v** (per-request figures: whole phase median of windows, min–max of windows):", fmtCount(configRate), dur))
	sec.addTable(t)

	if base != nil {
		var rt table
		rt.Header = []string{"Row", "CPU per request vs Redis per request", "CPU per request, net of harness floor", "allocation per request vs Redis per request", "GC pauses /min", "from Redis /min", "L2 bytes read by the cache (wrapper)"}
		rt.Align = []byte{'l', 'r', 'r', 'r', 'r', 'r', 'r'}
		floor := rows[0]
		bu := base.paced.total
		bcpu, balloc := perReq(bu, cpuOf), perReq(bu, allocOf)
		fcpu := 0.0
		if floor.na == "" {
			fcpu = perReq(floor.paced.total, cpuOf)
		}
		for _, r := range rows[2:] {
			if r.na != "" {
				rt.Rows = append(rt.Rows, []string{r.name, "n/a: " + r.na})
				continue
			}
			u := r.paced.total
			cpu, alloc := perReq(u, cpuOf), perReq(u, allocOf)
			net := "–"
			if floor.na == "" {
				net = fmt.Sprintf("%s vs %s: %s", fmtDur(max(cpu-fcpu, 0)), fmtDur(bcpu-fcpu), lessOrMore(bcpu-fcpu, cpu-fcpu))
			}
			l2 := "–"
			if r.series == 0 {
				l2 = fmtBytes(float64(r.l2Read))
			}
			fromRedis := "n/a"
			if u.srvOK && e.ownRedis {
				fromRedis = fmtBytes(u.perMinute(float64(u.netOut)))
			}
			rt.Rows = append(rt.Rows, []string{r.name, lessOrMore(bcpu, cpu), net, lessOrMore(balloc, alloc),
				fmt.Sprintf("%s vs %s ms", sig3(u.perMinute(float64(u.gcPause)/1e6)), sig3(bu.perMinute(float64(bu.gcPause)/1e6))),
				fromRedis, l2})
			if r.series == 0 {
				sec.headline("config at 2,730 req/s: CPU per request, Redis per request ÷ ours", lessTimes(bcpu, cpu), "≥20× less")
				sec.headline("config: allocation per request, Redis per request ÷ ours", lessTimes(balloc, alloc), "≥20× less; published 6.3 GiB/min")
				sec.headline("config: bytes from Redis per minute, ours (steady state)", fmtBytes(u.perMinute(float64(u.netOut)))+
					fmt.Sprintf(" (cache's own L2 reads: %s)", fmtBytes(float64(r.l2Read))), "0")
				sec.headline("config: GC pauses per minute, ours vs Redis per request", fmt.Sprintf("%s vs %s ms",
					sig3(u.perMinute(float64(u.gcPause)/1e6)), sig3(bu.perMinute(float64(bu.gcPause)/1e6))), "published 10 vs 130 ms/min")
			}
		}
		sec.add("**Compared with reading Redis on every request** (“N× less” = Redis per request ÷ row, “N× more” the inverse; the harness floor is the no-op row: " +
			"the pacer and workers themselves):")
		sec.addTable(rt)
		sec.add(fmt.Sprintf("Published (.NET): re-reading the document on every request moved 6.3 GiB/min, spent 27.5%% of wall time parsing, "+
			"130 vs 10 ms/min in GC pauses and 267 vs 81 MiB of memory. Here Redis per request used %.1f%% of one core and moved %s/min.",
			100*bu.cpu.Seconds()/bu.wall.Seconds(), fmtBytes(bu.perMinute(float64(bu.netOut)))))
	}

	// Full load.
	var ft table
	ft.Header = []string{"Row", "throughput req/s", "vs Redis per request", "p50", "p99", "CPU per request"}
	ft.Align = []byte{'l', 'r', 'r', 'r', 'r', 'r'}
	thr := func(r *cfgRow) []float64 {
		var out []float64
		for _, p := range r.fullRuns {
			out = append(out, float64(p.total.requests)/p.total.wall.Seconds())
		}
		return out
	}
	var bars []bar
	for _, r := range rows[1:] {
		if r.na != "" || len(r.fullRuns) == 0 {
			ft.Rows = append(ft.Rows, []string{r.name, "n/a: " + r.na})
			bars = append(bars, bar{Label: r.name, Series: r.series, Caption: "n/a"})
			continue
		}
		tp := summarize(thr(r))
		vs := "1 (baseline)"
		if r != base && base != nil && len(base.fullRuns) == len(r.fullRuns) {
			vs = fmtSpread(summarize(ratios(thr(r), thr(base))), "×")
		}
		var p50s, p99s, cpus []float64
		for _, p := range r.fullRuns {
			p50s = append(p50s, p.lat.quantile(0.5))
			p99s = append(p99s, p.lat.quantile(0.99))
			cpus = append(cpus, perReq(p.total, cpuOf))
		}
		ft.Rows = append(ft.Rows, []string{r.name, fmt.Sprintf("%s (%s–%s)", tickLabel3(tp.Median), tickLabel3(tp.Min), tickLabel3(tp.Max)), vs, fmtDur(summarize(p50s).Median), fmtSpreadDur(summarize(p99s)), fmtDur(summarize(cpus).Median)})
		bars = append(bars, bar{Label: r.name, Value: tp.Median, Lo: tp.Min, Hi: tp.Max, Series: r.series, Caption: tickLabel3(tp.Median) + " req/s"})
		if r.series == 0 && base != nil && len(base.fullRuns) == len(r.fullRuns) {
			sec.headline("config, 50 goroutines: throughput ours ÷ Redis per request", fmtSpread(summarize(ratios(thr(r), thr(base))), "×"), "")
		}
	}
	sec.add(fmt.Sprintf("**Full load: %d goroutines in closed loops for %v, %d runs** (throughput median with min–max over runs; our row times one call in 8):",
		goroutines, fullDur, e.reps))
	sec.addTable(ft)

	var cbars []bar
	for _, r := range rows {
		if r.na != "" || r.paced == nil {
			cbars = append(cbars, bar{Label: r.name, Series: r.series, Caption: "n/a"})
			continue
		}
		s := winSpread(r.paced, cpuOf)
		cbars = append(cbars, bar{Label: r.name, Value: s.Median, Lo: s.Min, Hi: s.Max, Series: r.series, Caption: fmtDur(s.Median)})
	}
	sec.addChart("4-config-cpu.svg", barChart{
		Title: fmt.Sprintf("4. Config at %s req/s: CPU per request (median of windows, whisker min–max)", fmtCount(configRate)),
		Unit:  "CPU per request", Log: true, Dur: true, Bars: cbars,
	})
	sec.addChart("4-config-full-load.svg", barChart{
		Title: fmt.Sprintf("4. Config, %d goroutines: throughput (median of runs, whisker min–max)", goroutines),
		Unit:  "requests/s", Log: true, Bars: bars,
	})
	return sec, nil
}

// lessTimes formats base/x as "N×", or "≥N×" when x is too small to
// measure (then N is base over one unit).
func lessTimes(base, x float64) string {
	if x <= 0 {
		return "≥" + sig3(base) + "×"
	}
	return sig3(base/x) + "×"
}

// lessOrMore says how x compares with base: "N× less" (base/x) when x is
// smaller, "N× more" (x/base) when it is larger.
func lessOrMore(base, x float64) string {
	if x > base {
		return sig3(x/base) + "× more"
	}
	return lessTimes(base, x) + " less"
}
