package hybrid_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// TestRemoteDown checks that reads degrade to load and L1 while the Remote
// fails, and that writes report the failure.
func TestRemoteDown(t *testing.T) {
	for _, secret := range []bool{true, false} {
		t.Run("secret="+strconv.FormatBool(secret), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSharedTier(t)
				o := s.options()
				if secret {
					o.Secret = []byte("s3cret")
				}
				c := newTestCache[string](t, o)
				ctx := context.Background()
				down := errors.New("dial tcp: connection refused")
				s.remote.FailWith(down)

				l := &counter{value: "loaded"}
				for i := range 3 {
					v, err := c.GetOrCreate(ctx, "k", l.load)
					if err != nil || v != "loaded" {
						t.Fatalf("GetOrCreate #%d: got %q, %v, want \"loaded\", nil", i, v, err)
					}
				}
				synctest.Wait() // the fill has tried to write the Remote
				if got := l.calls.Load(); got != 1 {
					t.Errorf("load ran %d times, want 1 (then L1)", got)
				}
				if st := c.Stats(); st.L2.Errors != 2 || st.L1.Hits != 2 {
					t.Errorf("Stats: got L2.Errors %d, L1.Hits %d, want 2 (the read and the write of the fill), 2", st.L2.Errors, st.L1.Hits)
				}
				if v, ok := getString(t, c, "k"); !ok || v != "loaded" {
					t.Errorf("Get: got %q, %v, want \"loaded\" from L1", v, ok)
				}

				if err := c.Set(ctx, "k", "new"); !errors.Is(err, down) {
					t.Errorf("Set: got %v, want an error wrapping %v", err, down)
				}
				// A failed Set drops the key from L1: the old value must not
				// be served as if nothing happened.
				if v, ok := getString(t, c, "k"); ok {
					t.Errorf("Get after a failed Set: got %q, want a miss", v)
				}
				if err := c.Delete(ctx, "k"); !errors.Is(err, down) {
					t.Errorf("Delete: got %v, want an error wrapping %v", err, down)
				}
				if got := s.bus.Stats().Published; got != 0 {
					t.Errorf("messages published for failed writes: got %d, want 0", got)
				}

				s.remote.FailWith(nil)
				if err := c.Set(ctx, "k", "new"); err != nil {
					t.Errorf("Set after recovery: %v", err)
				}
				if v, ok := s.stored(t, "k"); !ok || v != "new" {
					t.Errorf("Remote after recovery holds %q (ok %v), want \"new\"", v, ok)
				}
			})
		})
	}
}

func TestRemoteSlowHonoursContext(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	s.remote.SetLatency(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.Set(ctx, "k", "v"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Set with a slow Remote: got %v, want %v", err, context.DeadlineExceeded)
	}
	if _, _, err := c.Get(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get with a slow Remote: got %v, want %v", err, context.DeadlineExceeded)
	}
}

func TestBackgroundWriteRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		s.remote.FailWith(errors.New("blip"))
		var calls int
		load := func(context.Context, string) (string, error) {
			calls++
			// Redis recovers while the fill's write-back is retried.
			go func() {
				time.Sleep(10 * time.Millisecond)
				s.remote.FailWith(nil)
			}()
			return "v", nil
		}
		if _, err := c.GetOrCreate(context.Background(), "k", load); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		if v, ok := s.stored(t, "k"); !ok || v != "v" {
			t.Errorf("Redis holds %q %v after the retry, want v", v, ok)
		}
		st := c.Stats()
		if st.L2.WriteRetries == 0 || st.L2.WritesDropped != 0 {
			t.Errorf("L2.WriteRetries %d L2.WritesDropped %d, want >0 and 0", st.L2.WriteRetries, st.L2.WritesDropped)
		}
	})
}

// TestStoreBoundDeadAddress: go-redis's default client (3 retries; 5 dial
// attempts 100 ms apart) takes about 1.7 s to give up on a dead address.
// With l2's ReadTimeout and WriteTimeout at 300 ms, GetOrCreate answers
// from the loader, and Set and Delete return an error, each within twice
// that bound.
func TestStoreBoundDeadAddress(t *testing.T) {
	const bound = 300 * time.Millisecond
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: deadAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	so := l2.Options{ReadTimeout: bound, WriteTimeout: bound}
	a := newSplitInstance(t, "A", rdb, nil, so, hybrid.Options{Namespace: redistest.Prefix(t)}, invalidate.Options{})
	timed := func(what string, f func() error) error {
		t.Helper()
		start := time.Now()
		err := f()
		d := time.Since(start)
		t.Logf("%s: %v after %v", what, err, d.Round(time.Millisecond))
		if d > 2*bound {
			t.Errorf("%s took %v, want at most %v (store bound %v)", what, d, 2*bound, bound)
		}
		return err
	}

	err := timed("GetOrCreate", func() error {
		v, err := a.c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) { return "loaded", nil })
		if err == nil && v != "loaded" {
			t.Errorf("GetOrCreate: got %q, want \"loaded\"", v)
		}
		return err
	})
	if err != nil {
		t.Errorf("GetOrCreate: got %v, want the loaded value (the loader stands in for Redis)", err)
	}
	for _, w := range []struct {
		name string
		do   func() error
	}{
		{"Set", func() error { return a.c.Set(ctx, "k", "v") }},
		{"Delete", func() error { return a.c.Delete(ctx, "k") }},
	} {
		if err := timed(w.name, w.do); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: got %v, want an error wrapping context.DeadlineExceeded", w.name, err)
		}
	}
	if st := a.c.Stats(); st.L2.Errors == 0 {
		t.Error("L2.Errors: got 0, want the failed read counted")
	}
}

