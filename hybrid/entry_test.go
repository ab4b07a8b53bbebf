package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

func TestPerKeyValidated(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	base := s.remote.Calls().Total() // New opens the invalidation log
	ctx := context.Background()
	tests := []struct {
		name string
		opts []hybrid.EntryOption
	}{
		{"zero TTL", []hybrid.EntryOption{hybrid.WithTTL(0)}},
		{"negative LocalTTL", []hybrid.EntryOption{hybrid.WithLocalTTL(-time.Second)}},
		{"zero EntryOption", []hybrid.EntryOption{{}}},
		{"negative NegativeTTL", []hybrid.EntryOption{hybrid.WithNegativeTTL(-time.Second)}},
		{"jitter of 1", []hybrid.EntryOption{hybrid.WithTTLJitter(1)}},
		{"negative fail-safe", []hybrid.EntryOption{hybrid.WithFailSafeMaxAge(-time.Second)}},
		{"zero fail-safe throttle", []hybrid.EntryOption{hybrid.WithFailSafeThrottle(0)}},
		{"negative soft timeout", []hybrid.EntryOption{hybrid.WithSoftTimeout(-1)}},
		{"negative load timeout", []hybrid.EntryOption{hybrid.WithLoadTimeout(-1)}},
		{"eager refresh NaN", []hybrid.EntryOption{hybrid.WithEagerRefresh(math.NaN())}},
		{"eager refresh below 0", []hybrid.EntryOption{hybrid.WithEagerRefresh(-0.5)}},
		{"empty tag", []hybrid.EntryOption{hybrid.WithTags("a", "")}},
		{"long tag", []hybrid.EntryOption{hybrid.WithTags(strings.Repeat("t", 201))}},
		{"too many tags", []hybrid.EntryOption{hybrid.WithTags(tagsN(20)...), hybrid.WithTags(tagsN(20)...)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := c.Set(ctx, "k", "v", tt.opts...); err == nil {
				t.Error("Set: got no error, want one")
			}
			if _, err := c.GetOrCreate(ctx, "k", neverLoad(t), tt.opts...); err == nil {
				t.Error("GetOrCreate: got no error, want one")
			}
		})
	}
	if got := s.remote.Calls().Total() - base; got != 0 {
		t.Errorf("invalid entry options reached the Remote %d times, want 0", got)
	}
}

// tagsN returns n distinct tags.
func tagsN(n int) []string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprint("tag", i)
	}
	return tags
}

// These tests check that the resilience settings of Options can be set,
// and unset, for one call.

func shortLived(s *sharedTier) hybrid.Options {
	o := s.options()
	o.TTL = 10 * time.Second
	o.LocalTTL = 10 * time.Second
	return o
}

func TestWithFailSafePerCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, shortLived(s)) // no fail-safe by default
		ctx := context.Background()
		kept := []hybrid.EntryOption{hybrid.WithFailSafeMaxAge(time.Hour), hybrid.WithFailSafeThrottle(2 * time.Second)}
		if err := c.Set(ctx, "k", "kept", kept...); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, "plain", "gone"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(11 * time.Second)
		dbDown := errors.New("db down")
		var calls atomic.Int64
		fail := func(context.Context, string) (string, error) { calls.Add(1); return "", dbDown }

		// Without the option, the expired value is not a fallback.
		if _, err := c.GetOrCreate(ctx, "k", fail); !errors.Is(err, dbDown) {
			t.Errorf("call without fail-safe: got %v, want the load error", err)
		}
		// With it, the value written with fail-safe is served stale,
		// and throttled: the next calls do not load.
		for range 3 {
			if v, err := c.GetOrCreate(ctx, "k", fail, kept...); err != nil || v != "kept" {
				t.Fatalf("call with fail-safe: got %q %v, want the stale value", v, err)
			}
		}
		if got := calls.Load(); got != 2 {
			t.Errorf("loads: got %d, want 2 (one per mode; then throttled)", got)
		}
		time.Sleep(3 * time.Second) // past the 2s throttle: load is tried again
		if v, err := c.GetOrCreate(ctx, "k", fail, kept...); err != nil || v != "kept" {
			t.Fatalf("after the throttle: got %q %v, want the stale value", v, err)
		}
		if got := calls.Load(); got != 3 {
			t.Errorf("loads after the throttle: got %d, want 3", got)
		}
		// A value written without fail-safe is gone from both tiers.
		if _, err := c.GetOrCreate(ctx, "plain", fail, kept...); !errors.Is(err, dbDown) {
			t.Errorf("value written without fail-safe: got %v, want the load error", err)
		}
		if st := c.Stats(); st.Load.StaleServed != 2 { // a throttled re-serve is an L1 hit
			t.Errorf("Load.StaleServed: got %d, want 2", st.Load.StaleServed)
		}
	})
}

func TestWithFailSafeZeroTurnsItOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := shortLived(s)
		o.FailSafeMaxAge = time.Hour
		c := newTestCache[string](t, o)
		ctx := context.Background()
		if err := c.Set(ctx, "k", "old"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(11 * time.Second)
		dbDown := errors.New("db down")
		fail := func(context.Context, string) (string, error) { return "", dbDown }
		if _, err := c.GetOrCreate(ctx, "k", fail, hybrid.WithFailSafeMaxAge(0)); !errors.Is(err, dbDown) {
			t.Errorf("WithFailSafeMaxAge(0): got %v, want the load error", err)
		}
		if v, err := c.GetOrCreate(ctx, "k", fail); err != nil || v != "old" {
			t.Errorf("default fail-safe: got %q %v, want the stale value", v, err)
		}
	})
}

func TestWithSoftAndLoadTimeoutPerCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, shortLived(s))
		ctx := context.Background()
		fs := hybrid.WithFailSafeMaxAge(time.Hour)
		if err := c.Set(ctx, "k", "old", fs); err != nil {
			t.Fatal(err)
		}
		time.Sleep(11 * time.Second)
		var finished atomic.Bool
		slow := func(ctx context.Context, _ string) (string, error) {
			select {
			case <-time.After(time.Second):
				finished.Store(true)
				return "new", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		start := time.Now()
		v, err := c.GetOrCreate(ctx, "k", slow, fs, hybrid.WithSoftTimeout(100*time.Millisecond))
		if err != nil || v != "old" {
			t.Fatalf("soft timeout: got %q %v, want the stale value", v, err)
		}
		if waited := time.Since(start); waited != 100*time.Millisecond {
			t.Errorf("waited %v, want the call's soft timeout", waited)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if v, _ := getString(t, c, "k"); v != "new" || !finished.Load() {
			t.Errorf("after the load finished: got %q, want new", v)
		}

		// A hard timeout per call cancels the load.
		start = time.Now()
		_, err = c.GetOrCreate(ctx, "other", slow, hybrid.WithLoadTimeout(300*time.Millisecond))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("load timeout: got %v, want context.DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited != 300*time.Millisecond {
			t.Errorf("waited %v, want the call's load timeout", waited)
		}
	})
}

func TestWithEagerRefreshPerCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, shortLived(s))
		ctx := context.Background()
		var calls atomic.Int64
		load := func(context.Context, string) (string, error) {
			return "v" + string(rune('0'+calls.Add(1))), nil
		}
		eager := hybrid.WithEagerRefresh(0.5)
		if v, _ := c.GetOrCreate(ctx, "k", load, eager); v != "v1" {
			t.Fatalf("first: got %q", v)
		}
		if v, _ := c.GetOrCreate(ctx, "plain", load); v != "v2" {
			t.Fatalf("first plain: got %q", v)
		}
		synctest.Wait()
		time.Sleep(6 * time.Second)
		if v, _ := c.GetOrCreate(ctx, "k", load, eager); v != "v1" {
			t.Fatalf("due hit: got %q, want v1 at once", v)
		}
		if v, _ := c.GetOrCreate(ctx, "plain", load); v != "v2" {
			t.Fatalf("plain hit: got %q, want v2", v)
		}
		synctest.Wait()
		if got := calls.Load(); got != 3 {
			t.Errorf("loads: got %d, want 3 (one refresh, of k only)", got)
		}
		if v, _ := c.GetOrCreate(ctx, "k", load, eager); v != "v3" {
			t.Errorf("after the refresh: got %q, want v3", v)
		}
	})
}

