package hybrid_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// TestReadYourWrites is the first promise: after Set returns nil, Get on the
// same instance sees the value, every time, while another instance reads
// the key concurrently.
func TestReadYourWrites(t *testing.T) {
	for _, secret := range []string{"", "s3cret"} {
		t.Run("secret="+strconv.Quote(secret), func(t *testing.T) {
			s := newSharedTier(t)
			o := s.options()
			if secret != "" {
				o.Secret = []byte(secret)
			}
			a := newTestCache[int](t, o)
			b := newTestCache[int](t, o)
			ctx := context.Background()

			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, _, _ = b.Get(ctx, "k")
				}
			})
			defer func() {
				close(stop)
				wg.Wait()
			}()

			misses := 0
			for i := range 2000 {
				if err := a.Set(ctx, "k", i); err != nil {
					t.Fatalf("Set #%d: %v", i, err)
				}
				v, ok, err := a.Get(ctx, "k")
				if err != nil || !ok || v != i {
					misses++
					if misses <= 5 {
						t.Errorf("Get right after Set(k, %d): got %d, %v, %v", i, v, ok, err)
					}
				}
			}
			if misses > 0 {
				t.Errorf("%d of 2000 reads missed their own write, want 0", misses)
			}
		})
	}
}

func TestSetThenGetOrCreateSkipsLoad(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	ctx := context.Background()
	if err := c.Set(ctx, "k", "set"); err != nil {
		t.Fatal(err)
	}
	v, err := c.GetOrCreate(ctx, "k", neverLoad(t))
	if err != nil || v != "set" {
		t.Errorf("GetOrCreate after Set: got %q, %v, want \"set\", nil", v, err)
	}
	if v, ok := s.stored(t, "k"); !ok || v != "set" {
		t.Errorf("Remote holds %q (ok %v), want \"set\"", v, ok)
	}
}

func TestBusPublishFails(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.Remote = nil // bus only: Set publishes on its own
	c := newTestCache[string](t, o)
	down := errors.New("bus down")
	s.bus.FailWith(down)
	if err := c.Set(context.Background(), "k", "v"); !errors.Is(err, down) {
		t.Errorf("Set: got %v, want an error wrapping %v", err, down)
	}
	if err := c.Clear(context.Background()); !errors.Is(err, down) {
		t.Errorf("Clear: got %v, want an error wrapping %v", err, down)
	}
	if st := c.Stats(); st.Invalidations.PublishErrors != 2 {
		t.Errorf("Invalidations.PublishErrors: got %d, want 2", st.Invalidations.PublishErrors)
	}
}