// TestIntegrationRedisRestart is promise 6 with Redis killed: under
// concurrent GetOrCreate on two instances nothing panics, every call
// returns within 2 s, loads stand in for Redis and L1 serves what they
// loaded; writes return errors. Once Redis is back, the shared tier and the
// bus work again.
//
// With StrictLoss, the bus's loss flushes L1 at once (TestLossRedisStopped
// and TestLossRedisRestartedEmpty cover the default, which keeps it).
//
// NOTE: it kills the package's shared redis-server and starts it again; no
// test of this package runs in parallel with another.
func TestIntegrationRedisRestart(t *testing.T) {
	srv.NeedOwned(t)
	ctx := context.Background()
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, StrictLoss: true}
	bo := invalidate.Options{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond}
	p := []*instance{
		newInstance(t, "A", singleNode(shortTimeouts), o, bo),
		newInstance(t, "B", singleNode(shortTimeouts), o, bo),
	}
	a, b := p[0], p[1]
	setStr(t, a, "k0", "v0")
	waitStat(t, b, "Invalidations.Applied", statReceived, 1)
	fill(t, b, "k0", "v0")

	down := false
	t.Cleanup(func() {
		if down {
			if err := srv.Restart(); err != nil {
				t.Errorf("restarting redis-server: %v", err)
			}
		}
	})
	if err := srv.Kill(); err != nil {
		t.Fatalf("kill redis-server: %v", err)
	}
	down = true
	killed := time.Now()
	for _, in := range p {
		waitStat(t, in, "Bus.Losses", statBusLosses, 1)
	}

	const (
		goroutines = 8
		rounds     = 25
		nkeys      = 5
		bound      = 2 * time.Second
	)
	var panics atomic.Int64
	var mu sync.Mutex
	var errs []string
	var slowest time.Duration
	hammer := func() {
		var wg sync.WaitGroup
		for g := range goroutines {
			in := p[g%len(p)]
			wg.Go(func() {
				defer func() {
					if r := recover(); r != nil {
						panics.Add(1)
					}
				}()
				for i := range rounds {
					key := fmt.Sprint("k", (g+i)%nkeys)
					cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					start := time.Now()
					v, err := in.c.GetOrCreate(cctx, key, func(_ context.Context, key string) (string, error) {
						return "loaded:" + key, nil
					})
					d := time.Since(start)
					cancel()
					mu.Lock()
					slowest = max(slowest, d)
					if (err != nil || v != "loaded:"+key || d > bound) && len(errs) < 10 {
						errs = append(errs, fmt.Sprintf("%s: GetOrCreate(%s) = %q, %v in %v; want \"loaded:%s\", nil within %v", in.name, key, v, err, d, key, bound))
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	hammer()
	first := []hybrid.Stats{a.c.Stats(), b.c.Stats()}
	firstCalls := []remoteCalls{a.remote.calls(), b.remote.calls()}
	hammer() // everything is in L1 now
	for i, in := range p {
		st, calls := in.c.Stats(), in.remote.calls()
		t.Logf("%s while Redis is down: Load.Calls %d, L2.Errors %d, L1.Hits %d, L2.WriteRetries %d, L2.WritesDropped %d",
			in.name, st.Load.Calls, st.L2.Errors, st.L1.Hits, st.L2.WriteRetries, st.L2.WritesDropped)
		if st.Load.Calls == 0 || st.Load.Calls > nkeys {
			t.Errorf("%s: Load.Calls %d while Redis is down, want 1..%d (one per key: loads stand in, L1 keeps them)", in.name, st.Load.Calls, nkeys)
		}
		if st.L2.Errors == 0 {
			t.Errorf("%s: L2.Errors 0 while Redis is down, want the failed reads counted", in.name)
		}
		// The second round is answered by L1: no load, no Redis read.
		// (Background write-backs of the first round may still be retried.)
		reads := calls.Get + calls.GetBatch - firstCalls[i].Get - firstCalls[i].GetBatch
		if st.Load.Calls != first[i].Load.Calls || reads != 0 || st.L1.Hits <= first[i].L1.Hits {
			t.Errorf("%s: second round: Load.Calls %d -> %d, %d Redis reads, L1.Hits %d -> %d; want the same loads, no reads, more hits (L1 serves)",
				in.name, first[i].Load.Calls, st.Load.Calls, reads, first[i].L1.Hits, st.L1.Hits)
		}
	}
	t.Logf("%d GetOrCreate calls while Redis was down: slowest %v, %d panics", 2*goroutines*rounds, slowest.Round(time.Microsecond), panics.Load())
	if panics.Load() != 0 {
		t.Errorf("%d goroutines panicked", panics.Load())
	}
	for _, e := range errs {
		t.Error(e)
	}

	// Writes report the outage (promise 8); reads still answer.
	start := time.Now()
	if err := a.c.Set(ctx, "k1", "written"); err == nil {
		t.Error("A: Set while Redis is down: got nil, want an error")
	} else {
		t.Logf("A: Set while Redis is down: %v", err)
	}
	if err := a.c.Delete(ctx, "k1"); err == nil {
		t.Error("A: Delete while Redis is down: got nil, want an error")
	}
	if v, ok := getStr(t, a, "k0"); !ok || v != "loaded:k0" {
		t.Errorf("A: Get(k0) while Redis is down: got %q, %v, want \"loaded:k0\" from L1", v, ok)
	}
	if v, ok := getStr(t, a, "nothing"); ok {
		t.Errorf("A: Get(nothing) while Redis is down: got %q, want a miss", v)
	}
	if v, err := a.c.GetOrCreate(ctx, "k1", func(context.Context, string) (string, error) { return "reloaded", nil }); err != nil || v != "reloaded" {
		t.Errorf("A: GetOrCreate(k1) after the failed writes: got %q, %v, want \"reloaded\" (not the value of the failed Set)", v, err)
	}
	if d := time.Since(start); d > 4*bound {
		t.Errorf("writes and reads while Redis is down took %v, want each within %v", d, bound)
	}

	// Redis comes back, empty.
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart redis-server: %v", err)
	}
	down = false
	restarted := time.Now()
	for _, in := range p {
		waitFor(t, 10*time.Second, in.name+"'s bus to be restored", func() bool { return in.c.Stats().Bus.Losses >= 2 },
			func() string { return fmt.Sprintf("Bus.Losses %d", in.c.Stats().Bus.Losses) })
	}
	busBack := time.Since(restarted)
	waitFor(t, 5*time.Second, "A's Set to succeed", func() bool { return a.c.Set(ctx, "k2", "after") == nil }, nil)
	setBack := time.Since(restarted)
	l2Hits := b.c.Stats().L2.Hits
	waitFor(t, 5*time.Second, "B to read A's value from Redis", func() bool {
		v, ok := getStr(t, b, "k2")
		return ok && v == "after"
	}, nil)
	if b.c.Stats().L2.Hits <= l2Hits {
		t.Errorf("B: L2.Hits did not grow after the restart")
	}
	recv := b.c.Stats().Invalidations.Applied
	setStr(t, a, "k2", "after2")
	waitStat(t, b, "Invalidations.Applied", statReceived, recv+1)
	if v, ok := getStr(t, b, "k2"); !ok || v != "after2" {
		t.Errorf("B: Get after A's Set over the restored bus: got %q, %v, want \"after2\"", v, ok)
	}
	t.Logf("Redis down %v; after the restart: buses restored in %v, writes work in %v, B sees A's Set over the bus",
		restarted.Sub(killed).Round(time.Millisecond), busBack.Round(time.Millisecond), setBack.Round(time.Millisecond))
}

// TestFaultBreakerCallerDeadline: Redis is healthy but 60 ms away (a
// proxy delays each way by 30 ms); the client is built with
// ContextTimeoutEnabled, as l2's bounds ask. Get calls whose
// callers allow only 5 ms run out of their own time. That is the callers'
// budget, not a failure of the shared tier: like a cancelled context it
// must not open the breaker, or the next Set, with all the time it wants,
// fails with ErrUnavailable for BreakerOpenFor although Redis is fine.
//
// NOTE: breaker.record skips a failure when ctx.Err() != nil, but go-redis
// sets the socket deadline from ctx, and the read may time out a moment
// before ctx's timer marks ctx done (l2's withCause checks the deadline by
// the clock for that reason): some of the Gets are then counted, and a few
// in a row open the breaker. The control subtest shows that the store's own
// read timeout (l2.Options.ReadTimeout) does count, as it should.
func TestFaultBreakerCallerDeadline(t *testing.T) {
	srv.NeedReal(t)
	const (
		delay     = 30 * time.Millisecond // each way
		budget    = 5 * time.Millisecond
		threshold = 3
		// Many Gets: go-redis's socket deadline may fire a moment before
		// ctx's own timer marks it done, and a check of ctx.Err() alone
		// then takes the caller's deadline for a failure of Redis.
		gets = 30
	)
	// storeTimeout is the store's ReadTimeout.
	run := func(t *testing.T, callerBudget, storeTimeout time.Duration) (hybrid.Stats, error) {
		ctx := context.Background()
		ns := redistest.Prefix(t)
		p := startProxy(t, srv.Addr)
		rdb := via(p, func(o *redis.Options) { o.ContextTimeoutEnabled = true; o.MaxRetries = -1 })(t)
		o := hybrid.Options{Namespace: ns, BreakerThreshold: threshold, BreakerOpenFor: 5 * time.Second}
		// A generous WriteTimeout: the Sets must not time out on a loaded machine.
		a := newSplitInstance(t, "A", rdb, nil, l2.Options{ReadTimeout: storeTimeout, WriteTimeout: 5 * time.Second}, o, invalidate.Options{})
		setStr(t, a, "k", "v")
		setFault(t, p.Delay(delay))
		timedOut := 0
		for range gets {
			a.c.DropLocal("k")
			cctx, cancel := ctx, context.CancelFunc(func() {})
			if callerBudget > 0 {
				cctx, cancel = context.WithTimeout(ctx, callerBudget)
			}
			_, ok, err := a.c.Get(cctx, "k")
			cancel()
			if !ok {
				timedOut++
			}
			if ok || (err != nil && !errors.Is(err, context.DeadlineExceeded)) {
				t.Fatalf("Get with a %v budget, store timeout %v: got %v, %v, want a miss for lack of time", callerBudget, storeTimeout, ok, err)
			}
		}
		t.Logf("%d Gets with a %v budget and store timeout %v: %d ran out of time", gets, callerBudget, storeTimeout, timedOut)
		start := time.Now()
		err := a.c.Set(ctx, "k", "v2")
		t.Logf("then Set without a deadline: %v after %v; L2.BreakerOpens %d, L2.Errors %d",
			err, time.Since(start).Round(time.Millisecond), a.c.Stats().L2.BreakerOpens, a.c.Stats().L2.Errors)
		return a.c.Stats(), err
	}

	t.Run("caller-deadline-does-not-count", func(t *testing.T) {
		st, err := run(t, budget, -1)
		if err != nil {
			t.Errorf("Set on a healthy Redis after %d Gets ran out of their callers' %v: got %v, want nil "+
				"(a caller's deadline is not a shared-tier failure; L2.BreakerOpens %d)", gets, budget, err, st.L2.BreakerOpens)
		}
		if st.L2.BreakerOpens != 0 {
			t.Errorf("L2.BreakerOpens %d, want 0: the callers' own deadlines opened the breaker", st.L2.BreakerOpens)
		}
	})

	t.Run("store-timeout-counts", func(t *testing.T) {
		// 25 ms: short of the 60 ms round trip through the proxy.
		st, err := run(t, 0, 25*time.Millisecond)
		if st.L2.BreakerOpens != 1 || !errors.Is(err, hybrid.ErrUnavailable) {
			t.Errorf("after %d reads cut short by l2.Options.ReadTimeout: L2.BreakerOpens %d, Set %v; want 1 and ErrUnavailable", gets, st.L2.BreakerOpens, err)
		}
	})
}

// TestFaultRedisPaused: Redis stops answering (CLIENT PAUSE ALL for
// 1.5 s, sent from a separate client) while an instance with 200 ms
// go-redis timeouts, fail-safe and a soft load timeout is in use. Every
// call returns within its timeouts; for keys whose value expired, a load
// that fails or hangs past SoftTimeout gives way to the stale value
// (Stats.Load.StaleServed); a caller's own deadline is honoured.
//
// NOTE: it pauses the package's shared redis-server, so it needs one
// started here, and it waits for the pause to end before it returns.
func TestFaultRedisPaused(t *testing.T) {
	srv.NeedOwned(t)
	ctx := context.Background()
	ns := redistest.Prefix(t)
	const (
		ttl         = 200 * time.Millisecond
		softTimeout = 100 * time.Millisecond
		loadTimeout = 600 * time.Millisecond
		pause       = 1500 * time.Millisecond
		bound       = time.Second
	)
	o := hybrid.Options{
		Namespace:      ns,
		TTL:            ttl,
		LocalTTL:       ttl,
		FailSafeMaxAge: 10 * time.Second,
		SoftTimeout:    softTimeout,
		LoadTimeout:    loadTimeout,
	}
	a := newInstance(t, "A", singleNode(shortTimeouts), o, invalidate.Options{})
	admin := srv.Client(t)

	// Fill two keys, and wait for their write-back to Redis.
	for _, k := range []string{"fails", "hangs"} {
		v, err := a.c.GetOrCreate(ctx, k, func(_ context.Context, key string) (string, error) { return "v1:" + key, nil })
		if err != nil || v != "v1:"+k {
			t.Fatalf("GetOrCreate(%s): got %q, %v", k, v, err)
		}
	}
	waitFor(t, 5*time.Second, "the fills' write-backs", func() bool { return a.remote.ifAbsents.Load() >= 2 }, nil)
	// Wait until the values have expired (Get reports a miss), while Redis
	// and L1 keep them for fail-safe.
	waitFor(t, 5*time.Second, "the values to expire", func() bool {
		_, fresh1 := getStr(t, a, "fails")
		_, fresh2 := getStr(t, a, "hangs")
		return !fresh1 && !fresh2
	}, nil)

	t.Cleanup(func() {
		// CLIENT UNPAUSE would itself wait for the pause: wait for its end.
		if err := waitPing(t, admin, 5*time.Second); err != nil {
			t.Errorf("Redis still paused at the end of the test: %v", err)
		}
	})
	if err := admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	paused := time.Now()
	before := a.c.Stats()

	// Check that the pause holds: a PING gets no answer.
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer probe.Close()
	if err := probe.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered during CLIENT PAUSE ALL: the pause did not take")
	}

	errBoom := errors.New("backend down")
	type result struct {
		name string
		v    string
		err  error
		d    time.Duration
	}
	results := make([]result, 5)
	hang := func(ctx context.Context, _ string) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	}
	calls := []func() (string, error){
		// An expired value and a failing load: the stale value.
		func() (string, error) {
			return a.c.GetOrCreate(ctx, "fails", func(context.Context, string) (string, error) { return "", errBoom })
		},
		// An expired value and a load that hangs: the stale value after
		// SoftTimeout.
		func() (string, error) { return a.c.GetOrCreate(ctx, "hangs", hang) },
		// No stale value: the load answers once the read has timed out.
		func() (string, error) {
			return a.c.GetOrCreate(ctx, "fresh", func(context.Context, string) (string, error) { return "loaded", nil })
		},
		// No stale value, a load that hangs and a caller with a deadline.
		func() (string, error) {
			cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
			defer cancel()
			return a.c.GetOrCreate(cctx, "impatient", hang)
		},
		// A write.
		func() (string, error) { return "", a.c.Set(ctx, "written", "x") },
	}
	names := []string{"GetOrCreate(fails)", "GetOrCreate(hangs)", "GetOrCreate(fresh)", "GetOrCreate(impatient, 150ms)", "Set(written)"}
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(func() {
			start := time.Now()
			v, err := call()
			results[i] = result{names[i], v, err, time.Since(start)}
		})
	}
	wg.Wait()
	within := time.Since(paused)
	for _, r := range results {
		t.Logf("during the pause: %s = %q, %v after %v", r.name, r.v, r.err, r.d.Round(time.Millisecond))
		if r.d > bound {
			t.Errorf("%s took %v during the pause, want at most %v", r.name, r.d, bound)
		}
	}
	if within >= pause {
		t.Errorf("the calls took %v, longer than the pause (%v): they did not all run while Redis was paused", within, pause)
	}
	if r := results[0]; r.err != nil || r.v != "v1:fails" {
		t.Errorf("%s with a failing load: got %q, %v, want the stale \"v1:fails\"", r.name, r.v, r.err)
	}
	if r := results[1]; r.err != nil || r.v != "v1:hangs" {
		t.Errorf("%s with a hanging load: got %q, %v, want the stale \"v1:hangs\"", r.name, r.v, r.err)
	}
	if r := results[2]; r.err != nil || r.v != "loaded" {
		t.Errorf("%s: got %q, %v, want \"loaded\"", r.name, r.v, r.err)
	}
	if r := results[3]; !errors.Is(r.err, context.DeadlineExceeded) || r.d >= loadTimeout {
		t.Errorf("%s: got %q, %v after %v, want context.DeadlineExceeded soon after 150ms, before the load's own timeout (%v)", r.name, r.v, r.err, r.d, loadTimeout)
	}
	if r := results[4]; r.err == nil {
		t.Errorf("%s during the pause: got nil, want an error", r.name)
	}
	st := a.c.Stats()
	t.Logf("during the pause: Load.StaleServed +%d, Load.SoftTimeouts +%d, L2.Errors +%d, Load.Errors +%d",
		st.Load.StaleServed-before.Load.StaleServed, st.Load.SoftTimeouts-before.Load.SoftTimeouts, st.L2.Errors-before.L2.Errors, st.Load.Errors-before.Load.Errors)
	if st.Load.StaleServed-before.Load.StaleServed < 2 {
		t.Errorf("Load.StaleServed +%d, want at least 2", st.Load.StaleServed-before.Load.StaleServed)
	}
	if st.Load.SoftTimeouts == before.Load.SoftTimeouts {
		t.Error("Load.SoftTimeouts did not grow: the hanging load was not cut short for its caller")
	}
	if st.L2.Errors == before.L2.Errors {
		t.Error("L2.Errors did not grow: the calls did not meet the paused Redis")
	}

	// A stale value served is served again, throttled, without a load.
	if v, err := a.c.GetOrCreate(ctx, "fails", neverLoad(t)); err != nil || v != "v1:fails" {
		t.Errorf("GetOrCreate(fails) again: got %q, %v, want the stale value without a load (FailSafeThrottle)", v, err)
	}

	if err := waitPing(t, admin, 5*time.Second); err != nil {
		t.Fatalf("Redis still paused: %v", err)
	}
	t.Logf("Redis answered again %v after CLIENT PAUSE %v", time.Since(paused).Round(time.Millisecond), pause)
	// Redis is back: the cache loads anew.
	if err := a.c.Set(ctx, "fails", "v2"); err != nil {
		t.Fatalf("Set after the pause: %v", err)
	}
	if v, err := a.c.GetOrCreate(ctx, "fails", neverLoad(t)); err != nil || v != "v2" {
		t.Errorf("GetOrCreate(fails) after the pause and a Set: got %q, %v, want \"v2\"", v, err)
	}
}

// Network faults between the cache and Redis, made by a TCP proxy
// (internal/faultproxy): a black hole and added latency. The cut of the
// bus connection alone is TestFaultBusCut, in invalidation_test.go.

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
		waitStat(t, a, "Bus.Losses", statBusLosses, 1)
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
		t.Logf("round 1: Load.Calls %d, L2.Errors %d; round 2: Load.Calls %d, L1.Hits +%d",
			mid.Load.Calls-before.Load.Calls, mid.L2.Errors-before.L2.Errors, after.Load.Calls-mid.Load.Calls, after.L1.Hits-mid.L1.Hits)

		if n := mid.Load.Calls - before.Load.Calls; n == 0 || n > 24 {
			t.Errorf("round 1: %d loads, want 1..24 (loads stand in for Redis, at most once per key)", n)
		}
		if mid.L2.Errors == before.L2.Errors {
			t.Error("round 1: L2.Errors did not grow: the reads did not reach the black hole")
		}
		if after.Load.Calls != mid.Load.Calls || afterCalls.Get != midCalls.Get || after.L1.Hits-mid.L1.Hits < goroutines*calls {
			t.Errorf("round 2: Load.Calls %d -> %d, Redis reads %d -> %d, L1.Hits +%d; want no loads, no reads, %d hits (L1 serves)",
				mid.Load.Calls, after.Load.Calls, midCalls.Get, afterCalls.Get, after.L1.Hits-mid.L1.Hits, goroutines*calls)
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
		misses := a.c.Stats().L1.Misses
		done := make(chan error, 1)
		go func() {
			_, err := a.c.GetOrCreate(ctx, "closing", func(context.Context, string) (string, error) { return "x", nil })
			done <- err
		}()
		waitFor(t, time.Second, "the fill to start", func() bool { return a.c.Stats().L1.Misses > misses }, nil)
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
		waitFor(t, 5*time.Second, "the breaker to open", func() bool { return a.c.Stats().L2.BreakerOpens >= 1 },
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
		t.Logf("breaker opened %v into the black hole (L2.BreakerOpens %d, L2.Errors %d); before: %s",
			opened.Round(time.Millisecond), st.L2.BreakerOpens, st.L2.Errors, summary(opening))
		t.Logf("breaker open: %s in %v; L2.Skipped +%d", summary(fast), phaseLen.Round(time.Millisecond), st2.L2.Skipped-st.L2.Skipped)
		if st2.L2.BreakerOpens < 1 {
			t.Errorf("L2.BreakerOpens: got %d, want >= 1", st2.L2.BreakerOpens)
		}
		// go-redis waits 200 ms for a reply; an open breaker waits for none.
		if limit := 100 * time.Millisecond; p99 > limit {
			t.Errorf("breaker open: p99 of GetOrCreate is %v, want under %v (the client's timeout is 200 ms)", p99, limit)
		}
		if skipped := st2.L2.Skipped - st.L2.Skipped; phaseLen < openFor && skipped < goroutines*calls {
			t.Errorf("breaker open: L2.Skipped +%d for %d calls, want every read skipped", skipped, goroutines*calls)
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
		waitStat(t, a, "Bus.Losses", statBusLosses, 1)
		losses := a.c.Stats().Bus.Losses
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
		waitStat(t, a, "Bus.Losses", statBusLosses, losses+1)
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
	t.Logf("latency %v each way, store timeout %v: reads %s; Load.Calls +%d, L2.Errors +%d",
		latency, timeout, summary(reads), mid.Load.Calls-before.Load.Calls, mid.L2.Errors-before.L2.Errors)
	if mid.L2.Errors-before.L2.Errors < goroutines*calls {
		t.Errorf("L2.Errors +%d, want at least %d (every read timed out)", mid.L2.Errors-before.L2.Errors, goroutines*calls)
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

// cacheCommands are the commands a cache (l2.Store and invalidate.Bus over
// go-redis) needs: reads and writes of its keys, the write-and-publish
// scripts, the bus, and what go-redis sends when it connects.
var cacheCommands = []string{
	"+get", "+set", "+mget", // l2.Store
	"+evalsha", "+eval", "+incr", "+time", // its scripts (EVAL after NOSCRIPT); INCR and TIME for sequence counters
	"+xadd", "+xrevrange", "+xrange", "+xinfo|stream", "+exists", // the invalidation log
	"+publish", "+subscribe", "+unsubscribe", "+ping", // invalidate.Bus
	"+hello", "+auth", "+client|setname", // go-redis's connection set-up
}

// aclUser creates on the shared server a user with a random password who
// may use only cacheCommands, only on the keys of namespace ns ("ns:*") and
// only on its bus channel. The user is deleted when t ends (which also
// disconnects its clients).
func aclUser(t *testing.T, ns string) (user, password string) {
	t.Helper()
	admin := srv.Client(t)
	user = "u-" + randomHex(8)
	password = "pw-" + randomHex(16)
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">" + password, "~" + ns + ":*", "&hybridcache:" + ns}
	for _, c := range cacheCommands {
		args = append(args, c)
	}
	ctx := context.Background()
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() {
		if err := admin.Do(context.Background(), "ACL", "DELUSER", user).Err(); err != nil {
			t.Errorf("ACL DELUSER %s: %v", user, err)
		}
	})
	return user, password
}

// asUser makes clients of the package's Redis that log in as user.
func asUser(user, password string, tune func(*redis.Options)) clientFactory {
	return singleNode(func(o *redis.Options) {
		o.Username, o.Password = user, password
		if tune != nil {
			tune(o)
		}
	})
}

// TestFaultACL: a Redis user limited by ACL to the namespace's keys, its
// bus channel and the commands in cacheCommands is enough for the cache:
// reads, writes, batches and invalidation between two instances work. The
// same user cannot touch a key outside the namespace, publish elsewhere or
// run a dangerous command (NOPERM), and a cache in another namespace gets
// errors on writes while its reads degrade to load.
func TestFaultACL(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	ns := redistest.Prefix(t)
	user, password := aclUser(t, ns)
	newClient := asUser(user, password, nil)
	o := hybrid.Options{Namespace: ns, Secret: []byte("acl-secret")}
	a := newInstance(t, "A", newClient, o, invalidate.Options{})
	b := newInstance(t, "B", newClient, o, invalidate.Options{})
	raw := newClient(t)

	if v, err := a.c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) { return "v1", nil }); err != nil || v != "v1" {
		t.Fatalf("A: GetOrCreate as %s: got %q, %v", user, v, err)
	}
	waitFor(t, 5*time.Second, "A's write-back", func() bool { return a.remote.ifAbsents.Load() >= 1 }, nil)
	fill(t, b, "k", "v1")
	setStr(t, a, "k", "v2")
	waitStat(t, b, "Invalidations.Applied", statReceived, 1)
	if v, ok := getStr(t, b, "k"); !ok || v != "v2" {
		t.Errorf("B: Get after A's Set: got %q, %v, want \"v2\"", v, ok)
	}
	if err := a.c.Delete(ctx, "k"); err != nil {
		t.Errorf("A: Delete as %s: %v", user, err)
	}
	waitStat(t, b, "Invalidations.Applied", statReceived, 2)
	batch := []string{"m1", "m2", "m3"}
	got, err := a.c.GetOrCreateMany(ctx, batch, func(_ context.Context, missing []string) (map[string]string, error) {
		out := map[string]string{}
		for _, k := range missing {
			out[k] = "loaded:" + k
		}
		return out, nil
	})
	if err != nil || len(got) != len(batch) {
		t.Errorf("A: GetOrCreateMany as %s: got %v, %v", user, got, err)
	}
	waitFor(t, 5*time.Second, "A's batch write-back", func() bool { return a.remote.batchKeys.Load() >= int64(len(batch)) }, nil)
	many, err := b.c.GetMany(ctx, batch)
	if err != nil || len(many) != len(batch) {
		t.Errorf("B: GetMany as %s: got %v, %v, want the 3 values A wrote", user, many, err)
	}
	for _, in := range []*instance{a, b} {
		st := in.c.Stats()
		t.Logf("%s as ACL user %s: L2.Hits %d, Load.Calls %d, Invalidations.Sent %d, Invalidations.Applied %d, L2.Errors %d, Bus.Losses %d",
			in.name, user, st.L2.Hits, st.Load.Calls, st.Invalidations.Sent, st.Invalidations.Applied, st.L2.Errors, st.Bus.Losses)
		if st.L2.Errors != 0 || st.Invalidations.PublishErrors != 0 || st.Bus.Losses != 0 {
			t.Errorf("%s: L2.Errors %d, Invalidations.PublishErrors %d, Bus.Losses %d, want 0: the cache needs more than the user may do",
				in.name, st.L2.Errors, st.Invalidations.PublishErrors, st.Bus.Losses)
		}
	}

	// What the user may not do.
	outside := "other:" + ns + ":k"
	denied := []struct {
		what string
		err  error
	}{
		{"SET " + outside, raw.Set(ctx, outside, "x", time.Minute).Err()},
		{"GET " + outside, raw.Get(ctx, outside).Err()},
		{"PUBLISH another channel", raw.Publish(ctx, "hybridcache:other", "x").Err()},
		{"FLUSHDB", raw.FlushDB(ctx).Err()},
		{"KEYS *", raw.Keys(ctx, "*").Err()},
		{"CONFIG GET requirepass", raw.ConfigGet(ctx, "requirepass").Err()},
	}
	for _, d := range denied {
		t.Logf("as %s: %s: %v", user, d.what, d.err)
		if !redis.IsPermissionError(d.err) {
			t.Errorf("as %s: %s: got %v, want NOPERM", user, d.what, d.err)
		}
	}
	// A script run by the user is held to the same rules.
	if err := raw.Eval(ctx, "return redis.call('SET', KEYS[1], 'x')", []string{outside}).Err(); err == nil {
		t.Errorf("as %s: EVAL SET %s: got nil, want refused", user, outside)
	}
	admin := srv.Client(t)
	if n, err := admin.Exists(ctx, outside).Result(); err != nil || n != 0 {
		t.Errorf("%s exists (%d, %v) after the refused writes", outside, n, err)
	}

	// A cache in a namespace the user may not touch: writes fail, reads
	// degrade to load, nothing is written.
	other := "other." + ns
	c := newSplitInstance(t, "C", newClient(t), nil, l2.Options{}, hybrid.Options{Namespace: other}, invalidate.Options{})
	if err := c.c.Set(ctx, "k", "x"); err == nil || !redis.IsPermissionError(err) {
		t.Errorf("C: Set outside the user's keys: got %v, want a NOPERM error", err)
	} else {
		t.Logf("C: Set outside the user's keys: %v", err)
	}
	if v, err := c.c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) { return "loaded", nil }); err != nil || v != "loaded" {
		t.Errorf("C: GetOrCreate outside the user's keys: got %q, %v, want \"loaded\" (reads degrade)", v, err)
	}
	if st := c.c.Stats(); st.L2.Errors == 0 {
		t.Error("C: L2.Errors 0, want the refused read counted")
	}
	keys, err := admin.Keys(ctx, other+":*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("keys under %s: %v, %v, want none", other, keys, err)
	}
	t.Logf("C (namespace %s): L2.Errors %d", other, c.c.Stats().L2.Errors)
}

