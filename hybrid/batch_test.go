package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// TestGetOrCreateManyWithDoubles: one page of keys, some in L1, some only
// in the shared tier, some nowhere: one batch read, one load of what is
// missing, one batch write.
func TestGetOrCreateManyWithDoubles(t *testing.T) {
	eachCtx(t, func(t *testing.T, ctx context.Context) {
		s := newSharedTier(t)
		p := newPeers(t, s, 2, hybrid.Options{})
		a, b := p[0], p[1]
		set(t, b, "inL1", "1")     // a reads it into its L1 below
		set(t, b, "inRemote", "2") // only in the shared tier for a
		s.flush(t)
		fillFromRemote(t, a, "inL1", "1")
		before := s.remote.Calls()

		var asked []string
		load := func(_ context.Context, missing []string) (map[string]string, error) {
			asked = slices.Clone(missing)
			return map[string]string{"new1": "n1", "new2": "n2"}, nil // "absent" is not found
		}
		got, err := a.GetOrCreateMany(ctx, []string{"inL1", "inRemote", "new1", "new2", "absent", "new1"}, load)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"inL1": "1", "inRemote": "2", "new1": "n1", "new2": "n2"}
		if !maps.Equal(got, want) {
			t.Errorf("GetOrCreateMany: got %v, want %v", got, want)
		}
		slices.Sort(asked)
		if w := []string{"absent", "new1", "new2"}; !slices.Equal(asked, w) {
			t.Errorf("load asked for %q, want %q", asked, w)
		}
		s.waitWrites(t, writes(before)+2)
		after := s.remote.Calls()
		if n := after.Get - before.Get; n != 2 {
			t.Errorf("Get calls: got %d, want 2 (the keys, then the sequence counters of those missing)", n)
		}
		if n := after.Write - before.Write; n != 2 {
			t.Errorf("Write calls: got %d, want 2 (the sequence counters, missing and so made; the write-back)", n)
		}
		for k, v := range map[string]string{"new1": "n1", "new2": "n2"} {
			if sv, ok := s.stored(t, k); !ok || sv != v {
				t.Errorf("Remote holds %s = %q (%v), want %q", k, sv, ok, v)
			}
		}
		if _, ok := s.stored(t, "absent"); ok {
			t.Error("Remote holds a key that load did not return")
		}
		// Now all in L1: nothing more reaches the Remote.
		calls := s.remote.Calls()
		got, err = a.GetOrCreateMany(ctx, []string{"inL1", "inRemote", "new1", "new2"}, load)
		if err != nil || len(got) != 4 {
			t.Errorf("second GetOrCreateMany: got %v, %v, want 4 values", got, err)
		}
		if s.remote.Calls() != calls {
			t.Errorf("second GetOrCreateMany reached the Remote: %+v, was %+v", s.remote.Calls(), calls)
		}
	})
}

func TestGetOrCreateManyLoadError(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	errDB := errors.New("db down")
	got, err := c.GetOrCreateMany(context.Background(), []string{"a", "b"}, func(context.Context, []string) (map[string]string, error) {
		return nil, errDB
	})
	if !errors.Is(err, errDB) {
		t.Errorf("GetOrCreateMany: got %v, want an error wrapping %v", err, errDB)
	}
	if len(got) != 0 {
		t.Errorf("GetOrCreateMany: got %v, want no values", got)
	}
	if keys := s.valueKeys(); len(keys) != 0 {
		t.Errorf("Remote keys: got %q, want none", keys)
	}
}

func TestGetOrCreateManyEmptyKey(t *testing.T) {
	c := newTestCache[string](t, hybrid.Options{})
	got, err := c.GetOrCreateMany(context.Background(), []string{"", "a"}, func(_ context.Context, missing []string) (map[string]string, error) {
		return map[string]string{"a": "1"}, nil
	})
	if !errors.Is(err, hybrid.ErrEmptyKey) {
		t.Errorf("GetOrCreateMany with an empty key: got %v, want an error wrapping %v", err, hybrid.ErrEmptyKey)
	}
	if got["a"] != "1" {
		t.Errorf("GetOrCreateMany with an empty key: got %v, want a = 1 still", got)
	}
}

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
			if st := b.Stats(); st.L1.FillsDiscarded < 1 {
				t.Errorf("b: L1.FillsDiscarded got %d, want at least 1", st.L1.FillsDiscarded)
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
		s.waitStored(t, "b")
		var m missingRow
		if _, err := a.GetOrCreate(ctx, "b", m.load); !errors.Is(err, hybrid.ErrNotFound) || m.calls.Load() != 0 {
			t.Errorf("GetOrCreate of b: err %v after %d loads, want ErrNotFound after 0", err, m.calls.Load())
		}
	})
}

