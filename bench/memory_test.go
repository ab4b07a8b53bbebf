package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/maypok86/otter/v2"

	"github.com/hybridcache/hybridcache/hybrid"
)

// The memory figures of a large L1 (bench/RESULTS.md, "Memory of a large
// L1"): real heap bytes per entry against what the weigher charges, and
// what a full L1 costs the garbage collector, for our L1, otter alone and
// a plain map. The default run is small (50,000 entries, 256 MiB of
// garbage, a few seconds); HYBRID_BENCH_MEMORY=1 runs the figures
// (1,000,000 entries, 2 GiB of garbage):
//
//	HYBRID_BENCH_MEMORY=1 go test -count=1 -v -run TestMemoryL1 .

// memValueLen is the length of each entry's value: the 230 B.
const memValueLen = 230

// memDoc is the value cached: a pointer to a struct holding 230 bytes of
// text, as a service caches a decoded record.
type memDoc struct {
	Body string `json:"body"`
}

// memKey and memValue make entry i's key and value, each its own
// allocation, as a cache filled from a database holds them.
func memKey(i int) string { return "item:" + strconv.Itoa(10_000_000+i) }

func memValue(i int) *memDoc {
	b := make([]byte, memValueLen)
	for j := range b {
		b[j] = 'a' + byte((i+j)%26)
	}
	return &memDoc{Body: string(b)}
}

// memCase is one way of holding the entries: fill stores n of them and
// returns what holds them and the bytes its weigher charged (0: none).
type memCase struct {
	name string
	fill func(t *testing.T, n int) (holder any, weighed uint64, done func())
}

// memOverhead is what hybrid's weigher adds to every entry besides its
// key and encoded value (hybrid/local.go, entryOverhead); otter alone is
// given the same rule over the value's length.
const memOverhead = 64

var memCases = []memCase{
	{"no L1 (nothing held)", func(t *testing.T, n int) (any, uint64, func()) {
		return nil, 0, func() {}
	}},
	{"no cache (map[string]*memDoc)", func(t *testing.T, n int) (any, uint64, func()) {
		m := make(map[string]*memDoc)
		for i := range n {
			m[memKey(i)] = memValue(i)
		}
		return m, 0, func() {}
	}},
	{"otter alone", func(t *testing.T, n int) (any, uint64, func()) {
		c := otter.Must(&otter.Options[string, *memDoc]{
			MaximumWeight: 1 << 40,
			Weigher: func(k string, v *memDoc) uint32 {
				return uint32(len(k) + len(v.Body) + memOverhead)
			},
		})
		for i := range n {
			c.Set(memKey(i), memValue(i))
		}
		if got := c.EstimatedSize(); got != n {
			t.Fatalf("otter holds %d entries, want %d", got, n)
		}
		return c, c.WeightedSize(), func() {}
	}},
	{"hybrid L1 (Cache[*memDoc], no Remote)", func(t *testing.T, n int) (any, uint64, func()) {
		return fillHybrid(t, n, hybrid.Options{}, memValue)
	}},
	{"hybrid L1, FailSafeMaxAge 1h", func(t *testing.T, n int) (any, uint64, func()) {
		return fillHybrid(t, n, hybrid.Options{FailSafeMaxAge: time.Hour}, memValue)
	}},
	{"hybrid L1, Cache[[]byte] (JSON: base64)", func(t *testing.T, n int) (any, uint64, func()) {
		return fillHybrid(t, n, hybrid.Options{}, func(i int) []byte { return []byte(memValue(i).Body) })
	}},
}

// memNone, memOtter and memOurs are the indexes in memCases of nothing
// held, otter alone and our L1 as configured by default.
const memNone, memOtter, memOurs = 0, 2, 3

// fillHybrid fills an L1-only cache made with o (lifetimes of an hour, a
// bound that holds every entry) with n entries, value(i) for key i.
func fillHybrid[V any](t *testing.T, n int, o hybrid.Options, value func(int) V) (any, uint64, func()) {
	o.LocalMaxBytes, o.TTL, o.LocalTTL = 1<<40, time.Hour, time.Hour
	c, err := hybrid.New[V](o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := c.Set(t.Context(), memKey(i), value(i)); err != nil {
			t.Fatal(err)
		}
	}
	st := c.Stats().L1
	if st.Entries != n {
		t.Fatalf("L1 holds %d entries, want %d", st.Entries, n)
	}
	return c, st.Size, func() { c.Close() }
}

// heapLive is the heap's live bytes and objects after two full
// collections.
func heapLive() (bytes, objects uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.HeapObjects
}

