package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
)

func TestFailSafeServesStaleWhenLoadFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, failSafeOptions(s))
		ctx := context.Background()
		var calls atomic.Int64
		fail := atomic.Bool{}
		dbDown := errors.New("db down")
		load := func(context.Context, string) (string, error) {
			n := calls.Add(1)
			if fail.Load() {
				return "", dbDown
			}
			return "v" + string(rune('0'+n)), nil
		}
		if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "v1" {
			t.Fatalf("first: got %q %v", v, err)
		}
		synctest.Wait()
		time.Sleep(11 * time.Second) // past the lifetime, within FailSafeMaxAge
		fail.Store(true)
		v, err := c.GetOrCreate(ctx, "k", load)
		if err != nil || v != "v1" {
			t.Fatalf("with the loader failing: got %q %v, want the stale v1", v, err)
		}
		if st := c.Stats(); st.Load.StaleServed != 1 {
			t.Errorf("Load.StaleServed: got %d, want 1", st.Load.StaleServed)
		}
		// Throttled: the failing loader is not called again for a while.
		before := calls.Load()
		for range 5 {
			if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "v1" {
				t.Fatalf("throttled: got %q %v, want v1", v, err)
			}
		}
		if got := calls.Load() - before; got != 0 {
			t.Errorf("loader called %d times during the throttle, want 0", got)
		}
		// The lookup that found v1 past its lifetime was a miss; the
		// throttled ones were hits.
		if st := c.Stats(); st.L1.Hits != 5 || st.L1.Misses != 2 {
			t.Errorf("Stats: L1.Hits %d, L1.Misses %d, want 5 and 2", st.L1.Hits, st.L1.Misses)
		}
		// After the throttle, the loader is tried again; it works now.
		fail.Store(false)
		time.Sleep(6 * time.Second)
		if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v == "v1" {
			t.Errorf("after the throttle: got %q %v, want a fresh value", v, err)
		}
	})
}

func TestFailSafeFromTheSharedTier(t *testing.T) {
	t.Run("background", func(t *testing.T) { testFailSafeFromTheSharedTier(t, false) })
	t.Run("cancelable", func(t *testing.T) { testFailSafeFromTheSharedTier(t, true) })
}

// testFailSafeFromTheSharedTier reads with a ctx that can end if cancelable
// (see eachCtx; the ctx is made in the bubble, as synctest wants).
func testFailSafeFromTheSharedTier(t *testing.T, cancelable bool) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := failSafeOptions(s)
		a := newTestCache[string](t, o)
		ctx := context.Background()
		if cancelable {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
		}
		if err := a.Set(ctx, "k", "kept"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(11 * time.Second)
		// A new instance has nothing in L1; the shared tier still holds the
		// stale value for fail-safe.
		b := newTestCache[string](t, o)
		load := func(context.Context, string) (string, error) { return "", errors.New("db down") }
		if v, err := b.GetOrCreate(ctx, "k", load); err != nil || v != "kept" {
			t.Errorf("got %q %v, want the stale value from the shared tier", v, err)
		}
	})
}

func TestFailSafeLimitedByMaxAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := failSafeOptions(s)
		o.FailSafeMaxAge = 5 * time.Second
		c := newTestCache[string](t, o)
		ctx := context.Background()
		if err := c.Set(ctx, "k", "old"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(16 * time.Second) // lifetime 10s + max age 5s passed
		dbDown := errors.New("db down")
		load := func(context.Context, string) (string, error) { return "", dbDown }
		if _, err := c.GetOrCreate(ctx, "k", load); !errors.Is(err, dbDown) {
			t.Errorf("got err %v, want the loader's error past FailSafeMaxAge", err)
		}
	})
}