// TestIntegrationWritesFailRedisDown (promise 6, write path): with no Redis
// to reach, Set, Delete, Expire and Clear return errors, and a failed Set leaves nothing
// behind in L1; GetOrCreate still answers from load, Get without error.
func TestIntegrationWritesFailRedisDown(t *testing.T) {
	ctx := context.Background()
	ro := &redis.Options{Addr: deadAddr(t)}
	shortTimeouts(ro)
	rdb := redis.NewClient(ro)
	t.Cleanup(func() { rdb.Close() })
	remote := &countingRemote{s: l2.New(rdb, l2.Options{})}
	c := newTestCache[string](t, hybrid.Options{Namespace: redistest.Prefix(t), Remote: remote})
	var loads atomic.Int64
	load := func(context.Context, string) (string, error) {
		loads.Add(1)
		return "loaded", nil
	}
	const bound = 2 * time.Second
	timed := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		if d := time.Since(start); d > bound {
			t.Errorf("%s took %v, want at most %v", what, d, bound)
		}
	}
	timed("GetOrCreate", func() {
		if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "loaded" {
			t.Errorf("GetOrCreate: got %q, %v, want \"loaded\", nil", v, err)
		}
	})
	timed("Set", func() {
		if err := c.Set(ctx, "k", "written"); err == nil {
			t.Error("Set with Redis down: got nil, want an error")
		}
	})
	timed("Get", func() {
		v, ok, err := c.Get(ctx, "k")
		if err != nil || (ok && v == "written") {
			t.Errorf("Get after the failed Set: got %q, %v, %v; want no error and never the value of the failed Set", v, ok, err)
		}
	})
	timed("GetOrCreate", func() {
		if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "loaded" {
			t.Errorf("GetOrCreate after the failed Set: got %q, %v, want \"loaded\" (load stands in)", v, err)
		}
	})
	timed("Delete", func() {
		if err := c.Delete(ctx, "k"); err == nil {
			t.Error("Delete with Redis down: got nil, want an error")
		}
	})
	timed("GetOrCreate", func() {
		if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "loaded" {
			t.Errorf("GetOrCreate after the failed Delete: got %q, %v, want \"loaded\"", v, err)
		}
	})
	timed("Expire", func() {
		if err := c.Expire(ctx, "k"); err == nil {
			t.Error("Expire with Redis down: got nil, want an error")
		}
	})
	if v, ok, err := c.Get(ctx, "k"); ok || err != nil {
		t.Errorf("Get after the failed Expire: got %q, %v, %v; want a miss (L1 expired here anyway)", v, ok, err)
	}
	timed("Clear", func() {
		if err := c.Clear(ctx); err == nil {
			t.Error("Clear with Redis down: got nil, want an error")
		}
	})
	st := c.Stats()
	t.Logf("Redis unreachable: %d loads, L2.Errors %d", loads.Load(), st.L2.Errors)
	if loads.Load() != 3 {
		t.Errorf("loads: got %d, want 3 (the failed Set and Delete each drop the key from L1)", loads.Load())
	}
	if st.L2.Errors == 0 {
		t.Error("L2.Errors: got 0, want the failures counted")
	}
}

// storedEnvelope reads ns:key straight from Redis and returns its header;
// it fails t when the key is missing or does not decode.
func storedEnvelope(t testing.TB, rdb redis.UniversalClient, ns, key string) envelope.Header {
	t.Helper()
	b, err := rdb.Get(context.Background(), ns+":"+key).Bytes()
	if err != nil {
		t.Fatalf("GET %s:%s: %v", ns, key, err)
	}
	h, _, err := envelope.Decode(b)
	if err != nil {
		t.Fatalf("GET %s:%s: %v", ns, key, err)
	}
	return h
}

