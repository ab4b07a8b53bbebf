package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// Scenario 11: the Internet Archive's 2017 measurement of cache stampedes,
// scaled down ten times: one hot key read by 50 workers across 3 instances,
// a 2 s lifetime, a 50 ms recompute. How many callers wait for a load, how
// many loads the fleet makes and how many run at once, for plain expiry,
// eager refresh and XFetch (Options.XFetchBeta), each with and without
// Options.LoadLease.

const (
	xfWorkers = 50                     // across the instances
	xfInsts   = 3                      // instances
	xfTTL     = 2 * time.Second        // TTL and LocalTTL
	xfLoad    = 50 * time.Millisecond  // the recompute
	xfLease   = time.Second            // Options.LoadLease in the lease rows
	xfPace    = time.Millisecond       // each worker's pause between reads
	xfMiss    = xfLoad / 2             // a read this slow waited for a load
	xfEager   = 0.8                    // EagerRefresh in the eager rows
	xfBeta    = 1.0                    // XFetchBeta in the XFetch rows
	xfSettle  = 200 * time.Millisecond // after the warm-up, before the clock starts
)

type xfMode struct {
	name string
	set  func(*hybrid.Options)
}

var xfModes = []xfMode{
	{"plain expiry", func(*hybrid.Options) {}},
	{fmt.Sprintf("eager refresh %.1f", xfEager), func(o *hybrid.Options) { o.EagerRefresh = xfEager }},
	{fmt.Sprintf("XFetch β=%.0f", xfBeta), func(o *hybrid.Options) { o.XFetchBeta = xfBeta }},
}

// xfResult is what one cell measured, over all its instances.
type xfResult struct {
	reads, misses, l2Misses int64
	loads, most             int64
	refreshes, deferred     uint64
	p99                     float64
}

