package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
)

// recorder collects events and spans.
type recorder struct {
	mu      sync.Mutex
	events  []string
	spans   []string
	changed chan struct{} // closed and replaced when events or spans grow
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, s)
	r.wakeLocked()
}

// wakeLocked tells waitFor that events or spans grew.
func (r *recorder) wakeLocked() {
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// waitFor waits until done, called with r's lock held, reports true, and
// fails t after 10 s. A span or event may come after the effect a test can
// see (a span ends after its call returned): wait for it, not the effect.
func (r *recorder) waitFor(t testing.TB, what string, done func() bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		if done() {
			r.mu.Unlock()
			return
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-timeout:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("waited 10s for %s: events %q, spans %q", what, r.events, r.spans)
		}
	}
}

// waitSpans waits until n spans have ended and returns them all.
func (r *recorder) waitSpans(t testing.TB, n int) []string {
	t.Helper()
	var spans []string
	r.waitFor(t, fmt.Sprintf("%d spans", n), func() bool {
		spans = slices.Clone(r.spans)
		return len(spans) >= n
	})
	return spans
}

func (r *recorder) has(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.events, s)
}

func (r *recorder) Start(ctx context.Context, op hybrid.Op, key string) (context.Context, func(error)) {
	return ctx, func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		s := string(op) + " " + key
		if err != nil {
			s += " failed"
		}
		r.spans = append(r.spans, s)
		r.wakeLocked()
	}
}

func (r *recorder) options(o hybrid.Options) hybrid.Options {
	o.Events = hybrid.Events{
		Evicted: func(key string, expired bool) {
			if expired {
				key += " expired"
			}
			r.add("evicted " + key)
		},
		Invalidated: func(op hybrid.Op, keys []string) { r.add("invalidated " + string(op) + " " + keys[0]) },
		L2Error:     func(op hybrid.Op, err error) { r.add("l2error " + string(op)) },
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
	// New opens the invalidation log (span "open_log"): not part of what
	// follows.
	if spans := ra.waitSpans(t, 1); !slices.Equal(spans, []string{"open_log "}) {
		t.Errorf("spans of New: %q, want one open_log", spans)
	}
	ra.mu.Lock()
	ra.spans = nil
	ra.mu.Unlock()

	if _, err := a.GetOrCreate(ctx, "k", (&counter{value: "v"}).load); err != nil {
		t.Fatal(err)
	}
	// The fill's write ends its span after the Remote has counted the call,
	// so wait for the span rather than for the write.
	// Before its load, the fill reads the key's sequence counter, and
	// makes it, found missing; before its first write, the instance reads
	// the clear record.
	spans := ra.waitSpans(t, 6)
	if want := []string{"get k", "get_seq k", "get_seq k", "load k", "get_clear ", "set k"}; !slices.Equal(spans, want) {
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

// TestEventsStaleServedAndEvicted runs on synctest's clock: L1 reads the time
// on a ticker, which a loaded machine may hold back past a real sleep.
func TestEventsStaleServedAndEvicted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
		time.Sleep(50 * time.Millisecond) // the value's logical lifetime passes
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
		// L1 counts an eviction before it calls Evicted: wait for the event of
		// one by size, then read the counters, which can only be ahead.
		n := 0
		r.waitFor(t, "an Evicted event by size", func() bool {
			n = 0
			bySize := false
			for _, e := range r.events {
				if strings.HasPrefix(e, "evicted ") {
					n++
					bySize = bySize || !strings.HasSuffix(e, " expired")
				}
			}
			return bySize
		})
		if ev := c.Stats().L1.Evictions; ev == 0 || uint64(n) > ev+c.Stats().L1.Expirations {
			t.Errorf("%d evictions counted, %d Evicted events", ev, n)
		}
		if n == 0 {
			t.Error("no Evicted event")
		}
	})
}
