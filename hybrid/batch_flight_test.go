package hybrid_test

import (
	"context"
	"errors"
	"maps"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
)

// These tests hold the promises a batch shares with GetOrCreate: one fill
// per key across single and batch calls, and no stale fill.

// blockingMany is a batch load that records the keys of each call, tells
// started, waits for release and returns value for every key.
type blockingMany struct {
	calls   atomic.Int64
	asked   chan []string
	release chan struct{}
	value   string
}

func newBlockingMany(value string) *blockingMany {
	return &blockingMany{asked: make(chan []string, 10), release: make(chan struct{}), value: value}
}

func (l *blockingMany) load(_ context.Context, missing []string) (map[string]string, error) {
	l.calls.Add(1)
	l.asked <- slices.Clone(missing)
	<-l.release
	m := make(map[string]string, len(missing))
	for _, k := range missing {
		m[k] = l.value
	}
	return m, nil
}

type manyResult struct {
	m   map[string]string
	err error
}

func goGetOrCreateMany(ctx context.Context, c *hybrid.Cache[string], keys []string, load func(context.Context, []string) (map[string]string, error)) <-chan manyResult {
	ch := make(chan manyResult, 1)
	go func() {
		m, err := c.GetOrCreateMany(ctx, keys, load)
		ch <- manyResult{m, err}
	}()
	return ch
}

// await returns what ch delivers. In a synctest bubble, where time only
// moves when every goroutine waits, it fails the test instead of hanging
// when nothing comes.
func await[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatal("nothing came in a minute")
		panic("unreachable")
	}
}

// TestManyJoinsSingleFill: a batch that needs a key a GetOrCreate is
// filling waits for that fill instead of loading the key again.
func TestManyJoinsSingleFill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache[string](t, newSharedTier(t).options())
		single := newBlockingLoad("from single")
		single.started = make(chan struct{}, 1)
		res := goGetOrCreate(t.Context(), c, "k", single.load)
		await(t, single.started)
		batch := newBlockingMany("from batch")
		many := goGetOrCreateMany(t.Context(), c, []string{"k", "x"}, batch.load)
		if asked := await(t, batch.asked); !slices.Equal(asked, []string{"x"}) {
			t.Errorf("batch load asked for %q, want only %q", asked, "x")
		}
		close(batch.release)
		synctest.Wait()
		var r manyResult
		early := false
		select {
		case r = <-many:
			early = true
			t.Errorf("GetOrCreateMany returned %v, %v before the single fill of k ended", r.m, r.err)
		default:
		}
		close(single.release)
		if !early {
			r = await(t, many)
		}
		want := map[string]string{"k": "from single", "x": "from batch"}
		if r.err != nil || !maps.Equal(r.m, want) {
			t.Errorf("GetOrCreateMany: got %v, %v, want %v", r.m, r.err, want)
		}
		if r := await(t, res); r.err != nil || r.v != "from single" {
			t.Errorf("GetOrCreate: got %q, %v, want \"from single\"", r.v, r.err)
		}
		if n := single.calls.Load() + batch.calls.Load(); n != 2 {
			t.Errorf("loads: got %d, want 2", n)
		}
	})
}

// TestSingleJoinsManyFill: GetOrCreate and a second batch, on keys a batch
// is filling, wait for that batch instead of loading again.
func TestSingleJoinsManyFill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache[string](t, newSharedTier(t).options())
		batch := newBlockingMany("v")
		first := goGetOrCreateMany(t.Context(), c, []string{"a", "b", "a"}, batch.load)
		if asked := await(t, batch.asked); !slices.Equal(asked, []string{"a", "b"}) {
			t.Errorf("batch load asked for %q, want %q", asked, []string{"a", "b"})
		}
		single := goGetOrCreate(t.Context(), c, "a", neverLoad(t))
		second := goGetOrCreateMany(t.Context(), c, []string{"b", "a"}, func(context.Context, []string) (map[string]string, error) {
			t.Error("second batch loaded, want it to join the first")
			return nil, nil
		})
		synctest.Wait()
		close(batch.release)
		want := map[string]string{"a": "v", "b": "v"}
		for i, ch := range []<-chan manyResult{first, second} {
			if r := await(t, ch); r.err != nil || !maps.Equal(r.m, want) {
				t.Errorf("batch %d: got %v, %v, want %v", i, r.m, r.err, want)
			}
		}
		if r := await(t, single); r.err != nil || r.v != "v" {
			t.Errorf("GetOrCreate: got %q, %v, want \"v\"", r.v, r.err)
		}
		if n := batch.calls.Load(); n != 1 {
			t.Errorf("batch loads: got %d, want 1", n)
		}
	})
}

