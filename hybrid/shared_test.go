package hybrid_test

// Network faults between the cache and Redis, made by a TCP proxy
// (internal/faultproxy): a black hole, added latency, and a cut of the bus
// connection alone.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// blackHoleBus notices a silent pub/sub connection within ~2 health
// intervals and reconnects quickly once traffic passes again.
var blackHoleBus = invalidate.Options{
	HealthInterval: 150 * time.Millisecond,
	ReconnectMin:   20 * time.Millisecond,
	ReconnectMax:   100 * time.Millisecond,
}

// hammerGetOrCreate runs GetOrCreate from goroutines goroutines, calls
// times each, on the keys key(g, i); every call must return
// "loaded:"+key, nil within bound. It returns the durations.
func hammerGetOrCreate(t *testing.T, in *instance, goroutines, calls int, key func(g, i int) string, bound time.Duration) []time.Duration {
	t.Helper()
	var (
		ts     timings
		fails  failures
		panics atomic.Int64
		wg     sync.WaitGroup
	)
	load := func(_ context.Context, key string) (string, error) { return "loaded:" + key, nil }
	for g := range goroutines {
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					panics.Add(1)
				}
			}()
			for i := range calls {
				k := key(g, i)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				start := time.Now()
				v, err := in.c.GetOrCreate(ctx, k, load)
				d := time.Since(start)
				cancel()
				ts.add(d)
				if err != nil || v != "loaded:"+k || d > bound {
					fails.addf("%s: GetOrCreate(%s) = %q, %v in %v; want %q, nil within %v", in.name, k, v, err, d, "loaded:"+k, bound)
				}
			}
		})
	}
	wg.Wait()
	if n := panics.Load(); n != 0 {
		t.Errorf("%d goroutines panicked", n)
	}
	fails.report(t)
	return ts.sorted()
}