func TestSoftTimeoutServesStaleThenUpdates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := failSafeOptions(s)
		o.SoftTimeout = 100 * time.Millisecond
		c := newTestCache[string](t, o)
		ctx := context.Background()
		if err := c.Set(ctx, "k", "old"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(11 * time.Second)
		slow := func(ctx context.Context, _ string) (string, error) {
			select {
			case <-time.After(time.Second):
				return "new", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		start := time.Now()
		v, err := c.GetOrCreate(ctx, "k", slow)
		if err != nil || v != "old" {
			t.Fatalf("got %q %v, want the stale value after the soft timeout", v, err)
		}
		if waited := time.Since(start); waited != o.SoftTimeout {
			t.Errorf("caller waited %v, want the soft timeout %v", waited, o.SoftTimeout)
		}
		// A caller that comes while the load goes on gets the stale value at
		// once, without a load of its own.
		if v, err := c.GetOrCreate(ctx, "k", neverLoad(t)); err != nil || v != "old" {
			t.Errorf("during the slow load: got %q %v, want the stale value at once", v, err)
		}
		time.Sleep(2 * time.Second) // the load finishes in the background
		synctest.Wait()
		if v, _ := getString(t, c, "k"); v != "new" {
			t.Errorf("after the slow load finished: got %q, want new", v)
		}
		if st := c.Stats(); st.Load.SoftTimeouts != 1 {
			t.Errorf("Load.SoftTimeouts: got %d, want 1", st.Load.SoftTimeouts)
		}
	})
}

func TestEagerRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := s.options()
		o.TTL = 10 * time.Second
		o.LocalTTL = 10 * time.Second
		o.EagerRefresh = 0.5
		c := newTestCache[string](t, o)
		ctx := context.Background()
		var calls atomic.Int64
		load := func(context.Context, string) (string, error) {
			return "v" + string(rune('0'+calls.Add(1))), nil
		}
		if v, _ := c.GetOrCreate(ctx, "k", load); v != "v1" {
			t.Fatalf("first: got %q", v)
		}
		synctest.Wait()
		time.Sleep(6 * time.Second) // past half the lifetime
		// The hit returns the current value at once and refreshes once. The
		// refresh runs on another goroutine, in parallel (synctest fakes only
		// time), so a later hit of the loop may already see its v2.
		if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "v1" {
			t.Fatalf("due hit: got %q %v, want v1 at once", v, err)
		}
		for range 4 {
			if v, err := c.GetOrCreate(ctx, "k", load); err != nil || (v != "v1" && v != "v2") {
				t.Fatalf("due hit: got %q %v, want v1 or the refreshed v2", v, err)
			}
		}
		synctest.Wait()
		if got := calls.Load(); got != 2 {
			t.Errorf("loads: got %d, want 2 (one refresh)", got)
		}
		if v, _ := c.GetOrCreate(ctx, "k", load); v != "v2" {
			t.Errorf("after the refresh: got %q, want v2", v)
		}
		if v, _ := s.stored(t, "k"); v != "v2" {
			t.Errorf("shared tier: got %q, want the refreshed v2", v)
		}
		// A hit that read the old entry just before the refresh stored v2
		// and ended may start a second refresh, which finds v2 in the
		// shared tier and loads nothing (the loads above say so).
		if st := c.Stats(); st.Load.Refreshes < 1 || st.Load.Refreshes > 2 {
			t.Errorf("Load.Refreshes: got %d, want 1 (or 2, see above)", st.Load.Refreshes)
		}
	})
}

// TestSoftTimeoutLoadGoexit: a load that calls runtime.Goexit while a soft
// timeout is armed (the load then runs on a goroutine of its own) fails
// like a panic, so fail-safe answers at once, and leaves no fill behind:
// Close returns.
func TestSoftTimeoutLoadGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := failSafeOptions(s)
		o.SoftTimeout = time.Second
		c := newTestCache[string](t, o)
		set(t, c, "k", "old")
		time.Sleep(11 * time.Second)
		start := time.Now()
		v, err := c.GetOrCreate(t.Context(), "k", func(context.Context, string) (string, error) {
			runtime.Goexit()
			return "", nil
		})
		if err != nil || v != "old" || time.Since(start) != 0 {
			t.Errorf("got %q, %v after %v; want the stale value at once", v, err, time.Since(start))
		}
		closed := make(chan struct{})
		go func() {
			c.Close()
			close(closed)
		}()
		await(t, closed)
	})
}

