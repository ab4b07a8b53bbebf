package hybrid_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
)

// recorder collects events and spans.
type recorder struct {
	mu     sync.Mutex
	events []string
	spans  []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, s)
}

func (r *recorder) has(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.events, s)
}

func (r *recorder) Start(ctx context.Context, op, key string) (context.Context, func(error)) {
	return ctx, func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		s := op + " " + key
		if err != nil {
			s += " failed"
		}
		r.spans = append(r.spans, s)
	}
}

func (r *recorder) options(o hybrid.Options) hybrid.Options {
	o.Events = hybrid.Events{
		Evicted:     func(key string, expired bool) { r.add("evicted " + key) },
		Invalidated: func(op string, keys []string) { r.add("invalidated " + op + " " + keys[0]) },
		L2Error:     func(op string, err error) { r.add("l2error " + op) },
		StaleServed: func(key string, cause error) { r.add("stale " + key) },
	}
	o.Tracer = r
	return o
}

func TestEventsAndSpans(t *testing.T) {
	s := newSharedTier(t)
	var ra, rb recorder
	a := newTestCache[string](t, ra.options(s.options()))
	b := newTestCache[string](t, rb.options(s.options()))
	ctx := context.Background()

	if _, err := a.GetOrCreate(ctx, "k", (&counter{value: "v"}).load); err != nil {
		t.Fatal(err)
	}
	s.waitWrites(t, 1)
	ra.mu.Lock()
	spans := slices.Clone(ra.spans)
	ra.mu.Unlock()
	if want := []string{"get k", "load k", "set k"}; !slices.Equal(spans, want) {
		t.Errorf("spans of a full miss: %q, want %q", spans, want)
	}

	if err := a.Set(ctx, "k", "v2"); err != nil {
		t.Fatal(err)
	}
	s.flush(t)
	if !rb.has("invalidated set k") {
		t.Errorf("b's events %q lack the invalidation", rb.events)
	}

	s.remote.FailWith(errors.New("down"))
	if _, _, err := b.Get(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if !rb.has("l2error get") {
		t.Errorf("b's events %q lack the failed get", rb.events)
	}
	if a.Set(ctx, "k", "v3") == nil {
		t.Fatal("Set with a failing Remote returned nil")
	}
	if !ra.has("l2error set") {
		t.Errorf("a's events %q lack the failed set", ra.events)
	}
}

func TestEventsStaleServedAndEvicted(t *testing.T) {
	var r recorder
	o := r.options(hybrid.Options{
		TTL: 20 * time.Millisecond, LocalTTL: 20 * time.Millisecond,
		FailSafeMaxAge: time.Hour, LocalMaxBytes: 4 << 10,
	})
	c := newTestCache[string](t, o)
	ctx := context.Background()
	if _, err := c.GetOrCreate(ctx, "k", (&counter{value: "v"}).load); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the value's logical lifetime pass
	v, err := c.GetOrCreate(ctx, "k", (&counter{err: errors.New("db down")}).load)
	if err != nil || v != "v" {
		t.Fatalf("got %q %v, want the stale v", v, err)
	}
	if !r.has("stale k") {
		t.Errorf("events %q lack the stale serve", r.events)
	}
	// Overfill L1 (4 KiB) so that entries are evicted by size.
	big := string(make([]byte, 1000))
	for i := range 50 {
		if err := c.Set(ctx, string(rune('a'+i%26))+string(rune('a'+i/26)), big); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().L1Evictions == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	r.mu.Lock()
	n := 0
	for _, e := range r.events {
		if len(e) > 8 && e[:8] == "evicted " {
			n++
		}
	}
	r.mu.Unlock()
	if ev := c.Stats().L1Evictions; ev == 0 || uint64(n) > ev+c.Stats().L1Expirations {
		t.Errorf("%d evictions counted, %d Evicted events", ev, n)
	}
	if n == 0 {
		t.Error("no Evicted event")
	}
}
