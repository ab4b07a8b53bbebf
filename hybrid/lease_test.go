package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"github.com/hybridcache/hybridcache/internal/message"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// Load leases (Options.LoadLease): one load per key across instances, on
// real Redis, single node and cluster.

// fleetLoad is a "database" shared by the instances of a test: it counts
// its calls (and the keys a batch load asked for) and takes delay.
type fleetLoad struct {
	delay time.Duration
	calls atomic.Int64
	keys  atomic.Int64
	fail  error // returned instead of a value when set
	// gate, if set, is called before each batch load, such as to wait
	// until every instance has asked for its leases.
	gate func()
}

func (l *fleetLoad) load(ctx context.Context, key string) (string, error) {
	l.calls.Add(1)
	l.keys.Add(1)
	select {
	case <-time.After(l.delay):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if l.fail != nil {
		return "", l.fail
	}
	return "db:" + key, nil
}

func (l *fleetLoad) loadMany(ctx context.Context, keys []string) (map[string]string, error) {
	l.calls.Add(1)
	l.keys.Add(int64(len(keys)))
	if l.gate != nil {
		l.gate()
	}
	select {
	case <-time.After(l.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		if !strings.HasPrefix(k, "gone") { // a row the database does not have
			out[k] = "db:" + k
		}
	}
	return out, nil
}

// leaseKeys returns the lease keys of namespace ns that Redis holds, with
// their remaining lifetimes, over every node of a cluster.
func leaseKeys(t testing.TB, rdb redis.UniversalClient, ns string) map[string]time.Duration {
	t.Helper()
	ctx := context.Background()
	out := make(map[string]time.Duration)
	var mu sync.Mutex
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, ns+":\x00lease:*", 1000).Iterator()
		for iter.Next(ctx) {
			d, err := c.PTTL(ctx, iter.Val()).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			out[iter.Val()] = d
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, scan)
	} else {
		err = scan(ctx, rdb.(*redis.Client))
	}
	if err != nil {
		t.Fatalf("scan lease keys: %v", err)
	}
	return out
}

// noLeaseLeft fails t if Redis holds a lease key of ns without a lifetime,
// or, when released, any lease key at all.
func noLeaseLeft(t testing.TB, rdb redis.UniversalClient, ns string, released bool) {
	t.Helper()
	for k, d := range leaseKeys(t, rdb, ns) {
		if d < 0 {
			t.Errorf("lease key %q has no lifetime (PTTL %v)", k, d)
		} else if released {
			t.Errorf("lease key %q left behind (PTTL %v)", k, d)
		}
	}
}

// getOnAll calls GetOrCreate(key, load) on every instance at once, each
// with a 5 s bound, and returns their results, by instance.
func getOnAll(ins []*instance, key string, load func(context.Context, string) (string, error)) []result {
	out := make([]result, len(ins))
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			v, err := in.c.GetOrCreate(ctx, key, load)
			out[i] = result{v, err}
		}()
	}
	wg.Wait()
	return out
}

// wantAll fails t for each instance whose result is not want.
func wantAll(t *testing.T, ins []*instance, res []result, want string) {
	t.Helper()
	for i, r := range res {
		if r.err != nil || r.v != want {
			t.Errorf("%s: got %q, %v, want %q", ins[i].name, r.v, r.err, want)
		}
	}
}

// holding starts a GetOrCreate of key on in whose load, once started,
// holds the lease until release is called (it then returns v) or its ctx
// ends (Close). It returns once the load has started.
func holding(t testing.TB, in *instance, key, v string) (res <-chan result, release func()) {
	t.Helper()
	return waitHolding(t, in, key, v, nil)
}

func leaseOptions(ns string, secret []byte) hybrid.Options {
	return hybrid.Options{Namespace: ns, Secret: secret, LoadLease: 2 * time.Second}
}