// TestEagerRefreshFindsNewerValue: a refresh that finds in the shared tier
// a value written after the one it refreshes (another instance refreshed
// it) takes that value and does not load.
func TestEagerRefreshFindsNewerValue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := s.options()
		o.TTL, o.LocalTTL, o.EagerRefresh = 10*time.Second, 10*time.Second, 0.5
		c := newTestCache[string](t, o)
		ctx := context.Background()
		var calls atomic.Int64
		load := func(context.Context, string) (string, error) {
			return fmt.Sprint("v", calls.Add(1)), nil
		}
		if v, _ := c.GetOrCreate(ctx, "k", load); v != "v1" {
			t.Fatalf("first: got %q", v)
		}
		synctest.Wait()
		time.Sleep(6 * time.Second) // past half the lifetime
		// Written behind the cache's back, as by a peer whose message is late.
		if _, err := s.remote.Write(ctx, []tier.Write{{Key: testNS + ":k", Value: envelopeOf(t, "peer", 10*time.Second), TTL: 10 * time.Second}}, tier.Feed{}); err != nil {
			t.Fatal(err)
		}
		if v, _ := c.GetOrCreate(ctx, "k", load); v != "v1" {
			t.Fatalf("due hit: got %q, want v1 at once", v)
		}
		synctest.Wait()
		if n := calls.Load(); n != 1 {
			t.Errorf("loads: got %d, want 1 (the refresh found the newer value)", n)
		}
		if v, _ := c.GetOrCreate(ctx, "k", load); v != "peer" {
			t.Errorf("after the refresh: got %q, want the newer value it found", v)
		}
	})
}

// TestWithLocalTTLOnRemoteHit: WithLocalTTL "sets the L1 lifetime of the
// value stored by this call", including a value the call found in the shared
// tier.
func TestWithLocalTTLOnRemoteHit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		p := newPeers(t, s, 2, hybrid.Options{})
		a, b := p[0], p[1]
		set(t, a, "k", "v")
		s.flush(t)
		short := hybrid.WithLocalTTL(5 * time.Second)
		if _, err := b.GetOrCreate(t.Context(), "k", neverLoad(t), short); err != nil {
			t.Fatal(err)
		}
		time.Sleep(6 * time.Second)
		gets := s.remote.Calls().Get
		if _, err := b.GetOrCreate(t.Context(), "k", neverLoad(t), short); err != nil {
			t.Fatal(err)
		}
		if got := s.remote.Calls().Get - gets; got != 1 {
			t.Errorf("6s after an L2 hit stored with WithLocalTTL(5s): %d Remote reads, want 1 (the L1 copy expired)", got)
		}
	})
}

func TestTTLJitter(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.TTL = time.Hour
	o.TTLJitter = 0.5
	a := newTestCache[string](t, o)
	ctx := context.Background()
	seen := map[int64]bool{}
	for i := range 20 {
		key := fmt.Sprint(i)
		if err := a.Set(ctx, key, "v"); err != nil {
			t.Fatal(err)
		}
		b, _ := s.remote.Peek(testNS + ":" + key)
		h, _, err := envelope.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		life := h.Expires.Sub(h.Written)
		if life > time.Hour || life < 30*time.Minute-time.Second {
			t.Fatalf("lifetime %v, want within [30m, 1h]", life)
		}
		seen[int64(life/time.Second)] = true
	}
	if len(seen) < 5 {
		t.Errorf("20 writes got only %d distinct lifetimes, want them spread", len(seen))
	}
}
