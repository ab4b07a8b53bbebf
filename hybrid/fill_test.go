package hybrid_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"go.uber.org/goleak"
)

// result is what one GetOrCreate returned.
type result struct {
	v   string
	err error
}

// blockingLoad is a load function that counts its calls, tells started
// about each, waits for release and returns value. It records whether its
// ctx was done when it returned.
type blockingLoad struct {
	calls   atomic.Int64
	started chan struct{} // receives one value per call; may be nil
	release chan struct{}
	value   string
	ctxErr  atomic.Value // error from the load's ctx as it returned
}

func newBlockingLoad(value string) *blockingLoad {
	return &blockingLoad{release: make(chan struct{}), value: value}
}

func (l *blockingLoad) load(ctx context.Context, _ string) (string, error) {
	l.calls.Add(1)
	if l.started != nil {
		l.started <- struct{}{}
	}
	<-l.release
	l.ctxErr.Store(errBox{ctx.Err()})
	return l.value, nil
}

type errBox struct{ err error }

// loadCtxErr returns the error of the load's ctx as it returned.
func (l *blockingLoad) loadCtxErr() error {
	b, _ := l.ctxErr.Load().(errBox)
	return b.err
}

// goGetOrCreate starts GetOrCreate on a goroutine and returns where its
// result will arrive.
func goGetOrCreate(ctx context.Context, c *hybrid.Cache[string], key string, load func(context.Context, string) (string, error)) <-chan result {
	ch := make(chan result, 1)
	go func() {
		v, err := c.GetOrCreate(ctx, key, load)
		ch <- result{v, err}
	}()
	return ch
}

// TestStampede: 100 callers miss on one key at once; load runs once and
// every caller gets its value.
func TestStampede(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		l := newBlockingLoad("v")
		const n = 100
		results := make([]<-chan result, n)
		for i := range n {
			results[i] = goGetOrCreate(t.Context(), c, "k", l.load)
		}
		synctest.Wait() // every caller has joined and waits; load waits for release
		if got := l.calls.Load(); got != 1 {
			t.Fatalf("load started %d times with %d callers waiting, want 1", got, n)
		}
		close(l.release)
		for i, ch := range results {
			if r := <-ch; r.err != nil || r.v != "v" {
				t.Errorf("caller %d: got %q, %v, want \"v\", nil", i, r.v, r.err)
			}
		}
		synctest.Wait() // the fill has written the Remote
		if got := l.calls.Load(); got != 1 {
			t.Errorf("load ran %d times, want 1", got)
		}
		if c := s.remote.Calls(); c.Get != 1 || c.SetIfAbsent != 1 {
			t.Errorf("Remote calls: got %+v, want one Get and one SetIfAbsent", c)
		}
		if st := c.Stats(); st.Loads != 1 || st.L1Misses != n || st.L2Misses != 1 {
			t.Errorf("Stats: got Loads %d, L1Misses %d, L2Misses %d, want 1, %d, 1", st.Loads, st.L1Misses, st.L2Misses, n)
		}
	})
}

// TestStampedeOnRemoteRead: the callers pile up while the fill is still
// reading the shared tier; it is read once and load never runs.
func TestStampedeOnRemoteRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		s.remote.Put("ns:k", envelopeOf(t, "stored", time.Hour), time.Hour)
		release := make(chan struct{})
		s.remote.SetBeforeGet(func(string) { <-release })
		const n = 50
		results := make([]<-chan result, n)
		for i := range n {
			results[i] = goGetOrCreate(t.Context(), c, "k", neverLoad(t))
		}
		synctest.Wait()
		close(release)
		for i, ch := range results {
			if r := <-ch; r.err != nil || r.v != "stored" {
				t.Errorf("caller %d: got %q, %v, want \"stored\", nil", i, r.v, r.err)
			}
		}
		if got := s.remote.Calls().Get; got != 1 {
			t.Errorf("Remote Gets: got %d, want 1", got)
		}
	})
}

// TestLeaderCancel: the caller that started the fill leaves; it gets
// context.Canceled at once, the load goes on with a live ctx and the others
// get its value.
func TestLeaderCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		l := newBlockingLoad("v")
		leaderCtx, cancel := context.WithCancel(t.Context())
		leader := goGetOrCreate(leaderCtx, c, "k", l.load)
		synctest.Wait() // the leader's load is running
		var others []<-chan result
		for range 10 {
			others = append(others, goGetOrCreate(t.Context(), c, "k", l.load))
		}
		synctest.Wait()

		cancel()
		synctest.Wait()
		select {
		case r := <-leader:
			if !errors.Is(r.err, context.Canceled) {
				t.Errorf("leader: got %q, %v, want %v", r.v, r.err, context.Canceled)
			}
		default:
			t.Fatal("the cancelled leader is still waiting for the load")
		}

		close(l.release)
		for i, ch := range others {
			if r := <-ch; r.err != nil || r.v != "v" {
				t.Errorf("waiter %d: got %q, %v, want \"v\", nil", i, r.v, r.err)
			}
		}
		if err := l.loadCtxErr(); err != nil {
			t.Errorf("the load's ctx ended with the leader's: %v, want it alive", err)
		}
		if got := l.calls.Load(); got != 1 {
			t.Errorf("load ran %d times, want 1", got)
		}
		synctest.Wait()
		if v, ok := s.stored(t, "k"); !ok || v != "v" {
			t.Errorf("Remote holds %q (ok %v), want \"v\"", v, ok)
		}
	})
}

