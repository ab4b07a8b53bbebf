package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

// TestLoadTimeout: Options.LoadTimeout ends a fill whose load takes too
// long, for every waiter.
func TestLoadTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := s.options()
		o.LoadTimeout = time.Second
		c := newTestCache[string](t, o)
		load := func(ctx context.Context, _ string) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		}
		r1 := goGetOrCreate(t.Context(), c, "k", load)
		r2 := goGetOrCreate(t.Context(), c, "k", load)
		for i, ch := range []<-chan result{r1, r2} {
			if r := <-ch; !errors.Is(r.err, context.DeadlineExceeded) {
				t.Errorf("caller %d: got %q, %v, want an error wrapping %v", i, r.v, r.err, context.DeadlineExceeded)
			}
		}
	})
}

// TestLoadPanic: a load that panics gives every waiter an error wrapping
// ErrPanic; the cache goes on and the next call loads again.
func TestLoadPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		release := make(chan struct{})
		var calls atomic.Int64
		load := func(context.Context, string) (string, error) {
			calls.Add(1)
			<-release
			panic("boom")
		}
		var results []<-chan result
		for range 5 {
			results = append(results, goGetOrCreate(t.Context(), c, "k", load))
		}
		synctest.Wait()
		close(release)
		for i, ch := range results {
			if r := <-ch; !errors.Is(r.err, hybrid.ErrPanic) {
				t.Errorf("caller %d: got %q, %v, want an error wrapping %v", i, r.v, r.err, hybrid.ErrPanic)
			}
		}
		if got := calls.Load(); got != 1 {
			t.Errorf("the panicking load ran %d times, want 1", got)
		}
		l := &counter{value: "after"}
		if v, err := c.GetOrCreate(t.Context(), "k", l.load); err != nil || v != "after" {
			t.Errorf("GetOrCreate after the panic: got %q, %v, want \"after\", nil", v, err)
		}
		if got := l.calls.Load(); got != 1 {
			t.Errorf("load after the panic ran %d times, want 1", got)
		}
		if st := c.Stats(); st.Load.Errors != 1 || st.Load.Calls != 2 {
			t.Errorf("Stats: got Load.Calls %d, Load.Errors %d, want 2, 1", st.Load.Calls, st.Load.Errors)
		}
	})
}

// TestLoadGoexit: a load that ends its goroutine without returning (for
// instance a test helper calling t.FailNow in a loader) must not leave the
// key's fill open forever: waiters get an error and the next call loads
// again.
func TestLoadGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) {
			runtime.Goexit()
			return "", nil
		})
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("GetOrCreate whose load called runtime.Goexit: got %v, want an error at once (not the caller's deadline)", err)
		}
		v, err := c.GetOrCreate(ctx, "k", loadTop)
		if err != nil || v != "v" {
			t.Errorf("next GetOrCreate: got %q, %v, want \"v\", nil (a new load)", v, err)
		}
	})
}

// The load bound (Options.MaxConcurrentLoads).

// slowLoads is a load function that counts the loads running at once and
// the most seen, and waits for one value on release per call.
type slowLoads struct {
	running, most, calls atomic.Int64
	release              chan struct{}
}

func newSlowLoads() *slowLoads { return &slowLoads{release: make(chan struct{})} }

func (l *slowLoads) load(ctx context.Context, key string) (string, error) {
	l.calls.Add(1)
	n := l.running.Add(1)
	defer l.running.Add(-1)
	for m := l.most.Load(); n > m && !l.most.CompareAndSwap(m, n); m = l.most.Load() {
	}
	select {
	case <-l.release:
		return "v:" + key, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// TestMaxConcurrentLoads: 5 fills of distinct keys, two callers each, with
// a bound of 2: never more than 2 loads at once, the other 3 fills wait
// (Stats.Load.Queued) and load as slots free; every caller gets its value.
func TestMaxConcurrentLoads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := s.options()
		o.MaxConcurrentLoads = 2
		c := newTestCache[string](t, o)
		l := newSlowLoads()
		const keys = 5
		var results []<-chan result
		for i := range keys {
			for range 2 {
				results = append(results, goGetOrCreate(t.Context(), c, fmt.Sprint(i), l.load))
			}
		}
		synctest.Wait()
		if n := l.running.Load(); n != 2 {
			t.Fatalf("%d loads running with 5 fills and a bound of 2, want 2", n)
		}
		if st := c.Stats(); st.Load.Queued != 3 || st.Load.Calls != 2 {
			t.Errorf("Stats: Load.Queued %d, Load.Calls %d, want 3 and 2", st.Load.Queued, st.Load.Calls)
		}
		for range keys {
			l.release <- struct{}{}
			synctest.Wait()
			if n := l.running.Load(); n > 2 {
				t.Errorf("%d loads running, want at most 2", n)
			}
		}
		for i, ch := range results {
			if r := <-ch; r.err != nil || r.v != "v:"+fmt.Sprint(i/2) {
				t.Errorf("caller %d: got %q, %v, want %q", i, r.v, r.err, "v:"+fmt.Sprint(i/2))
			}
		}
		if m, n := l.most.Load(), l.calls.Load(); m != 2 || n != keys {
			t.Errorf("loads: %d in all, at most %d at once; want %d and 2", n, m, keys)
		}
		if st := c.Stats(); st.Load.Queued != 3 || st.Load.Calls != keys {
			t.Errorf("Stats: Load.Queued %d, Load.Calls %d, want 3 and %d", st.Load.Queued, st.Load.Calls, keys)
		}
	})
}

