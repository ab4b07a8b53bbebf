package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
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
				if rc := in.remote.calls(); rc.Get+rc.GetBatch > 1 {
					got := rc.Get + rc.GetBatch
					t.Errorf("%s: %d Redis reads of the value, want 1 (the miss) when it comes inline", in.name, got)
				}
			}
		}
		// An instance whose miss came before the holder's write and whose
		// take came after its release takes the lease, finds the value
		// with the take (the take returns what the lease guards) and
		// releases it unused: a loaded machine makes that more likely.
		// The loads are what count (one, above).
		if taken < 1 || taken > uint64(len(ins)) {
			t.Errorf("%d leases taken, want 1 to %d", taken, len(ins))
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
	waitFor(t, 5*time.Second, "the lease taken and released", func() bool { return in.remote.calls().WriteReleasing == 1 }, nil)
	if n := in.remote.leaseCalls.Load(); n != 1 {
		t.Fatalf("%d lease calls besides the write for one cold fill, want 1 (the take)", n)
	}
	in.c.ClearL1(context.Background())
	for range 3 {
		if _, err := in.c.GetOrCreate(ctx, "a", loadTop); err != nil { // L2 hit, then L1 hits
			t.Fatal(err)
		}
	}
	if _, err := in.c.GetOrCreate(ctx, "b", loadTop, hybrid.WithLoadLease(0)); err != nil {
		t.Fatal(err)
	}
	// The fill's write-back comes before any release would.
	waitFor(t, 5*time.Second, "b written back", func() bool { return in.remote.calls().WriteIfAbsent == 1 }, nil)
	if n, w := in.remote.leaseCalls.Load(), in.remote.calls().WriteReleasing; n != 1 || w != 1 {
		t.Errorf("%d lease calls and %d writes with a release after hits and a fill without a lease, want still 1 and 1", n, w)
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
				in.c.ClearL1(context.Background())
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
