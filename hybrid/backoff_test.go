package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// When a background refresh comes due again (backoff.go), on real Redis.

// TestRefreshBackoff: a background refresh whose load fails is not tried
// again on every hit, but after RefreshBackoff, doubled for each failure in
// a row (each wait drawn between half and all of it); the hits meanwhile
// get the value at once, and once the load works again the next try
// refreshes it.
func TestRefreshBackoff(t *testing.T) {
	const backoff = 40 * time.Millisecond
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, TTL: 10 * time.Second, LocalTTL: 10 * time.Second, EagerRefresh: 0.02, RefreshBackoff: backoff}
	in := newInstances(t, 1, singleNode(nil), o)[0] // due 200 ms after a write
	ctx := context.Background()
	errDB := errors.New("db down")
	var failing atomic.Bool
	var loads atomic.Int64
	var mu sync.Mutex
	var tries []time.Time // the failed loads
	load := func(context.Context, string) (string, error) {
		if failing.Load() {
			mu.Lock()
			tries = append(tries, time.Now())
			mu.Unlock()
			return "", errDB
		}
		return fmt.Sprint("v", loads.Add(1)), nil
	}
	if v, err := in.c.GetOrCreate(ctx, "k", load); err != nil || v != "v1" {
		t.Fatalf("first: got %q, %v", v, err)
	}
	failing.Store(true)
	time.Sleep(250 * time.Millisecond) // due
	hits, slow := 0, 0
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); hits++ {
		start := time.Now()
		if v, err := in.c.GetOrCreate(ctx, "k", load); err != nil || v != "v1" {
			t.Fatalf("hit %d while refreshes fail: got %q, %v; want v1", hits, v, err)
		}
		if time.Since(start) > 20*time.Millisecond {
			slow++
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	got := append([]time.Time(nil), tries...)
	mu.Unlock()
	// Waits of 20-40, 40-80, 80-160, 160-320, 320-640 and 640-1280 ms fit
	// 6 or 7 tries in 1.5 s; a try on every hit would be hundreds.
	if n := len(got); n < 3 || n > 10 {
		t.Fatalf("%d refresh loads in 1.5 s of %d hits, want about 6 (backed off)", n, hits)
	}
	for k := 1; k < len(got); k++ {
		least := (backoff << min(k-1, 5)) / 2
		if gap := got[k].Sub(got[k-1]); gap < least-15*time.Millisecond {
			t.Errorf("try %d came %v after the one before, want at least %v (half of RefreshBackoff doubled %d times)", k+1, gap, least, k-1)
		}
	}
	if slow > 0 {
		t.Errorf("%d of %d hits took over 20 ms: a hit must not wait for a refresh", slow, hits)
	}
	waitStat(t, in, "Load.RefreshesBackedOff", func(s hybrid.Stats) uint64 { return s.Load.RefreshesBackedOff }, uint64(len(got)))

	// The load works again: a try after the current backoff refreshes.
	failing.Store(false)
	waitFor(t, 3*time.Second, "the refreshed value", func() bool {
		v, err := in.c.GetOrCreate(ctx, "k", load)
		return err == nil && v == "v2"
	}, nil)
	// A refresh stores in L1 first, then in Redis, as every fill does.
	waitFor(t, 3*time.Second, "the refreshed value in Redis", func() bool {
		v, ok := redisValue(t, in.rdb, ns, "k")
		return ok && v == "v2"
	}, func() string {
		v, ok := redisValue(t, in.rdb, ns, "k")
		return fmt.Sprintf("Redis holds %q (%v)", v, ok)
	})
}

// leaseRefreshPair returns two instances sharing a namespace under
// LoadLease whose values are due for an eager refresh 1 s after they are
// written (4 s lifetimes).
func leaseRefreshPair(t *testing.T) (ns string, a, b *instance) {
	t.Helper()
	ns = redistest.Prefix(t)
	o := leaseOptions(ns, nil)
	o.TTL, o.LocalTTL, o.EagerRefresh = 4*time.Second, 4*time.Second, 0.25 // due after 1 s
	ins := newInstances(t, 2, singleNode(nil), o)
	return ns, ins[0], ins[1]
}

// blockedRefresh returns a load that answers "v1" to its first cold calls;
// a later call signals started and blocks until release, then answers
// "v2" (or ends with its ctx).
func blockedRefresh(t *testing.T, cold int64) (load func(context.Context, string) (string, error), started chan struct{}, release func()) {
	t.Helper()
	started = make(chan struct{}, 1)
	block, release := gate(t)
	var calls atomic.Int64
	load = func(ctx context.Context, key string) (string, error) {
		if calls.Add(1) <= cold {
			return "v1", nil
		}
		started <- struct{}{}
		select {
		case <-block:
			return "v2", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return load, started, release
}

// TestRefreshLeftToLeaseHolder: with LoadLease, a background refresh takes
// the key's lease; an instance whose refresh finds the lease held by
// another one's refresh does not load, serves its copy, puts its refresh
// off, and gets the holder's value when it is written.
func TestRefreshLeftToLeaseHolder(t *testing.T) {
	_, a, b := leaseRefreshPair(t)
	ctx := context.Background()
	loadA, started, release := blockedRefresh(t, 1)
	var bLoads atomic.Int64
	loadB := func(context.Context, string) (string, error) {
		bLoads.Add(1)
		return "b", nil
	}
	if v, err := a.c.GetOrCreate(ctx, "k", loadA); err != nil || v != "v1" {
		t.Fatalf("A, cold: got %q, %v", v, err)
	}
	fillFromRemote(t, b.c, "k", "v1")
	time.Sleep(1100 * time.Millisecond) // due on both

	if v, err := a.c.GetOrCreate(ctx, "k", loadA); err != nil || v != "v1" {
		t.Fatalf("A, due: got %q, %v; want v1 at once", v, err)
	}
	<-started // A's refresh holds the lease and loads
	for i := range 20 {
		if v, err := b.c.GetOrCreate(ctx, "k", loadB); err != nil || v != "v1" {
			t.Fatalf("B, due hit %d: got %q, %v; want its copy v1", i, v, err)
		}
	}
	waitStat(t, b, "Load.RefreshesDeferred", func(s hybrid.Stats) uint64 { return s.Load.RefreshesDeferred }, 1)
	if st := b.c.Stats(); st.Load.RefreshesDeferred != 1 || st.Load.Calls != 0 || bLoads.Load() != 0 {
		t.Errorf("B: %d refreshes deferred, %d loads; want 1 and 0 (A holds the lease)", st.Load.RefreshesDeferred, st.Load.Calls)
	}
	release()
	waitFor(t, 3*time.Second, "B to serve A's refreshed value", func() bool {
		v, err := b.c.GetOrCreate(ctx, "k", loadB)
		return err == nil && v == "v2"
	}, nil)
	if n := bLoads.Load(); n != 0 {
		t.Errorf("B loaded %d times, want 0", n)
	}
	if st := a.c.Stats(); st.Leases.Taken != 2 || st.Load.Refreshes != 1 {
		t.Errorf("A: %d leases taken, %d refreshes; want 2 (the cold fill's and the refresh's) and 1", st.Leases.Taken, st.Load.Refreshes)
	}
}

// TestRefreshManyLeftToLeaseHolder: a batch refresh loads only the keys
// whose lease it took; a key whose lease another instance holds is left
// to it, and not in the batch load's keys.
func TestRefreshManyLeftToLeaseHolder(t *testing.T) {
	ns, a, b := leaseRefreshPair(t)
	ctx := context.Background()
	loadA, started, release := blockedRefresh(t, 2)
	var mu sync.Mutex
	var bKeys [][]string
	loadB := func(_ context.Context, keys []string) (map[string]string, error) {
		mu.Lock()
		bKeys = append(bKeys, slices.Sorted(slices.Values(keys)))
		mu.Unlock()
		m := make(map[string]string, len(keys))
		for _, k := range keys {
			m[k] = "b"
		}
		return m, nil
	}
	for _, k := range []string{"k1", "k2"} {
		if v, err := a.c.GetOrCreate(ctx, k, loadA); err != nil || v != "v1" {
			t.Fatalf("A, cold %s: got %q, %v", k, v, err)
		}
		fillFromRemote(t, b.c, k, "v1")
	}
	time.Sleep(1100 * time.Millisecond) // due on both
	if v, err := a.c.GetOrCreate(ctx, "k1", loadA); err != nil || v != "v1" {
		t.Fatalf("A, due: got %q, %v; want v1 at once", v, err)
	}
	<-started // A's refresh of k1 holds its lease and loads
	if got, err := b.c.GetOrCreateMany(ctx, []string{"k1", "k2"}, loadB); err != nil || got["k1"] != "v1" || got["k2"] != "v1" {
		t.Fatalf("B, due page: got %v, %v; want its copies", got, err)
	}
	waitFor(t, 3*time.Second, "B's refresh of k2", func() bool {
		v, ok := redisValue(t, b.rdb, ns, "k2")
		return ok && v == "b"
	}, nil)
	release()
	mu.Lock()
	defer mu.Unlock()
	if len(bKeys) != 1 || !slices.Equal(bKeys[0], []string{"k2"}) {
		t.Errorf("B's batch loads: %q, want one of [k2] (k1's lease is A's)", bKeys)
	}
}