// TestMaxConcurrentLoadsWaiterLeaves: a caller whose fill waits for a slot
// leaves when its own ctx ends; the fill goes on waiting for the others,
// then loads.
func TestMaxConcurrentLoadsWaiterLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := s.options()
		o.MaxConcurrentLoads = 1
		c := newTestCache[string](t, o)
		l := newSlowLoads()
		busy := goGetOrCreate(t.Context(), c, "busy", l.load)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		short := goGetOrCreate(ctx, c, "k", l.load)
		patient := goGetOrCreate(t.Context(), c, "k", l.load)
		if r := <-short; !errors.Is(r.err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Errorf("queued caller with a 1s deadline: got %q, %v after %v, want DeadlineExceeded after 1s", r.v, r.err, time.Since(start))
		}
		if st := c.Stats(); st.Load.Queued != 1 || l.calls.Load() != 1 {
			t.Errorf("Load.Queued %d, loads %d, want 1 and 1 (k waits for the slot)", st.Load.Queued, l.calls.Load())
		}
		l.release <- struct{}{} // busy's load ends; k's takes the slot
		l.release <- struct{}{}
		for name, ch := range map[string]<-chan result{"busy": busy, "k": patient} {
			if r := <-ch; r.err != nil || r.v != "v:"+name {
				t.Errorf("%s: got %q, %v, want %q", name, r.v, r.err, "v:"+name)
			}
		}
	})
}

// TestMaxConcurrentLoadsWaitEnds: a fill's wait for a slot ends with its
// LoadTimeout, and with Close (ErrClosed).
func TestMaxConcurrentLoadsWaitEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := s.options()
		o.MaxConcurrentLoads = 1
		c := newTestCache[string](t, o)
		l := newSlowLoads()
		busy := goGetOrCreate(t.Context(), c, "busy", l.load)
		synctest.Wait()
		start := time.Now()
		_, err := c.GetOrCreate(t.Context(), "k", l.load, hybrid.WithLoadTimeout(time.Second))
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Errorf("queued fill with a 1s load timeout: got %v after %v, want DeadlineExceeded after 1s", err, time.Since(start))
		}
		queued := goGetOrCreate(t.Context(), c, "k", l.load)
		synctest.Wait()
		c.Close()
		if r := <-queued; !errors.Is(r.err, hybrid.ErrClosed) {
			t.Errorf("queued fill at Close: got %q, %v, want ErrClosed", r.v, r.err)
		}
		if r := <-busy; !errors.Is(r.err, context.Canceled) {
			t.Errorf("running load at Close: got %q, %v, want context.Canceled", r.v, r.err)
		}
		if n := l.calls.Load(); n != 1 {
			t.Errorf("loads: got %d, want 1 (the queued fills never loaded)", n)
		}
	})
}

