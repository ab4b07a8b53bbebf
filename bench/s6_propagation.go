package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
)

// propSet is three instances of one implementation on one key: instance 0
// writes, 1 and 2 read.
type propSet struct {
	sets    int // Sets made, warm-ups included
	write   func(v int) error
	read    [2]func() (int, bool, error)
	msgs    func() (published, received, swapped uint64) // ours only
	lag     func() [2]hybrid.DurationStats               // ours only: the readers' Stats.Invalidations.Lag
	closeFn func()
}

type propImpl struct {
	name   string
	series int
	na     string
	delays []float64 // ns, from Set returning to a reader serving the value
	// fromCall are the delays from Set being called (see propagate).
	fromCall []float64
	early    int // reads that served the value before Set returned
	lost     int
	blocks   [][]float64
	msgsPer  string
}

// pollMode is how the reading instances look for the new value.
type pollMode struct {
	name  string
	short string
	poll  time.Duration // 0: spin, yielding with runtime.Gosched
}

func scenarioPropagation(ctx context.Context, e *env) (*section, error) {
	changes := pick(e, 200, 1000)
	modes := []pollMode{
		{"readers poll every 50 µs (time.Sleep between Gets)", "poll 50 µs", 50 * time.Microsecond},
		{"readers spin (runtime.Gosched between Gets)", "spin", 0},
	}
	sec := &section{id: 6, title: "Invalidation propagation across 3 instances"}
	sec.intro = fmt.Sprintf("Three instances in this process, each with its own go-redis client (and, for ours, its own l2.Store "+
		"and invalidate.Bus), same Namespace, Options.Secret set (so a Set's message carries the value and peers swap it in). "+
		"Instance A sets a new value %d times per mode; instances B and C read the key in a loop and stamp the first read that "+
		"serves the new value. The delay is from Set returning on A to that read; a read before Set returned counts as 0 (and is "+
		"counted). Changes run in %d blocks, the implementations taking turns block by block.\n\n"+
		"Two ways of polling: readers that sleep 50 µs between Gets (the figure that answers the question: the delay is the "+
		"message's, give or take the poll interval), and readers that spin as fast as they can, yielding with runtime.Gosched. "+
		"On this %d-core machine two spinning readers keep every P of the Go scheduler busy, and then the runtime looks at the "+
		"network poller only from sysmon (up to every 10 ms) instead of when a P goes idle, so the spin rows measure that "+
		"scheduling artefact as much as the message; on a machine with spare cores the two modes agree.", changes, e.reps, numCPU())

	type implDef struct {
		name   string
		series int
		na     string
		open   func() (*propSet, error)
	}
	defs := []implDef{
		{name: "hybridcache", series: 0, open: func() (*propSet, error) { return openPropOurs(ctx, e) }},
		{name: "go-redis/cache", series: 2, na: "no cross-instance invalidation: other instances serve their local copy until its local TTL ends"},
		{name: "rueidis (CLIENT TRACKING)", series: 3, open: func() (*propSet, error) {
			return openPropPeer(ctx, e, spec{kind: nameRueidis, prefix: e.k("prop-rueidis"), f: fmtMsgpack})
		}},
		{name: "go-redis CSC (CLIENT TRACKING)", series: 4, open: func() (*propSet, error) {
			return openPropPeer(ctx, e, spec{kind: nameCSC, prefix: e.k("prop-csc"), f: fmtMsgpack})
		}},
	}
	sets := make([]*propSet, len(defs))
	for i, d := range defs {
		if d.na != "" {
			continue
		}
		ps, err := d.open()
		if err != nil {
			defs[i].na = err.Error()
			continue
		}
		defer ps.closeFn()
		sets[i] = ps
	}
	var t table
	t.Header = []string{"Row", "p50", "p99", "max", "p50 per block (min–max)", "p99 per block (min–max)", "served before Set returned", "not seen in 1 s", "messages per Set"}
	t.Align = []byte{'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'l'}
	var bars []bar
	// The library's own figure for the same changes: the readers'
	// Stats.Invalidations.Lag, over each mode (warm-ups included).
	var lagT table
	lagT.Header = []string{"Mode", "harness p50 from Set returning / called", "library p50", "harness p99 from Set returning / called", "library p99", "library max", "messages measured", "clock skew"}
	lagT.Align = []byte{'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r'}
	version := 1
	for mi, mode := range modes {
		impls := make([]*propImpl, len(defs))
		for i, d := range defs {
			impls[i] = &propImpl{name: d.name + ", " + mode.short, series: d.series, na: d.na}
		}
		before := make([][3]uint64, len(defs))
		var lag0 [2]hybrid.DurationStats
		if sets[0] != nil && sets[0].lag != nil {
			lag0 = sets[0].lag()
		}
		sets0 := make([]int, len(defs))
		for i, ps := range sets {
			if ps != nil && ps.msgs != nil {
				p, r, s := ps.msgs()
				before[i] = [3]uint64{p, r, s}
			}
			if ps != nil {
				sets0[i] = ps.sets
			}
		}
		per := (changes + e.reps - 1) / e.reps
		for b := range e.reps {
			e.progressf("    %s, block %d/%d", mode.short, b+1, e.reps)
			for k := range impls {
				i := (k + b) % len(impls)
				im, ps := impls[i], sets[i]
				if ps == nil || im.na != "" {
					continue
				}
				n := min(per, changes-b*per)
				d, fc, early, lost, err := propagate(ctx, ps, version, n, mode.poll)
				version += n + 1
				if err != nil {
					im.na = err.Error()
					continue
				}
				im.delays = append(im.delays, d...)
				im.fromCall = append(im.fromCall, fc...)
				im.blocks = append(im.blocks, d)
				im.early += early
				im.lost += lost
			}
		}
		for i, ps := range sets {
			if ps != nil && ps.msgs != nil && impls[i].na == "" {
				p, r, s := ps.msgs()
				b := before[i]
				n := float64(ps.sets - sets0[i])
				impls[i].msgsPer = fmt.Sprintf("%.2f published, %.2f received (%.2f swapped in)", float64(p-b[0])/n, float64(r-b[1])/n, float64(s-b[2])/n)
			}
		}
		for _, im := range impls {
			if im.na != "" {
				if mi == 0 {
					t.Rows = append(t.Rows, []string{im.name, "n/a: " + im.na})
					bars = append(bars, bar{Label: im.name + " p50", Series: im.series, Caption: "n/a"})
				}
				continue
			}
			var b50, b99 []float64
			for _, blk := range im.blocks {
				b50 = append(b50, percentile(blk, 0.5))
				b99 = append(b99, percentile(blk, 0.99))
			}
			s50, s99 := summarize(b50), summarize(b99)
			p50, p99, mx := percentile(im.delays, 0.5), percentile(im.delays, 0.99), percentile(im.delays, 1)
			msgs := im.msgsPer
			if msgs == "" {
				msgs = "n/a: server-side invalidation pushes, one per client that cached the key (not counted)"
			}
			t.Rows = append(t.Rows, []string{im.name, fmtDur(p50), fmtDur(p99), fmtDur(mx),
				fmt.Sprintf("%s–%s", fmtDur(s50.Min), fmtDur(s50.Max)), fmt.Sprintf("%s–%s", fmtDur(s99.Min), fmtDur(s99.Max)),
				fmt.Sprintf("%d of %d", im.early, len(im.delays)), fmtCount(float64(im.lost)), msgs})
			bars = append(bars, bar{Label: im.name + " p50", Value: max(p50, 1), Lo: s50.Min, Hi: s50.Max, Series: im.series, Caption: fmtDur(p50)},
				bar{Label: im.name + " p99", Value: max(p99, 1), Lo: s99.Min, Hi: s99.Max, Series: im.series, Caption: fmtDur(p99)})
			if im.series == 0 && sets[0].lag != nil {
				lib := lagSince(sets[0].lag(), lag0)
				c50, c99 := percentile(im.fromCall, 0.5), percentile(im.fromCall, 0.99)
				lagT.Rows = append(lagT.Rows, []string{mode.short, fmtDur(p50) + " / " + fmtDur(c50), fmtDur(float64(lib.Quantile(0.5))),
					fmtDur(p99) + " / " + fmtDur(c99), fmtDur(float64(lib.Quantile(0.99))), fmtDur(float64(lib.Max)), fmtCount(float64(lib.Count)), fmtCount(float64(lib.Skewed))})
				sec.headline(fmt.Sprintf("propagation as the library reports it (Stats.Invalidations.Lag), %s: p50 / p99", mode.short),
					fmt.Sprintf("%s / %s", fmtDur(float64(lib.Quantile(0.5))), fmtDur(float64(lib.Quantile(0.99)))), "")
			}
			if im.series == 0 {
				sec.headline(fmt.Sprintf("propagation to 2 other instances, %s: p50 / p99 / max", mode.short),
					fmt.Sprintf("%s / %s / %s", fmtDur(p50), fmtDur(p99), fmtDur(mx)), "p99 ≤ 5 ms on loopback")
				if mi == 0 {
					sec.headline("messages per Set (ours)", msgs, "")
				}
			}
		}
	}
	sec.addTable(t)
	if len(lagT.Rows) > 0 {
		sec.add("The library's own measurement of the same runs: B's and C's `Stats.Invalidations.Lag`, from A building each " +
			"message (just before the write that publishes it) to B or C having applied it to L1, percentiles estimated from its " +
			"buckets (factors of √2 from 10 µs). The harness's figure above runs from Set returning on A to a poll serving the value: " +
			"the library's includes A's round trip to Redis, which that one leaves out. Measured from Set being called (second " +
			"figure of each harness column), the harness covers the library's span plus the wait for the next poll, and the two " +
			"should agree to within the poll interval. Library max: its largest, cut to the bound of the highest bucket that " +
			"grew in the mode.")
		sec.addTable(lagT)
	}
	sec.add("Percentiles are over all changes × 2 readers; the per-block ranges show how much they moved between blocks. " +
		"go-redis CSC applies an invalidation that arrives on an idle pooled connection at its background drainer's next tick " +
		"(CacheConfig.DrainInterval, default 5 ms); the harness keeps every peer's defaults.")
	sec.addChart("6-propagation.svg", barChart{
		Title: "6. Propagation delay to the other instances (all changes; whisker: per-block min–max)",
		Unit:  "", Log: true, Dur: true, Bars: bars,
	})
	return sec, nil
}

// propagate makes n changes (values from v0) on ps and returns the delays
// seen by both readers, how many reads were early, and how many were lost.
//
// fromCall are the same delays measured from Set being called: the span
// the library's own lag (Stats.Invalidations.Lag) covers, plus the poll.
func propagate(ctx context.Context, ps *propSet, v0, n int, poll time.Duration) (delays, fromCall []float64, early, lost int, err error) {
	var target atomic.Int64
	target.Store(-1)
	var stop atomic.Bool
	type stamp struct {
		v  int64
		at time.Time
	}
	seen := [2]chan stamp{make(chan stamp, 1), make(chan stamp, 1)}
	var readErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(-1)
			for !stop.Load() {
				want := target.Load()
				if want != last {
					v, ok, err := ps.read[r]()
					if err != nil {
						readErr.CompareAndSwap(nil, &err)
						return
					}
					if ok && int64(v) == want {
						at := time.Now()
						select {
						case seen[r] <- stamp{want, at}:
						case <-time.After(2 * time.Second): // the writer gave up on this one
						}
						last = want
					}
				}
				if poll > 0 {
					time.Sleep(poll)
				} else {
					runtime.Gosched()
				}
			}
		}()
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	// Warm up: both readers hold the key before the first timed change.
	var called time.Time
	change := func(v int) (time.Time, error) {
		called = time.Now()
		target.Store(int64(v))
		ps.sets++
		if err := ps.write(v); err != nil {
			return time.Time{}, err
		}
		return time.Now(), nil
	}
	if _, err := change(v0); err != nil {
		return nil, nil, 0, 0, err
	}
	for r := range 2 {
		select {
		case <-seen[r]:
		case <-time.After(3 * time.Second):
			if p := readErr.Load(); p != nil {
				return nil, nil, 0, 0, *p
			}
			return nil, nil, 0, 0, errors.New("readers did not see the first value within 2 s")
		}
	}
	for i := 1; i <= n; i++ {
		t0, err := change(v0 + i)
		if err != nil {
			return nil, nil, 0, 0, err
		}
		for r := range 2 {
			deadline := time.After(time.Second)
		wait:
			for {
				select {
				case st := <-seen[r]:
					if st.v != int64(v0+i) {
						continue // a late stamp for a change already given up on
					}
					d := st.at.Sub(t0)
					if d < 0 {
						early++
						d = 0
					}
					delays = append(delays, float64(d))
					fromCall = append(fromCall, float64(st.at.Sub(called)))
					break wait
				case <-deadline:
					lost++
					if p := readErr.Load(); p != nil {
						return nil, nil, 0, 0, *p
					}
					break wait
				}
			}
		}
	}
	return delays, fromCall, early, lost, nil
}

