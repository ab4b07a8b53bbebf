package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/l2"
)

// Scenario 10: production traces replayed through a fleet. Each trace is
// replayed, request by request on one goroutine, through N instances of
// each system, and the scenario counts what the fleet did: local hits,
// Redis round trips, database loads, invalidation messages, stale reads,
// and times each request. Belady's optimal hit ratio for the same budget
// is computed offline. The traces, sizes, writes and orders are in
// trace.go, the systems in trace_systems.go.

// traceSeed picks the requests that become writes.
const traceSeed = 22

// traceFleetShape is how many instances take the requests, and how.
type traceFleetShape struct {
	n   int
	own bool // each instance its own consecutive part; else round robin
}

func (s traceFleetShape) String() string {
	switch {
	case s.n == 1:
		return "1"
	case s.own:
		return fmt.Sprintf("%d, own order", s.n)
	default:
		return fmt.Sprintf("%d, round robin", s.n)
	}
}

// tracePlan is what scenario 10 replays in a mode.
type tracePlan struct {
	limit  int   // requests replayed per trace, at most
	pcts   []int // L1 budgets, % of the working set's bytes
	shapes []traceFleetShape
	// The write rates, replayed at budget writePct with the shapes of
	// writeShapes (no writes: every shape at every budget).
	rates       []float64
	writePct    int
	writeShapes []traceFleetShape
	reps        int
}

func tracePlanFor(e *env) tracePlan {
	if e.quick {
		return tracePlan{
			limit:       12_000,
			pcts:        []int{1, 10, 30},
			shapes:      []traceFleetShape{{3, false}},
			rates:       []float64{0.01},
			writePct:    10,
			writeShapes: []traceFleetShape{{3, false}},
			reps:        1,
		}
	}
	return tracePlan{
		limit:       300_000,
		pcts:        []int{1, 10, 30},
		shapes:      []traceFleetShape{{1, false}, {3, false}, {3, true}, {8, false}, {8, true}},
		rates:       []float64{0.001, 0.01},
		writePct:    10,
		writeShapes: []traceFleetShape{{3, false}, {8, false}},
		reps:        1,
	}
}

// traceCell is one replay: a trace, a fleet, a budget and a write rate.
type traceCell struct {
	t          *trace
	db         *traceDB
	shape      traceFleetShape
	n          int
	pct        int
	budget     uint64 // bytes per instance
	overhead   uint64 // an entry's weight less its key and payload
	meanWeight float64
	rate       float64
	writes     []bool
	order      []event
	ns         string // the system's Namespace or key prefix in Redis
}

// traceResult is what one system did in one cell.
type traceResult struct {
	requests, reads, writes int64
	keys                    int // distinct keys replayed
	counts                  traceCounts
	loads                   int64
	stale                   int64
	failed                  int64
	firstErr                error
	p50, p99                float64
	allocs                  float64 // per request
}