// TestIntegrationExpire: after Expire returns, no instance serves the old
// value as live: it is stale in Redis (kept for as long as before, for
// fail-safe), reads miss, and GetOrCreate reloads.
func TestIntegrationExpire(t *testing.T) {
	eachTopology(t, func(t *testing.T, newClient clientFactory, secret []byte) {
		ctx := context.Background()
		ns := redistest.Prefix(t)
		p := newInstances(t, 2, newClient, hybrid.Options{Namespace: ns, Secret: secret, FailSafeMaxAge: time.Hour})
		a, b := p[0], p[1]
		raw := newClient(t)
		setStr(t, a, "k", "v1")
		waitStat(t, b, "Invalidations.Applied", statReceived, 1)
		fill(t, b, "k", "v1")
		before := raw.PTTL(ctx, ns+":k").Val()

		if err := a.c.Expire(ctx, "k"); err != nil {
			t.Fatalf("Expire: %v", err)
		}
		waitStat(t, b, "Invalidations.Applied", statReceived, 2)
		if h := storedEnvelope(t, raw, ns, "k"); h.Expires.After(time.Now()) {
			t.Errorf("Redis: logical expiry %v after Expire, want now or earlier", h.Expires)
		}
		if v, ok := redisValue(t, raw, ns, "k"); !ok || v != "v1" {
			t.Errorf("Redis holds %q, %v after Expire, want the old value kept for fail-safe", v, ok)
		}
		if after := raw.PTTL(ctx, ns+":k").Val(); after > before || after < before-time.Minute {
			t.Errorf("Redis PTTL %v after Expire, %v before: want the physical lifetime kept", after, before)
		}
		if got := a.remote.calls().WriteKeepTTL; got != 1 {
			t.Errorf("A: WriteKeepTTL calls: got %d, want 1 (rewrite and announce in one script)", got)
		}
		for _, in := range p {
			if v, ok := getStr(t, in, "k"); ok {
				t.Errorf("%s: Get after Expire: got %q, want a miss", in.name, v)
			}
		}

		// B reloads; A, whose L1 also held v1, reads B's reload.
		l := &counter{value: "v2"}
		if v, err := b.c.GetOrCreate(ctx, "k", l.load); err != nil || v != "v2" {
			t.Fatalf("B: GetOrCreate after Expire: got %q, %v, want the reload \"v2\"", v, err)
		}
		waitFor(t, 5*time.Second, "B's reload in Redis", func() bool {
			v, ok := redisValue(t, raw, ns, "k")
			return ok && v == "v2"
		}, nil)
		if v, err := a.c.GetOrCreate(ctx, "k", l.load); err != nil || v != "v2" {
			t.Errorf("A: GetOrCreate after Expire: got %q, %v, want \"v2\" (B's reload)", v, err)
		}
		if got := l.calls.Load(); got != 1 {
			t.Errorf("loads: got %d, want 1", got)
		}
		if h := storedEnvelope(t, raw, ns, "k"); !h.Expires.After(time.Now()) {
			t.Errorf("Redis: the reload's expiry %v has passed", h.Expires)
		}
	})
}

// TestIntegrationExpireFailSafe: an expired value is kept for fail-safe,
// in both tiers: when the reload fails, both instances, and a new one
// with nothing in L1, serve it.
func TestIntegrationExpireFailSafe(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, FailSafeMaxAge: time.Hour}
	p := newInstances(t, 2, singleNode(nil), o)
	a, b := p[0], p[1]
	setStr(t, a, "k", "v1")
	waitStat(t, b, "Invalidations.Applied", statReceived, 1)
	fill(t, b, "k", "v1")
	if err := a.c.Expire(ctx, "k"); err != nil {
		t.Fatalf("Expire: %v", err)
	}
	waitStat(t, b, "Invalidations.Applied", statReceived, 2)
	down := errors.New("database down")
	p = append(p, newInstance(t, "C", singleNode(nil), o, invalidate.Options{}))
	for _, in := range p {
		l := &counter{err: down}
		if v, err := in.c.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Errorf("%s: GetOrCreate with a failing load after Expire: got %q, %v, want the stale \"v1\"", in.name, v, err)
		}
		if got := l.calls.Load(); got != 1 {
			t.Errorf("%s: loads: got %d, want 1 (the value expired)", in.name, got)
		}
		if got := in.c.Stats().Load.StaleServed; got != 1 {
			t.Errorf("%s: Load.StaleServed: got %d, want 1", in.name, got)
		}
	}
}

// TestIntegrationExpireWithoutFailSafe: without fail-safe, an expired value
// is never served again: a failing reload returns its error.
func TestIntegrationExpireWithoutFailSafe(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	p := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns})
	a, b := p[0], p[1]
	setStr(t, a, "k", "v1")
	waitStat(t, b, "Invalidations.Applied", statReceived, 1)
	fill(t, b, "k", "v1")
	if err := b.c.Expire(ctx, "k"); err != nil {
		t.Fatalf("Expire: %v", err)
	}
	waitStat(t, a, "Invalidations.Applied", statReceived, 1)
	down := errors.New("database down")
	for _, in := range p {
		if v, err := in.c.GetOrCreate(ctx, "k", (&counter{err: down}).load); !errors.Is(err, down) {
			t.Errorf("%s: GetOrCreate with a failing load after Expire: got %q, %v, want an error wrapping %v", in.name, v, err, down)
		}
	}
	for _, in := range p {
		if v, err := in.c.GetOrCreate(ctx, "k", (&counter{value: "v2"}).load); err != nil || v != "v2" {
			t.Errorf("%s: GetOrCreate after Expire: got %q, %v, want the reload \"v2\"", in.name, v, err)
		}
	}
}

