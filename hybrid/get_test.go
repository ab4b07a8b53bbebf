package hybrid_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// TestGetOrCreateTiers follows one key through the three tiers: a full
// miss loads and stores in both tiers, the same instance then hits L1 and
// a second instance sharing the Remote hits L2.
func TestGetOrCreateTiers(t *testing.T) {
	eachCtx(t, func(t *testing.T, ctx context.Context) {
		s := newSharedTier(t)
		o := hybrid.Options{Namespace: testNS, Remote: s.remote}
		a := newTestCache[string](t, o)
		b := newTestCache[string](t, o)
		l := &counter{value: "v1"}

		// Full miss.
		if v, err := a.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Fatalf("first GetOrCreate: got %q, %v, want \"v1\", nil", v, err)
		}
		s.waitWrites(t, 1)
		if got, want := s.remote.Keys(), []string{"ns:k"}; !slices.Equal(got, want) {
			t.Errorf("Remote keys after the fill: got %q, want %q", got, want)
		}
		if v, ok := s.stored(t, "k"); !ok || v != "v1" {
			t.Errorf("Remote holds %q (ok %v), want \"v1\"", v, ok)
		}
		st := a.Stats()
		if st.L1.Misses != 1 || st.L2.Misses != 1 || st.Load.Calls != 1 || st.L1.Hits != 0 || st.L2.Hits != 0 || st.L1.Entries != 1 {
			t.Errorf("Stats after a full miss: got %+v, want L1.Misses 1, L2.Misses 1, Load.Calls 1, L1.Entries 1", st)
		}
		if c := s.remote.Calls(); c.Get != 1 || c.IfAbsent != 1 {
			t.Errorf("Remote calls after a full miss: got %+v, want 1 Get and 1 IfAbsent write", c)
		}

		// L1 hit.
		if v, err := a.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Fatalf("second GetOrCreate: got %q, %v, want \"v1\", nil", v, err)
		}
		if st := a.Stats(); st.L1.Hits != 1 || st.Load.Calls != 1 {
			t.Errorf("Stats after an L1 hit: got L1.Hits %d, Load.Calls %d, want 1, 1", st.L1.Hits, st.Load.Calls)
		}
		if got := s.remote.Calls().Get; got != 1 {
			t.Errorf("an L1 hit read the Remote: %d Gets, want 1", got)
		}

		// L2 hit, on another instance.
		if v, err := b.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Fatalf("GetOrCreate on the second instance: got %q, %v, want \"v1\", nil", v, err)
		}
		if v, err := b.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Fatalf("second GetOrCreate on the second instance: got %q, %v, want \"v1\", nil", v, err)
		}
		st = b.Stats()
		if st.L1.Misses != 1 || st.L2.Hits != 1 || st.L1.Hits != 1 || st.Load.Calls != 0 || st.L2.Misses != 0 {
			t.Errorf("Stats of the second instance: got %+v, want L1.Misses 1, L2.Hits 1, L1.Hits 1, no load", st)
		}
		if got := l.calls.Load(); got != 1 {
			t.Errorf("load ran %d times in all, want 1", got)
		}
		// b's hit read the clear record too, once: a Clear may have made the
		// value a miss (see TestClearRecordReadOncePerInstance).
		if c := s.remote.Calls(); c.Get != 3 || c.IfAbsent != 1 || c.Total() != 4 {
			t.Errorf("Remote calls: got %+v, want 3 Gets (a miss, a hit, the clear record) and 1 IfAbsent write", c)
		}
	})
}

func TestGetMissWithoutLoad(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	if v, ok := getString(t, c, "k"); ok {
		t.Fatalf("Get of a missing key: got %q, want a miss", v)
	}
	s.remote.Put("ns:k", envelopeOf(t, "there", time.Minute), time.Minute)
	if v, ok := getString(t, c, "k"); !ok || v != "there" {
		t.Errorf("Get of a key in the Remote: got %q, %v, want \"there\", true", v, ok)
	}
	if v, ok := getString(t, c, "k"); !ok || v != "there" {
		t.Errorf("second Get: got %q, %v, want \"there\", true", v, ok)
	}
	if got := s.remote.Calls().Get; got != 3 {
		t.Errorf("Remote Gets: got %d, want 3 (a miss, then one read whose value stays in L1, and the clear record once)", got)
	}
	if st := c.Stats(); st.L2.Misses != 1 || st.L2.Hits != 1 || st.L1.Hits != 1 {
		t.Errorf("Stats: got %+v, want L2.Misses 1, L2.Hits 1, L1.Hits 1", st)
	}
}