// Batches are as resilient as single reads: fail-safe, soft timeout, eager
// refresh, negative caching and the load bound, with the same per-call
// options.

// TestBatchFailSafe: a batch whose load fails serves the stale values it
// has, kept in L1 past their lifetime or stale in the shared tier, and the
// load's error for the other keys; they are served again without a load
// during the throttle, and a load that works replaces them. (It replaces
// TestBatchSkipsExpiredFailSafeEntries: batches used to load such keys
// anew and never fall back on them.)
func TestBatchFailSafe(t *testing.T) {
	t.Run("background", func(t *testing.T) { testBatchFailSafe(t, false) })
	t.Run("cancelable", func(t *testing.T) { testBatchFailSafe(t, true) })
}

// testBatchFailSafe reads with a ctx that can end if cancelable (see
// eachCtx; the ctx is made in the bubble, as synctest wants).
func testBatchFailSafe(t *testing.T, cancelable bool) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		p := newPeers(t, s, 2, failSafeOptions(s))
		a, b := p[0], p[1]
		ctx := context.Background()
		if cancelable {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
		}
		set(t, a, "inL1", "old1")
		set(t, a, "inRemote", "old2") // b never reads it: only the shared tier has it
		s.flush(t)
		fillFromRemote(t, b, "inL1", "old1")
		time.Sleep(11 * time.Second) // past the lifetime, within FailSafeMaxAge

		dbDown := errors.New("db down")
		var asked [][]string
		fail := func(_ context.Context, missing []string) (map[string]string, error) {
			asked = append(asked, slices.Sorted(slices.Values(missing)))
			return nil, dbDown
		}
		keys := []string{"inL1", "inRemote", "none"}
		want := map[string]string{"inL1": "old1", "inRemote": "old2"}
		got, err := b.GetOrCreateMany(ctx, keys, fail)
		if !errors.Is(err, dbDown) || !maps.Equal(got, want) {
			t.Fatalf("failing load: got %v, %v; want %v and the load's error for \"none\"", got, err, want)
		}
		if st := b.Stats(); st.Load.StaleServed != 2 {
			t.Errorf("Load.StaleServed: got %d, want 2", st.Load.StaleServed)
		}
		// Throttled: only the key without a stale value is loaded again.
		got, err = b.GetOrCreateMany(ctx, keys, fail)
		if !errors.Is(err, dbDown) || !maps.Equal(got, want) {
			t.Errorf("during the throttle: got %v, %v; want %v and the load's error", got, err, want)
		}
		if w := [][]string{{"inL1", "inRemote", "none"}, {"none"}}; !slices.EqualFunc(asked, w, slices.Equal) {
			t.Errorf("loads asked for %q, want %q", asked, w)
		}
		time.Sleep(6 * time.Second) // past the throttle: loads are tried again
		works := func(_ context.Context, missing []string) (map[string]string, error) {
			m := make(map[string]string, len(missing))
			for _, k := range missing {
				m[k] = "new"
			}
			return m, nil
		}
		want = map[string]string{"inL1": "new", "inRemote": "new", "none": "new"}
		if got, err := b.GetOrCreateMany(ctx, keys, works); err != nil || !maps.Equal(got, want) {
			t.Errorf("after the throttle, a load that works: got %v, %v; want %v", got, err, want)
		}
		if got, err := b.GetMany(ctx, keys); err != nil || !maps.Equal(got, want) {
			t.Errorf("GetMany: got %v, %v; want %v", got, err, want)
		}
	})
}