// TestFaultBlackHole: Redis (store and bus) behind a black hole, which
// keeps connections open and forwards nothing, with go-redis timeouts of
// 200 ms and no retries. GetOrCreate from many goroutines returns within a
// bound, loads stand in for Redis and L1 serves what they loaded; with the
// circuit breaker, calls are fast once it is open, and it closes again
// after the network heals.
func TestFaultBlackHole(t *testing.T) {
	srv.NeedReal(t)
	const (
		goroutines = 8
		bound      = 1500 * time.Millisecond
	)

	t.Run("no-breaker", func(t *testing.T) {
		ctx := context.Background()
		ns := redistest.Prefix(t)
		p := startProxy(t, srv.Addr)
		a := newInstance(t, "A", via(p, shortTimeouts), hybrid.Options{Namespace: ns, LoadTimeout: 800 * time.Millisecond}, blackHoleBus)
		setStr(t, a, "warm", "w") // the path works before the fault

		setFault(t, p.BlackHole())
		holed := time.Now()
		// The bus notices the silent connection and flushes L1 once; wait
		// for that so it does not happen between the two rounds below.
		waitStat(t, a, "BusLosses", statBusLosses, 1)
		noticed := time.Since(holed)

		key := func(g, i int) string { return fmt.Sprint("k", (g+8*i)%24) }
		const calls = 6
		before := a.c.Stats()
		first := hammerGetOrCreate(t, a, goroutines, calls, key, bound)
		mid, midCalls := a.c.Stats(), a.remote.calls()
		second := hammerGetOrCreate(t, a, goroutines, calls, key, bound)
		after, afterCalls := a.c.Stats(), a.remote.calls()
		t.Logf("black hole: bus noticed in %v; round 1 (misses): %s; round 2 (L1): %s",
			noticed.Round(time.Millisecond), summary(first), summary(second))
		t.Logf("round 1: Loads %d, L2Errors %d; round 2: Loads %d, L1Hits +%d",
			mid.Loads-before.Loads, mid.L2Errors-before.L2Errors, after.Loads-mid.Loads, after.L1Hits-mid.L1Hits)

		if n := mid.Loads - before.Loads; n == 0 || n > 24 {
			t.Errorf("round 1: %d loads, want 1..24 (loads stand in for Redis, at most once per key)", n)
		}
		if mid.L2Errors == before.L2Errors {
			t.Error("round 1: L2Errors did not grow: the reads did not reach the black hole")
		}
		if after.Loads != mid.Loads || afterCalls.Get != midCalls.Get || after.L1Hits-mid.L1Hits < goroutines*calls {
			t.Errorf("round 2: Loads %d -> %d, Redis reads %d -> %d, L1Hits +%d; want no loads, no reads, %d hits (L1 serves)",
				mid.Loads, after.Loads, midCalls.Get, afterCalls.Get, after.L1Hits-mid.L1Hits, goroutines*calls)
		}

		start := time.Now()
		err := a.c.Set(ctx, "w", "x")
		d := time.Since(start)
		t.Logf("Set into the black hole: %v after %v", err, d.Round(time.Millisecond))
		if err == nil || d > bound {
			t.Errorf("Set into the black hole: got %v after %v, want an error within %v", err, d, bound)
		}

		// Close with a fill stuck in the black hole: it cancels the fill,
		// but go-redis notices only at its ReadTimeout (200 ms here).
		misses := a.c.Stats().L1Misses
		done := make(chan error, 1)
		go func() {
			_, err := a.c.GetOrCreate(ctx, "closing", func(context.Context, string) (string, error) { return "x", nil })
			done <- err
		}()
		waitFor(t, time.Second, "the fill to start", func() bool { return a.c.Stats().L1Misses > misses }, nil)
		start = time.Now()
		a.c.Close()
		d = time.Since(start)
		err = <-done
		t.Logf("Close with a fill in the black hole: %v; the caller got %v", d.Round(time.Millisecond), err)
		if d > bound {
			t.Errorf("Close with a fill in the black hole took %v, want at most %v", d, bound)
		}
	})

	t.Run("breaker", func(t *testing.T) {
		ctx := context.Background()
		ns := redistest.Prefix(t)
		p := startProxy(t, srv.Addr)
		const openFor = 1500 * time.Millisecond
		o := hybrid.Options{Namespace: ns, LoadTimeout: 800 * time.Millisecond, BreakerThreshold: 3, BreakerOpenFor: openFor}
		a := newInstance(t, "A", via(p, shortTimeouts), o, blackHoleBus)
		admin := srv.Client(t)
		setStr(t, a, "warm", "w")

		setFault(t, p.BlackHole())
		holed := time.Now()
		// Phase 1: calls run into the black hole until the breaker opens
		// (BreakerThreshold failed reads).
		var opening []time.Duration
		phase1 := make(chan struct{})
		defer func() { <-phase1 }() // also when t fails below
		go func() {
			defer close(phase1)
			opening = hammerGetOrCreate(t, a, goroutines, 2, func(g, i int) string { return fmt.Sprint("open:", g, ":", i) }, bound)
		}()
		waitFor(t, 5*time.Second, "the breaker to open", func() bool { return a.c.Stats().BreakerOpens >= 1 },
			func() string { return fmt.Sprintf("%+v", a.c.Stats()) })
		opened := time.Since(holed)
		<-phase1
		st := a.c.Stats()

		// Phase 2: fresh keys (no fill to join), the breaker open: no call
		// waits for Redis.
		const calls = 50
		phase := time.Now()
		fast := hammerGetOrCreate(t, a, goroutines, calls, func(g, i int) string { return fmt.Sprint("fast:", g, ":", i) }, bound)
		phaseLen := time.Since(phase)
		st2 := a.c.Stats()
		p99 := percentile(fast, 0.99)
		t.Logf("breaker opened %v into the black hole (BreakerOpens %d, L2Errors %d); before: %s",
			opened.Round(time.Millisecond), st.BreakerOpens, st.L2Errors, summary(opening))
		t.Logf("breaker open: %s in %v; L2Skipped +%d", summary(fast), phaseLen.Round(time.Millisecond), st2.L2Skipped-st.L2Skipped)
		if st2.BreakerOpens < 1 {
			t.Errorf("BreakerOpens: got %d, want >= 1", st2.BreakerOpens)
		}
		// go-redis waits 200 ms for a reply; an open breaker waits for none.
		if limit := 100 * time.Millisecond; p99 > limit {
			t.Errorf("breaker open: p99 of GetOrCreate is %v, want under %v (the client's timeout is 200 ms)", p99, limit)
		}
		if skipped := st2.L2Skipped - st.L2Skipped; phaseLen < openFor && skipped < goroutines*calls {
			t.Errorf("breaker open: L2Skipped +%d for %d calls, want every read skipped", skipped, goroutines*calls)
		}
		start := time.Now()
		err := a.c.Set(ctx, "w", "x")
		d := time.Since(start)
		if !errors.Is(err, hybrid.ErrUnavailable) || d > 100*time.Millisecond {
			t.Errorf("Set while the breaker is open: got %v after %v, want ErrUnavailable at once", err, d)
		}

		// The network heals: after BreakerOpenFor a probe closes the breaker
		// (or sooner, when a call sent just before the breaker opened gets
		// its held reply and succeeds). First let the bus notice the black
		// hole, so that its recovery can be seen too.
		waitStat(t, a, "BusLosses", statBusLosses, 1)
		losses := a.c.Stats().BusLosses
		setFault(t, p.Pass())
		healed := time.Now()
		var setErr error
		waitFor(t, openFor+3*time.Second, "a Set to succeed after the network healed", func() bool {
			setErr = a.c.Set(ctx, "after", "healed")
			return setErr == nil
		}, func() string { return fmt.Sprintf("last error %v; %+v", setErr, a.c.Stats()) })
		closed := time.Since(healed)
		if v, ok := redisValue(t, admin, ns, "after"); !ok || v != "healed" {
			t.Errorf("Redis holds %q, %v after the Set, want \"healed\"", v, ok)
		}
		if v, err := a.c.GetOrCreate(ctx, "fresh", func(context.Context, string) (string, error) { return "loaded", nil }); err != nil || v != "loaded" {
			t.Errorf("GetOrCreate after the breaker closed: got %q, %v", v, err)
		}
		waitStat(t, a, "BusLosses", statBusLosses, losses+1)
		t.Logf("network healed: breaker closed (Set succeeded) after %v (BreakerOpenFor %v); bus restored after %v; final %+v",
			closed.Round(time.Millisecond), openFor, time.Since(healed).Round(time.Millisecond), a.c.Stats())
	})
}