// TestManyCallerLeaves: a batch caller whose ctx ends gets its error at
// once; the fill goes on for a GetOrCreate that joined it.
func TestManyCallerLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache[string](t, newSharedTier(t).options())
		batch := newBlockingMany("v")
		ctx, cancel := context.WithCancel(t.Context())
		many := goGetOrCreateMany(ctx, c, []string{"a", "b"}, batch.load)
		await(t, batch.asked)
		single := goGetOrCreate(t.Context(), c, "b", neverLoad(t))
		cancel()
		if r := await(t, many); !errors.Is(r.err, context.Canceled) {
			t.Errorf("GetOrCreateMany after its ctx ended: got %v, %v, want context.Canceled", r.m, r.err)
		}
		close(batch.release)
		if r := await(t, single); r.err != nil || r.v != "v" {
			t.Errorf("GetOrCreate that joined the batch: got %q, %v, want \"v\"", r.v, r.err)
		}
	})
}

// TestManyLoadGoexit: a batch load that calls runtime.Goexit fails every
// key of the batch, also for a GetOrCreate that joined it.
func TestManyLoadGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache[string](t, newSharedTier(t).options())
		started, release := make(chan struct{}), make(chan struct{})
		many := goGetOrCreateMany(t.Context(), c, []string{"a", "b"}, func(context.Context, []string) (map[string]string, error) {
			close(started)
			<-release
			runtime.Goexit()
			return nil, nil
		})
		await(t, started)
		single := goGetOrCreate(t.Context(), c, "a", neverLoad(t))
		synctest.Wait()
		close(release)
		if r := await(t, many); !errors.Is(r.err, hybrid.ErrPanic) || len(r.m) != 0 {
			t.Errorf("GetOrCreateMany: got %v, %v, want no values and ErrPanic", r.m, r.err)
		}
		if r := await(t, single); !errors.Is(r.err, hybrid.ErrPanic) {
			t.Errorf("GetOrCreate that joined the batch: got %q, %v, want ErrPanic", r.v, r.err)
		}
	})
}

// TestNoStaleBatchFill: a batch whose read or load raced a Set or Delete on
// another instance does not keep what it read or loaded in L1.
func TestNoStaleBatchFill(t *testing.T) {
	tests := []struct {
		name string
		load bool // hold the load, not the read
		del  bool // A deletes instead of setting
	}{
		{"read held, set", false, false},
		{"read held, delete", false, true},
		{"load held, set", true, false},
		{"load held, delete", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSharedTier(t)
			p := newPeers(t, s, 2, hybrid.Options{})
			a, b := p[0], p[1]
			ctx := context.Background()
			reached, release := make(chan struct{}), make(chan struct{})
			load := func(_ context.Context, missing []string) (map[string]string, error) {
				if !tt.load {
					t.Errorf("load(%q) called, want the values from the shared tier", missing)
				}
				close(reached)
				<-release
				return map[string]string{"k": "loaded", "other": "loaded"}, nil
			}
			if !tt.load {
				set(t, a, "k", "old")
				set(t, a, "other", "old")
				s.flush(t)
				var armed atomic.Bool
				armed.Store(true)
				s.remote.SetAfterGet(func(string) {
					if armed.CompareAndSwap(true, false) {
						close(reached)
						<-release
					}
				})
			}
			res := goGetOrCreateMany(ctx, b, []string{"other", "k"}, load)
			await(t, reached) // b's read has returned the old state, or its load runs
			setOrDelete(t, a, "k", tt.del)
			s.flush(t) // b has applied A's message
			close(release)
			r := await(t, res)
			if r.err != nil || len(r.m) != 2 {
				t.Fatalf("b: GetOrCreateMany: got %v, %v, want 2 values", r.m, r.err)
			}
			if st := b.Stats(); st.FillsDiscarded < 1 {
				t.Errorf("b: FillsDiscarded got %d, want at least 1", st.FillsDiscarded)
			}
			v, ok := getString(t, b, "k")
			switch {
			case tt.del && ok:
				t.Errorf("b: Get after A's Delete: got %q, want a miss", v)
			case !tt.del && (!ok || v != "new"):
				t.Errorf("b: Get after A's Set: got %q, %v, want \"new\" (GetOrCreateMany had returned %q)", v, ok, r.m["k"])
			}
		})
	}
}