// TestBatchWithFailSafeZero: WithFailSafeMaxAge(0) turns fail-safe off for one
// batch: its failing load is an error for every key.
func TestBatchWithFailSafeZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, failSafeOptions(s))
		set(t, c, "k", "old")
		time.Sleep(11 * time.Second)
		dbDown := errors.New("db down")
		fail := func(context.Context, []string) (map[string]string, error) { return nil, dbDown }
		got, err := c.GetOrCreateMany(t.Context(), []string{"k"}, fail, hybrid.WithFailSafeMaxAge(0))
		if !errors.Is(err, dbDown) || len(got) != 0 {
			t.Errorf("WithFailSafeMaxAge(0): got %v, %v; want no value and the load's error", got, err)
		}
		got, err = c.GetOrCreateMany(t.Context(), []string{"k"}, fail)
		if err != nil || got["k"] != "old" {
			t.Errorf("without the option: got %v, %v; want the stale value", got, err)
		}
	})
}

// TestIntegrationBatchFailSafe: on Redis, an instance that never held the
// keys serves the stale values its batch read found in Redis (one MGET)
// when its load fails, and writes nothing over them.
func TestIntegrationBatchFailSafe(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	const ttl = 200 * time.Millisecond
	o := hybrid.Options{Namespace: ns, TTL: ttl, LocalTTL: ttl, FailSafeMaxAge: time.Minute}
	p := newInstances(t, 2, singleNode(nil), o)
	a, b := p[0], p[1]
	keys := keysOf("s", 10)
	for _, k := range keys {
		setStr(t, a, k, "old:"+k)
	}
	time.Sleep(ttl + 100*time.Millisecond)
	dbDown := errors.New("db down")
	before := b.remote.calls()
	got, err := b.c.GetOrCreateMany(ctx, append(slices.Clone(keys), "none"), func(context.Context, []string) (map[string]string, error) {
		return nil, dbDown
	})
	if !errors.Is(err, dbDown) {
		t.Errorf("GetOrCreateMany: got error %v, want the load's error for \"none\"", err)
	}
	if len(got) != len(keys) {
		t.Errorf("GetOrCreateMany: got %d values, want the %d stale ones", len(got), len(keys))
	}
	for _, k := range keys {
		if got[k] != "old:"+k {
			t.Errorf("[%s] = %q, want the stale %q", k, got[k], "old:"+k)
		}
	}
	c := b.remote.calls()
	if c.GetBatch-before.GetBatch != 1 || c.Get != before.Get {
		t.Errorf("reads: %d GetBatch, %d Get; want 1 and 0", c.GetBatch-before.GetBatch, c.Get-before.Get)
	}
	if st := b.c.Stats(); st.Load.StaleServed != uint64(len(keys)) {
		t.Errorf("Load.StaleServed: got %d, want %d", st.Load.StaleServed, len(keys))
	}
	for _, k := range keys {
		if v, ok := redisValue(t, b.rdb, ns, k); !ok || v != "old:"+k {
			t.Errorf("Redis holds %q, %v for %s, want the stale value kept", v, ok, k)
		}
	}
}

// TestBatchSoftTimeout: with stale values at hand, a batch whose load is
// slower than its soft timeout (here a per-call WithSoftTimeout) gets them
// after that timeout, and so does a GetOrCreate of one of its keys that
// comes meanwhile, without a load; the load goes on and stores its values.
func TestBatchSoftTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, failSafeOptions(s))
		set(t, c, "a", "old")
		set(t, c, "b", "old")
		time.Sleep(11 * time.Second)
		slow := func(ctx context.Context, missing []string) (map[string]string, error) {
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return map[string]string{"a": "new", "b": "new"}, nil
		}
		soft := hybrid.WithSoftTimeout(100 * time.Millisecond)
		start := time.Now()
		got, err := c.GetOrCreateMany(t.Context(), []string{"a", "b"}, slow, soft)
		if want := map[string]string{"a": "old", "b": "old"}; err != nil || !maps.Equal(got, want) {
			t.Fatalf("got %v, %v; want %v after the soft timeout", got, err, want)
		}
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Errorf("the batch waited %v, want the soft timeout, 100ms", d)
		}
		if v, err := c.GetOrCreate(t.Context(), "a", neverLoad(t)); err != nil || v != "old" {
			t.Errorf("GetOrCreate during the slow load: got %q, %v; want the stale value at once", v, err)
		}
		time.Sleep(2 * time.Second) // the load finishes in the background
		synctest.Wait()
		if got, err := c.GetMany(t.Context(), []string{"a", "b"}); err != nil || got["a"] != "new" || got["b"] != "new" {
			t.Errorf("after the slow load: got %v, %v; want its values", got, err)
		}
		if st := c.Stats(); st.Load.SoftTimeouts != 1 || st.Load.StaleServed != 2 || st.Load.Calls != 1 {
			t.Errorf("Stats: Load.SoftTimeouts %d, Load.StaleServed %d, Load.Calls %d; want 1, 2, 1", st.Load.SoftTimeouts, st.Load.StaleServed, st.Load.Calls)
		}
	})
}