func TestWithNegativeTTLPerCall(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options()) // no negative caching by default
	ctx := context.Background()
	var calls atomic.Int64
	missing := func(context.Context, string) (string, error) {
		calls.Add(1)
		return "", hybrid.ErrNotFound
	}
	for range 3 {
		if _, err := c.GetOrCreate(ctx, "gone", missing, hybrid.WithNegativeTTL(time.Minute)); !errors.Is(err, hybrid.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("loads with WithNegativeTTL: got %d, want 1", got)
	}
	for range 2 {
		if _, err := c.GetOrCreate(ctx, "gone2", missing); !errors.Is(err, hybrid.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
	}
	if got := calls.Load(); got != 3 {
		t.Errorf("loads without it: got %d, want 3 (absence not remembered)", got)
	}
	// Batch too.
	m, err := c.GetOrCreateMany(ctx, []string{"a", "b"}, func(context.Context, []string) (map[string]string, error) {
		calls.Add(1)
		return map[string]string{"a": "A"}, nil
	}, hybrid.WithNegativeTTL(time.Minute))
	if err != nil || len(m) != 1 {
		t.Fatalf("batch: got %v %v", m, err)
	}
	if _, err := c.GetOrCreate(ctx, "b", neverLoad(t)); !errors.Is(err, hybrid.ErrNotFound) {
		t.Errorf("b after the batch: got %v, want the remembered ErrNotFound", err)
	}
}

// TestLocalTTLCutToTTL: a LocalTTL longer than the TTL a value is written
// with is cut to that TTL at every level that sets them (Options,
// Options.PerKey, the call, the load, the load's For(key)), never
// refused; each of the two comes from the last level that sets it, so a
// later level's longer TTL does not keep an earlier level's cut.
func TestLocalTTLCutToTTL(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, TTL: 10 * time.Minute, LocalTTL: time.Minute,
		PerKey: func(key string) []hybrid.EntryOption {
			switch key {
			case "per-key":
				return []hybrid.EntryOption{hybrid.WithTTL(3 * time.Second), hybrid.WithLocalTTL(20 * time.Second)}
			case "per-key, the call's TTL":
				return []hybrid.EntryOption{hybrid.WithTTL(2 * time.Second)}
			}
			return nil
		}}
	a := newInstances(t, 1, singleNode(nil), o)[0]
	ctx := context.Background()
	short, long := 3*time.Second, 20*time.Second
	const slack = 1500 * time.Millisecond
	get := func(key string, load func(context.Context, string) (string, error), opts ...hybrid.EntryOption) func() error {
		return func() error {
			_, err := a.c.GetOrCreate(ctx, key, load, opts...)
			return err
		}
	}
	batch := func() error {
		_, err := a.c.GetOrCreateMany(ctx, []string{"batch, cut", "batch, uncut"}, func(ctx context.Context, keys []string) (map[string]string, error) {
			e := hybrid.SettingsFrom(ctx)
			e.SetLocalTTL(long)
			e.For("batch, cut").SetTTL(short)
			out := make(map[string]string, len(keys))
			for _, k := range keys {
				out[k] = "v"
			}
			return out, nil
		})
		return err
	}
	tests := []struct {
		key        string
		write      func() error
		ttl, local time.Duration // want, in the shared tier and in L1
		writeFirst bool          // write runs before this key's check (batch keys share one)
	}{
		{"call", get("call", loadTop, hybrid.WithTTL(short), hybrid.WithLocalTTL(long)), short, short, true},
		{"Set", func() error { return a.c.Set(ctx, "Set", "v", hybrid.WithLocalTTL(long), hybrid.WithTTL(short)) }, short, short, true},
		{"load", get("load", loadWith("v", func(e *hybrid.LoadSettings) { e.SetLocalTTL(long); e.SetTTL(short) })), short, short, true},
		{"per-key", get("per-key", loadTop), short, short, true},
		{"batch, cut", batch, short, short, true},
		{"batch, uncut", nil, 10 * time.Minute, long, false},
		// An earlier level's short TTL cut the cache's LocalTTL; a later
		// level's longer TTL gives it back.
		{"per-key, the call's TTL", get("per-key, the call's TTL", loadTop, hybrid.WithTTL(5*time.Minute)), 5 * time.Minute, time.Minute, true},
		{"the load's TTL", get("the load's TTL", loadWith("v", func(e *hybrid.LoadSettings) { e.SetTTL(5 * time.Minute) }), hybrid.WithTTL(short)), 5 * time.Minute, time.Minute, true},
	}
	for _, tt := range tests {
		if tt.writeFirst {
			if err := tt.write(); err != nil {
				t.Errorf("%s: got %v, want the value stored", tt.key, err)
				continue
			}
		}
		var s stored
		for deadline, ok := time.Now().Add(5*time.Second), false; !ok; time.Sleep(time.Millisecond) {
			if s, ok = redisEntry(t, a.rdb, ns, tt.key); !ok && time.Now().After(deadline) {
				break
			}
		}
		if s.raw == nil {
			t.Errorf("%s: Redis holds nothing, want the value", tt.key)
			continue
		}
		within(t, tt.key+": PTTL in Redis", s.pttl, tt.ttl-slack, tt.ttl)
		e, ok, err := a.c.GetEntry(ctx, tt.key)
		if err != nil || !ok || e.Tier != hybrid.TierL1 {
			t.Errorf("%s: GetEntry: got %+v, %v, %v; want the value from L1", tt.key, e, ok, err)
			continue
		}
		within(t, tt.key+": LocalTTL", e.LocalTTL, tt.local-slack, tt.local)
	}
	if n := a.c.Stats().Load.BadOptions; n != 0 {
		t.Errorf("Load.BadOptions: got %d, want 0", n)
	}
}

// TestOptionsLocalTTLCut: New cuts Options.LocalTTL to Options.TTL with a
// Remote, and says so once.
func TestOptionsLocalTTLCut(t *testing.T) {
	srv.NeedReal(t)
	log, buf := captureLogger()
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: redistest.Prefix(t), TTL: 3 * time.Second, LocalTTL: time.Hour, Logger: log})[0]
	ctx := context.Background()
	if _, err := a.c.GetOrCreate(ctx, "k", loadTop); err != nil {
		t.Fatal(err)
	}
	e, ok, err := a.c.GetEntry(ctx, "k")
	if err != nil || !ok || e.Tier != hybrid.TierL1 {
		t.Fatalf("GetEntry: got %+v, %v, %v; want the value from L1", e, ok, err)
	}
	within(t, "LocalTTL", e.LocalTTL, 2*time.Second, 3*time.Second)
	if !strings.Contains(buf.String(), "Options.LocalTTL (1h0m0s) is longer than Options.TTL (3s)") {
		t.Errorf("New did not warn of the cut: %s", buf.String())
	}
}