// TestWaiterDeadline: a waiter with a short deadline leaves with
// DeadlineExceeded when it passes; the load goes on for the others.
func TestWaiterDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		l := newBlockingLoad("v")
		leader := goGetOrCreate(t.Context(), c, "k", l.load)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		short := goGetOrCreate(ctx, c, "k", l.load)

		r := <-short // time moves on only when everything else waits
		if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Errorf("waiter with a 1s deadline: got %q, %v, want %v", r.v, r.err, context.DeadlineExceeded)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("waiter returned after %v, want 1s", d)
		}
		synctest.Wait()
		select {
		case r := <-leader:
			t.Fatalf("leader returned %q, %v while the load was still running", r.v, r.err)
		default:
		}
		close(l.release)
		if r := <-leader; r.err != nil || r.v != "v" {
			t.Errorf("leader: got %q, %v, want \"v\", nil", r.v, r.err)
		}
		if err := l.loadCtxErr(); err != nil {
			t.Errorf("the load's ctx ended with the waiter's deadline: %v", err)
		}
		if got := l.calls.Load(); got != 1 {
			t.Errorf("load ran %d times, want 1", got)
		}
	})
}

// TestLoadTimeout: Options.LoadTimeout ends a fill whose load takes too
// long, for every waiter.
func TestLoadTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := s.options()
		o.LoadTimeout = time.Second
		c := newTestCache[string](t, o)
		load := func(ctx context.Context, _ string) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		}
		r1 := goGetOrCreate(t.Context(), c, "k", load)
		r2 := goGetOrCreate(t.Context(), c, "k", load)
		for i, ch := range []<-chan result{r1, r2} {
			if r := <-ch; !errors.Is(r.err, context.DeadlineExceeded) {
				t.Errorf("caller %d: got %q, %v, want an error wrapping %v", i, r.v, r.err, context.DeadlineExceeded)
			}
		}
	})
}

// TestLoadPanic: a load that panics gives every waiter an error wrapping
// ErrPanic; the cache goes on and the next call loads again.
func TestLoadPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		release := make(chan struct{})
		var calls atomic.Int64
		load := func(context.Context, string) (string, error) {
			calls.Add(1)
			<-release
			panic("boom")
		}
		var results []<-chan result
		for range 5 {
			results = append(results, goGetOrCreate(t.Context(), c, "k", load))
		}
		synctest.Wait()
		close(release)
		for i, ch := range results {
			if r := <-ch; !errors.Is(r.err, hybrid.ErrPanic) {
				t.Errorf("caller %d: got %q, %v, want an error wrapping %v", i, r.v, r.err, hybrid.ErrPanic)
			}
		}
		if got := calls.Load(); got != 1 {
			t.Errorf("the panicking load ran %d times, want 1", got)
		}
		l := &counter{value: "after"}
		if v, err := c.GetOrCreate(t.Context(), "k", l.load); err != nil || v != "after" {
			t.Errorf("GetOrCreate after the panic: got %q, %v, want \"after\", nil", v, err)
		}
		if got := l.calls.Load(); got != 1 {
			t.Errorf("load after the panic ran %d times, want 1", got)
		}
		if st := c.Stats(); st.LoadErrors != 1 || st.Loads != 2 {
			t.Errorf("Stats: got Loads %d, LoadErrors %d, want 2, 1", st.Loads, st.LoadErrors)
		}
	})
}

// TestLoadGoexit: a load that ends its goroutine without returning (for
// instance a test helper calling t.FailNow in a loader) must not leave the
// key's fill open forever: waiters get an error and the next call loads
// again.
func TestLoadGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) {
			runtime.Goexit()
			return "", nil
		})
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("GetOrCreate whose load called runtime.Goexit: got %v, want an error at once (not the caller's deadline)", err)
		}
		v, err := c.GetOrCreate(ctx, "k", loadTop)
		if err != nil || v != "v" {
			t.Errorf("next GetOrCreate: got %q, %v, want \"v\", nil (a new load)", v, err)
		}
	})
}