// TestBatchEagerRefresh: a batch that hits entries due for an eager refresh
// (written with a per-call WithEagerRefresh) returns them at once and
// refreshes them in the background with one batch load, once per key at a
// time; the new values are written to the shared tier.
func TestBatchEagerRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := s.options()
		o.TTL, o.LocalTTL = 10*time.Second, 10*time.Second
		c := newTestCache[string](t, o)
		eager := hybrid.WithEagerRefresh(0.5)
		var mu sync.Mutex
		var asked [][]string
		version := "v1"
		hold, release := gate(t)
		var holding atomic.Bool
		load := func(_ context.Context, missing []string) (map[string]string, error) {
			mu.Lock()
			asked = append(asked, slices.Sorted(slices.Values(missing)))
			v := version
			mu.Unlock()
			if holding.Load() {
				<-hold
			}
			m := make(map[string]string, len(missing))
			for _, k := range missing {
				m[k] = v + ":" + k
			}
			return m, nil
		}
		if _, err := c.GetOrCreateMany(t.Context(), []string{"a", "b"}, load, eager); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		time.Sleep(6 * time.Second) // past half the lifetime
		mu.Lock()
		version = "v2"
		mu.Unlock()
		holding.Store(true)
		for i := range 2 { // the second call finds the refresh in hand
			start := time.Now()
			got, err := c.GetOrCreateMany(t.Context(), []string{"a", "b"}, load, eager)
			if want := map[string]string{"a": "v1:a", "b": "v1:b"}; err != nil || !maps.Equal(got, want) || time.Since(start) != 0 {
				t.Errorf("due hit %d: got %v, %v after %v; want %v at once", i, got, err, time.Since(start), want)
			}
			synctest.Wait()
		}
		release()
		synctest.Wait()
		if w := [][]string{{"a", "b"}, {"a", "b"}}; !slices.EqualFunc(asked, w, slices.Equal) {
			t.Errorf("loads asked for %q, want %q (one load, one batch refresh)", asked, w)
		}
		if got, err := c.GetOrCreateMany(t.Context(), []string{"a", "b"}, load, eager); err != nil || got["a"] != "v2:a" || got["b"] != "v2:b" {
			t.Errorf("after the refresh: got %v, %v; want the v2 values", got, err)
		}
		if v, _ := s.stored(t, "a"); v != "v2:a" {
			t.Errorf("shared tier: got %q, want the refreshed v2:a", v)
		}
		if st := c.Stats(); st.Load.Refreshes != 2 {
			t.Errorf("Load.Refreshes: got %d, want 2 (one per key)", st.Load.Refreshes)
		}
	})
}

// TestBatchWithNegativeTTL: a per-call WithNegativeTTL makes a batch
// remember the keys its load did not return, in both tiers; WithNegativeTTL(0)
// remembers nothing.
func TestBatchWithNegativeTTL(t *testing.T) {
	eachCtx(t, func(t *testing.T, ctx context.Context) {
		s := newSharedTier(t)
		p := newPeers(t, s, 2, hybrid.Options{}) // NegativeTTL off by default
		a, b := p[0], p[1]
		var loads atomic.Int64
		load := func(_ context.Context, missing []string) (map[string]string, error) {
			loads.Add(1)
			return map[string]string{"a": "A"}, nil // "b" and "c" do not exist
		}
		for i := range 2 {
			got, err := a.GetOrCreateMany(ctx, []string{"a", "b"}, load, hybrid.WithNegativeTTL(time.Minute))
			if err != nil || !maps.Equal(got, map[string]string{"a": "A"}) {
				t.Fatalf("call %d: got %v, %v; want only a=A", i, got, err)
			}
		}
		if n := loads.Load(); n != 1 {
			t.Errorf("loads: got %d, want 1 (b's absence is remembered)", n)
		}
		s.waitStored(t, "b")
		noLoad := func(_ context.Context, missing []string) (map[string]string, error) {
			t.Errorf("peer loaded %q, want b's absence from the shared tier", missing)
			return nil, nil
		}
		if got, err := b.GetOrCreateMany(ctx, []string{"b"}, noLoad); err != nil || len(got) != 0 {
			t.Errorf("peer: got %v, %v; want no value and no error", got, err)
		}
		for range 2 {
			if _, err := a.GetOrCreateMany(ctx, []string{"c"}, load, hybrid.WithNegativeTTL(0)); err != nil {
				t.Fatal(err)
			}
		}
		if n := loads.Load(); n != 3 {
			t.Errorf("loads: got %d, want 3 (WithNegativeTTL(0) remembers nothing)", n)
		}
	})
}