func TestLeaseOneLoadAcrossFleet(t *testing.T) {
	eachTopology(t, func(t *testing.T, newClient clientFactory, secret []byte) {
		ns := redistest.Prefix(t)
		ins := newInstances(t, 5, newClient, leaseOptions(ns, secret))
		db := &fleetLoad{delay: 50 * time.Millisecond}
		const callers = 100
		start := make(chan struct{})
		var wg sync.WaitGroup
		var bad atomic.Int64
		var firstErr atomic.Value
		for _, in := range ins {
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					v, err := in.c.GetOrCreate(ctx, "cold", db.load)
					if err != nil || v != "db:cold" {
						bad.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("%s: %q, %v", in.name, v, err))
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		if n := bad.Load(); n > 0 {
			t.Fatalf("%d callers did not get the value; first: %v", n, firstErr.Load())
		}
		if n := db.calls.Load(); n != 1 {
			t.Fatalf("%d loads across 5 instances, want 1", n)
		}
		var taken, answered uint64
		for _, in := range ins {
			s := in.c.Stats()
			taken += s.Leases.Taken
			answered += s.Leases.Answered
			if s.Load.Calls == 0 && len(secret) > 0 {
				// It waited for the holder's value, which came inline: its
				// only read of the value is the miss before the lease.
				if rc := in.remote.calls(); rc.Get+rc.GetMany > 1 {
					got := rc.Get + rc.GetMany
					t.Errorf("%s: %d Redis reads of the value, want 1 (the miss) when it comes inline", in.name, got)
				}
			}
		}
		if taken != 1 {
			t.Errorf("%d leases taken, want 1", taken)
		}
		if answered == 0 {
			t.Errorf("no instance was answered by the lease holder; stats: %+v", ins[1].c.Stats())
		}
		waitFor(t, 2*time.Second, "the lease released", func() bool { return len(leaseKeys(t, ins[0].rdb, ns)) == 0 }, nil)
		noLeaseLeft(t, ins[0].rdb, ns, true)
	})
}

func TestLeaseManyPageAcrossFleet(t *testing.T) {
	eachTopology(t, func(t *testing.T, newClient clientFactory, secret []byte) {
		ns := redistest.Prefix(t)
		ins := newInstances(t, 5, newClient, leaseOptions(ns, secret))
		db := &fleetLoad{delay: 20 * time.Millisecond}
		page := make([]string, 50)
		for i := range page {
			page[i] = fmt.Sprintf("row:%d", i)
		}
		page[49] = "gone" // not found: shared as such, not loaded again
		// A holder loads once every instance has asked for every key's
		// lease (taken or waited for): an instance that came after a
		// release would find "gone" free and nothing stored, and load it
		// again, rightly. With the embedded miniredis, whose scripts are
		// slow under -race, the instances' asks spread over 100 ms.
		db.gate = func() {
			asked := func() bool {
				var n uint64
				for _, in := range ins {
					s := in.c.Stats()
					n += s.Leases.Taken + s.Leases.Waited
				}
				return n >= uint64(len(ins)*len(page))
			}
			for deadline := time.Now().Add(5 * time.Second); !asked() && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, len(ins))
		for _, in := range ins {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				got, err := in.c.GetOrCreateMany(ctx, page, db.loadMany)
				if err == nil && len(got) != len(page)-1 {
					err = fmt.Errorf("%d values for %d keys, one of them not found", len(got), len(page))
				}
				for _, k := range page[:49] {
					if err == nil && got[k] != "db:"+k {
						err = fmt.Errorf("%s = %q", k, got[k])
					}
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", in.name, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if n := db.keys.Load(); n != int64(len(page)) {
			t.Fatalf("%d keys loaded across 5 instances in %d calls, want %d", n, db.calls.Load(), len(page))
		}
		waitFor(t, 2*time.Second, "the leases released", func() bool { return len(leaseKeys(t, ins[0].rdb, ns)) == 0 }, nil)
	})
}

// A holder cut off from Redis while it loads cannot keep its lease alive:
// another instance takes it over when it ends and answers. The holder's
// late write then finds a value and stores nothing, and its release leaves
// alone a lease that is no longer its own.
func TestLeaseHungHolderTakenOver(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, Secret: []byte("s"), LoadLease: 300 * time.Millisecond}
	p := startProxy(t, srv.Addr)
	storeA := via(p, shortTimeouts)(t)
	direct := singleNode(nil)
	a := newSplitInstance(t, "A", storeA, direct(t), l2.Options{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}, o, invalidate.Options{})
	b := newInstance(t, "B", direct, o, invalidate.Options{})

	resA, releaseA := holding(t, a, "k", "from A")
	setFault(t, p.BlackHole()) // A hangs, as far as Redis can tell

	began := time.Now()
	var bLoads atomic.Int64
	v, err := b.c.GetOrCreate(context.Background(), "k", func(context.Context, string) (string, error) {
		bLoads.Add(1)
		return "from B", nil
	})
	took := time.Since(began)
	if err != nil || v != "from B" {
		t.Fatalf("B: got %q, %v, want B's own load after taking the lease over", v, err)
	}
	if s := b.c.Stats(); s.Leases.TakenOver != 1 || s.Leases.Waited != 1 {
		t.Fatalf("B: %d leases taken over, %d waited, want 1 and 1", s.Leases.TakenOver, s.Leases.Waited)
	}
	if took > 3*time.Second {
		t.Errorf("B took %v to take over a 300 ms lease", took)
	}
	rdb := direct(t)
	if got, _ := redisValue(t, rdb, ns, "k"); got != "from B" {
		t.Fatalf("Redis holds %q, want B's value", got)
	}
	// Someone else holds the lease when A comes back: A's release must
	// leave it.
	lk := ns + ":\x00lease:k"
	if err := rdb.Set(context.Background(), lk, "someone-else", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	setFault(t, p.Pass())
	releaseA()
	if r := <-resA; r.err != nil || r.v != "from A" {
		t.Fatalf("A: got %q, %v, want its own load", r.v, r.err)
	}
	waitFor(t, 5*time.Second, "A's write and release", func() bool { return a.remote.calls().FillAndRelease > 0 }, nil)
	if got, _ := redisValue(t, rdb, ns, "k"); got != "from B" {
		t.Fatalf("Redis holds %q after A's late write, want B's value kept", got)
	}
	if got, err := rdb.Get(context.Background(), lk).Result(); err != nil || got != "someone-else" {
		t.Fatalf("the lease after A's release: %q, %v; want another holder's lease kept", got, err)
	}
	if v, ok := getStr(t, a, "k"); !ok || v != "from B" {
		t.Errorf("A serves %q, %v after its write lost; want B's value", v, ok)
	}
	rdb.Del(context.Background(), lk)
}

// A holder whose instance closes mid-load releases its lease as it ends,
// so that a waiter takes it over at once rather than when it expires.
func TestLeaseHolderClosed(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, LoadLease: 5 * time.Second}
	ins := newInstances(t, 2, singleNode(nil), o)
	a, b := ins[0], ins[1]
	resA, _ := holding(t, a, "k", "from A") // until Close
	resB := goGet(b, "k", func(context.Context, string) (string, error) { return "from B", nil })
	waitStat(t, b, "Leases.Waited", func(s hybrid.Stats) uint64 { return s.Leases.Waited }, 1)
	closed := time.Now()
	if err := a.c.Close(); err != nil {
		t.Fatal(err)
	}
	r := <-resB
	if r.err != nil || r.v != "from B" {
		t.Fatalf("B: got %q, %v", r.v, r.err)
	}
	if took := time.Since(closed); took > 2*time.Second {
		t.Errorf("B took %v after A closed to take over a 5 s lease", took)
	}
	if s := b.c.Stats(); s.Leases.TakenOver != 1 {
		t.Errorf("B: %d leases taken over, want 1", s.Leases.TakenOver)
	}
	if r := <-resA; !errors.Is(r.err, hybrid.ErrClosed) && !errors.Is(r.err, context.Canceled) {
		t.Errorf("A: got %q, %v, want ErrClosed or a cancelled load", r.v, r.err)
	}
}

// A load slower than its lease keeps the lease alive, so it is not
// duplicated.
func TestLeaseKeepAlive(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, Secret: []byte("s"), LoadLease: 60 * time.Millisecond}
	ins := newInstances(t, 3, singleNode(nil), o)
	db := &fleetLoad{delay: 400 * time.Millisecond}
	wantAll(t, ins, getOnAll(ins, "slow", db.load), "db:slow")
	if n := db.calls.Load(); n != 1 {
		t.Fatalf("%d loads of a 400 ms load under a 60 ms lease, want 1", n)
	}
	noLeaseLeft(t, ins[0].rdb, ns, true)
}