// TestExpireKeepsL1ForFailSafe: L1 keeps an expired entry as fail-safe's
// fallback, on the instance that expired it and on its peers, so that it
// is served even when the shared tier cannot be read either.
func TestExpireKeepsL1ForFailSafe(t *testing.T) {
	s := newSharedTier(t)
	p := newPeers(t, s, 2, failSafeOptions(s))
	a, b := p[0], p[1]
	ctx := context.Background()
	set(t, a, "k", "v1")
	s.flush(t)
	fillFromRemote(t, b, "k", "v1")
	if err := a.Expire(ctx, "k"); err != nil {
		t.Fatalf("Expire: %v", err)
	}
	s.flush(t)
	s.remote.FailWith(errors.New("redis down"))
	for i, c := range p {
		l := &counter{err: errors.New("database down")}
		if v, err := c.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Errorf("instance %d: GetOrCreate with nothing to read or load: got %q, %v, want the stale \"v1\" from L1", i, v, err)
		}
		if got := l.calls.Load(); got != 1 {
			t.Errorf("instance %d: loads: got %d, want 1", i, got)
		}
	}
}

// TestExpireKeepsALaterWrite: a Set that lands between Expire's read and
// its rewrite is kept, live: the Expire counts as made before it.
func TestExpireKeepsALaterWrite(t *testing.T) {
	s := newSharedTier(t)
	p := newPeers(t, s, 2, hybrid.Options{FailSafeMaxAge: time.Hour})
	a, b := p[0], p[1]
	ctx := context.Background()
	set(t, a, "k", "v1")
	s.flush(t)
	s.remote.SetAfterGet(func(key string) {
		if key == testNS+":k" {
			s.remote.SetAfterGet(nil)
			set(t, b, "k", "v2")
		}
	})
	if err := a.Expire(ctx, "k"); err != nil {
		t.Fatalf("Expire: %v", err)
	}
	s.flush(t)
	if got := s.remote.Calls().IfEqual; got != 1 {
		t.Errorf("IfEqual writes: got %d, want 1 (Expire's rewrite in place)", got)
	}
	b2, _ := s.remote.Peek(testNS + ":k")
	if h, _, err := envelope.Decode(b2); err != nil || !h.Expires.After(time.Now()) {
		t.Errorf("the Remote holds an envelope expiring %v (%v), want B's live write", h.Expires, err)
	}
	for _, c := range p {
		fillFromRemote(t, c, "k", "v2")
	}
}

