package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// Scenario 12: write-heavy traffic through a fleet, a Set's message
// carrying the new value (swap: the peers that hold the key replace their
// copy) against naming the key only (drop: the peers drop their copy and
// read Redis when the key is asked for again; Options.InlineMaxBytes -1).
// The traces of scenario 10 are replayed at 10% and 30% writes, and a
// synthetic workload of 230-byte values (the median value of Twitter's
// production study, OSDI '20, which found 35% of clusters serving more
// than 30% writes) at the same rates, through 3 and 8 instances of ours.

// writeMode is a row of scenario 12: how a Set's message is made.
type writeMode struct {
	name   string
	inline int // Options.InlineMaxBytes
}

var writeModes = []writeMode{
	{"swap (values in messages)", 0},
	{"drop (keys only)", -1},
	{"swap up to 1 KiB, drop above", 1024},
}

// modesFor returns the modes that differ on t: a threshold above t's
// largest value is swap.
func modesFor(t *trace) []writeMode {
	largest := uint32(0)
	for _, s := range t.sizes {
		largest = max(largest, s)
	}
	var out []writeMode
	for _, m := range writeModes {
		if m.inline > 0 && int(largest) < m.inline {
			continue
		}
		out = append(out, m)
	}
	return out
}

// synthValueBytes is the payload of every value of the synthetic workload.
const synthValueBytes = 230

// writePlan is what scenario 12 replays in a mode.
type writePlan struct {
	limit     int // trace requests replayed, at most
	synthKeys int
	synthReqs int
	synthZipf float64 // the Zipf exponent of the synthetic keys' popularity
	rates     []float64
	ns        []int // instances, round robin
	tracePct  int   // the traces' L1 budget, % of the working set (the synthetic's: all of it)
	reps      int
}

func writePlanFor(e *env) writePlan {
	if e.quick {
		return writePlan{limit: 10_000, synthKeys: 2_000, synthReqs: 10_000, synthZipf: 1.01,
			rates: []float64{0.1, 0.3}, ns: []int{3}, tracePct: 10, reps: 1}
	}
	return writePlan{limit: 100_000, synthKeys: 10_000, synthReqs: 100_000, synthZipf: 1.01,
		rates: []float64{0.1, 0.3}, ns: []int{3, 8}, tracePct: 10, reps: 3}
}

// synthTrace returns a trace of reqs requests for keys keys whose
// popularity follows a Zipf law of exponent s (rand.Zipf needs s > 1),
// every value synthValueBytes long. The same arguments give the same trace.
func synthTrace(keys, reqs int, s float64) *trace {
	t := &trace{name: fmt.Sprintf("synthetic %d B", synthValueBytes)}
	for k := range keys {
		t.keys = append(t.keys, "s"+strconv.Itoa(k))
		t.ids = append(t.ids, int32(k))
		t.sizes = append(t.sizes, synthValueBytes)
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(12, synthValueBytes)), s, 1, uint64(keys-1))
	t.reqs = make([]uint32, reqs)
	for i := range t.reqs {
		t.reqs[i] = uint32(z.Uint64())
	}
	return t
}

// writeFleet is N instances of ours, each with its own client, l2.Store
// behind the counting wrapper, and invalidate.Bus behind a counting one.
type writeFleet struct {
	traceOurs
	buses []*countingBus
}

func openWriteFleet(e *env, c *traceCell, inline int) (*writeFleet, error) {
	f := &writeFleet{traceOurs: traceOurs{load: c.db.load, keys: c.t.keys}}
	for range c.n {
		in := &traceInst{rdb: e.newClient()}
		in.bus = invalidate.New(in.rdb, invalidate.Options{})
		in.remote = &countingRemote{s: l2.New(in.rdb, l2.Options{})}
		f.ins = append(f.ins, in)
		cb := &countingBus{b: in.bus}
		f.buses = append(f.buses, cb)
		o := oursOptions(e, spec{kind: nameOurs, prefix: c.ns, f: fmtMsgpack}, in.remote, cb)
		o.LocalMaxBytes = int64(c.budget)
		o.InlineMaxBytes = inline
		hc, err := hybrid.New[*TraceValue](o)
		if err != nil {
			f.close()
			return nil, err
		}
		in.c = hc
	}
	return f, nil
}