// TestFaultLatency: every byte between the store and Redis is delayed by
// 500 ms each way, while l2's ReadTimeout and WriteTimeout are 100 ms (with
// a client built with ContextTimeoutEnabled, whose own ReadTimeout is the
// 5 s default).
// Reads give up at the store's timeout and load stands in, and writes
// return an error wrapping context.DeadlineExceeded, all well within one
// round trip through the slow path.
func TestFaultLatency(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	ns := redistest.Prefix(t)
	p := startProxy(t, srv.Addr)
	const (
		latency = 500 * time.Millisecond // each way
		timeout = 100 * time.Millisecond
		// Well under one round trip through the proxy (1 s), with room
		// for a loaded machine.
		bound = 700 * time.Millisecond
	)
	slow := via(p, func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
		o.MaxRetries = -1
	})(t)
	direct := singleNode(nil)(t)
	a := newSplitInstance(t, "A", slow, direct, l2.Options{ReadTimeout: timeout, WriteTimeout: timeout}, hybrid.Options{Namespace: ns}, invalidate.Options{})
	setStr(t, a, "pre", "stored") // before the fault: written to Redis

	setFault(t, p.Delay(latency))
	before := a.c.Stats()

	// Concurrent reads of fresh keys, and of a key Redis holds.
	const goroutines, calls = 4, 3
	reads := hammerGetOrCreate(t, a, goroutines, calls, func(g, i int) string { return fmt.Sprint("k", g, ":", i) }, bound)
	a.c.DropLocal("pre")
	start := time.Now()
	v, err := a.c.GetOrCreate(ctx, "pre", func(context.Context, string) (string, error) { return "loaded", nil })
	if d := time.Since(start); err != nil || v != "loaded" || d > bound {
		t.Errorf("GetOrCreate(pre) through the slow path: got %q, %v after %v, want the loaded value within %v (the read gives up at %v)", v, err, d, bound, timeout)
	}
	a.c.DropLocal("pre")
	start = time.Now()
	v, ok, err := a.c.Get(ctx, "pre")
	if d := time.Since(start); err != nil || ok || d > bound {
		t.Errorf("Get(pre) through the slow path: got %q, %v, %v after %v, want a miss (a failed read) within %v", v, ok, err, d, bound)
	}
	mid := a.c.Stats()
	t.Logf("latency %v each way, store timeout %v: reads %s; Loads +%d, L2Errors +%d",
		latency, timeout, summary(reads), mid.Loads-before.Loads, mid.L2Errors-before.L2Errors)
	if mid.L2Errors-before.L2Errors < goroutines*calls {
		t.Errorf("L2Errors +%d, want at least %d (every read timed out)", mid.L2Errors-before.L2Errors, goroutines*calls)
	}

	// Writes report the timeout.
	for _, w := range []struct {
		name string
		do   func() error
	}{
		{"Set", func() error { return a.c.Set(ctx, "w", "x") }},
		{"Delete", func() error { return a.c.Delete(ctx, "w") }},
	} {
		start := time.Now()
		err := w.do()
		d := time.Since(start)
		t.Logf("%s through the slow path: %v after %v", w.name, err, d.Round(time.Millisecond))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s through the slow path: got %v, want an error wrapping context.DeadlineExceeded", w.name, err)
		}
		if d > bound {
			t.Errorf("%s through the slow path took %v, want under %v (store timeout %v)", w.name, d, bound, timeout)
		}
	}

	// Without the fault the same path works: the errors came from the delay.
	setFault(t, p.Pass())
	waitFor(t, 5*time.Second, "a Set to succeed once the delay is gone", func() bool { return a.c.Set(ctx, "w", "y") == nil }, nil)
	if v, ok := redisValue(t, direct, ns, "w"); !ok || v != "y" {
		t.Errorf("Redis holds %q, %v, want \"y\"", v, ok)
	}
}