// tlsNode makes clients of a TLS redis-server.
func tlsNode(ts *redistest.TLSServer) clientFactory {
	return func(t testing.TB) redis.UniversalClient {
		t.Helper()
		c := redis.NewClient(ts.Options())
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// TestFaultTLS: a redis-server that listens only for TLS (a certificate
// authority and a server certificate for 127.0.0.1 made by the test, a
// password required) serves two instances: GetOrCreate, Set and Delete go
// over TLS, and so does the bus between them. Clients that do not trust the
// test's authority, expect another name or speak plain TCP get nowhere.
func TestFaultTLS(t *testing.T) {
	ts := redistest.StartTLS(t, redistest.TLSOptions{Password: "tls-" + randomHex(16)})
	ctx := context.Background()
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns}
	a := newInstance(t, "A", tlsNode(ts), o, invalidate.Options{})
	b := newInstance(t, "B", tlsNode(ts), o, invalidate.Options{})
	raw := ts.Client(t)

	// Read path: A loads and writes back; B reads it from Redis.
	if v, err := a.c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) { return "v1", nil }); err != nil || v != "v1" {
		t.Fatalf("A: GetOrCreate over TLS: got %q, %v", v, err)
	}
	waitFor(t, 5*time.Second, "A's write-back", func() bool { return a.remote.ifAbsents.Load() >= 1 }, nil)
	if v, ok := redisValue(t, raw, ns, "k"); !ok || v != "v1" {
		t.Fatalf("Redis holds %q, %v, want \"v1\"", v, ok)
	}
	fill(t, b, "k", "v1")

	// Write path and bus: A's Set and Delete reach B over TLS.
	setStr(t, a, "k", "v2")
	waitStat(t, b, "Invalidations.Applied", statReceived, 1)
	if v, ok := getStr(t, b, "k"); !ok || v != "v2" {
		t.Errorf("B: Get after A's Set over TLS: got %q, %v, want \"v2\"", v, ok)
	}
	if err := a.c.Delete(ctx, "k"); err != nil {
		t.Fatalf("A: Delete over TLS: %v", err)
	}
	waitStat(t, b, "Invalidations.Applied", statReceived, 2)
	if v, ok := getStr(t, b, "k"); ok {
		t.Errorf("B: Get after A's Delete over TLS: got %q, want a miss", v)
	}
	if _, ok := redisValue(t, raw, ns, "k"); ok {
		t.Error("Redis still holds k after the Delete")
	}
	for _, in := range []*instance{a, b} {
		st := in.c.Stats()
		t.Logf("%s over TLS: L2.Hits %d, Load.Calls %d, Invalidations.Sent %d, Invalidations.Applied %d, L2.Errors %d, Bus.Losses %d",
			in.name, st.L2.Hits, st.Load.Calls, st.Invalidations.Sent, st.Invalidations.Applied, st.L2.Errors, st.Bus.Losses)
		if st.L2.Errors != 0 || st.Bus.Losses != 0 {
			t.Errorf("%s: L2.Errors %d, Bus.Losses %d, want 0", in.name, st.L2.Errors, st.Bus.Losses)
		}
	}
	// Clients the server must not talk to (it has no plain port), or that
	// must not trust it.
	bad := []struct {
		name  string
		tune  func(*redis.Options)
		check func(error) bool
	}{
		{"plain TCP", func(o *redis.Options) { o.TLSConfig = nil }, func(err error) bool { return err != nil }},
		{"system roots only", func(o *redis.Options) { o.TLSConfig.RootCAs = nil }, func(err error) bool {
			var ua x509.UnknownAuthorityError
			return errors.As(err, &ua)
		}},
		{"another server name", func(o *redis.Options) { o.TLSConfig.ServerName = "cache.example.com" }, func(err error) bool {
			var he x509.HostnameError
			return errors.As(err, &he)
		}},
		{"TLS 1.0 only", func(o *redis.Options) {
			o.TLSConfig.MinVersion, o.TLSConfig.MaxVersion = tls.VersionTLS10, tls.VersionTLS10
		}, func(err error) bool { return err != nil }},
	}
	for _, c := range bad {
		ro := ts.Options()
		ro.ReadTimeout, ro.DialerRetries = 500*time.Millisecond, 1
		c.tune(ro)
		cl := redis.NewClient(ro)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := cl.Ping(cctx).Err()
		cancel()
		cl.Close()
		t.Logf("%s: PING: %v", c.name, err)
		if !c.check(err) {
			t.Errorf("%s: PING got %v, want it refused", c.name, err)
		}
	}
}