// writeSnap is what the fleet, the process and Redis had counted at one
// point of a replay.
type writeSnap struct {
	hits, trips, published, swapped int64
	busMsgs, busBytes               int64
	srv                             serverCounters
	cpu                             time.Duration
	mallocs                         uint64
}

func (f *writeFleet) snap(ctx context.Context, e *env) writeSnap {
	var s writeSnap
	for i, in := range f.ins {
		st := in.c.Stats()
		s.hits += int64(st.L1.Hits)
		s.trips += in.remote.trips.Load()
		s.published += int64(st.Invalidations.Sent)
		s.swapped += int64(st.Invalidations.Swapped)
		s.busMsgs += f.buses[i].msgs.Load()
		s.busBytes += f.buses[i].bytes.Load()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.mallocs = ms.Mallocs
	s.cpu = cpuTime()
	s.srv = readServerCounters(ctx, e.rdb)
	return s
}

// settleBus waits, up to 2 s, until every instance has received every
// message the fleet published.
func (f *writeFleet) settleBus() {
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		var sent, got int64
		for i, in := range f.ins {
			sent += int64(in.c.Stats().Invalidations.Sent)
			got += f.buses[i].msgs.Load()
		}
		if got >= sent*int64(len(f.ins)) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// writeResult is what one mode did in one cell, over the measured part of
// the replay (after the warm-up).
type writeResult struct {
	reads, writes     int64
	hits, trips       int64
	stale             int64
	published         int64
	swapped           int64
	busMsgs, busBytes int64
	redis             serverDelta
	clientCPU         time.Duration
	allocs            float64 // per request
	p50, p99          float64
	failed            int64
	firstErr          error
}

// runWriteCell replays c through a fresh fleet of ours in mode m: the
// first quarter of the requests warms the fleet, the rest is measured.
func runWriteCell(ctx context.Context, e *env, c *traceCell, m writeMode) (*writeResult, error) {
	db := newTraceDB(c.t)
	run := *c
	run.db = db
	run.ns = e.k(fmt.Sprintf("writes-%d", time.Now().UnixNano()))
	f, err := openWriteFleet(e, &run, m.inline)
	if err != nil {
		return nil, err
	}
	defer e.dropPrefix(context.Background(), run.ns)
	defer f.close()
	warm := len(c.order) / 4
	last := make([]uint32, len(c.t.keys)) // the version of the last write that returned
	r := &writeResult{}
	var h hist
	var s0 writeSnap
	for n, ev := range c.order {
		if n == warm {
			f.settleBus()
			s0 = f.snap(ctx, e)
		}
		measured := n >= warm
		k := c.t.reqs[ev.i]
		start := time.Now()
		if c.writes != nil && c.writes[ev.i] {
			db.version[k]++
			err = f.write(ctx, int(ev.inst), k, db.value(k))
			if measured {
				h.record(int64(time.Since(start)))
				r.writes++
			}
			if err == nil {
				last[k] = db.version[k]
			}
		} else {
			var v *TraceValue
			v, err = f.read(ctx, int(ev.inst), k)
			if measured {
				h.record(int64(time.Since(start)))
				r.reads++
			}
			switch {
			case err != nil:
			case v == nil || v.ID != c.t.ids[k] || len(v.Data) != int(c.t.sizes[k]):
				err = fmt.Errorf("key %s: got %+v", c.t.keys[k], v)
			case v.Version < last[k] && measured:
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
	f.settleBus()
	s1 := f.snap(ctx, e)
	requests := r.reads + r.writes
	r.hits, r.trips = s1.hits-s0.hits, s1.trips-s0.trips
	r.published, r.swapped = s1.published-s0.published, s1.swapped-s0.swapped
	r.busMsgs, r.busBytes = s1.busMsgs-s0.busMsgs, s1.busBytes-s0.busBytes
	r.redis = s0.srv.delta(s1.srv)
	r.clientCPU = s1.cpu - s0.cpu
	r.allocs = float64(s1.mallocs-s0.mallocs) / float64(requests)
	r.p50, r.p99 = h.quantile(0.5), h.quantile(0.99)
	return r, nil
}

// Per-write and per-request figures of a result. The Redis figures are
// NaN when the harness does not own the server (-redis).
func (r *writeResult) hitPct() float64      { return 100 * float64(r.hits) / float64(r.reads) }
func (r *writeResult) stalePer10k() float64 { return 1e4 * float64(r.stale) / float64(r.reads) }
func (r *writeResult) tripsPerReq() float64 {
	return float64(r.trips) / float64(r.reads+r.writes)
}
func (r *writeResult) busBytesPerWrite() float64 { return float64(r.busBytes) / float64(r.writes) }
func (r *writeResult) redisCPUPerReq(own bool) float64 {
	if !own || !r.redis.available {
		return math.NaN()
	}
	return 1e9 * r.redis.cpu / float64(r.reads+r.writes) // ns
}
func (r *writeResult) redisCPUPerWrite(own bool) float64 {
	if !own || !r.redis.available {
		return math.NaN()
	}
	return 1e9 * r.redis.cpu / float64(r.writes) // ns
}
func (r *writeResult) scriptPerWrite(own bool) float64 {
	if !own || !r.redis.available {
		return math.NaN()
	}
	return 1e3 * float64(r.redis.usec["evalsha"]+r.redis.usec["eval"]) / float64(r.writes) // ns
}
func (r *writeResult) getsPerRead(own bool) float64 {
	if !own || !r.redis.available {
		return math.NaN()
	}
	return float64(r.redis.byCommand["get"]+r.redis.byCommand["mget"]) / float64(r.reads)
}
func (r *writeResult) clientCPUPerReq() float64 {
	return float64(r.clientCPU) / float64(r.reads+r.writes)
}

func scenarioWrites(ctx context.Context, e *env) (*section, error) {
	plan := writePlanFor(e)
	sec := &section{id: 12, title: "Write-heavy traffic: swap against drop"}
	var traces []*trace
	for _, path := range e.traces {
		t, err := readTrace(path, plan.limit)
		if err != nil {
			return sec, err
		}
		traces = append(traces, t)
	}
	synth := synthTrace(plan.synthKeys, plan.synthReqs, plan.synthZipf)
	traces = append(traces, synth)
	overhead, err := traceOverhead(ctx, e)
	if err != nil {
		return sec, fmt.Errorf("measuring an entry's weight: %w", err)
	}
	type cellKey struct {
		trace string
		n     int
		rate  float64
	}
	var cells []cellKey
	for _, t := range traces {
		for _, r := range plan.rates {
			for _, n := range plan.ns {
				cells = append(cells, cellKey{t.name, n, r})
			}
		}
	}
	byName := map[string]*trace{}
	var desc []string
	for _, t := range traces {
		byName[t.name] = t
		desc = append(desc, fmt.Sprintf("%s (%s requests, %s distinct keys)", t.name, fmtCount(float64(len(t.reqs))), fmtCount(float64(len(t.keys)))))
	}
	pctOf := func(t *trace) int {
		if t == synth {
			return 100
		}
		return plan.tracePct
	}
	ns := make([]string, len(plan.ns))
	for i, n := range plan.ns {
		ns[i] = strconv.Itoa(n)
	}
	rates := make([]string, len(plan.rates))
	for i, r := range plan.rates {
		rates[i] = fmtRate(r)
	}
	sec.intro = fmt.Sprintf("Workloads: %s. The traces are scenario 10's (CC BY 4.0, headissue GmbH, Jens Wilke; "+
		"traces/README.md), values 64 B to 16 KiB as there, L1 budget %d%% of the working set per instance. The synthetic "+
		"workload asks for %s keys with Zipf popularity (exponent %.2f), every value a %d-byte payload, L1 budget the whole working set: the median value of Twitter's production study "+
		"(OSDI '20), which found 35%% of cache clusters serving more than 30%% writes. %s of the requests are writes "+
		"(the requests whose hash of (seed %d, index) falls below the rate: the database's version goes up, then a Set "+
		"through the instance that takes the request). Each workload is replayed on one goroutine through N = %s "+
		"instances of ours in this process, round robin, each instance with its own client, l2.Store and "+
		"invalidate.Bus, `Options.Secret` set (a message carries a value only when signed), msgpack. The first "+
		"quarter of each replay warms the fleet; the figures are the rest's.\n\n"+
		"Rows: **swap** (the default: a Set's message carries the value, up to `InlineMaxBytes`, and each peer that "+
		"holds the key replaces its copy without a round trip), **drop** (`InlineMaxBytes: -1`: the message names "+
		"the key, each peer drops its copy and reads Redis at its next read of the key) and, on the traces, whose "+
		"values vary, **swap up to 1 KiB** (`InlineMaxBytes: 1024`: values of up to 1 KiB encoded are swapped, larger "+
		"ones dropped).\n\n"+
		"Columns: L1 hit %% of reads; stale reads per 10,000 reads (a version older than the last write that had "+
		"returned: a peer read the key before the message reached it); Redis round trips per request (the counting "+
		"wrapper); Redis `GET`s per read (`INFO commandstats`); bus bytes per write, summed over the N instances that "+
		"receive it (the message's payload; Redis adds about 20 bytes of framing and the channel's name to each); Redis "+
		"CPU per request (`used_cpu_user` + `used_cpu_sys` over the measured part: everything Redis did, the sending "+
		"of the messages and the reads drop sends it included); the write script's time per write (`INFO commandstats`, "+
		"`EVALSHA`'s usec: its `SET`, sequence counter, `PUBLISH` and `XADD`, not the sending of the messages); "+
		"the process's CPU per request (getrusage: every instance, its bus and the replay); p50 and p99 of every "+
		"request; allocations per request. %s per cell, medians (min–max); the drop ÷ swap table takes its ratios "+
		"within a run.",
		strings.Join(desc, "; "), plan.tracePct, fmtCount(float64(plan.synthKeys)), plan.synthZipf, synthValueBytes,
		strings.Join(rates, " and "), traceSeed, strings.Join(ns, " and "), runsText(plan.reps))
	if !e.ownRedis {
		sec.intro += " The Redis server is shared (-redis): its CPU and command counts are not attributable and show as –."
	}

	results := map[cellKey]map[string][]*writeResult{}
	for rep := range plan.reps {
		for _, ck := range cells {
			t := byName[ck.trace]
			c := newTraceCell(t, traceFleetShape{ck.n, false}, pctOf(t), ck.rate, overhead)
			if results[ck] == nil {
				results[ck] = map[string][]*writeResult{}
			}
			// The modes take turns; which goes first alternates by run.
			modes := modesFor(t)
			for j := range modes {
				m := modes[(j+rep)%len(modes)]
				e.progressf("    %s, N=%d, writes %s: %s (run %d of %d)", t.name, ck.n, fmtRate(ck.rate), m.name, rep+1, plan.reps)
				settle()
				r, err := runWriteCell(ctx, e, c, m)
				if err != nil {
					return sec, fmt.Errorf("%s, N=%d, writes %s, %s: %w", t.name, ck.n, fmtRate(ck.rate), m.name, err)
				}
				if r.failed > 0 {
					return sec, fmt.Errorf("%s, N=%d, writes %s, %s: %d request(s) failed (first: %w)", t.name, ck.n, fmtRate(ck.rate), m.name, r.failed, r.firstErr)
				}
				results[ck][m.name] = append(results[ck][m.name], r)
			}
		}
	}

	own := e.ownRedis
	field := func(rs []*writeResult, f func(*writeResult) float64) spread {
		var xs []float64
		for _, r := range rs {
			xs = append(xs, f(r))
		}
		return summarize(xs)
	}
	tb := table{
		Header: []string{"workload", "writes", "N", "mode", "L1 hit %", "stale reads / 10k reads", "Redis round trips / request",
			"Redis GETs / read", "bus bytes / write (× N)", "Redis CPU / request", "write script / write", "client CPU / request",
			"p50", "p99", "allocs / request"},
		Align: []byte{'l', 'r', 'r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'},
	}
	ratio := table{
		Header: []string{"workload", "writes", "N", "mode", "L1 hit % swap, mode", "stale reads / 10k swap, mode", "Redis round trips / request",
			"bus bytes / write", "Redis CPU", "Redis CPU per write, mode − swap", "client CPU", "p99"},
		Align: []byte{'l', 'r', 'r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'},
	}
	diffs := func(rs, base []*writeResult, f func(*writeResult) float64) []float64 {
		var xs []float64
		for i := range min(len(rs), len(base)) {
			xs = append(xs, f(rs[i])-f(base[i]))
		}
		return xs
	}
	within := func(rs, base []*writeResult, f func(*writeResult) float64) string {
		var xs []float64
		for i := range min(len(rs), len(base)) {
			xs = append(xs, f(rs[i])/f(base[i]))
		}
		return fmtSpread(summarize(xs), "×")
	}
	for _, ck := range cells {
		for _, m := range modesFor(byName[ck.trace]) {
			rs := results[ck][m.name]
			tb.Rows = append(tb.Rows, []string{ck.trace, fmtRate(ck.rate), strconv.Itoa(ck.n), m.name,
				fmtSpread2(field(rs, (*writeResult).hitPct)),
				fmtSpread(field(rs, (*writeResult).stalePer10k), ""),
				fmtSpread(field(rs, (*writeResult).tripsPerReq), ""),
				fmtSpread(field(rs, func(r *writeResult) float64 { return r.getsPerRead(own) }), ""),
				fmtSpreadBytes(field(rs, (*writeResult).busBytesPerWrite)),
				fmtSpreadDur(field(rs, func(r *writeResult) float64 { return r.redisCPUPerReq(own) })),
				fmtSpreadDur(field(rs, func(r *writeResult) float64 { return r.scriptPerWrite(own) })),
				fmtSpreadDur(field(rs, (*writeResult).clientCPUPerReq)),
				fmtSpreadDur(field(rs, func(r *writeResult) float64 { return r.p50 })),
				fmtSpreadDur(field(rs, func(r *writeResult) float64 { return r.p99 })),
				fmtSpread(field(rs, func(r *writeResult) float64 { return r.allocs }), ""),
			})
		}
		sw := results[ck][writeModes[0].name]
		for _, m := range modesFor(byName[ck.trace])[1:] {
			dr := results[ck][m.name]
			ratio.Rows = append(ratio.Rows, []string{ck.trace, fmtRate(ck.rate), strconv.Itoa(ck.n), m.name,
				fmt.Sprintf("%.1f, %.1f", field(sw, (*writeResult).hitPct).Median, field(dr, (*writeResult).hitPct).Median),
				fmt.Sprintf("%s, %s", sig3(field(sw, (*writeResult).stalePer10k).Median), sig3(field(dr, (*writeResult).stalePer10k).Median)),
				within(dr, sw, (*writeResult).tripsPerReq),
				within(dr, sw, (*writeResult).busBytesPerWrite),
				within(dr, sw, func(r *writeResult) float64 { return r.redisCPUPerReq(own) }),
				fmtSpreadDur(summarize(diffs(dr, sw, func(r *writeResult) float64 { return r.redisCPUPerWrite(own) }))),
				within(dr, sw, (*writeResult).clientCPUPerReq),
				within(dr, sw, func(r *writeResult) float64 { return r.p99 }),
			})
		}
	}
	sec.addTable(tb)
	sec.add("**Each mode ÷ swap**, per cell, ratios taken within a run (below 1: the mode costs less than swap); Redis CPU and client CPU per request, and Redis CPU per write as what the mode adds to each write (negative: it saves):")
	sec.addTable(ratio)

	// The headline: the synthetic workload at the highest rate and the
	// largest fleet, where the two differ most.
	ck := cellKey{synth.name, plan.ns[len(plan.ns)-1], plan.rates[len(plan.rates)-1]}
	sw, dr := results[ck][writeModes[0].name], results[ck][writeModes[1].name]
	sec.headline(fmt.Sprintf("%s, %s writes, N = %d: L1 hit swap / drop; drop ÷ swap: bus bytes, Redis CPU", synth.name, fmtRate(ck.rate), ck.n),
		fmt.Sprintf("%.1f / %.1f%%; %s, %s", field(sw, (*writeResult).hitPct).Median, field(dr, (*writeResult).hitPct).Median,
			within(dr, sw, (*writeResult).busBytesPerWrite), within(dr, sw, func(r *writeResult) float64 { return r.redisCPUPerReq(own) })),
		"")
	return sec, nil
}

// fmtSpreadBytes formats a spread of byte counts: "1.20 KiB (1.10–1.31)".
func fmtSpreadBytes(s spread) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 || s.Min == s.Max {
		return fmtBytes(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtBytes(s.Median), fmtBytes(s.Min), fmtBytes(s.Max))
}