// TestFaultBusCut: only B's bus goes through the proxy; its store and
// instance A talk to Redis directly. Cutting the proxy drops B's pub/sub
// connection: B reports the loss (BusLosses), misses A's Set made during
// the cut, and once the proxy passes again and the bus has reconnected, B
// serves nothing it held before (no stale value) and sees A's next Set.
func TestFaultBusCut(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	p := startProxy(t, srv.Addr)
	o := hybrid.Options{Namespace: ns}
	a := newInstance(t, "A", singleNode(nil), o, invalidate.Options{})
	bo := invalidate.Options{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond}
	b := newSplitInstance(t, "B", singleNode(nil)(t), via(p, nil)(t), l2.Options{}, o, bo)

	setStr(t, a, "k", "v1")
	waitStat(t, b, "Received", statReceived, 1)
	fill(t, b, "k", "v1")
	losses := b.c.Stats().BusLosses

	// A fill of B that loads across the whole outage.
	loading, release := make(chan struct{}), make(chan struct{})
	type result struct {
		v   string
		err error
	}
	slow := make(chan result, 1)
	go func() {
		v, err := b.c.GetOrCreate(context.Background(), "slow", func(context.Context, string) (string, error) {
			close(loading)
			<-release
			return "loaded-before", nil
		})
		slow <- result{v, err}
	}()
	<-loading

	p.Cut()
	cut := time.Now()
	waitStat(t, b, "BusLosses", statBusLosses, losses+1)
	noticed := time.Since(cut)

	// During the cut B fills k again (its L1 was flushed), then A changes
	// it: the message cannot reach B.
	fill(t, b, "k", "v1")
	recv := b.c.Stats().Received
	setStr(t, a, "k", "v2")
	setStr(t, a, "slow", "written-during")
	during, _ := getStr(t, b, "k")
	if got := b.c.Stats().Received; got != recv {
		t.Fatalf("B received %d message(s) while its bus was cut: the cut did not cut", got-recv)
	}

	setFault(t, p.Pass())
	healed := time.Now()
	waitStat(t, b, "BusLosses", statBusLosses, losses+2)
	restored := time.Since(healed)
	if v, ok := getStr(t, b, "k"); !ok || v != "v2" {
		t.Errorf("B: Get(k) after the bus reconnected: got %q, %v, want \"v2\" (what B filled during the cut must not be served)", v, ok)
	}
	// The fill that loaded across the outage may answer its caller, but
	// must leave nothing behind.
	discarded := b.c.Stats().FillsDiscarded
	close(release)
	r := <-slow
	if r.err != nil || r.v != "loaded-before" {
		t.Errorf("B: GetOrCreate(slow) across the outage: got %q, %v, want its load's value", r.v, r.err)
	}
	if v, ok := getStr(t, b, "slow"); !ok || v != "written-during" {
		t.Errorf("B: Get(slow) after the outage: got %q, %v, want \"written-during\" (A's Set during the cut), not the fill that loaded across it", v, ok)
	}
	if got := b.c.Stats().FillsDiscarded; got <= discarded {
		t.Errorf("B: FillsDiscarded %d -> %d, want the fill across the outage discarded", discarded, got)
	}
	if v, ok := redisValue(t, a.rdb, ns, "slow"); !ok || v != "written-during" {
		t.Errorf("Redis holds %q, %v for slow, want \"written-during\"", v, ok)
	}

	setStr(t, a, "k", "v3")
	waitStat(t, b, "Received", statReceived, recv+1)
	if v, ok := getStr(t, b, "k"); !ok || v != "v3" {
		t.Errorf("B: Get(k) after A's Set over the restored bus: got %q, %v, want \"v3\"", v, ok)
	}
	st := b.c.Stats()
	t.Logf("bus cut: loss noticed after %v; during the cut B served %q (A had written v2); bus restored %v after the proxy passed again; BusLosses %d -> %d, proxy accepted %d connections",
		noticed.Round(time.Millisecond), during, restored.Round(time.Millisecond), losses, st.BusLosses, p.Accepted())
}