// TestMaxConcurrentLoadsServesStale: with fail-safe, a fill beyond the bound
// that has a stale value lets its callers have it at once, and callers
// that come while it waits too; it then loads and stores the new value.
func TestMaxConcurrentLoadsServesStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := failSafeOptions(s)
		o.MaxConcurrentLoads = 1
		c := newTestCache[string](t, o)
		set(t, c, "k", "old")
		time.Sleep(11 * time.Second) // past the lifetime, within FailSafeMaxAge
		l := newSlowLoads()
		busy := goGetOrCreate(t.Context(), c, "busy", l.load)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // fails the test, not hangs it
		defer cancel()
		start := time.Now()
		for i := range 3 {
			v, err := c.GetOrCreate(ctx, "k", l.load)
			if err != nil || v != "old" || time.Since(start) != 0 {
				t.Fatalf("caller %d beyond the bound: got %q, %v after %v, want the stale value at once", i, v, err, time.Since(start))
			}
		}
		synctest.Wait()
		if st := c.Stats(); st.Load.StaleServed != 1 || st.Load.Queued != 1 || l.calls.Load() != 1 {
			t.Errorf("Load.StaleServed %d, Load.Queued %d, loads %d; want 1, 1, 1 (one fill for k, waiting)", st.Load.StaleServed, st.Load.Queued, l.calls.Load())
		}
		l.release <- struct{}{} // busy ends; k's fill loads
		if r := <-busy; r.err != nil {
			t.Fatal(r.err)
		}
		l.release <- struct{}{}
		synctest.Wait()
		if v, err := c.GetOrCreate(t.Context(), "k", neverLoad(t)); err != nil || v != "v:k" {
			t.Errorf("after the queued load: got %q, %v, want its value", v, err)
		}
		if v, _ := s.stored(t, "k"); v != "v:k" {
			t.Errorf("shared tier: got %q, want the queued load's value", v)
		}
	})
}

// TestIntegrationMaxConcurrentLoads: on Redis, 40 callers over 20 keys and
// a bound of 3: at most 3 loads at once, one per key, all written back.
func TestIntegrationMaxConcurrentLoads(t *testing.T) {
	ns := redistest.Prefix(t)
	in := newInstance(t, "A", singleNode(nil), hybrid.Options{Namespace: ns, MaxConcurrentLoads: 3}, invalidate.Options{})
	var running, most, calls atomic.Int64
	load := func(_ context.Context, key string) (string, error) {
		calls.Add(1)
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		return "v:" + key, nil
	}
	const keys = 20
	var wg sync.WaitGroup
	var fails failures
	for i := range 2 * keys {
		wg.Go(func() {
			key := fmt.Sprint(i % keys)
			if r := <-goGet(in, key, load); r.err != nil || r.v != "v:"+key {
				fails.addf("GetOrCreate(%s): got %q, %v", key, r.v, r.err)
			}
		})
	}
	wg.Wait()
	fails.report(t)
	if m, n := most.Load(), calls.Load(); m > 3 || n != keys {
		t.Errorf("loads: %d in all, at most %d at once; want %d and at most 3", n, m, keys)
	}
	if st := in.c.Stats(); st.Load.Queued == 0 {
		t.Error("Load.Queued is 0: no fill waited for a slot")
	}
	waitFor(t, 5*time.Second, "the write-backs", func() bool { return in.remote.ifAbsents.Load() >= keys }, nil)
	for i := range keys {
		key := fmt.Sprint(i)
		if v, ok := redisValue(t, in.rdb, ns, key); !ok || v != "v:"+key {
			t.Errorf("Redis holds %s = %q (%v), want %q", key, v, ok, "v:"+key)
		}
	}
}

// loadFault is what the load function does for a key.
type loadFault int

const (
	loadOK loadFault = iota
	loadPanic
	loadHang
	loadError
)

func (f loadFault) String() string {
	return [...]string{"ok", "panic", "hang", "error"}[f]
}

