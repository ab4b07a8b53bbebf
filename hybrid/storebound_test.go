package hybrid_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// TestStoreBoundDeadAddress: go-redis's default client (3 retries; 5 dial
// attempts 100 ms apart) takes about 1.7 s to give up on a dead address.
// With l2's ReadTimeout and WriteTimeout at 300 ms, GetOrCreate answers
// from the loader, and Set and Delete return an error, each within twice
// that bound.
func TestStoreBoundDeadAddress(t *testing.T) {
	const bound = 300 * time.Millisecond
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: deadAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	so := l2.Options{ReadTimeout: bound, WriteTimeout: bound}
	a := newSplitInstance(t, "A", rdb, nil, so, hybrid.Options{Namespace: redistest.Prefix(t)}, invalidate.Options{})
	timed := func(what string, f func() error) error {
		t.Helper()
		start := time.Now()
		err := f()
		d := time.Since(start)
		t.Logf("%s: %v after %v", what, err, d.Round(time.Millisecond))
		if d > 2*bound {
			t.Errorf("%s took %v, want at most %v (store bound %v)", what, d, 2*bound, bound)
		}
		return err
	}

	err := timed("GetOrCreate", func() error {
		v, err := a.c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) { return "loaded", nil })
		if err == nil && v != "loaded" {
			t.Errorf("GetOrCreate: got %q, want \"loaded\"", v)
		}
		return err
	})
	if err != nil {
		t.Errorf("GetOrCreate: got %v, want the loaded value (the loader stands in for Redis)", err)
	}
	for _, w := range []struct {
		name string
		do   func() error
	}{
		{"Set", func() error { return a.c.Set(ctx, "k", "v") }},
		{"Delete", func() error { return a.c.Delete(ctx, "k") }},
	} {
		if err := timed(w.name, w.do); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: got %v, want an error wrapping context.DeadlineExceeded", w.name, err)
		}
	}
	if st := a.c.Stats(); st.L2Errors == 0 {
		t.Error("L2Errors: got 0, want the failed read counted")
	}
}

// TestLeaderReadOnStoppedRedis: on a client with ContextTimeoutEnabled, the
// Store bounds its reads, so the first caller to miss reads Redis on its own
// goroutine even with a ctx that can end. With the server stopped
// (SIGSTOP), a follower whose ctx ends returns at once, and the leader,
// whose ctx ends during the hung read, returns within the store's read
// bound. Once the server resumes, the caller that stayed gets the value.
func TestLeaderReadOnStoppedRedis(t *testing.T) {
	const bound = 300 * time.Millisecond
	own, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Close)
	if !own.Owned() {
		srv.NeedOwned(t) // miniredis or HYBRID_REDIS_ADDR: no process to stop
	}
	rdb := redis.NewClient(&redis.Options{Addr: own.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	so := l2.Options{ReadTimeout: bound, WriteTimeout: bound}
	ns := redistest.Prefix(t)
	a := newSplitInstance(t, "A", rdb, nil, so, hybrid.Options{Namespace: ns}, invalidate.Options{})
	if got := a.remote.ReadBound(); got != bound {
		t.Fatalf("ReadBound: got %v, want %v", got, bound)
	}
	setStr(t, a, "k", "stored")
	a.c.DropLocal("k")

	if err := own.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := own.Signal(syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	defer resume()

	leaderCtx, cancelLeader := context.WithCancel(context.Background())
	defer cancelLeader()
	leader := goGetOrCreate(leaderCtx, a.c, "k", neverLoad(t))
	waitFor(t, 5*time.Second, "the leader's read to start", func() bool { return a.c.Stats().L1Misses >= 1 }, nil)
	followerCtx, cancelFollower := context.WithCancel(context.Background())
	follower := goGetOrCreate(followerCtx, a.c, "k", neverLoad(t))
	// The fill reads again once the leader's read is cut; if Redis is still
	// stopped then, it loads the same value.
	stays := goGetOrCreate(context.Background(), a.c, "k", func(context.Context, string) (string, error) { return "stored", nil })
	waitFor(t, 5*time.Second, "the follower and the caller that stays to miss", func() bool { return a.c.Stats().L1Misses >= 3 }, nil)

	start := time.Now()
	cancelFollower()
	if r := <-follower; !errors.Is(r.err, context.Canceled) {
		t.Errorf("follower: got %q, %v, want context.Canceled", r.v, r.err)
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("follower returned %v after its ctx ended, want at once", d)
	}
	start = time.Now()
	cancelLeader()
	r := <-leader
	d := time.Since(start)
	t.Logf("leader: %v after %v (store read bound %v)", r.err, d.Round(time.Millisecond), bound)
	if !errors.Is(r.err, context.Canceled) {
		t.Errorf("leader: got %q, %v, want context.Canceled", r.v, r.err)
	}
	if d > bound+100*time.Millisecond {
		t.Errorf("leader returned %v after its ctx ended during a hung read, want within the read bound %v", d, bound)
	}
	resume()
	select {
	case r := <-stays:
		if r.err != nil || r.v != "stored" {
			t.Errorf("the caller that stayed: got %q, %v, want \"stored\"", r.v, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the caller that stayed never got an answer")
	}
}