// Errors are shared: the waiters' callers get the holder's load error, and
// a not-found remembered by NegativeTTL, without loading again.
func TestLeaseSharesFailures(t *testing.T) {
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			srv.NeedReal(t)
			ns := redistest.Prefix(t)
			o := leaseOptions(ns, m.secret)
			o.NegativeTTL = time.Minute
			ins := newInstances(t, 3, singleNode(nil), o)
			for _, c := range []struct {
				key  string
				fail error
				want error
			}{
				{"broken", errors.New("db down"), hybrid.ErrLeaseHolderFailed},
				{"missing", hybrid.ErrNotFound, hybrid.ErrNotFound},
			} {
				db := &fleetLoad{delay: 100 * time.Millisecond, fail: c.fail}
				res := getOnAll(ins, c.key, db.load)
				if n := db.calls.Load(); n != 1 {
					t.Fatalf("%s: %d loads, want 1", c.key, n)
				}
				for i, r := range res {
					err := r.err
					if ins[i].c.Stats().Load.Calls > 0 {
						continue // the holder: its own error
					}
					if !errors.Is(err, c.want) {
						t.Errorf("%s: %s got %v, want %v", c.key, ins[i].name, err, c.want)
					}
					if c.fail != hybrid.ErrNotFound && len(m.secret) > 0 && (err == nil || !strings.Contains(err.Error(), "db down")) {
						t.Errorf("%s: %s got %v, want the holder's error text", c.key, ins[i].name, err)
					}
				}
			}
		})
	}
}