func scenarioXFetch(ctx context.Context, e *env) (*section, error) {
	run := pick(e, 4*time.Second, 12*time.Second)
	reps := pick(e, 1, 3)
	sec := &section{id: 11, title: "Stampede at expiry: plain expiry, eager refresh and XFetch"}
	sec.intro = fmt.Sprintf("The Internet Archive's 2017 measurement (50 workers, a 20 s TTL, 500 ms recomputes: plain expiry gave "+
		"484 misses and 471 simultaneous recomputes; XFetch with a lock 0 misses, 17 recomputes, 0 simultaneous), scaled down ten "+
		"times: %d instances in this process, each with its own go-redis client (the options of scenario 8), l2.Store and "+
		"invalidate.Bus, same Namespace (a fresh one per cell), Options.Secret set, TTL = LocalTTL = %s; %d workers split among "+
		"them read one hot key with GetOrCreate, pausing %s between reads, for %s per cell; the load sleeps %s and counts its "+
		"calls and how many run at once. The key is warm on every instance when the clock starts. Modes: plain expiry (the "+
		"default), eager refresh (Options.EagerRefresh = %.1f), XFetch (Options.XFetchBeta = %.0f); each without and with "+
		"Options.LoadLease = %s.\n\nColumns: misses, the reads that took %s or more (they waited for a load); L2 misses, the "+
		"fills that found the key in neither tier (Stats.L2.Misses, summed); loads, the load calls of the fleet; at once, the "+
		"most load calls running at the same moment; refreshes, background refreshes started (Stats.Load.Refreshes) and "+
		"those left to a lease holder (Stats.Load.RefreshesDeferred); p99 over every read. %d run(s) per cell, the cells "+
		"taking turns; medians, min–max in parentheses.",
		xfInsts, fmtDur(float64(xfTTL)), xfWorkers, fmtDur(float64(xfPace)), fmtDur(float64(run)), fmtDur(float64(xfLoad)),
		xfEager, xfBeta, fmtDur(float64(xfLease)), fmtDur(float64(xfMiss)), reps)

	type cellKey struct{ m, lease int }
	leases := []time.Duration{0, xfLease}
	goroutines := runtime.NumGoroutine()
	res := map[cellKey][]*xfResult{}
	for rep := range reps {
		for m := range xfModes {
			for l, lease := range leases {
				k := cellKey{m, l}
				e.progressf("    %s, lease %v (run %d of %d)", xfModes[m].name, lease, rep+1, reps)
				settle()
				r, err := runXFetchCell(ctx, e, xfModes[m], lease, run)
				if err != nil {
					return sec, fmt.Errorf("%s, lease %v: %w", xfModes[m].name, lease, err)
				}
				res[k] = append(res[k], r)
			}
		}
	}

	var t table
	t.Header = []string{"mode", "LoadLease", "misses", "L2 misses", "loads", "at once", "refreshes (deferred)", "reads", "p99"}
	t.Align = []byte{'l', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r'}
	med := func(rs []*xfResult, f func(*xfResult) float64) spread {
		var xs []float64
		for _, r := range rs {
			xs = append(xs, f(r))
		}
		return summarize(xs)
	}
	for m, mode := range xfModes {
		for l, lease := range leases {
			rs := res[cellKey{m, l}]
			if len(rs) == 0 {
				continue
			}
			ls := "off"
			if lease > 0 {
				ls = fmtDur(float64(lease))
			}
			t.Rows = append(t.Rows, []string{mode.name, ls,
				fmtSpread(med(rs, func(r *xfResult) float64 { return float64(r.misses) }), ""),
				fmtSpread(med(rs, func(r *xfResult) float64 { return float64(r.l2Misses) }), ""),
				fmtSpread(med(rs, func(r *xfResult) float64 { return float64(r.loads) }), ""),
				fmtSpread(med(rs, func(r *xfResult) float64 { return float64(r.most) }), ""),
				fmt.Sprintf("%s (%s)", sig3(med(rs, func(r *xfResult) float64 { return float64(r.refreshes) }).Median),
					sig3(med(rs, func(r *xfResult) float64 { return float64(r.deferred) }).Median)),
				fmtCount(med(rs, func(r *xfResult) float64 { return float64(r.reads) }).Median),
				fmtSpreadDur(med(rs, func(r *xfResult) float64 { return r.p99 })),
			})
		}
	}
	sec.addTable(t)
	plain, xf := res[cellKey{0, 0}], res[cellKey{len(xfModes) - 1, 1}]
	if len(plain) > 0 && len(xf) > 0 {
		m := func(rs []*xfResult, f func(*xfResult) int64) string {
			return sig3(med(rs, func(r *xfResult) float64 { return float64(f(r)) }).Median)
		}
		misses := func(r *xfResult) int64 { return r.misses }
		loads := func(r *xfResult) int64 { return r.loads }
		most := func(r *xfResult) int64 { return r.most }
		sec.headline(fmt.Sprintf("stampede at expiry, %d workers on %d instances, %s TTL, %s load, %s: misses / loads / most at once, plain expiry → XFetch + LoadLease",
			xfWorkers, xfInsts, fmtDur(float64(xfTTL)), fmtDur(float64(xfLoad)), fmtDur(float64(run))),
			fmt.Sprintf("%s / %s / %s → %s / %s / %s", m(plain, misses), m(plain, loads), m(plain, most), m(xf, misses), m(xf, loads), m(xf, most)),
			"IA 2017 (20 s TTL, 500 ms load): 484 / – / 471 simultaneous → 0 / 17 / 0 simultaneous (ours: 1 at once = never two)")
	}
	sec.add(fmt.Sprintf("Expected shape: plain expiry makes every worker that reads during a recompute wait for it, about once per "+
		"lifetime (%s lifetimes in a cell); each instance loads its own copy without the lease (3 at once), one instance for "+
		"the fleet with it. Eager refresh reloads at %.0f%% of the lifetime, in the background, so no caller waits, but each "+
		"instance whose copy comes due loads without the lease. XFetch reloads a little before expiry, the more likely the "+
		"nearer; with the lease, one instance loads and the others keep serving until its write reaches them. Our plain "+
		"expiry already has per-instance stampede protection (one load per instance), which the IA's had not: its "+
		"simultaneous recomputes are ours times the workers per instance.", sig3(float64(run)/float64(xfTTL)), xfEager*100))
	left := runtime.NumGoroutine() - goroutines
	for deadline := time.Now().Add(time.Second); left > 0 && time.Now().Before(deadline); left = runtime.NumGoroutine() - goroutines {
		time.Sleep(10 * time.Millisecond)
	}
	if left > 0 {
		sec.add(fmt.Sprintf("%d goroutine(s) more than before the scenario remained after every instance was closed.", left))
	}
	return sec, nil
}

// xfInst is one instance of a cell.
type xfInst struct {
	c   *hybrid.Cache[*Record]
	rdb *redis.Client
	bus *invalidate.Bus
}

func (in *xfInst) close() {
	if in.c != nil {
		in.c.Close()
	}
	in.bus.Close()
	in.rdb.Close()
}

// xfDB is a cell's database: a load that takes xfLoad, counting its calls
// and the most running at once.
type xfDB struct {
	calls, running, most atomic.Int64
}

func (d *xfDB) load(ctx context.Context, key string) (*Record, error) {
	d.calls.Add(1)
	now := d.running.Add(1)
	defer d.running.Add(-1)
	for m := d.most.Load(); now > m && !d.most.CompareAndSwap(m, now); m = d.most.Load() {
	}
	t := time.NewTimer(xfLoad)
	defer t.Stop()
	select {
	case <-t.C:
		return makeRecord(1), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func runXFetchCell(ctx context.Context, e *env, m xfMode, lease, run time.Duration) (*xfResult, error) {
	ns := e.k(fmt.Sprintf("xfetch-%d", time.Now().UnixNano()))
	var ins []*xfInst
	defer func() {
		for _, in := range ins {
			in.close()
		}
	}()
	for range xfInsts {
		co := outageClient
		co.Addr = e.addr
		in := &xfInst{rdb: redis.NewClient(&co)}
		in.bus = invalidate.New(in.rdb, invalidate.Options{})
		ins = append(ins, in)
		o := oursOptions(e, spec{kind: nameOurs, prefix: ns, f: fmtMsgpack}, &countingRemote{s: l2.New(in.rdb, l2.Options{})}, in.bus)
		o.TTL, o.LocalTTL, o.LoadLease = xfTTL, xfTTL, lease
		m.set(&o)
		c, err := hybrid.New[*Record](o)
		if err != nil {
			return nil, err
		}
		in.c = c
	}
	db := &xfDB{}
	const key = "hot"
	// Warm: one load, written back, then read by the others.
	if _, err := ins[0].c.GetOrCreate(ctx, key, db.load); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(2 * time.Second); ; {
		if n, err := e.rdb.Exists(ctx, ns+":"+key).Result(); err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the warm-up load was not written back")
		}
		time.Sleep(time.Millisecond)
	}
	for _, in := range ins[1:] {
		if _, err := in.c.GetOrCreate(ctx, key, db.load); err != nil {
			return nil, err
		}
	}
	time.Sleep(xfSettle)
	var l2Before int64
	for _, in := range ins {
		l2Before += int64(in.c.Stats().L2.Misses)
	}
	loads0 := db.calls.Load()
	db.most.Store(0)

	var reads, misses atomic.Int64
	lats := make([][]float64, xfWorkers)
	var errMu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	end := time.Now().Add(run)
	for w := range xfWorkers {
		in := ins[w%len(ins)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]float64, 0, int(run/xfPace))
			for time.Now().Before(end) {
				s := time.Now()
				_, err := in.c.GetOrCreate(ctx, key, db.load)
				d := time.Since(s)
				if err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					return
				}
				reads.Add(1)
				if d >= xfMiss {
					misses.Add(1)
				}
				lat = append(lat, float64(d))
				time.Sleep(xfPace)
			}
			lats[w] = lat
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	r := &xfResult{reads: reads.Load(), misses: misses.Load(), loads: db.calls.Load() - loads0, most: db.most.Load()}
	for _, in := range ins {
		st := in.c.Stats()
		r.l2Misses += int64(st.L2.Misses)
		r.refreshes += st.Load.Refreshes
		r.deferred += st.Load.RefreshesDeferred
	}
	r.l2Misses -= l2Before
	var all []float64
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	r.p99 = percentileSorted(all, 0.99)
	return r, nil
}