func TestGetOrCreateNilLoad(t *testing.T) {
	c := newTestCache[string](t, hybrid.Options{})
	if _, err := c.GetOrCreate(context.Background(), "k", nil); err == nil {
		t.Error("GetOrCreate with a nil load: got no error, want one")
	}
}

func TestGetOrCreateCancelledContext(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	base := s.remote.Calls().Total() // New opens the invalidation log
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.GetOrCreate(ctx, "k", neverLoad(t)); !errors.Is(err, context.Canceled) {
		t.Errorf("GetOrCreate: got %v, want %v", err, context.Canceled)
	}
	if _, _, err := c.Get(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get: got %v, want %v", err, context.Canceled)
	}
	if err := c.Set(ctx, "k", "v"); !errors.Is(err, context.Canceled) {
		t.Errorf("Set: got %v, want %v", err, context.Canceled)
	}
	if got := s.remote.Calls().Total() - base; got != 0 {
		t.Errorf("calls with a cancelled ctx reached the Remote %d times, want 0", got)
	}
}

func TestEmptyKey(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	base := s.remote.Calls().Total() // New opens the invalidation log
	ctx := context.Background()
	if _, err := c.GetOrCreate(ctx, "", neverLoad(t)); !errors.Is(err, hybrid.ErrEmptyKey) {
		t.Errorf("GetOrCreate: got %v, want %v", err, hybrid.ErrEmptyKey)
	}
	if _, _, err := c.Get(ctx, ""); !errors.Is(err, hybrid.ErrEmptyKey) {
		t.Errorf("Get: got %v, want %v", err, hybrid.ErrEmptyKey)
	}
	if err := c.Set(ctx, "", "v"); !errors.Is(err, hybrid.ErrEmptyKey) {
		t.Errorf("Set: got %v, want %v", err, hybrid.ErrEmptyKey)
	}
	if err := c.Delete(ctx, ""); !errors.Is(err, hybrid.ErrEmptyKey) {
		t.Errorf("Delete: got %v, want %v", err, hybrid.ErrEmptyKey)
	}
	if got := s.remote.Calls().Total() - base; got != 0 {
		t.Errorf("empty keys reached the Remote %d times, want 0", got)
	}
}