// With Redis unreachable, a lease cannot be asked for: each instance loads
// by itself within its bounds, and nothing hangs.
func TestLeaseRedisDown(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := leaseOptions(ns, []byte("s"))
	p := startProxy(t, srv.Addr)
	direct := singleNode(nil)
	so := l2.Options{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}
	var ins []*instance
	for i := range 3 {
		ins = append(ins, newSplitInstance(t, string(rune('A'+i)), via(p, shortTimeouts)(t), direct(t), so, o, invalidate.Options{}))
	}
	setFault(t, p.BlackHole())
	db := &fleetLoad{delay: 10 * time.Millisecond}
	began := time.Now()
	wantAll(t, ins, getOnAll(ins, "k", db.load), "db:k")
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("took %v with Redis unreachable", took)
	}
	if n := db.calls.Load(); n != 3 {
		t.Errorf("%d loads, want each of 3 instances to load by itself", n)
	}
	setFault(t, p.Pass())
}

// The lease is asked for only when both tiers miss: hits cost no lease
// call, and WithLoadLease(0) turns it off for one call.
func TestLeaseOnlyOnColdFills(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	in := newInstances(t, 1, singleNode(nil), leaseOptions(ns, nil))[0]
	ctx := context.Background()
	if _, err := in.c.GetOrCreate(ctx, "a", loadTop); err != nil {
		t.Fatal(err)
	}
	// Take, then write and release in one call once the callers have
	// the value.
	waitFor(t, 5*time.Second, "the lease taken and released", func() bool { return in.remote.calls().FillAndRelease == 1 }, nil)
	if n := in.remote.leaseCalls.Load(); n != 1 {
		t.Fatalf("%d lease calls besides the write for one cold fill, want 1 (the take)", n)
	}
	in.c.ClearLocal(context.Background())
	for range 3 {
		if _, err := in.c.GetOrCreate(ctx, "a", loadTop); err != nil { // L2 hit, then L1 hits
			t.Fatal(err)
		}
	}
	if _, err := in.c.GetOrCreate(ctx, "b", loadTop, hybrid.WithLoadLease(0)); err != nil {
		t.Fatal(err)
	}
	// The fill's write-back comes before any release would.
	waitFor(t, 5*time.Second, "b written back", func() bool { return in.remote.calls().SetIfAbsent == 1 }, nil)
	if n, w := in.remote.leaseCalls.Load(), in.remote.calls().FillAndRelease; n != 1 || w != 1 {
		t.Errorf("%d lease calls and %d writes with a release after hits and a fill without a lease, want still 1 and 1", n, w)
	}
}

func TestLeaseOptionsChecked(t *testing.T) {
	if _, err := hybrid.New[string](hybrid.Options{Namespace: "n", Remote: &hybridtest.Remote{}, LoadLease: time.Second}); err == nil {
		t.Error("New accepted LoadLease without a Bus")
	}
	if _, err := hybrid.New[string](hybrid.Options{LoadLease: time.Second}); err == nil {
		t.Error("New accepted LoadLease without a Remote")
	}
	if _, err := hybrid.New[string](hybrid.Options{LoadLease: -time.Second}); err == nil {
		t.Error("New accepted a negative LoadLease")
	}
	// Near the largest Duration, the release's timeout (the lease plus a
	// second) and the wait's deadline would overflow.
	for _, f := range []struct {
		name string
		o    hybrid.Options
	}{
		{"LoadLease", hybrid.Options{LoadLease: math.MaxInt64 - 1}},
		{"LoadLease", hybrid.Options{LoadLease: 25 * time.Hour}},
		{"LeaseWait", hybrid.Options{LoadLease: time.Second, LeaseWait: math.MaxInt64}},
	} {
		f.o.Namespace, f.o.Remote, f.o.Bus, f.o.Logger = "n", &hybridtest.Remote{}, new(hybridtest.Bus), quiet
		c, err := hybrid.New[string](f.o)
		if err == nil {
			c.Close()
			t.Errorf("New accepted a %s out of range", f.name)
		} else if !strings.Contains(err.Error(), "Options."+f.name) {
			t.Errorf("New with a %s out of range: %v, want an error naming the field", f.name, err)
		}
	}
	c := newTestCache[string](t, hybrid.Options{})
	if _, err := c.GetOrCreate(context.Background(), "k", loadTop, hybrid.WithLoadLease(time.Second)); err == nil {
		t.Error("a lease was accepted by a cache without a Remote")
	}
	if _, err := c.GetOrCreate(context.Background(), "k", loadTop, hybrid.WithLoadLease(time.Microsecond)); err == nil {
		t.Error("a 1 µs lease was accepted")
	}
	bus := new(hybridtest.Bus)
	leasing := newTestCache[string](t, hybrid.Options{Namespace: "n", Remote: &hybridtest.Remote{Bus: bus}, Bus: bus})
	if _, err := leasing.GetOrCreate(context.Background(), "k", loadTop, hybrid.WithLoadLease(math.MaxInt64)); err == nil {
		t.Error("a lease of the largest Duration was accepted")
	}
}

