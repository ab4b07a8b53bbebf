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

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"github.com/hybridcache/hybridcache/internal/envelope"
)

func TestNewValidatesOptions(t *testing.T) {
	remote := new(hybridtest.Remote)
	bus := new(hybridtest.Bus)
	defer bus.Close()
	tests := []struct {
		name  string
		o     hybrid.Options
		field string // "" for no error
	}{
		{"zero", hybrid.Options{}, ""},
		{"remote without namespace", hybrid.Options{Remote: remote}, "Namespace"},
		{"bus without namespace", hybrid.Options{Bus: bus}, "Namespace"},
		{"remote with namespace", hybrid.Options{Namespace: "n", Remote: remote}, ""},
		{"bus only", hybrid.Options{Namespace: "n", Bus: bus}, ""},
		{"LocalTTL longer than TTL", hybrid.Options{Namespace: "n", Remote: remote, TTL: time.Minute, LocalTTL: 2 * time.Minute}, "LocalTTL"},
		{"LocalTTL longer than default TTL", hybrid.Options{Namespace: "n", Remote: remote, LocalTTL: time.Hour}, "LocalTTL"},
		{"LocalTTL equal to TTL", hybrid.Options{Namespace: "n", Remote: remote, TTL: time.Minute, LocalTTL: time.Minute}, ""},
		{"LocalTTL longer than TTL without Remote", hybrid.Options{TTL: time.Minute, LocalTTL: time.Hour}, ""},
		{"negative TTL", hybrid.Options{TTL: -1}, "TTL"},
		{"negative LocalTTL", hybrid.Options{LocalTTL: -time.Second}, "LocalTTL"},
		{"negative LoadTimeout", hybrid.Options{LoadTimeout: -time.Second}, "LoadTimeout"},
		{"negative LogEvery", hybrid.Options{LogEvery: -time.Second}, "LogEvery"},
		{"negative LocalMaxBytes", hybrid.Options{LocalMaxBytes: -1}, "LocalMaxBytes"},
		{"negative MaxValueBytes", hybrid.Options{MaxValueBytes: -1}, "MaxValueBytes"},
		{"negative InlineMaxBytes means never inline", hybrid.Options{InlineMaxBytes: -1}, ""},
		{"negative MaxKeyBytes", hybrid.Options{MaxKeyBytes: -1}, "MaxKeyBytes"},
		{"negative MaxConcurrentLoads", hybrid.Options{MaxConcurrentLoads: -1}, "MaxConcurrentLoads"},
		{"MaxConcurrentLoads", hybrid.Options{MaxConcurrentLoads: 4}, ""},
		// "X" with key "v2:1" and "X:v2" with key "1" would be one Redis key.
		{"namespace with the separator", hybrid.Options{Namespace: "X:v2", Remote: remote}, "Namespace"},
		{"namespace with other punctuation", hybrid.Options{Namespace: "app.v2-products/eu", Remote: remote}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := hybrid.New[string](tt.o)
			if c != nil {
				defer c.Close()
			}
			if tt.field == "" {
				if err != nil {
					t.Fatalf("New: got %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New: got no error, want one naming Options.%s", tt.field)
			}
			if c != nil {
				t.Errorf("New: got a cache and an error, want a nil cache")
			}
			// The message must name the field for the user to fix.
			if !strings.Contains(err.Error(), "Options."+tt.field) {
				t.Errorf("New: got %q, want it to name Options.%s", err, tt.field)
			}
		})
	}
}