// secretScenario is a Redis login that fails, or reaches nothing.
type secretScenario struct {
	name string
	// opts returns the client's options, and passwords in play besides
	// secrets.
	opts    func(t *testing.T) (*redis.Options, []string)
	secrets []string         // must appear in no log line and no error
	cause   func(error) bool // what the store's errors must be, so the scenario is what it says
}

// TestFaultSecretsNotLeaked: with a password that is wrong or a Redis that
// cannot be reached, everything the cache, the store and the bus log (at
// Debug level) and every error they return is free of the passwords in
// play, whether they came in redis.Options or in a URL read by
// redis.ParseURL.
func TestFaultSecretsNotLeaked(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	user, password := aclUser(t, ns)
	wrong := "wrong-" + randomHex(16)
	dead := deadAddr(t)
	isAuth := func(err error) bool { return redis.IsAuthError(err) }
	refused := func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
	fromURL := func(url string) func(t *testing.T) (*redis.Options, []string) {
		return func(t *testing.T) (*redis.Options, []string) {
			o, err := redis.ParseURL(url)
			if err != nil {
				t.Fatalf("ParseURL: %v", err)
			}
			if o.Password == "" {
				t.Fatal("ParseURL: no password in the options")
			}
			return o, nil
		}
	}

	scenarios := []secretScenario{
		{
			name: "options-wrong-password",
			opts: func(*testing.T) (*redis.Options, []string) {
				return &redis.Options{Addr: srv.Addr, Username: user, Password: wrong}, nil
			},
			secrets: []string{wrong, password},
			cause:   isAuth,
		},
		{
			name: "options-dead-address",
			opts: func(*testing.T) (*redis.Options, []string) {
				return &redis.Options{Addr: dead, Username: user, Password: password}, nil
			},
			secrets: []string{password},
			cause:   refused,
		},
		{
			name:    "url-wrong-password",
			opts:    fromURL(fmt.Sprintf("redis://%s:%s@%s/0", user, wrong, srv.Addr)),
			secrets: []string{wrong, password},
			cause:   isAuth,
		},
		{
			name:    "url-dead-address",
			opts:    fromURL(fmt.Sprintf("redis://%s:%s@%s/0", user, password, dead)),
			secrets: []string{password},
			cause:   refused,
		},
		{
			// The right password, a namespace the user may not touch:
			// Redis refuses every command (NOPERM) after a good login.
			name:    "url-right-password-no-permission",
			opts:    fromURL(fmt.Sprintf("redis://%s:%s@%s/0", user, password, srv.Addr)),
			secrets: []string{password},
			cause:   func(err error) bool { return redis.IsPermissionError(err) },
		},
		{
			name: "tls-wrong-password",
			// A TLS-only server with requirepass, and the wrong password.
			opts: func(t *testing.T) (*redis.Options, []string) {
				ts := redistest.StartTLS(t, redistest.TLSOptions{Password: "tls-" + randomHex(16)})
				o := ts.Options()
				o.Password = wrong
				return o, []string{ts.Password}
			},
			secrets: []string{wrong},
			cause:   isAuth,
		},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ro, more := sc.opts(t)
			sc.secrets = append(sc.secrets, more...)
			testSecrets(t, sc, ro)
		})
	}
}