// Fail-safe applies to a failure shared by the lease: whichever instance
// holds the lease, both answer with their stale value after one load.
func TestLeaseFailSafe(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := leaseOptions(ns, []byte("s"))
	o.TTL, o.FailSafeMaxAge = 100*time.Millisecond, time.Minute
	ins := newInstances(t, 2, singleNode(nil), o)
	setStr(t, ins[0], "k", "old")
	fill(t, ins[1], "k", "old")
	time.Sleep(150 * time.Millisecond) // past TTL: stale in both tiers
	db := &fleetLoad{delay: 50 * time.Millisecond, fail: errors.New("db down")}
	wantAll(t, ins, getOnAll(ins, "k", db.load), "old") // the stale value
	if n := db.calls.Load(); n != 1 {
		t.Errorf("%d loads, want 1", n)
	}
	if s0, s1 := ins[0].c.Stats(), ins[1].c.Stats(); s0.Load.StaleServed+s1.Load.StaleServed != 2 {
		t.Errorf("stale served %d + %d times, want once on each instance", s0.Load.StaleServed, s1.Load.StaleServed)
	}
}

// A waiter whose bus misses the holder's message learns of the value when
// its bus is back (the restore makes it read what it waits for), not when
// the lease would have ended.
func TestLeaseMessageLost(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, Secret: []byte("s"), LoadLease: 20 * time.Second, LeaseWait: time.Minute}
	direct := singleNode(nil)
	a := newInstance(t, "A", direct, o, invalidate.Options{})
	p := startProxy(t, srv.Addr)
	b := newSplitInstance(t, "B", direct(t), via(p, shortTimeouts)(t), l2.Options{}, o,
		invalidate.Options{ReconnectMin: 50 * time.Millisecond, ReconnectMax: 100 * time.Millisecond, HealthInterval: 100 * time.Millisecond})

	resA, releaseA := holding(t, a, "k", "from A")
	var bLoads atomic.Int64
	resB := goGet(b, "k", func(context.Context, string) (string, error) {
		bLoads.Add(1)
		return "from B", nil
	})
	waitStat(t, b, "Leases.Waited", func(s hybrid.Stats) uint64 { return s.Leases.Waited }, 1)
	setFault(t, p.BlackHole())
	p.Cut() // B's bus is down while A announces
	releaseA()
	if r := <-resA; r.err != nil || r.v != "from A" {
		t.Fatalf("A: %q, %v", r.v, r.err)
	}
	waitFor(t, 5*time.Second, "A's write and release", func() bool { return a.remote.calls().FillAndRelease > 0 }, nil)
	began := time.Now()
	setFault(t, p.Pass())
	r := <-resB
	if r.err != nil || r.v != "from A" {
		t.Fatalf("B: %q, %v, want A's value", r.v, r.err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("B answered %v after its bus could reconnect, with 20 s left on the lease", took)
	}
	if n := bLoads.Load(); n != 0 {
		t.Errorf("B loaded %d times, want 0", n)
	}
	// The message was lost: B read the value after the restore.
	if s, rc := b.c.Stats(), b.remote.calls(); s.Bus.Losses == 0 || rc.Get+rc.GetMany != 2 {
		t.Errorf("B: %d bus losses, %d reads of the value; want a loss and 2 reads (the miss, the one after the restore)", s.Bus.Losses, rc.Get+rc.GetMany)
	}
}