// TestBatchLoadTakesOneSlot: a batch load takes one slot of
// MaxConcurrentLoads whatever its number of keys, and a batch whose load
// waits for a slot serves its stale values at once.
func TestBatchLoadTakesOneSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := failSafeOptions(s)
		o.MaxConcurrentLoads = 2
		c := newTestCache[string](t, o)
		set(t, c, "s", "old")
		time.Sleep(11 * time.Second)
		batch := newBlockingMany("v")
		many := goGetOrCreateMany(t.Context(), c, []string{"a", "b", "c"}, batch.load)
		single := newSlowLoads()
		one := goGetOrCreate(t.Context(), c, "d", single.load)
		synctest.Wait()
		if n := batch.calls.Load() + single.calls.Load(); n != 2 {
			t.Fatalf("loads running: %d, want 2 (the batch of 3 keys takes one slot)", n)
		}
		<-batch.asked
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // fails the test, not hangs it
		defer cancel()
		start := time.Now()
		got, err := c.GetOrCreateMany(ctx, []string{"s"}, batch.load)
		if err != nil || got["s"] != "old" || time.Since(start) != 0 {
			t.Errorf("batch beyond the bound: got %v, %v after %v; want the stale value at once", got, err, time.Since(start))
		}
		if st := c.Stats(); st.Load.Queued != 1 || st.Load.StaleServed != 1 {
			t.Errorf("Load.Queued %d, Load.StaleServed %d; want 1 and 1", st.Load.Queued, st.Load.StaleServed)
		}
		close(batch.release)
		single.release <- struct{}{}
		if r := await(t, many); r.err != nil || len(r.m) != 3 {
			t.Errorf("first batch: got %v, %v; want 3 values", r.m, r.err)
		}
		if r := await(t, one); r.err != nil {
			t.Errorf("GetOrCreate(d): %v", r.err)
		}
		synctest.Wait() // the queued batch has loaded s
		if got, _ := c.GetMany(t.Context(), []string{"s"}); got["s"] != "v" {
			t.Errorf("after the queued load: got %v, want s = v", got)
		}
	})
}

// TestIntegrationBatch: GetOrCreateMany on one Redis costs one round trip
// for the reads, one load for the misses and one for the write back.
func TestIntegrationBatch(t *testing.T) { testBatch(t, singleNode(nil)) }

// TestIntegrationClusterBatch is TestIntegrationBatch on a Redis Cluster
// (HYBRID_REDIS_CLUSTER): the keys spread over slots, and nothing fails with
// CROSSSLOT.
func TestIntegrationClusterBatch(t *testing.T) { testBatch(t, clusterNodes(t)) }

func keysOf(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return keys
}