// TestCloseWaitsForFill: Close cancels the ctx of a fill in progress and
// returns only once the load has returned.
func TestCloseWaitsForFill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		sawDone, release := make(chan struct{}), make(chan struct{})
		load := func(ctx context.Context, _ string) (string, error) {
			<-ctx.Done()
			close(sawDone)
			<-release
			return "", ctx.Err()
		}
		caller := goGetOrCreate(context.Background(), c, "k", load)
		synctest.Wait()
		closed := make(chan struct{})
		go func() {
			c.Close()
			close(closed)
		}()
		<-sawDone // Close cancelled the load's ctx
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while the load was still running")
		default:
		}
		close(release)
		<-closed
		if r := <-caller; !errors.Is(r.err, context.Canceled) {
			t.Errorf("caller of the cancelled fill: got %q, %v, want an error wrapping %v", r.v, r.err, context.Canceled)
		}
		if _, err := c.GetOrCreate(t.Context(), "k", loadTop); !errors.Is(err, hybrid.ErrClosed) {
			t.Errorf("GetOrCreate after Close: got %v, want %v", err, hybrid.ErrClosed)
		}
	})
}

// TestCloseLeavesNoGoroutines: after Close of every cache and of the bus,
// nothing of theirs runs.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := newSharedTier(t)
	var caches []*hybrid.Cache[string]
	for range 3 {
		c, err := hybrid.New[string](s.options())
		if err != nil {
			t.Fatal(err)
		}
		caches = append(caches, c)
	}
	ctx := context.Background()
	for i, c := range caches {
		if _, err := c.GetOrCreate(ctx, "k", loadTop); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, "k", "v"+string(rune('0'+i))); err != nil {
			t.Fatal(err)
		}
	}
	// A fill still blocked when Close comes.
	started := make(chan struct{})
	go func() {
		_, _ = caches[0].GetOrCreate(ctx, "slow", func(ctx context.Context, _ string) (string, error) {
			close(started)
			<-ctx.Done()
			return "", ctx.Err()
		})
	}()
	<-started
	for _, c := range caches {
		c.Close()
	}
	s.bus.Close()
}

// boundedRemote is a Remote whose reads have a known bound (a
// hybrid.BoundedReader), so a fill's leader reads it on its own goroutine.
// After hangNext, the next Get blocks until release is closed (a hung
// server, until the store's read timeout), then fails with its ctx's error
// if that ended meanwhile, as a client that applies ctx deadlines does.
type boundedRemote struct {
	*hybridtest.Remote
	hangs   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (r *boundedRemote) ReadBound() time.Duration { return 100 * time.Millisecond }

func (r *boundedRemote) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if r.hangs.CompareAndSwap(true, false) {
		r.entered <- struct{}{}
		<-r.release
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
	}
	return r.Remote.Get(ctx, key)
}

// TestLeaderReadBounded: with a Remote that bounds its reads, the leader
// of a fill makes the read itself, even with a ctx that can end. A
// follower whose ctx ends returns at once; the leader, whose ctx ends
// during a hung read, returns when the read gives up (the bound), not
// before; its read cut short is not a shared-tier error, and the fill
// reads again for the callers still waiting, without a load.
func TestLeaderReadBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		r := &boundedRemote{Remote: s.remote, entered: make(chan struct{}, 1), release: make(chan struct{})}
		o := s.options()
		o.Remote = r
		c := newTestCache[string](t, o)
		s.remote.Put("ns:k", envelopeOf(t, "stored", time.Hour), time.Hour)

		r.hangs.Store(true)
		leaderCtx, cancelLeader := context.WithCancel(t.Context())
		leader := goGetOrCreate(leaderCtx, c, "k", neverLoad(t))
		<-r.entered
		followerCtx, cancelFollower := context.WithCancel(t.Context())
		follower := goGetOrCreate(followerCtx, c, "k", neverLoad(t))
		stays := goGetOrCreate(t.Context(), c, "k", neverLoad(t))
		synctest.Wait()

		cancelFollower()
		synctest.Wait()
		select {
		case res := <-follower:
			if !errors.Is(res.err, context.Canceled) {
				t.Errorf("follower: got %q, %v, want context.Canceled", res.v, res.err)
			}
		default:
			t.Fatal("follower: still waiting after its ctx ended, want it back at once")
		}

		cancelLeader()
		synctest.Wait()
		select {
		case res := <-leader:
			t.Fatalf("leader: returned %q, %v during its own hung read, want it to wait for the read's bound", res.v, res.err)
		default:
		}
		time.Sleep(r.ReadBound()) // the store gives up on the hung read
		close(r.release)
		if res := <-leader; !errors.Is(res.err, context.Canceled) {
			t.Errorf("leader: got %q, %v, want context.Canceled", res.v, res.err)
		}
		if res := <-stays; res.err != nil || res.v != "stored" {
			t.Errorf("the caller that stayed: got %q, %v, want \"stored\"", res.v, res.err)
		}
		if st := c.Stats(); st.L2Errors != 0 || st.Loads != 0 || st.L2Hits != 1 {
			t.Errorf("Stats: L2Errors %d, Loads %d, L2Hits %d; want 0, 0, 1 (the cut read is no failure; the fill read again)", st.L2Errors, st.Loads, st.L2Hits)
		}
	})
}