func scenarioTrace(ctx context.Context, e *env) (*section, error) {
	plan := tracePlanFor(e)
	sec := &section{id: 10, title: "Production traces through a fleet"}
	var traces []*trace
	for _, path := range e.traces {
		t, err := readTrace(path, plan.limit)
		if err != nil {
			return sec, err
		}
		traces = append(traces, t)
	}
	overhead, err := traceOverhead(ctx, e)
	if err != nil {
		return sec, fmt.Errorf("measuring an entry's weight: %w", err)
	}
	var desc []string
	for _, t := range traces {
		desc = append(desc, fmt.Sprintf("%s (%s requests, %s distinct keys, %s of values)", t.name, fmtCount(float64(len(t.reqs))),
			fmtCount(float64(len(t.keys))), fmtBytes(float64(workingSet(t, overhead)))))
	}
	type cellKey struct {
		trace string
		shape traceFleetShape
		pct   int
		rate  float64
	}
	var cells []cellKey
	for _, t := range traces {
		for _, pct := range plan.pcts {
			for _, s := range plan.shapes {
				cells = append(cells, cellKey{t.name, s, pct, 0})
			}
		}
		for _, r := range plan.rates {
			for _, s := range plan.writeShapes {
				cells = append(cells, cellKey{t.name, s, plan.writePct, r})
			}
		}
	}
	sec.intro = fmt.Sprintf("Traces: %s. `orm-busy` and `web07` were recorded in production by an e-commerce application "+
		"(copyright headissue GmbH, Jens Wilke, CC BY 4.0, https://creativecommons.org/licenses/by/4.0/; from the cache2k "+
		"traces as bundled with the Caffeine simulator; see traces/README.md). Each trace is replayed on one goroutine, "+
		"request by request, through a fleet of N instances of each system in this process, each instance with its own "+
		"client(s): round robin (request i to instance i %% N, in the trace's order) or own order (instance j takes its own "+
		"consecutive share of the trace, from request j·len/N; the instances take turns, one request each). A read is the "+
		"system's read-through call; a miss in every tier calls the \"database\", a load that counts its calls and returns "+
		"the key's latest version at once. Values: the key's integer, a version and a random payload whose size is a hash "+
		"of the key, 64 B to 16 KiB (`traceSize` in trace.go), msgpack-encoded. Every local tier is bounded to the budget's "+
		"share of the working set, the sum over the distinct keys of key + payload + %d bytes: the weight our L1 gives an "+
		"entry (encoding, envelope and 144 bytes of bookkeeping, measured). Ours (LocalMaxBytes) and otter alone (the same "+
		"weigher) count it so; go-redis/cache's TinyLFU counts entries, so it gets the budget over the mean weight; rueidis "+
		"(CacheSizeEachConn, one pipelining connection) weighs its entries itself.\n\n"+
		"Rows: ours (hybrid.Cache with its own l2.Store, behind the counting wrapper, and invalidate.Bus per instance); otter "+
		"alone per instance, configured as our L1 configures it (the same weights, a lifetime per entry), no shared tier, "+
		"its upkeep run by the caller as our L1 runs it; the same with otter's default executor, whose upkeep goroutine lags a replay this tight, so that the cache holds more than its budget until it "+
		"catches up (1.7 to 1.9 times it on average at 1%% of a 20,000-request prefix of orm-busy), which shows as hits; "+
		"Redis alone (GET and decode per request; a miss loads and SETs; run once per trace, fleet and write rate, since it "+
		"has no budget); go-redis/cache (Once, with its local TinyLFU); rueidis (DoCache, server-assisted client-side "+
		"caching; a miss loads and SETs); Belady: the hit ratio of Belady's MIN on each instance's requests with the same "+
		"budget and weights (evict the entry needed furthest ahead, admit nothing needed later than what it would "+
		"displace; a write drops the key elsewhere), computed offline; with unequal sizes this is the usual bound, not a "+
		"proven optimum.\n\n"+
		"Writes: with a write rate, the requests whose hash of (seed %d, index) falls below it become a write of their key: "+
		"the database's version goes up, then the system's write call (ours: Set, which tells the other instances; otter "+
		"alone: a Set on its own instance; go-redis/cache: Set, which reaches the other instances' local tiers when their "+
		"entries expire; rueidis: SET, after which Redis tells the other clients to drop the key). Everything but the "+
		"systems is deterministic: the same trace, seed and N give the same requests, sizes, writes and orders, and so the "+
		"same counts for Redis alone and Belady. Otter (ours' L1, otter alone) seeds its sketch's hashes at random, so its "+
		"hit counts vary by a few tenths of a point from run to run (more at 1%%), and invalidations arrive while the replay "+
		"goes on.\n\n"+
		"Columns: L1 hit %% (reads answered by the instance's local tier); Redis round trips per request (every call that "+
		"reached Redis, writes included); DB loads per distinct key (of the replay); bus messages per write (ours: "+
		"published / received and applied, over the fleet; rueidis: keys its clients were told to drop, less those of the "+
		"same replay without writes, which are its fills'); stale reads (reads that returned a version older than the last "+
		"write of the key that had returned); p50 and p99 of every request; allocations per request (runtime.MemStats over "+
		"the replay: the loads' values and the other goroutines' included). %s per cell (%d cells): the workload is the "+
		"same in every run, and a replay takes up to a minute.",
		strings.Join(desc, "; "), overhead, traceSeed, runsText(plan.reps), len(cells))

	byName := map[string]*trace{}
	for _, t := range traces {
		byName[t.name] = t
	}
	results := map[cellKey]map[string][]*traceResult{}
	redisOnce := map[cellKey][]*traceResult{} // by trace, shape and rate
	belady := map[cellKey]float64{}
	for rep := range plan.reps {
		for _, ck := range cells {
			t := byName[ck.trace]
			c := newTraceCell(t, ck.shape, ck.pct, ck.rate, overhead)
			if rep == 0 {
				belady[ck] = c.beladyRatio()
			}
			if results[ck] == nil {
				results[ck] = map[string][]*traceResult{}
			}
			for _, sys := range traceSystems {
				// Redis alone has no local tier: the budget changes nothing,
				// so it runs once per trace, fleet and write rate.
				if sys.name == nameRedisAlone {
					if r := redisOnce[cellKey{ck.trace, ck.shape, 0, ck.rate}]; len(r) > rep {
						results[ck][sys.name] = append(results[ck][sys.name], r[rep])
						continue
					}
				}
				e.progressf("    %s, N=%s, %d%%, writes %s: %s (run %d of %d)", t.name, ck.shape, ck.pct, fmtRate(ck.rate), sys.name, rep+1, plan.reps)
				settle()
				r, err := runTraceSystem(ctx, e, c, sys)
				if err != nil {
					return sec, fmt.Errorf("%s, N=%s, %d%%, %s: %w", t.name, ck.shape, ck.pct, sys.name, err)
				}
				results[ck][sys.name] = append(results[ck][sys.name], r)
				if sys.name == nameRedisAlone {
					k := cellKey{ck.trace, ck.shape, 0, ck.rate}
					redisOnce[k] = append(redisOnce[k], r)
				}
			}
		}
	}

	header := []string{"N", "system", "L1 hit %", "Redis round trips / request", "DB loads / distinct key",
		"bus messages / write", "stale reads", "p50", "p99", "allocs / request"}
	align := []byte{'l', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'}
	addRows := func(tb *table, ck cellKey) {
		for _, sys := range traceSystems {
			rs := results[ck][sys.name]
			if len(rs) == 0 {
				continue
			}
			quiet := ck
			quiet.rate = 0
			tb.Rows = append(tb.Rows, traceRow(ck.shape.String(), sys.name, rs, results[quiet][sys.name]))
		}
		tb.Rows = append(tb.Rows, []string{ck.shape.String(), "Belady (optimal, offline)", fmt.Sprintf("%.2f", belady[ck]),
			"–", "–", "–", "–", "–", "–", "–"})
	}
	var remarks []string
	for _, t := range traces {
		for _, pct := range plan.pcts {
			tb := table{Header: header, Align: align}
			for _, s := range plan.shapes {
				addRows(&tb, cellKey{t.name, s, pct, 0})
			}
			c := newTraceCell(t, plan.shapes[0], pct, 0, overhead)
			sec.add(fmt.Sprintf("**%s, L1 budget %d%% of the working set (%s per instance), no writes.**", t.name, pct, fmtBytes(float64(c.budget))))
			sec.addTable(tb)
		}
		for _, r := range plan.rates {
			tb := table{Header: header, Align: align}
			for _, s := range plan.writeShapes {
				addRows(&tb, cellKey{t.name, s, plan.writePct, r})
			}
			writes := 0
			for _, w := range traceWrites(len(t.reqs), r, traceSeed) {
				if w {
					writes++
				}
			}
			sec.add(fmt.Sprintf("**%s, L1 budget %d%%, %s of the requests are writes (%s writes).**", t.name, plan.writePct, fmtRate(r), fmtCount(float64(writes))))
			sec.addTable(tb)
		}
		// The chart and the headline: the first shape with more than one
		// instance, round robin, no writes.
		shape := plan.shapes[0]
		for _, s := range plan.shapes {
			if s.n > 1 && !s.own {
				shape = s
				break
			}
		}
		var bars []bar
		for _, pct := range plan.pcts {
			ck := cellKey{t.name, shape, pct, 0}
			for _, sys := range traceSystems {
				rs := results[ck][sys.name]
				if len(rs) == 0 || sys.name == nameRedisAlone {
					continue
				}
				s := summarize(hitRatios(rs))
				bars = append(bars, bar{Label: fmt.Sprintf("%s, %d%%", sys.name, pct), Value: s.Median, Lo: s.Min, Hi: s.Max,
					Series: sys.series, Caption: fmt.Sprintf("%.1f%%", s.Median)})
			}
			bars = append(bars, bar{Label: fmt.Sprintf("Belady, %d%%", pct), Value: belady[ck], Series: 5,
				Caption: fmt.Sprintf("%.1f%%", belady[ck])})
		}
		sec.addChart(fmt.Sprintf("10-trace-%s.svg", t.name), barChart{
			Title: fmt.Sprintf("10. %s: L1 hit ratio by budget (%% of the working set), N = %s", t.name, shape),
			Unit:  "% hits", Bars: bars,
			Note: "Redis alone: no local tier. Trace: headissue GmbH, Jens Wilke, CC BY 4.0.",
		})
		mid := plan.pcts[len(plan.pcts)/2]
		ck := cellKey{t.name, shape, mid, 0}
		ours, alone := results[ck][nameOurs], results[ck][nameOtterAlone]
		if len(ours) > 0 && len(alone) > 0 {
			sec.headline(fmt.Sprintf("%s, N = %s, L1 %d%%: L1 hit ours / otter alone / Belady; DB loads per key ours / otter alone", t.name, shape, mid),
				fmt.Sprintf("%.1f / %.1f / %.1f%%; %s / %s", summarize(hitRatios(ours)).Median, summarize(hitRatios(alone)).Median, belady[ck],
					sig3(summarize(loadsPerKey(ours, len(t.keys))).Median), sig3(summarize(loadsPerKey(alone, len(t.keys))).Median)),
				"L1 hit ≥ otter alone − 0.2")
		}
	}
	for ck, bySys := range results {
		for name, rs := range bySys {
			for _, r := range rs {
				if r.failed > 0 {
					remarks = append(remarks, fmt.Sprintf("%s, N=%s, %d%%, writes %s, %s: %d request(s) failed (first: %v).",
						ck.trace, ck.shape, ck.pct, fmtRate(ck.rate), name, r.failed, r.firstErr))
				}
			}
		}
	}
	slices.Sort(remarks) // the map's order is random
	for _, rm := range remarks {
		sec.add(rm)
	}
	return sec, nil
}

func runsText(n int) string {
	if n == 1 {
		return "One run"
	}
	return fmt.Sprintf("%d runs", n)
}

func fmtRate(r float64) string {
	if r == 0 {
		return "none"
	}
	return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.2f", 100*r), "0"), ".0") + "%"
}

// workingSet returns the weight of all the trace's distinct keys.
func workingSet(t *trace, overhead uint64) uint64 {
	var sum uint64
	for k, key := range t.keys {
		sum += traceWeight(key, t.sizes[k], overhead)
	}
	return sum
}

func newTraceCell(t *trace, shape traceFleetShape, pct int, rate float64, overhead uint64) *traceCell {
	ws := workingSet(t, overhead)
	return &traceCell{
		t:          t,
		shape:      shape,
		n:          shape.n,
		pct:        pct,
		budget:     ws * uint64(pct) / 100,
		overhead:   overhead,
		meanWeight: float64(ws) / float64(len(t.keys)),
		rate:       rate,
		writes:     traceWrites(len(t.reqs), rate, traceSeed),
		order:      traceOrder(len(t.reqs), shape.n, shape.own),
	}
}

// beladyRatio returns Belady's hit ratio over the cell's reads, in percent.
func (c *traceCell) beladyRatio() float64 {
	weights := make([]uint64, len(c.t.keys))
	for k, key := range c.t.keys {
		weights[k] = traceWeight(key, c.t.sizes[k], c.overhead)
	}
	var hits int64
	for _, h := range beladyHits(c.t, c.order, c.writes, c.n, weights, c.budget) {
		hits += h
	}
	reads := len(c.t.reqs)
	for _, w := range c.writes {
		if w {
			reads--
		}
	}
	return 100 * float64(hits) / float64(reads)
}

// traceOverhead measures what our L1 weighs an entry beyond its key and
// payload: one instance stores one value and reports its L1 bytes.
func traceOverhead(ctx context.Context, e *env) (uint64, error) {
	ns := e.k(fmt.Sprintf("trace-weight-%d", time.Now().UnixNano()))
	o := oursOptions(e, spec{kind: nameOurs, prefix: ns, f: fmtMsgpack}, &countingRemote{s: l2.New(e.rdb, l2.Options{})}, nil)
	c, err := hybrid.New[*TraceValue](o)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	const id = 1000 // a payload of 2 KiB or more: a 3-byte msgpack length, as most
	size := traceSize(id)
	key := "k1000"
	if _, err := c.GetOrCreate(ctx, key, func(context.Context, string) (*TraceValue, error) {
		return &TraceValue{ID: id, Data: payloadOf(id, size)}, nil
	}); err != nil {
		return 0, err
	}
	w := c.Stats().L1.Size
	if w <= uint64(len(key))+uint64(size) {
		return 0, fmt.Errorf("L1 weighs %d bytes for a key of %d and a payload of %d", w, len(key), size)
	}
	return w - uint64(len(key)) - uint64(size), nil
}

// runTraceSystem replays c through a fresh fleet of sys.
func runTraceSystem(ctx context.Context, e *env, c *traceCell, sys traceSystem) (*traceResult, error) {
	db := newTraceDB(c.t)
	run := *c
	run.db = db
	run.ns = e.k(fmt.Sprintf("trace-%d", time.Now().UnixNano()))
	f, err := sys.open(e, &run)
	if err != nil {
		return nil, err
	}
	defer e.dropPrefix(context.Background(), run.ns)
	defer f.close()
	last := make([]uint32, len(c.t.keys)) // the version of the last write that returned
	r := &traceResult{keys: len(c.t.keys)}
	var h hist
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for _, ev := range c.order {
		k := c.t.reqs[ev.i]
		start := time.Now()
		if c.writes != nil && c.writes[ev.i] {
			db.version[k]++
			err = f.write(ctx, int(ev.inst), k, db.value(k))
			h.record(int64(time.Since(start)))
			r.writes++
			if err == nil {
				last[k] = db.version[k]
			}
		} else {
			var v *TraceValue
			v, err = f.read(ctx, int(ev.inst), k)
			h.record(int64(time.Since(start)))
			r.reads++
			switch {
			case err != nil:
			case v == nil || v.ID != c.t.ids[k] || len(v.Data) != int(c.t.sizes[k]):
				err = fmt.Errorf("key %s: got %+v", c.t.keys[k], v)
			case v.Version < last[k]:
				r.stale++
			}
		}
		if err != nil {
			r.failed++
			if r.firstErr == nil {
				r.firstErr = err
			}
		}
	}
	runtime.ReadMemStats(&m1)
	r.requests = r.reads + r.writes
	r.allocs = float64(m1.Mallocs-m0.Mallocs) / float64(r.requests)
	r.p50, r.p99 = h.quantile(0.5), h.quantile(0.99)
	r.counts = f.counts()
	r.loads = db.loads.Load()
	return r, nil
}

// dropPrefix deletes the keys under prefix, so that a replay's values do
// not stay in Redis for the rest of the run.
func (e *env) dropPrefix(ctx context.Context, prefix string) {
	iter := e.rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			e.rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		e.rdb.Unlink(ctx, batch...)
	}
}