func openPropOurs(ctx context.Context, e *env) (*propSet, error) {
	s := spec{kind: nameOurs, prefix: e.k("prop-ours"), f: fmtMsgpack, ownBus: true}
	var inst [3]*ours[*Record]
	closeAll := func() {
		for _, o := range inst {
			if o != nil {
				o.Close()
			}
		}
	}
	for i := range inst {
		o, err := openOurs[*Record](e, s)
		if err != nil {
			closeAll()
			return nil, err
		}
		inst[i] = o
	}
	ps := &propSet{
		write: func(v int) error { return inst[0].c.Set(ctx, "k", &Record{ID: v, Name: "v"}) },
		lag: func() [2]hybrid.DurationStats {
			return [2]hybrid.DurationStats{inst[1].c.Stats().Invalidations.Lag, inst[2].c.Stats().Invalidations.Lag}
		},
		msgs: func() (uint64, uint64, uint64) {
			a, b, c := inst[0].c.Stats(), inst[1].c.Stats(), inst[2].c.Stats()
			return a.Invalidations.Sent, b.Invalidations.Applied + c.Invalidations.Applied, b.Invalidations.Swapped + c.Invalidations.Swapped
		},
		closeFn: closeAll,
	}
	for r := range 2 {
		c := inst[r+1].c
		ps.read[r] = func() (int, bool, error) {
			v, ok, err := c.Get(ctx, "k")
			if !ok || err != nil {
				return 0, ok, err
			}
			return v.ID, true, nil
		}
	}
	return ps, nil
}