// TestNewRefusesGlobNamespace: a glob character in a Namespace would make
// SCAN MATCH "Namespace:*" list other namespaces' keys too ("ns*:*" lists
// "ns2:k"), so New refuses it, naming the field and the character.
func TestNewRefusesGlobNamespace(t *testing.T) {
	remote := new(hybridtest.Remote)
	tests := []struct {
		namespace string
		char      string // as the error quotes it; "" for no error
	}{
		{"ns*", `'*'`},
		{"n?", `'?'`},
		{"ns[12]", `'['`},
		{"ns]", `']'`},
		{`ns\x`, `'\\'`},
		{"a*b?", `'*'`}, // the first one found
		{"products.v2-eu/1_a", ""},
	}
	for _, tt := range tests {
		t.Run(tt.namespace, func(t *testing.T) {
			c, err := hybrid.New[string](hybrid.Options{Namespace: tt.namespace, Remote: remote})
			if c != nil {
				defer c.Close()
			}
			if tt.char == "" {
				if err != nil {
					t.Fatalf("New: got %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New: got no error, want one naming Options.Namespace and %s", tt.char)
			}
			if c != nil {
				t.Errorf("New: got a cache and an error, want a nil cache")
			}
			if msg := err.Error(); !strings.Contains(msg, "Options.Namespace") || !strings.Contains(msg, tt.char) {
				t.Errorf("New: got %q, want it to name Options.Namespace and %s", msg, tt.char)
			}
		})
	}
}

func TestEntryOptionsValidated(t *testing.T) {
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
		{"LocalTTL longer than TTL", []hybrid.EntryOption{hybrid.WithTTL(time.Second), hybrid.WithLocalTTL(time.Minute)}},
		{"negative NegativeTTL", []hybrid.EntryOption{hybrid.WithNegativeTTL(-time.Second)}},
		{"jitter of 1", []hybrid.EntryOption{hybrid.WithTTLJitter(1)}},
		{"negative fail-safe", []hybrid.EntryOption{hybrid.WithFailSafe(-time.Second)}},
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

// TestZeroOptionsL1Only checks that the zero Options make a working cache
// with nothing but L1.
func TestZeroOptionsL1Only(t *testing.T) {
	c := newTestCache[string](t, hybrid.Options{})
	ctx := context.Background()
	l := &counter{value: "v"}
	for i := range 3 {
		v, err := c.GetOrCreate(ctx, "k", l.load)
		if err != nil || v != "v" {
			t.Fatalf("GetOrCreate #%d: got %q, %v, want \"v\", nil", i, v, err)
		}
	}
	if got := l.calls.Load(); got != 1 {
		t.Errorf("load ran %d times, want 1", got)
	}
	if err := c.Set(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	if v, ok := getString(t, c, "a"); !ok || v != "1" {
		t.Errorf("Get(a) after Set: got %q, %v, want \"1\", true", v, ok)
	}
	if err := c.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if v, ok := getString(t, c, "a"); ok {
		t.Errorf("Get(a) after Delete: got %q, want a miss", v)
	}
	if err := c.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok := getString(t, c, "k"); ok {
		t.Errorf("Get(k) after Clear: got %q, want a miss", v)
	}
	s := c.Stats()
	want := hybrid.Stats{L1: hybrid.L1Stats{Hits: 3, Misses: 3}, Load: hybrid.LoadStats{Calls: 1}}
	if s.L1.Hits != want.L1.Hits || s.L1.Misses != want.L1.Misses || s.Load.Calls != want.Load.Calls || s.L2.Hits+s.L2.Misses+s.L2.Errors+s.Invalidations.Sent != 0 {
		t.Errorf("Stats: got %+v, want L1.Hits 3, L1.Misses 3, Load.Calls 1 and no L2 or bus counts", s)
	}
}

// TestDefaults checks the defaults that show from outside: the JSON codec,
// a shared-tier lifetime of 10 minutes, an L1 lifetime of 1 minute and the
// channel "hybridcache:" + Namespace.
func TestDefaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		ctx := t.Context()
		var got [][]byte
		unsub, err := s.bus.Subscribe(ctx, testChannel, func(m []byte) { got = append(got, m) }, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer unsub()

		start := time.Now()
		if err := c.Set(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
		s.flush(t)
		if len(got) != 1 {
			t.Errorf("got %d messages on %q, want 1", len(got), testChannel)
		}
		b, ok := s.remote.Peek(testNS + ":k")
		if !ok {
			t.Fatal("the Remote does not hold ns:k after Set")
		}
		h, payload, err := envelope.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.Codec != codec.IDJSON || string(payload) != `"v"` {
			t.Errorf("stored codec %d payload %s, want %d \"v\"", h.Codec, payload, codec.IDJSON)
		}
		if d := h.Expires.Sub(start); d != 10*time.Minute {
			t.Errorf("stored expiry %v after the write, want 10m", d)
		}

		gets := s.remote.Calls().Get
		time.Sleep(time.Minute - time.Millisecond)
		if v, ok := getString(t, c, "k"); !ok || v != "v" {
			t.Errorf("Get just before LocalTTL: got %q, %v, want \"v\", true", v, ok)
		}
		if n := s.remote.Calls().Get - gets; n != 0 {
			t.Errorf("Get just before LocalTTL read the Remote %d times, want 0", n)
		}
		time.Sleep(2 * time.Millisecond)
		if v, ok := getString(t, c, "k"); !ok || v != "v" {
			t.Errorf("Get just after LocalTTL: got %q, %v, want \"v\", true", v, ok)
		}
		if n := s.remote.Calls().Get - gets; n != 2 {
			t.Errorf("Get just after LocalTTL read the Remote %d times, want 2 (the value, and the clear record the first time)", n)
		}
	})
}

// tagsN returns n distinct tags.
func tagsN(n int) []string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprint("tag", i)
	}
	return tags
}

func TestTTLJitterValidated(t *testing.T) {
	for _, j := range []float64{-0.1, 1, 2} {
		if _, err := hybrid.New[string](hybrid.Options{TTLJitter: j}); err == nil {
			t.Errorf("TTLJitter %v: got nil error", j)
		}
	}
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
		kept := []hybrid.EntryOption{hybrid.WithFailSafe(time.Hour), hybrid.WithFailSafeThrottle(2 * time.Second)}
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
		if _, err := c.GetOrCreate(ctx, "k", fail, hybrid.WithFailSafe(0)); !errors.Is(err, dbDown) {
			t.Errorf("WithFailSafe(0): got %v, want the load error", err)
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
		fs := hybrid.WithFailSafe(time.Hour)
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