// gcSample is what the runtime reports of its collector at a moment.
type gcSample struct {
	cpu, idle float64 // GC CPU in seconds, all of it and the idle mark workers'
	cycles    uint64
	goal      uint64 // the heap goal, bytes
	scan      uint64 // scannable heap bytes
	pauses    *metrics.Float64Histogram
	process   time.Duration // user plus system CPU of the process
	at        time.Time
}

func sampleGC() gcSample {
	ms := []metrics.Sample{
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/cpu/classes/gc/mark/idle:cpu-seconds"},
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/sched/pauses/total/gc:seconds"},
		{Name: "/gc/heap/goal:bytes"},
		{Name: "/gc/scan/heap:bytes"},
	}
	metrics.Read(ms)
	return gcSample{
		cpu:     ms[0].Value.Float64(),
		idle:    ms[1].Value.Float64(),
		cycles:  ms[2].Value.Uint64(),
		pauses:  ms[3].Value.Float64Histogram(),
		goal:    ms[4].Value.Uint64(),
		scan:    ms[5].Value.Uint64(),
		process: cpuTime(),
		at:      time.Now(),
	}
}

// gcCost is the collector's work over a stretch of time.
type gcCost struct {
	wall, process time.Duration
	cpu, idle     float64
	cycles        uint64
	goal, scan    uint64   // the heap goal and the scannable heap at the start, bytes
	pauses        []uint64 // stop-the-world pauses per bucket of bounds
	bounds        []float64
}

func gcBetween(a, b gcSample) gcCost {
	g := gcCost{
		wall:    b.at.Sub(a.at),
		process: b.process - a.process,
		cpu:     b.cpu - a.cpu,
		idle:    b.idle - a.idle,
		cycles:  b.cycles - a.cycles,
		goal:    a.goal,
		scan:    a.scan,
		pauses:  make([]uint64, len(b.pauses.Counts)),
		bounds:  b.pauses.Buckets,
	}
	for i := range g.pauses {
		g.pauses[i] = b.pauses.Counts[i] - a.pauses.Counts[i]
	}
	return g
}

// pauseQuantiles pools the pauses of gs and returns their count and the
// given quantiles, each as the upper bound of its bucket, in seconds.
func pauseQuantiles(gs []gcCost, qs ...float64) (uint64, []float64) {
	counts := make([]uint64, len(gs[0].pauses))
	var n uint64
	for _, g := range gs {
		for i, c := range g.pauses {
			counts[i] += c
			n += c
		}
	}
	bounds := gs[0].bounds
	out := make([]float64, len(qs))
	for j, q := range qs {
		rank := max(uint64(math.Ceil(q*float64(n))), 1)
		out[j] = math.NaN()
		var seen uint64
		for i, c := range counts {
			seen += c
			if c > 0 && seen >= rank {
				out[j] = bounds[i+1]
				if math.IsInf(out[j], 1) {
					out[j] = bounds[i]
				}
				break
			}
		}
	}
	return n, out
}

// memSink keeps the garbage workload's last objects reachable, so that the
// compiler allocates every one on the heap.
var memSink [1024]*memGarbage

// memGarbage is one small object of the workload, with a pointer (to
// itself) so that it is allocated as an object the collector scans.
type memGarbage struct {
	next *memGarbage
	pad  [48]byte
}

// churn allocates total bytes in 64-byte objects and drops them.
func churn(total int) {
	for i := range total / 64 {
		g := &memGarbage{}
		g.next, g.pad[0] = g, byte(i)
		memSink[i%len(memSink)] = g
	}
	clear(memSink[:])
}

// memResult is one case's figures over the rounds.
type memResult struct {
	real    []float64 // heap bytes per entry
	objects float64   // heap objects per entry
	weighed float64   // bytes per entry the weigher charged; 0: no weigher
	gc      []gcCost
}

