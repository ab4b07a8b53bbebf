package hybrid_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

// TestFaultRedisPaused: Redis stops answering (CLIENT PAUSE ALL for
// 1.5 s, sent from a separate client) while an instance with 200 ms
// go-redis timeouts, fail-safe and a soft load timeout is in use. Every
// call returns within its timeouts; for keys whose value expired, a load
// that fails or hangs past SoftTimeout gives way to the stale value
// (Stats.StaleServed); a caller's own deadline is honoured.
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
	waitFor(t, 5*time.Second, "the fills' write-backs", func() bool { return a.remote.setIfAbsents.Load() >= 2 }, nil)
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
	t.Logf("during the pause: StaleServed +%d, SoftTimeouts +%d, L2Errors +%d, LoadErrors +%d",
		st.StaleServed-before.StaleServed, st.SoftTimeouts-before.SoftTimeouts, st.L2Errors-before.L2Errors, st.LoadErrors-before.LoadErrors)
	if st.StaleServed-before.StaleServed < 2 {
		t.Errorf("StaleServed +%d, want at least 2", st.StaleServed-before.StaleServed)
	}
	if st.SoftTimeouts == before.SoftTimeouts {
		t.Error("SoftTimeouts did not grow: the hanging load was not cut short for its caller")
	}
	if st.L2Errors == before.L2Errors {
		t.Error("L2Errors did not grow: the calls did not meet the paused Redis")
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