func testSecrets(t *testing.T, sc secretScenario, ro *redis.Options) {
	ctx := context.Background()
	shortTimeouts(ro)
	rdb := redis.NewClient(ro)
	t.Cleanup(func() { rdb.Close() })
	logger, logs := captureLogger()

	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}

	// The store on its own.
	store := l2.New(rdb, l2.Options{ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	_, err := store.Get(ctx, []string{"k"})
	keep(err)
	if !sc.cause(err) {
		t.Fatalf("l2 Get: got %v, want the scenario's failure", err)
	}
	_, err = store.Get(ctx, []string{"a", "b"})
	keep(err)
	for _, w := range []tier.Write{
		{Key: "k", Value: []byte("v"), TTL: time.Minute},
		{Key: "k", Value: []byte("v"), TTL: time.Minute, Msg: []byte("m")},
		{Key: "k", Value: []byte("w"), TTL: time.Minute, If: tier.IfEqual, Old: []byte("v")},
	} {
		_, err = store.Write(ctx, []tier.Write{w}, tier.Feed{Channel: "ch"})
		keep(err)
	}

	// The bus: Subscribe cannot succeed; the Bus logs its reconnect attempts.
	bus := invalidate.New(rdb, invalidate.Options{Logger: logger, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
	t.Cleanup(func() { bus.Close() })
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	unsub, err := bus.Subscribe(sctx, "hybridcache:secrets", func([]byte) {}, func(bool) {})
	cancel()
	if err == nil {
		unsub()
		t.Fatal("bus Subscribe succeeded, want it to fail")
	}
	keep(err)
	keep(bus.Publish(ctx, "hybridcache:secrets", []byte("m")))

	// The cache, logging every error (LogEvery 1ns).
	c, err := hybrid.New[string](hybrid.Options{Namespace: "secrets", Remote: store, Logger: logger, LogEvery: time.Nanosecond})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	load := func(context.Context, string) (string, error) { return "loaded", nil }
	if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "loaded" {
		t.Errorf("GetOrCreate: got %q, %v, want the loaded value", v, err)
	}
	_, _, err = c.Get(ctx, "other")
	keep(err)
	keep(c.Set(ctx, "k", "v"))
	keep(c.Delete(ctx, "k"))
	_, err = c.GetOrCreateMany(ctx, []string{"m1", "m2"}, func(_ context.Context, missing []string) (map[string]string, error) {
		out := map[string]string{}
		for _, k := range missing {
			out[k] = "loaded"
		}
		return out, nil
	})
	keep(err)
	_, err = c.GetMany(ctx, []string{"m3", "m4"})
	keep(err)

	// Let the bus log a failed reconnect, and the fills' write-backs fail.
	waitFor(t, 3*time.Second, "the bus to log its connection failure", func() bool { return strings.Contains(logs.String(), "invalidate:") }, logs.String)
	waitFor(t, 3*time.Second, "the cache to log a failed write-back", func() bool { return strings.Contains(logs.String(), "write") }, logs.String)
	c.Close()
	bus.Close()

	var all strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&all, "%v\n%+v\n%#v\n", e, e, e)
	}
	text := logs.String()
	lines := strings.Count(text, "\n")
	t.Logf("%d errors returned, %d log lines; for example:\n  error: %v\n  log: %s", len(errs), lines, errs[0], firstLogLine(text, "hybrid:"))
	if len(errs) < 5 || !strings.Contains(text, "hybrid:") {
		t.Errorf("only %d errors and no cache log line: the scenario did not exercise the failure paths\n%s", len(errs), text)
	}
	for _, s := range sc.secrets {
		if strings.Contains(text, s) {
			t.Errorf("a password appears in the logs:\n%s", text)
		}
		if strings.Contains(all.String(), s) {
			t.Errorf("a password appears in the errors:\n%s", all.String())
		}
	}
}

// firstLogLine returns the first line of logs containing s.
func firstLogLine(logs, s string) string {
	for line := range strings.Lines(logs) {
		if strings.Contains(line, s) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