// A holder that is alive but slow keeps its lease; a waiter gives up after
// LeaseWait and loads by itself, and the holder's later write, finding the
// waiter's value, stores nothing.
func TestLeaseWaitBounded(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, Secret: []byte("s"), LoadLease: 100 * time.Millisecond, LeaseWait: 300 * time.Millisecond}
	ins := newInstances(t, 2, singleNode(nil), o)
	a, b := ins[0], ins[1]
	resA, releaseA := holding(t, a, "k", "from A")
	began := time.Now()
	v, err := b.c.GetOrCreate(context.Background(), "k", func(context.Context, string) (string, error) { return "from B", nil })
	if err != nil || v != "from B" {
		t.Fatalf("B: %q, %v, want its own load after LeaseWait", v, err)
	}
	if took := time.Since(began); took < 300*time.Millisecond || took > 3*time.Second {
		t.Errorf("B loaded after %v, want about LeaseWait (300 ms)", took)
	}
	if s := b.c.Stats(); s.Leases.TimedOut != 1 || s.Leases.TakenOver != 0 {
		t.Errorf("B: %d timed out, %d taken over; want 1 and 0 (A kept its lease alive)", s.Leases.TimedOut, s.Leases.TakenOver)
	}
	waitFor(t, 5*time.Second, "B's write-back", func() bool { return b.remote.calls().SetIfAbsent > 0 }, nil)
	releaseA()
	if r := <-resA; r.err != nil || r.v != "from A" {
		t.Fatalf("A: %q, %v", r.v, r.err)
	}
	waitFor(t, 5*time.Second, "A's write and release", func() bool { return a.remote.calls().FillAndRelease > 0 }, nil)
	if got, _ := redisValue(t, a.rdb, ns, "k"); got != "from B" {
		t.Errorf("Redis holds %q, want B's value, written first", got)
	}
	noLeaseLeft(t, a.rdb, ns, true)
}

// A value the holder cannot store (over MaxValueBytes) is not waited for
// in turn: the holder says so, and the waiters load it by themselves at
// once instead of taking the lease one after another.
func TestLeaseNotStored(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := leaseOptions(ns, nil)
	o.MaxValueBytes = 64
	ins := newInstances(t, 3, singleNode(nil), o)
	big := strings.Repeat("x", 200)
	var loads atomic.Int64
	load := func(ctx context.Context, key string) (string, error) {
		loads.Add(1)
		time.Sleep(50 * time.Millisecond)
		return big, nil
	}
	wantAll(t, ins, getOnAll(ins, "big", load), big)
	var taken, waited uint64
	for _, in := range ins {
		s := in.c.Stats()
		taken += s.Leases.Taken
		waited += s.Leases.Waited
	}
	if n := loads.Load(); n != 3 || taken != 1 || waited != 2 {
		t.Errorf("%d loads, %d leases taken, %d waited; want 3 (nothing can be stored), 1 and 2 (no lease taken in turn)", n, taken, waited)
	}
	noLeaseLeft(t, ins[0].rdb, ns, true)
}

// A holder whose load calls runtime.Goexit releases its lease as a failed
// load does: the waiters hear of the failure at once, and the next fill of
// the key, on any instance, takes the lease at once instead of waiting
// LeaseWait for a lease kept alive by no load.
func TestLeaseHolderGoexit(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			srv.NeedReal(t)
			ns := redistest.Prefix(t)
			o := hybrid.Options{Namespace: ns, Secret: []byte("s"), LoadLease: time.Second, LeaseWait: 3 * time.Second}
			ins := newInstances(t, 2, singleNode(nil), o)
			a, b := ins[0], ins[1]
			g, release := gate(t)
			started := make(chan struct{})
			resA := make(chan error, 1)
			go func() {
				var err error
				if batch {
					_, err = a.c.GetOrCreateMany(context.Background(), []string{"k"}, func(context.Context, []string) (map[string]string, error) {
						close(started)
						<-g
						runtime.Goexit()
						return nil, nil
					})
				} else {
					_, err = a.c.GetOrCreate(context.Background(), "k", func(context.Context, string) (string, error) {
						close(started)
						<-g
						runtime.Goexit()
						return "", nil
					})
				}
				resA <- err
			}()
			<-started
			var bLoads atomic.Int64
			resB := goGet(b, "k", func(context.Context, string) (string, error) {
				bLoads.Add(1)
				return "from B", nil
			})
			waitStat(t, b, "Leases.Waited", func(s hybrid.Stats) uint64 { return s.Leases.Waited }, 1)
			release()
			if err := <-resA; !errors.Is(err, hybrid.ErrPanic) {
				t.Fatalf("A: got %v, want ErrPanic", err)
			}
			r := <-resB
			if !errors.Is(r.err, hybrid.ErrLeaseHolderFailed) || bLoads.Load() != 0 {
				t.Errorf("B: got %q, %v after %d loads, want ErrLeaseHolderFailed without a load", r.v, r.err, bLoads.Load())
			}
			// The lease is free: a new fill on either instance takes it.
			for _, in := range ins {
				if v, err := in.c.GetOrCreate(context.Background(), "k", func(context.Context, string) (string, error) { return "again", nil }); err != nil || v != "again" {
					t.Errorf("%s: got %q, %v, want its own load", in.name, v, err)
				}
				in.c.ClearLocal(context.Background())
				if err := in.c.Delete(context.Background(), "k"); err != nil {
					t.Fatal(err)
				}
			}
			for _, in := range ins {
				if s := in.c.Stats(); s.Leases.TimedOut != 0 {
					t.Errorf("%s: %d leases timed out, want 0 (the lease released at Goexit)", in.name, s.Leases.TimedOut)
				}
			}
			waitFor(t, 2*time.Second, "the leases released", func() bool { return len(leaseKeys(t, a.rdb, ns)) == 0 }, nil)
		})
	}
}