func openPropPeer(ctx context.Context, e *env, s spec) (*propSet, error) {
	var inst [3]impl[*Record]
	closeAll := func() {
		for _, c := range inst {
			if c != nil {
				c.Close()
			}
		}
	}
	for i := range inst {
		c, err := open[*Record](e, s)
		if err != nil {
			closeAll()
			return nil, err
		}
		inst[i] = c
	}
	ps := &propSet{
		write:   func(v int) error { return inst[0].Set(ctx, "k", &Record{ID: v, Name: "v"}, benchTTL) },
		closeFn: closeAll,
	}
	for r := range 2 {
		c := inst[r+1]
		ps.read[r] = func() (int, bool, error) {
			v, ok, err := c.Get(ctx, "k")
			if !ok || err != nil {
				return 0, ok, err
			}
			return v.ID, true, nil
		}
	}
	return ps, nil
}

// lagSince returns the lags recorded by both readers since before: their
// buckets added up, less those of before. Max is the larger of the two
// now, cut to the upper bound of the highest bucket that grew (a Max
// from before the span is not its own).
func lagSince(now, before [2]hybrid.DurationStats) hybrid.DurationStats {
	var d hybrid.DurationStats
	for r := range now {
		if d.Buckets == nil {
			d.Buckets = make([]uint64, len(now[r].Buckets))
		}
		for i, n := range now[r].Buckets {
			if i < len(before[r].Buckets) {
				n -= before[r].Buckets[i]
			}
			d.Buckets[i] += n
			d.Count += n
		}
		d.Max = max(d.Max, now[r].Max)
		d.Skewed += now[r].Skewed - before[r].Skewed
	}
	bounds := hybrid.DurationBounds()
	for i := len(d.Buckets) - 1; i >= 0; i-- {
		if d.Buckets[i] > 0 {
			if i < len(bounds) {
				d.Max = min(d.Max, bounds[i])
			}
			break
		}
	}
	return d
}