func hitRatios(rs []*traceResult) []float64 {
	var out []float64
	for _, r := range rs {
		out = append(out, 100*float64(r.counts.localHits)/float64(r.reads))
	}
	return out
}

func loadsPerKey(rs []*traceResult, keys int) []float64 {
	var out []float64
	for _, r := range rs {
		out = append(out, float64(r.loads)/float64(keys))
	}
	return out
}

// traceRow is the table row of one system in one cell. quiet holds the
// system's results in the same cell without writes, if any: the
// invalidations a peer's clients receive for fills as well as writes are
// counted per write as their difference.
func traceRow(shape, name string, rs, quiet []*traceResult) []string {
	field := func(rs []*traceResult, f func(r *traceResult) float64) spread {
		var xs []float64
		for _, r := range rs {
			xs = append(xs, f(r))
		}
		return summarize(xs)
	}
	last := rs[len(rs)-1]
	msgs, stale := "–", "–"
	if last.writes > 0 {
		perWrite := func(rs []*traceResult, f func(traceCounts) int64) float64 {
			return field(rs, func(r *traceResult) float64 { return float64(f(r.counts)) / float64(last.writes) }).Median
		}
		published := func(n traceCounts) int64 { return n.published }
		applied := func(n traceCounts) int64 { return n.applied }
		switch {
		case last.counts.published >= 0:
			msgs = sig3(perWrite(rs, published)) + " / " + sig3(perWrite(rs, applied))
		case last.counts.applied >= 0 && len(quiet) > 0:
			msgs = "– / " + sig3(max(0, perWrite(rs, applied)-perWrite(quiet, applied)))
		case last.counts.applied >= 0:
			msgs = "– / –"
		default:
			msgs = "0"
		}
		stale = fmtCount(field(rs, func(r *traceResult) float64 { return float64(r.stale) }).Median)
	}
	return []string{shape, name, fmtSpread2(summarize(hitRatios(rs))),
		fmtSpread(field(rs, func(r *traceResult) float64 { return float64(r.counts.trips) / float64(r.requests) }), ""),
		fmtSpread(field(rs, func(r *traceResult) float64 { return float64(r.loads) / float64(r.keys) }), ""),
		msgs, stale,
		fmtSpreadDur(field(rs, func(r *traceResult) float64 { return r.p50 })),
		fmtSpreadDur(field(rs, func(r *traceResult) float64 { return r.p99 })),
		fmtSpread(field(rs, func(r *traceResult) float64 { return r.allocs }), ""),
	}
}

// fmtSpread2 is fmtSpread with two decimals, for percentages.
func fmtSpread2(s spread) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 {
		return fmt.Sprintf("%.2f", s.Median)
	}
	return fmt.Sprintf("%.2f (%.2f–%.2f)", s.Median, s.Min, s.Max)
}