// A panicking holder's waiters get its panic, bounded and without the
// stack, which stays in the holder's own error.
func TestLeasePanicTextBounded(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	ins := newInstances(t, 2, singleNode(nil), leaseOptions(ns, []byte("s")))
	a, b := ins[0], ins[1]
	g, release := gate(t)
	started := make(chan struct{})
	resA := goGet(a, "k", func(context.Context, string) (string, error) {
		close(started)
		<-g
		panic(strings.Repeat("boom ", 2000))
	})
	<-started
	resB := goGet(b, "k", func(context.Context, string) (string, error) { return "from B", nil })
	waitStat(t, b, "Leases.Waited", func(s hybrid.Stats) uint64 { return s.Leases.Waited }, 1)
	release()
	if r := <-resA; !errors.Is(r.err, hybrid.ErrPanic) || !strings.Contains(r.err.Error(), "goroutine ") {
		t.Fatalf("A: got %v, want ErrPanic with the stack", r.err)
	}
	r := <-resB
	if !errors.Is(r.err, hybrid.ErrLeaseHolderFailed) || !strings.Contains(r.err.Error(), "boom") {
		t.Fatalf("B: got %v, want ErrLeaseHolderFailed with the panic's text", r.err)
	}
	if text := r.err.Error(); len(text) > 400 || strings.Contains(text, "goroutine ") {
		t.Errorf("B's error holds %d bytes (stack: %v), want the text bounded and no stack", len(text), strings.Contains(text, "goroutine "))
	}
}

// A second fill of a key on the instance whose first fill holds the lease
// (a Delete made later callers start anew) hears of the release from its
// own instance, at once, instead of waiting LeaseWait: own messages are
// not handled when they come back over the bus.
func TestLeaseHeldHere(t *testing.T) {
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			srv.NeedReal(t)
			ns := redistest.Prefix(t)
			o := leaseOptions(ns, m.secret)
			o.LoadLease = 10 * time.Second // kept alive: without news, the second fill waits LeaseWait
			a := newInstances(t, 1, singleNode(nil), o)[0]
			res1, release := holding(t, a, "k", "first")
			if err := a.c.Delete(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			res2 := goGet(a, "k", func(context.Context, string) (string, error) { return "second", nil })
			waitStat(t, a, "Leases.Waited", func(s hybrid.Stats) uint64 { return s.Leases.Waited }, 1)
			released := time.Now()
			release()
			if r := <-res1; r.err != nil || r.v != "first" {
				t.Fatalf("first fill: got %q, %v", r.v, r.err)
			}
			r := <-res2
			if r.err != nil || r.v != "second" {
				t.Fatalf("second fill: got %q, %v, want its own load (the first one's value came before the Delete)", r.v, r.err)
			}
			if took := time.Since(released); took > 2*time.Second {
				t.Errorf("second fill answered %v after the first released its lease", took)
			}
			if s := a.c.Stats(); s.Leases.TimedOut != 0 || s.Leases.Taken != 2 {
				t.Errorf("%d leases timed out, %d taken; want 0 and 2 (the second fill takes the lease once released)", s.Leases.TimedOut, s.Leases.Taken)
			}
		})
	}
}

// record subscribes to channel and returns what is published on it from
// now on, in order.
func record(t testing.TB, rdb redis.UniversalClient, channel string) <-chan []byte {
	t.Helper()
	ps := rdb.Subscribe(context.Background(), channel)
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := make(chan []byte, 100)
	go func() {
		for m := range ps.Channel() {
			select {
			case out <- []byte(m.Payload):
			default:
			}
		}
	}()
	t.Cleanup(func() { ps.Close() })
	return out
}

// recorded returns the first message of op from rec.
func recorded(t testing.TB, rec <-chan []byte, op message.Op) []byte {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case b := <-rec:
			if message.OpOf(b) == op {
				return b
			}
		case <-timeout:
			t.Fatalf("no %v message recorded", op)
		}
	}
}

