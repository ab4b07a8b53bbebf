package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
)

// missingRow is a load function for a row that does not exist.
type missingRow struct{ calls atomic.Int64 }

func (m *missingRow) load(context.Context, string) (string, error) {
	m.calls.Add(1)
	return "", fmt.Errorf("select: %w", hybrid.ErrNotFound)
}

func TestNegativeCaching(t *testing.T) {
	eachCtx(t, func(t *testing.T, ctx context.Context) {
		s := newSharedTier(t)
		o := s.options()
		o.NegativeTTL = time.Minute
		a := newTestCache[string](t, o)
		var m missingRow
		for i := range 3 {
			if _, err := a.GetOrCreate(ctx, "k", m.load); !errors.Is(err, hybrid.ErrNotFound) {
				t.Fatalf("call %d: got err %v, want ErrNotFound", i, err)
			}
		}
		if got := m.calls.Load(); got != 1 {
			t.Errorf("load calls: got %d, want 1 (the absence is remembered)", got)
		}
		if st := a.Stats(); st.LoadErrors != 0 {
			t.Errorf("LoadErrors: got %d, want 0 (not found is an answer, not an error)", st.LoadErrors)
		}
		if _, ok, err := a.Get(ctx, "k"); ok || err != nil {
			t.Errorf("Get of a remembered absence: got ok %v err %v, want false nil", ok, err)
		}
		// The shared tier remembers it too: a second instance does not load.
		s.waitWrites(t, 1) // the fill writes back after its callers have their answer
		b, found := s.remote.Peek(testNS + ":k")
		if !found {
			t.Fatal("the shared tier holds no absence marker")
		}
		if h, _, err := envelope.Decode(b); err != nil || h.Flags&envelope.FlagAbsent == 0 {
			t.Fatalf("stored marker: flags %v err %v, want FlagAbsent", h.Flags, err)
		}
		other := newTestCache[string](t, o)
		if _, err := other.GetOrCreate(ctx, "k", m.load); !errors.Is(err, hybrid.ErrNotFound) {
			t.Errorf("second instance: got err %v, want ErrNotFound", err)
		}
		if got := m.calls.Load(); got != 1 {
			t.Errorf("load calls after the second instance: got %d, want 1", got)
		}
		// A Set replaces the absence everywhere.
		if err := a.Set(ctx, "k", "now it exists"); err != nil {
			t.Fatal(err)
		}
		s.flush(t)
		if v, err := other.GetOrCreate(ctx, "k", m.load); err != nil || v != "now it exists" {
			t.Errorf("after Set: got %q %v, want the set value", v, err)
		}
	})
}

func TestNotFoundWithoutNegativeTTLIsNotRemembered(t *testing.T) {
	s := newSharedTier(t)
	a := newTestCache[string](t, s.options())
	var m missingRow
	for range 2 {
		if _, err := a.GetOrCreate(context.Background(), "k", m.load); !errors.Is(err, hybrid.ErrNotFound) {
			t.Fatalf("got err %v, want ErrNotFound", err)
		}
	}
	if got := m.calls.Load(); got != 2 {
		t.Errorf("load calls: got %d, want 2", got)
	}
	if _, found := s.remote.Peek(testNS + ":k"); found {
		t.Error("an absence was stored with NegativeTTL 0")
	}
}

func TestNegativeCachingInBatch(t *testing.T) {
	eachCtx(t, func(t *testing.T, ctx context.Context) {
		s := newSharedTier(t)
		o := s.options()
		o.NegativeTTL = time.Minute
		a := newTestCache[string](t, o)
		var loads atomic.Int64
		load := func(_ context.Context, missing []string) (map[string]string, error) {
			loads.Add(1)
			return map[string]string{"a": "A"}, nil // "b" does not exist
		}
		for i := range 2 {
			got, err := a.GetOrCreateMany(ctx, []string{"a", "b"}, load)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got["a"] != "A" {
				t.Fatalf("call %d: got %v, want only a=A", i, got)
			}
		}
		if got := loads.Load(); got != 1 {
			t.Errorf("batch loads: got %d, want 1 (b's absence is remembered)", got)
		}
		s.waitWrites(t, 1)
		var m missingRow
		if _, err := a.GetOrCreate(ctx, "b", m.load); !errors.Is(err, hybrid.ErrNotFound) || m.calls.Load() != 0 {
			t.Errorf("GetOrCreate of b: err %v after %d loads, want ErrNotFound after 0", err, m.calls.Load())
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

func TestTTLJitterValidated(t *testing.T) {
	for _, j := range []float64{-0.1, 1, 2} {
		if _, err := hybrid.New[string](hybrid.Options{TTLJitter: j}); err == nil {
			t.Errorf("TTLJitter %v: got nil error", j)
		}
	}
}