// TestFaultLoaderAtScale: two instances on real Redis, 100 keys read
// concurrently by 8 goroutines (each over every key, from a different
// start, so fills are shared and restarted). Some loads panic, some hang
// until their ctx ends (LoadTimeout), some fail, the rest succeed. Every
// caller gets its own key's answer: the value, or an error that wraps
// ErrPanic, context.DeadlineExceeded or that key's own error; no call waits
// longer than LoadTimeout allows, and no goroutine is left once the caches
// and buses are closed.
func TestFaultLoaderAtScale(t *testing.T) {
	srv.NeedReal(t)
	// Runs last, after the caches, buses and clients are closed.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })

	const (
		nkeys       = 100
		goroutines  = 8
		loadTimeout = 250 * time.Millisecond
		bound       = loadTimeout + time.Second
	)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, LoadTimeout: loadTimeout}
	p := []*instance{
		newInstance(t, "A", singleNode(nil), o, invalidate.Options{}),
		newInstance(t, "B", singleNode(nil), o, invalidate.Options{}),
	}

	keys := make([]string, nkeys)
	faults := make([]loadFault, nkeys)
	keyErrs := make([]error, nkeys)
	byKey := make(map[string]int, nkeys)
	count := map[loadFault]int{}
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
		byKey[keys[i]] = i
		switch {
		case i%10 == 0:
			faults[i] = loadPanic
		case i%10 == 1 && i < 60:
			faults[i] = loadHang
		case i%10 == 2 || i%10 == 3:
			faults[i] = loadError
			keyErrs[i] = fmt.Errorf("backend error for %s", keys[i])
		}
		count[faults[i]]++
	}
	var loads [4]atomic.Int64
	load := func(ctx context.Context, key string) (string, error) {
		i := byKey[key]
		loads[faults[i]].Add(1)
		switch faults[i] {
		case loadPanic:
			panic("loader bug for " + key)
		case loadHang:
			<-ctx.Done()
			return "", ctx.Err()
		case loadError:
			return "", keyErrs[i]
		}
		return "v:" + key, nil
	}

	var (
		ts       timings
		fails    failures
		outcomes [4]atomic.Int64
		wg       sync.WaitGroup
	)
	start := time.Now()
	for g := range goroutines {
		in := p[g%len(p)]
		wg.Go(func() {
			for j := range nkeys {
				i := (g*13 + j) % nkeys
				key := keys[i]
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				t0 := time.Now()
				v, err := in.c.GetOrCreate(ctx, key, load)
				d := time.Since(t0)
				cancel()
				ts.add(d)
				if d > bound {
					fails.addf("%s: GetOrCreate(%s) [%v] took %v, want at most %v", in.name, key, faults[i], d, bound)
				}
				ok := false
				switch faults[i] {
				case loadOK:
					ok = err == nil && v == "v:"+key
				case loadPanic:
					ok = errors.Is(err, hybrid.ErrPanic) && v == ""
				case loadHang:
					ok = errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, hybrid.ErrPanic) && v == ""
				case loadError:
					ok = errors.Is(err, keyErrs[i]) && !errors.Is(err, hybrid.ErrPanic) && v == ""
					// Never another key's error.
					for x, e := range keyErrs {
						if e != nil && x != i && errors.Is(err, e) {
							ok = false
						}
					}
				}
				if ok {
					outcomes[faults[i]].Add(1)
				} else {
					fails.addf("%s: GetOrCreate(%s) [%v] = %q, %v", in.name, key, faults[i], v, firstLine(err))
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		var sb strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&sb, 1)
		t.Fatalf("callers still waiting after 60 s: a waiter is stuck\n%s", sb.String())
	}
	elapsed := time.Since(start)
	fails.report(t)

	d := ts.sorted()
	t.Logf("%d keys (%d ok, %d panic, %d hang, %d error) x %d goroutines on 2 instances in %v: %s",
		nkeys, count[loadOK], count[loadPanic], count[loadHang], count[loadError], goroutines, elapsed.Round(time.Millisecond), summary(d))
	t.Logf("right answers: ok %d, panic %d, hang %d, error %d; loads: ok %d, panic %d, hang %d, error %d",
		outcomes[loadOK].Load(), outcomes[loadPanic].Load(), outcomes[loadHang].Load(), outcomes[loadError].Load(),
		loads[loadOK].Load(), loads[loadPanic].Load(), loads[loadHang].Load(), loads[loadError].Load())
	// Redis is up: the instances share what they loaded through it. (A
	// few shared-tier calls may still fail when a loaded machine stalls a
	// fill past LoadTimeout, which also bounds its Redis calls.)
	var l2Hits uint64
	for _, in := range p {
		st := in.c.Stats()
		l2Hits += st.L2.Hits
		t.Logf("%s: Load.Calls %d, Load.Errors %d, L1.Hits %d, L2.Hits %d, L2.Errors %d", in.name, st.Load.Calls, st.Load.Errors, st.L1.Hits, st.L2.Hits, st.L2.Errors)
	}
	if l2Hits == 0 {
		t.Error("L2.Hits 0 on both instances, want values loaded by one read by the other from Redis")
	}
	// A successful key loads at most once per instance (then L1 or Redis
	// answers); the faulty ones are not cached and load again.
	if n := loads[loadOK].Load(); n < int64(count[loadOK]) || n > int64(len(p)*count[loadOK]) {
		t.Errorf("loads of good keys: %d, want %d..%d", n, count[loadOK], len(p)*count[loadOK])
	}
	for _, f := range []loadFault{loadPanic, loadHang, loadError} {
		if n := loads[f].Load(); n < int64(count[f]) {
			t.Errorf("loads of %v keys: %d, want at least one per key (%d)", f, n, count[f])
		}
	}
}

// firstLine is err's message up to its first newline (a panic's error
// carries the stack after it).
func firstLine(err error) string {
	if err == nil {
		return "<nil>"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