// waitHolding is holding with a load that returns v, err once released.
func waitHolding(t testing.TB, in *instance, key, v string, err error) (res <-chan result, release func()) {
	t.Helper()
	g, release := gate(t)
	started := make(chan struct{})
	res = goGet(in, key, func(ctx context.Context, _ string) (string, error) {
		close(started)
		select {
		case <-g:
			return v, err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	<-started
	return res, release
}

// waiterAfter publishes the messages msgs returns while B waits for A's
// lease on k, then releases A (whose load returns "new") and returns B's
// result. B's result comes early if a message ended its wait.
func waiterAfter(t *testing.T, a, b *instance, ns string, msgs func() [][]byte) result {
	t.Helper()
	resA, releaseA := waitHolding(t, a, "k", "new", nil)
	waited := b.c.Stats().Leases.Waited
	resB := goGet(b, "k", func(context.Context, string) (string, error) { return "from B", nil })
	waitStat(t, b, "Leases.Waited", func(s hybrid.Stats) uint64 { return s.Leases.Waited }, waited+1)
	for _, msg := range msgs() {
		if err := a.rdb.Publish(context.Background(), "hybridcache:"+ns, msg).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var r result
	select {
	case r = <-resB: // the message ended B's wait
		releaseA()
	case <-time.After(300 * time.Millisecond):
		releaseA()
		r = <-resB
	}
	if ra := <-resA; ra.err != nil || ra.v != "new" {
		t.Fatalf("A: got %q, %v", ra.v, ra.err)
	}
	return r
}

// A signed lease holder's message recorded from an earlier fill, published
// again while another fill of the key waits, is not taken by that fill:
// lease news is bound to the holder's lease token.
func TestLeaseReplayedNews(t *testing.T) {
	for _, c := range []struct {
		op  message.Op
		v   string
		err error
	}{
		{message.OpFilled, "old", nil},
		{message.OpLoadFailed, "", errors.New("db down")},
		{message.OpNotFound, "", hybrid.ErrNotFound},
	} {
		t.Run(c.op.String(), func(t *testing.T) {
			srv.NeedReal(t)
			ns := redistest.Prefix(t)
			ins := newInstances(t, 2, singleNode(nil), leaseOptions(ns, []byte("s")))
			a, b := ins[0], ins[1]
			rec := record(t, a.rdb, "hybridcache:"+ns)
			resA, releaseA := waitHolding(t, a, "k", c.v, c.err)
			resB := goGet(b, "k", func(context.Context, string) (string, error) { return "from B", nil })
			waitStat(t, b, "Leases.Waited", func(s hybrid.Stats) uint64 { return s.Leases.Waited }, 1)
			releaseA()
			<-resA
			<-resB
			old := recorded(t, rec, c.op)
			// Each hears the other's Delete before the next fill, which it
			// would otherwise discard.
			ra, rb := a.c.Stats().Invalidations.Applied, b.c.Stats().Invalidations.Applied
			for _, in := range ins {
				if err := in.c.Delete(context.Background(), "k"); err != nil {
					t.Fatal(err)
				}
			}
			waitStat(t, a, "Invalidations.Applied", statReceived, ra+1)
			waitStat(t, b, "Invalidations.Applied", statReceived, rb+1)
			r := waiterAfter(t, a, b, ns, func() [][]byte { return [][]byte{old} })
			if r.err != nil || r.v != "new" {
				t.Errorf("B: got %q, %v after a replayed %v message, want the new holder's value", r.v, r.err, c.op)
			}
			if s := b.c.Stats(); s.Load.Calls != 0 {
				t.Errorf("B loaded %d times, want 0", s.Load.Calls)
			}
		})
	}
}

// Without a Secret, a forged load_failed, not_found or not_stored does not
// end the waiters' wait while the holder still holds its lease: news not
// from the holder they found only makes them read the key, and news that
// names it (its token can be read in Redis) makes them check the lease.
func TestLeaseForgedFailure(t *testing.T) {
	for _, op := range []message.Op{message.OpLoadFailed, message.OpNotFound, message.OpNotStored} {
		for _, named := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/holder named=%v", op, named), func(t *testing.T) {
				srv.NeedReal(t)
				ns := redistest.Prefix(t)
				ins := newInstances(t, 2, singleNode(nil), leaseOptions(ns, nil))
				a, b := ins[0], ins[1]
				r := waiterAfter(t, a, b, ns, func() [][]byte {
					m := message.Message{Op: op, Namespace: ns, Keys: []string{"k"}}
					if named {
						tok, err := a.rdb.Get(context.Background(), ns+":\x00lease:k").Result()
						if err != nil {
							t.Fatalf("the holder's lease: %v", err)
						}
						m.Token = strings.TrimSuffix(tok, "*")
					}
					return [][]byte{message.Encode(m, nil)}
				})
				if r.err != nil || r.v != "new" {
					t.Errorf("B: got %q, %v after a forged %v message, want the holder's value", r.v, r.err, op)
				}
				if s := b.c.Stats(); s.Load.Calls != 0 {
					t.Errorf("B loaded %d times, want 0", s.Load.Calls)
				}
			})
		}
	}
}