// TestKeysCheckedEverywhere: every entry point, single and batch, refuses
// the same keys (empty, reserved for the cache's records, over
// MaxKeyBytes); a batch serves the rest of its page. A page holding a tag
// record's key once overwrote the record, and GetMany returned it.
func TestKeysCheckedEverywhere(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	p := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns, Secret: []byte("s"), MaxKeyBytes: 16})
	a, b := p[0], p[1]
	bad := []struct {
		key  string
		want error
	}{
		{"", hybrid.ErrEmptyKey},
		{"\x00tag:shop", hybrid.ErrReservedKey},
		{"\x00", hybrid.ErrReservedKey},
		{strings.Repeat("k", 17), hybrid.ErrKeyTooLong},
	}
	if err := a.c.Set(ctx, "before", "v", hybrid.WithTags("shop")); err != nil {
		t.Fatal(err)
	}
	if err := a.c.DeleteByTag(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // written after the delete, by the clock tags compare
	if err := a.c.Set(ctx, "after", "v", hybrid.WithTags("shop")); err != nil {
		t.Fatal(err)
	}
	setStr(t, a, "good", "g") // in Redis before b's GetMany looks
	record, err := a.rdb.Get(ctx, ns+":\x00tag:shop").Bytes()
	if err != nil {
		t.Fatalf("the tag record: %v", err)
	}

	for _, k := range bad {
		load := func(context.Context, string) (string, error) {
			t.Errorf("load(%q) called for a bad key", k.key)
			return "x", nil
		}
		if _, err := a.c.GetOrCreate(ctx, k.key, load); !errors.Is(err, k.want) {
			t.Errorf("GetOrCreate(%q): got %v, want %v", k.key, err, k.want)
		}
		if _, _, err := a.c.Get(ctx, k.key); !errors.Is(err, k.want) {
			t.Errorf("Get(%q): got %v, want %v", k.key, err, k.want)
		}
		if err := a.c.Set(ctx, k.key, "x"); !errors.Is(err, k.want) {
			t.Errorf("Set(%q): got %v, want %v", k.key, err, k.want)
		}
		if err := a.c.Delete(ctx, k.key); !errors.Is(err, k.want) {
			t.Errorf("Delete(%q): got %v, want %v", k.key, err, k.want)
		}
		page := []string{"good", k.key, "new"}
		var asked []string
		got, err := a.c.GetOrCreateMany(ctx, page, func(_ context.Context, miss []string) (map[string]string, error) {
			asked = append(asked, miss...)
			m := map[string]string{}
			for _, key := range miss {
				m[key] = "loaded"
			}
			return m, nil
		})
		if !errors.Is(err, k.want) {
			t.Errorf("GetOrCreateMany(%q): got %v, want %v", page, err, k.want)
		}
		if slices.Contains(asked, k.key) {
			t.Errorf("GetOrCreateMany(%q): load asked for %q", page, k.key)
		}
		if got["good"] != "g" || got["new"] != "loaded" {
			t.Errorf("GetOrCreateMany(%q): got %q, want the rest of the page served", page, got)
		}
		if _, ok := got[k.key]; ok {
			t.Errorf("GetOrCreateMany(%q): got a value for %q", page, k.key)
		}
		got, err = b.c.GetMany(ctx, page)
		if !errors.Is(err, k.want) {
			t.Errorf("GetMany(%q): got %v, want %v", page, err, k.want)
		}
		if _, ok := got[k.key]; ok || got["good"] != "g" {
			t.Errorf("GetMany(%q): got %q, want good (and new, once written back)", page, got)
		}
	}
	if now, err := a.rdb.Get(ctx, ns+":\x00tag:shop").Bytes(); err != nil || !bytes.Equal(now, record) {
		t.Errorf("the tag record changed: %q, %v; want %q", now, err, record)
	}
	// A whole page of bad keys: each gets its error, load is not called.
	_, err = a.c.GetOrCreateMany(ctx, []string{"", "\x00x"}, func(context.Context, []string) (map[string]string, error) {
		t.Error("load called for a page of bad keys")
		return nil, nil
	})
	if !errors.Is(err, hybrid.ErrEmptyKey) || !errors.Is(err, hybrid.ErrReservedKey) {
		t.Errorf("GetOrCreateMany of bad keys: got %v, want both ErrEmptyKey and ErrReservedKey", err)
	}
	for _, in := range p {
		if v, ok := getStr(t, in, "after"); !ok || v != "v" {
			t.Errorf("%s: a value tagged after the delete: got %q, %v, want \"v\"", in.name, v, ok)
		}
	}
}

func TestL1HitAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		f    func()
	}{
		{"GetOrCreate", func() { _, _ = c.GetOrCreate(ctx, "k", loadTop) }},
		{"GetOrCreate WithTTL", func() { _, _ = c.GetOrCreate(ctx, "k", loadTop, hybrid.WithTTL(time.Minute)) }},
		{"GetOrCreate WithTTL WithLocalTTL", func() {
			_, _ = c.GetOrCreate(ctx, "k", loadTop, hybrid.WithTTL(time.Minute), hybrid.WithLocalTTL(time.Second))
		}},
		{"Get", func() { _, _, _ = c.Get(ctx, "k") }},
		{"Get AllowStale", func() { _, _, _ = c.Get(ctx, "k", hybrid.AllowStale()) }},
		{"GetEntry", func() { _, _, _ = c.GetEntry(ctx, "k") }},
	}
	for _, tt := range tests {
		if got := testing.AllocsPerRun(1000, tt.f); got != 0 {
			t.Errorf("%s on an L1 hit: %v allocations, want 0", tt.name, got)
		}
	}
	if st := c.Stats(); st.L1.Misses != 0 {
		t.Errorf("L1.Misses: got %d, want 0 (every call was a hit)", st.L1.Misses)
	}
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
		if got := s.remote.Calls().Get; got != 2 {
			t.Errorf("Remote Gets: got %d, want 2 (the value and the clear record, once each)", got)
		}
	})
}

// boundedRemote is a Remote whose reads have a known bound
// (RemoteInfo.ReadBound), so a fill's leader reads it on its own goroutine.
// After hangNext, the next Get blocks until release is closed (a hung
// server, until the store's read timeout), then fails with its ctx's error
// if that ended meanwhile, as a client that applies ctx deadlines does.
type boundedRemote struct {
	*hybridtest.Remote
	hangs   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (r *boundedRemote) Info() hybrid.RemoteInfo {
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
