package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// boundedRemote is a Remote whose reads have a known bound
// (tier.Info.ReadBound), so a fill's leader reads it on its own goroutine.
// After hangNext, the next Get blocks until release is closed (a hung
// server, until the store's read timeout), then fails with its ctx's error
// if that ended meanwhile, as a client that applies ctx deadlines does.
type boundedRemote struct {
	*hybridtest.Remote
	hangs   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (r *boundedRemote) Info() tier.Info {
	info := r.Remote.Info()
	info.ReadBound = 100 * time.Millisecond
	return info
}

func (r *boundedRemote) Get(ctx context.Context, keys []string) ([][]byte, error) {
	if r.hangs.CompareAndSwap(true, false) {
		r.entered <- struct{}{}
		<-r.release
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return r.Remote.Get(ctx, keys)
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
		time.Sleep(r.Info().ReadBound) // the store gives up on the hung read
		close(r.release)
		if res := <-leader; !errors.Is(res.err, context.Canceled) {
			t.Errorf("leader: got %q, %v, want context.Canceled", res.v, res.err)
		}
		if res := <-stays; res.err != nil || res.v != "stored" {
			t.Errorf("the caller that stayed: got %q, %v, want \"stored\"", res.v, res.err)
		}
		if st := c.Stats(); st.L2.Errors != 0 || st.Load.Calls != 0 || st.L2.Hits != 1 {
			t.Errorf("Stats: L2.Errors %d, Load.Calls %d, L2.Hits %d; want 0, 0, 1 (the cut read is no failure; the fill read again)", st.L2.Errors, st.Load.Calls, st.L2.Hits)
		}
	})
}

// TestLeaderReadOnStoppedRedis: the Store bounds its reads, on a client with
// ContextTimeoutEnabled and on go-redis's default options alike, so the
// first caller to miss reads Redis on its own goroutine even with a ctx that
// can end. With the server stopped
// (SIGSTOP), a follower whose ctx ends returns at once, and the leader,
// whose ctx ends during the hung read, returns within the store's read
// bound. Once the server resumes, the caller that stayed gets the value.
func TestLeaderReadOnStoppedRedis(t *testing.T) {
	for _, ctxTimeouts := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeouts), func(t *testing.T) {
			testLeaderReadOnStoppedRedis(t, ctxTimeouts)
		})
	}
}

func testLeaderReadOnStoppedRedis(t *testing.T, ctxTimeouts bool) {
	const bound = 300 * time.Millisecond
	own, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Close)
	if !own.Owned() {
		srv.NeedOwned(t) // miniredis or HYBRID_REDIS_ADDR: no process to stop
	}
	// Without ContextTimeoutEnabled, the client's own ReadTimeout bounds
	// the socket, and so the Store's reads.
	ro := &redis.Options{Addr: own.Addr, ContextTimeoutEnabled: ctxTimeouts, MaxRetries: -1}
	if !ctxTimeouts {
		ro.ReadTimeout = bound
	}
	rdb := redis.NewClient(ro)
	t.Cleanup(func() { rdb.Close() })
	so := l2.Options{ReadTimeout: bound, WriteTimeout: bound}
	ns := redistest.Prefix(t)
	a := newSplitInstance(t, "A", rdb, nil, so, hybrid.Options{Namespace: ns}, invalidate.Options{})
	if got := a.remote.Info().ReadBound; got != bound {
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
	waitFor(t, 5*time.Second, "the leader's read to start", func() bool { return a.c.Stats().L1.Misses >= 1 }, nil)
	followerCtx, cancelFollower := context.WithCancel(context.Background())
	follower := goGetOrCreate(followerCtx, a.c, "k", neverLoad(t))
	// The fill reads again once the leader's read is cut; if Redis is still
	// stopped then, it loads the same value.
	stays := goGetOrCreate(context.Background(), a.c, "k", func(context.Context, string) (string, error) { return "stored", nil })
	waitFor(t, 5*time.Second, "the follower and the caller that stays to miss", func() bool { return a.c.Stats().L1.Misses >= 3 }, nil)

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