// TestMemoryL1 fills each case with n entries, reads the heap's live bytes
// before and after (per entry), then, with the entries live, allocates and
// drops the same amount of garbage in each and reads the collector's CPU
// and pauses; the cases take turns, round by round, in a rotating order.
// The default run checks that our L1's weigher charges at least 1/1.35 of
// the heap an entry takes and at most 1/0.8 of it.
func TestMemoryL1(t *testing.T) {
	n, garbage, rounds := 50_000, 256<<20, 1
	if os.Getenv("HYBRID_BENCH_MEMORY") == "1" {
		n, garbage, rounds = 1_000_000, 2<<30, 3
	}
	t.Logf("%d entries of %d-byte values; %d MiB of 64-byte garbage; %d rounds; GOMAXPROCS %d, GOGC %q, %s",
		n, memValueLen, garbage>>20, rounds, runtime.GOMAXPROCS(0), os.Getenv("GOGC"), runtime.Version())
	churn(garbage / 4) // the heap's first growth, billed to no case
	results := make([]memResult, len(memCases))
	for round := range rounds {
		for k := range memCases {
			ci := (round + k) % len(memCases)
			mc, r := memCases[ci], &results[ci]
			before, objBefore := heapLive()
			holder, weighed, done := mc.fill(t, n)
			after, objAfter := heapLive()
			real := (float64(after) - float64(before)) / float64(n)
			r.real, r.weighed = append(r.real, real), float64(weighed)/float64(n)
			r.objects = (float64(objAfter) - float64(objBefore)) / float64(n)
			a := sampleGC()
			churn(garbage)
			g := gcBetween(a, sampleGC())
			r.gc = append(r.gc, g)
			runtime.KeepAlive(holder)
			done()
			np, q := pauseQuantiles([]gcCost{g}, 0.5, 0.99, 1)
			t.Logf("round %d, %s: live heap %d MiB before, %d after, heap goal %d MiB, scannable %d MiB; %.1f B/entry real, %.1f weighed; churn %v wall, %v process CPU, GC %.3f s CPU (%.3f idle mark), %d cycles, %d pauses p50 %v p99 %v max %v",
				round, mc.name, before>>20, after>>20, g.goal>>20, g.scan>>20, real, r.weighed, g.wall.Round(time.Millisecond), g.process.Round(time.Millisecond),
				g.cpu, g.idle, g.cycles, np, secs(q[0]), secs(q[1]), secs(q[2]))
		}
	}
	fmt.Println(memTable(n, garbage, rounds, results))
	ours := results[memOurs]
	if ratio := medianOf(ours.real) / ours.weighed; ratio > 1.35 || ratio < 0.8 {
		t.Errorf("our L1 takes %.0f B of heap per entry and weighs it %.0f B: real/weighed %.2f, want 0.8 to 1.35", medianOf(ours.real), ours.weighed, ratio)
	}
}

// medianOf is the median of xs, in any order.
func medianOf(xs []float64) float64 { return median(slices.Sorted(slices.Values(xs))) }

func secs(s float64) time.Duration { return time.Duration(s * 1e9).Round(time.Microsecond) }

// memTable is the Markdown tables of RESULTS.md's section: medians over
// the rounds, ratios taken within a round, the pauses of every round
// pooled.
func memTable(n, garbage, rounds int, rs []memResult) string {
	s := fmt.Sprintf("\n%d entries, %d MiB of garbage, %d rounds\n\n", n, garbage>>20, rounds)
	s += "| held by | heap B/entry | heap objects/entry | weighed B/entry | real/weighed |\n|---|---|---|---|---|\n"
	for i, r := range rs {
		w, ratio := "n/a", "n/a"
		if r.weighed > 0 {
			w, ratio = fmt.Sprintf("%.0f", r.weighed), fmt.Sprintf("%.2f", medianOf(r.real)/r.weighed)
		}
		s += fmt.Sprintf("| %s | %.0f | %.1f | %s | %s |\n", memCases[i].name, medianOf(r.real), r.objects, w, ratio)
	}
	s += "\n| held by | scannable heap | GC cycles | scan work (cycles × scannable) | churn CPU (getrusage) | ÷ nothing held | GC CPU less idle mark (runtime estimate) | ÷ otter alone | pauses | p50 | p99 | max |\n"
	s += "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
	none, otter := rs[memNone], rs[memOtter]
	for i, r := range rs {
		var scan, cycles, work, proc, vsNone, gc, vsOtter []float64
		for j, g := range r.gc {
			scan, cycles = append(scan, float64(g.scan>>20)), append(cycles, float64(g.cycles))
			work = append(work, float64(g.cycles)*float64(g.scan>>20))
			proc = append(proc, g.process.Seconds())
			vsNone = append(vsNone, g.process.Seconds()/none.gc[j].process.Seconds())
			gc = append(gc, g.cpu-g.idle)
			vsOtter = append(vsOtter, (g.cpu-g.idle)/(otter.gc[j].cpu-otter.gc[j].idle))
		}
		np, q := pauseQuantiles(r.gc, 0.5, 0.99, 1)
		s += fmt.Sprintf("| %s | %.0f MiB | %.0f | %.0f MiB | %.2f s | %.2f× | %.2f s | %.2f× | %d | %v | %v | %v |\n",
			memCases[i].name, medianOf(scan), medianOf(cycles), medianOf(work), medianOf(proc), medianOf(vsNone),
			medianOf(gc), medianOf(vsOtter), np, secs(q[0]), secs(q[1]), secs(q[2]))
	}
	return s
}