func testBatch(t *testing.T, newClient clientFactory) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	p := newInstances(t, 2, newClient, hybrid.Options{Namespace: ns})
	a, b := p[0], p[1]
	raw := newClient(t)

	// call runs a.GetOrCreateMany and checks the result against want.
	call := func(t *testing.T, keys []string, l *batchLoad, want map[string]string) {
		t.Helper()
		got, err := a.c.GetOrCreateMany(ctx, keys, l.load)
		if err != nil {
			t.Fatalf("GetOrCreateMany: %v", err)
		}
		if len(got) != len(want) {
			t.Errorf("GetOrCreateMany returned %d values, want %d", len(got), len(want))
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("GetOrCreateMany: [%s] = %q, want %q", k, got[k], w)
			}
		}
	}
	// waitWriteBack waits for the write back that a fill makes after its
	// callers have their values, and checks it was one WriteBatch of n keys.
	waitWriteBack := func(t *testing.T, before remoteCalls, n int64) {
		t.Helper()
		waitFor(t, 5*time.Second, "the batch write back", func() bool { return a.remote.calls().WriteBatch > before.WriteBatch }, nil)
		c := a.remote.calls()
		if c.WriteBatch-before.WriteBatch != 1 || c.BatchKeys-before.BatchKeys != n || c.WriteIfAbsent != before.WriteIfAbsent || c.WriteAlways != before.WriteAlways {
			t.Errorf("write back: %d WriteBatch of %d keys, %d WriteIfAbsent, %d WriteAlways; want 1 of %d, 0, 0",
				c.WriteBatch-before.WriteBatch, c.BatchKeys-before.BatchKeys, c.WriteIfAbsent-before.WriteIfAbsent, c.WriteAlways-before.WriteAlways, n)
		}
	}
	wantLoads := func(t *testing.T, l *batchLoad, want ...[]string) {
		t.Helper()
		got := l.snapshot()
		for _, w := range want {
			slices.Sort(w)
		}
		if !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("load calls: got %q, want %q", got, want)
		}
	}
	loaded := func(keys ...string) map[string]string {
		m := make(map[string]string, len(keys))
		for _, k := range keys {
			m[k] = "loaded:" + k
		}
		return m
	}

	cold := keysOf("c", 50)
	if cc, ok := raw.(*redis.ClusterClient); ok {
		masters := map[string]bool{}
		for _, k := range cold {
			m, err := cc.MasterForKey(ctx, ns+":"+k)
			if err != nil {
				t.Fatalf("MasterForKey: %v", err)
			}
			masters[m.Options().Addr] = true
		}
		t.Logf("the page's 50 keys live on %d masters", len(masters))
		if len(masters) < 2 {
			t.Fatalf("the page's keys all live on one master: the test does not cross slots")
		}
	}
	t.Run("cold", func(t *testing.T) {
		l := &batchLoad{}
		before := a.remote.calls()
		call(t, cold, l, loaded(cold...))
		wantLoads(t, l, slices.Clone(cold))
		c := a.remote.calls()
		if c.GetBatch-before.GetBatch != 1 || c.GetBatchKeys-before.GetBatchKeys != 50 || c.Get != before.Get {
			t.Errorf("reads: %d GetBatch of %d keys, %d Get; want 1 of 50, 0", c.GetBatch-before.GetBatch, c.GetBatchKeys-before.GetBatchKeys, c.Get-before.Get)
		}
		waitWriteBack(t, before, 50)
		for _, k := range cold {
			if v, ok := redisValue(t, raw, ns, k); !ok || v != "loaded:"+k {
				t.Errorf("Redis holds %q, %v for %s, want %q", v, ok, k, "loaded:"+k)
			}
		}
	})

	t.Run("warm", func(t *testing.T) {
		l := &batchLoad{}
		before := a.remote.calls()
		call(t, cold, l, loaded(cold...))
		wantLoads(t, l)
		if got := a.remote.calls().total() - before.total(); got != 0 {
			t.Errorf("Redis calls for a warm page: got %d, want 0", got)
		}
	})

	t.Run("half in Redis", func(t *testing.T) {
		keys := keysOf("h", 50)
		want := loaded(keys[25:]...)
		recv := a.c.Stats().Invalidations.Applied
		for _, k := range keys[:25] {
			setStr(t, b, k, "b:"+k)
			want[k] = "b:" + k
		}
		waitStat(t, a, "Invalidations.Applied", statReceived, recv+25)
		l := &batchLoad{}
		before := a.remote.calls()
		call(t, keys, l, want)
		wantLoads(t, l, slices.Clone(keys[25:]))
		c := a.remote.calls()
		if c.GetBatch-before.GetBatch != 1 || c.GetBatchKeys-before.GetBatchKeys != 50 || c.Get != before.Get {
			t.Errorf("reads: %d GetBatch of %d keys, %d Get; want 1 of 50, 0", c.GetBatch-before.GetBatch, c.GetBatchKeys-before.GetBatchKeys, c.Get-before.Get)
		}
		waitWriteBack(t, before, 25)
		for _, k := range keys {
			if v, ok := redisValue(t, raw, ns, k); !ok || v != want[k] {
				t.Errorf("Redis holds %q, %v for %s, want %q", v, ok, k, want[k])
			}
		}
	})

	t.Run("duplicates and an empty key", func(t *testing.T) {
		l := &batchLoad{}
		before := a.remote.calls()
		got, err := a.c.GetOrCreateMany(ctx, []string{"d0", "d1", "d0", "", "d2", "d1"}, l.load)
		if !errors.Is(err, hybrid.ErrEmptyKey) {
			t.Errorf("GetOrCreateMany with an empty key: got error %v, want one wrapping ErrEmptyKey", err)
		}
		want := loaded("d0", "d1", "d2")
		if len(got) != len(want) {
			t.Errorf("got %d values %v, want %v", len(got), got, want)
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("[%s] = %q, want %q", k, got[k], w)
			}
		}
		wantLoads(t, l, []string{"d0", "d1", "d2"})
		c := a.remote.calls()
		if c.GetBatch-before.GetBatch != 1 || c.GetBatchKeys-before.GetBatchKeys != 3 {
			t.Errorf("reads: %d GetBatch of %d keys, want 1 of 3", c.GetBatch-before.GetBatch, c.GetBatchKeys-before.GetBatchKeys)
		}
		waitWriteBack(t, before, 3)
	})

	t.Run("GetOrCreate joins the batch", func(t *testing.T) {
		keys := keysOf("j", 10)
		block, unblock := gate(t)
		l := &batchLoad{block: block, reached: make(chan struct{})}
		batch := make(chan error, 1)
		var page map[string]string
		go func() {
			var err error
			page, err = a.c.GetOrCreateMany(ctx, keys, l.load)
			batch <- err
		}()
		<-l.reached
		var singles atomic.Int64
		misses, gets := a.c.Stats().L1.Misses, a.remote.calls().Get
		single := goGet(a, "j03", func(context.Context, string) (string, error) {
			singles.Add(1)
			return "single", nil
		})
		waitFor(t, 5*time.Second, "the GetOrCreate to miss L1", func() bool { return a.c.Stats().L1.Misses > misses }, nil)
		select {
		case r := <-single:
			t.Fatalf("GetOrCreate(j03) returned %q, %v while the batch load was still running: it did not join", r.v, r.err)
		default:
		}
		unblock()
		if err := <-batch; err != nil {
			t.Fatalf("GetOrCreateMany: %v", err)
		}
		r := <-single
		if r.err != nil || r.v != "loaded:j03" {
			t.Errorf("GetOrCreate(j03): got %q, %v, want the batch's \"loaded:j03\"", r.v, r.err)
		}
		if n := singles.Load(); n != 0 {
			t.Errorf("GetOrCreate(j03)'s own load ran %d time(s), want 0", n)
		}
		if got := a.remote.calls().Get - gets; got != 0 {
			t.Errorf("GetOrCreate(j03) read Redis %d time(s), want 0", got)
		}
		wantLoads(t, l, slices.Clone(keys))
		if len(page) != len(keys) {
			t.Errorf("GetOrCreateMany returned %d values, want %d", len(page), len(keys))
		}
	})

	t.Run("the batch joins a GetOrCreate", func(t *testing.T) {
		reached := make(chan struct{})
		held, release := gate(t)
		single := goGet(a, "x", func(context.Context, string) (string, error) {
			close(reached)
			<-held
			return "single:x", nil
		})
		<-reached
		l := &batchLoad{}
		batch := make(chan map[string]string, 1)
		go func() {
			page, err := a.c.GetOrCreateMany(ctx, []string{"x", "y"}, l.load)
			if err != nil {
				t.Errorf("GetOrCreateMany: %v", err)
			}
			batch <- page
		}()
		waitFor(t, 5*time.Second, "the batch load", func() bool { return len(l.snapshot()) > 0 }, nil)
		release()
		page := <-batch
		if r := <-single; r.err != nil || r.v != "single:x" {
			t.Errorf("GetOrCreate(x): got %q, %v", r.v, r.err)
		}
		wantLoads(t, l, []string{"y"})
		if page["x"] != "single:x" || page["y"] != "loaded:y" || len(page) != 2 {
			t.Errorf("GetOrCreateMany(x, y): got %v, want x from the GetOrCreate it joined, y loaded", page)
		}
	})

	for _, in := range p {
		if st := in.c.Stats(); st.L2.Errors != 0 || st.L2.DecodeErrors != 0 {
			t.Errorf("%s: L2.Errors %d, L2.DecodeErrors %d; want 0, 0", in.name, st.L2.Errors, st.L2.DecodeErrors)
		}
	}
}