// fakeClock is a settable time source for hybridtest.Remote.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestIntegrationClear: Clear drops L1 on every instance, and what Redis
// held before it is a miss for every instance, a new one included, until
// written again; what is written after it is a hit.
func TestIntegrationClear(t *testing.T) {
	eachTopology(t, func(t *testing.T, newClient clientFactory, secret []byte) {
		ctx := context.Background()
		ns := redistest.Prefix(t)
		o := hybrid.Options{Namespace: ns, Secret: secret}
		p := newInstances(t, 2, newClient, o)
		a, b := p[0], p[1]
		raw := newClient(t)
		for _, k := range []string{"k1", "k2"} {
			setStr(t, a, k, "old-"+k)
		}
		waitStat(t, b, "Invalidations.Applied", statReceived, 2)
		fill(t, b, "k1", "old-k1")

		if err := a.c.Clear(ctx); err != nil {
			t.Fatalf("Clear: %v", err)
		}
		waitStat(t, b, "Invalidations.Applied", statReceived, 3)
		if pttl, err := raw.PTTL(ctx, ns+":\x00clear").Result(); err != nil || pttl != -1 {
			t.Errorf("the clear record's PTTL: %v, %v; want -1 (kept without expiry)", pttl, err)
		}
		if v, ok := redisValue(t, raw, ns, "k1"); !ok || v != "old-k1" {
			t.Errorf("Redis holds %q, %v for k1; want the old value left in place (no DEL)", v, ok)
		}
		c := newInstance(t, "C", newClient, o, invalidate.Options{})
		p = append(p, c)
		for _, in := range p {
			if n := in.c.Stats().L1.Entries; n != 0 {
				t.Errorf("%s: L1.Entries after Clear: got %d, want 0", in.name, n)
			}
			for _, k := range []string{"k1", "k2"} {
				if v, ok := getStr(t, in, k); ok {
					t.Errorf("%s: Get(%s) after Clear: got %q, want a miss", in.name, k, v)
				}
			}
		}

		// Written after the Clear: a hit everywhere. (Clear returns once
		// its millisecond has passed, so no sleep is needed.)
		setStr(t, a, "k3", "new")
		waitStat(t, b, "Invalidations.Applied", statReceived, 4)
		waitStat(t, c, "Invalidations.Applied", statReceived, 1)
		l := &counter{value: "reloaded"}
		if v, err := b.c.GetOrCreate(ctx, "k1", l.load); err != nil || v != "reloaded" {
			t.Fatalf("B: GetOrCreate(k1) after Clear: got %q, %v, want a reload", v, err)
		}
		waitFor(t, 5*time.Second, "B's reload of k1 in Redis", func() bool {
			v, ok := redisValue(t, raw, ns, "k1")
			return ok && v == "reloaded"
		}, nil)
		for _, in := range p {
			if v, ok := getStr(t, in, "k3"); !ok || v != "new" {
				t.Errorf("%s: Get(k3), written after Clear: got %q, %v, want \"new\"", in.name, v, ok)
			}
			if v, ok := getStr(t, in, "k1"); !ok || v != "reloaded" {
				t.Errorf("%s: Get(k1), reloaded after Clear: got %q, %v, want \"reloaded\"", in.name, v, ok)
			}
		}
		if got := l.calls.Load(); got != 1 {
			t.Errorf("loads: got %d, want 1", got)
		}
	})
}

// TestIntegrationClearL1: ClearL1 drops L1 on every instance and
// leaves Redis as it was: the values are read again, and no clear record
// is written.
func TestIntegrationClearL1(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	p := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns})
	a, b := p[0], p[1]
	raw := srv.Client(t)
	setStr(t, a, "k", "v")
	waitStat(t, b, "Invalidations.Applied", statReceived, 1)
	fill(t, b, "k", "v")
	record, err := raw.Get(ctx, ns+":\x00clear").Result()
	if err != nil {
		t.Fatalf("GET of the clear record, which A's Set made sure of: %v", err)
	}
	if err := a.c.ClearL1(ctx); err != nil {
		t.Fatalf("ClearL1: %v", err)
	}
	waitStat(t, b, "Invalidations.Applied", statReceived, 2)
	for _, in := range p {
		if n := in.c.Stats().L1.Entries; n != 0 {
			t.Errorf("%s: L1.Entries after ClearL1: got %d, want 0", in.name, n)
		}
		gets := in.remote.calls().Get
		if v, ok := getStr(t, in, "k"); !ok || v != "v" {
			t.Errorf("%s: Get after ClearL1: got %q, %v, want \"v\" from Redis", in.name, v, ok)
		}
		if got := in.remote.calls().Get - gets; got != 1 {
			t.Errorf("%s: Redis GETs after ClearL1: got %d, want 1", in.name, got)
		}
	}
	if got, err := raw.Get(ctx, ns+":\x00clear").Result(); err != nil || got != record {
		t.Errorf("clear record after ClearL1: %q, %v; want %q as before (ClearL1 writes none)", got, err, record)
	}
}
