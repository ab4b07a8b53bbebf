package hybrid_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// Coalesced refreshes (BatchRefresh), on real Redis.

// coalesceKeys are the keys of the coalescing tests: 9, as in sturdyc's
// README.
var coalesceKeys = []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"}

// dueOnTwo returns two instances whose L1s hold coalesceKeys, loaded one
// by one through A and read from Redis by B, and due for a refresh on both,
// with the batch loader bl and RefreshBatch's size and wait. one is the
// loaders' single-key load function, counting its calls.
func dueOnTwo(t *testing.T, bl *batchLoad, size int, wait time.Duration) (a, b *instance, one func(context.Context, string) (string, error), calls *atomic.Int64) {
	t.Helper()
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, TTL: 4 * time.Second, LocalTTL: 4 * time.Second, EagerRefresh: 0.25}
	ins := newInstances(t, 2, singleNode(nil), o, hybrid.BatchRefresh(bl.load, size, wait))
	calls = new(atomic.Int64)
	one = func(_ context.Context, key string) (string, error) {
		calls.Add(1)
		return "one:" + key, nil
	}
	ctx := context.Background()
	for _, k := range coalesceKeys {
		if _, err := ins[0].c.GetOrCreate(ctx, k, one); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the write-back of "+k, func() bool { _, ok := redisValue(t, ins[0].rdb, ns, k); return ok }, nil)
		fillFromRemote(t, ins[1].c, k, "one:"+k)
	}
	time.Sleep(1100 * time.Millisecond) // due after 1 s
	return ins[0], ins[1], one, calls
}

// TestRefreshBatchBySize: nine keys come due; their refreshes, from
// GetOrCreate calls that each give a one-key load function, are made in
// batches of RefreshBatch's size (9 refresh calls become 3) through its
// batch loader, at once when a batch is full; the other instance gets the
// refreshed values.
func TestRefreshBatchBySize(t *testing.T) {
	bl := &batchLoad{}
	a, b, one, calls := dueOnTwo(t, bl, 3, time.Minute)
	before := calls.Load()
	ctx := context.Background()
	for _, k := range coalesceKeys {
		if v, err := a.c.GetOrCreate(ctx, k, one); err != nil || v != "one:"+k {
			t.Fatalf("due hit of %s: got %q, %v; want the current value at once", k, v, err)
		}
	}
	waitFor(t, 5*time.Second, "three batch loads", func() bool { return len(bl.snapshot()) >= 3 }, nil)
	got := bl.snapshot()
	var all []string
	for _, c := range got {
		if len(c) != 3 {
			t.Errorf("a batch of %d keys (%v), want 3", len(c), c)
		}
		all = append(all, c...)
	}
	slices.Sort(all)
	if len(got) != 3 || !slices.Equal(all, coalesceKeys) {
		t.Errorf("batch loads %v, want the 9 keys in 3 batches", got)
	}
	if n := calls.Load() - before; n != 0 {
		t.Errorf("the one-key load function was called %d times for refreshes, want 0", n)
	}
	waitStat(t, a, "Load.RefreshesCoalesced", func(s hybrid.Stats) uint64 { return s.Load.RefreshesCoalesced }, 9)
	waitStat(t, b, "Invalidations.Applied", statReceived, 9) // A's writes announced
	for _, k := range coalesceKeys {
		waitFor(t, 3*time.Second, "B to serve the refreshed "+k, func() bool {
			v, err := b.c.GetOrCreate(ctx, k, neverLoad(t))
			return err == nil && v == "loaded:"+k
		}, nil)
	}
	if st := a.c.Stats(); st.Load.Refreshes != 9 || st.Load.Calls != 9+3 {
		t.Errorf("A: %d refreshes, %d load calls; want 9 and 12 (9 cold, 3 batches)", st.Load.Refreshes, st.Load.Calls)
	}
}

// TestRefreshBatchByWait: refreshes that come due within RefreshBatch's
// wait share one load, from GetOrCreate and GetOrCreateMany calls alike,
// and it comes once the wait is over.
func TestRefreshBatchByWait(t *testing.T) {
	bl := &batchLoad{}
	const wait = 200 * time.Millisecond
	a, _, one, _ := dueOnTwo(t, bl, 100, wait)
	ctx := context.Background()
	start := time.Now()
	for _, k := range coalesceKeys[:4] {
		if _, err := a.c.GetOrCreate(ctx, k, one); err != nil {
			t.Fatal(err)
		}
	}
	m, err := a.c.GetOrCreateMany(ctx, coalesceKeys[4:], func(context.Context, []string) (map[string]string, error) {
		return nil, errors.New("the call's own batch load is not used for refreshes")
	})
	if err != nil || len(m) != 5 {
		t.Fatalf("GetOrCreateMany of due keys: got %v, %v; want their 5 values at once", m, err)
	}
	waitFor(t, 5*time.Second, "the batch load", func() bool { return len(bl.snapshot()) >= 1 }, nil)
	if took := time.Since(start); took < wait-20*time.Millisecond {
		t.Errorf("the batch load came %v after the first due hit, want after the wait, %v", took, wait)
	}
	time.Sleep(wait)
	if got := bl.snapshot(); len(got) != 1 || !slices.Equal(got[0], coalesceKeys) {
		t.Errorf("batch loads %v, want one of the 9 keys", got)
	}
}

// TestRefreshBatchChecked: New refuses a RefreshBatch it cannot use, with
// an error naming it. (One whose load is not of the cache's value type
// does not compile.)
func TestRefreshBatchChecked(t *testing.T) {
	s := newSharedTier(t)
	strs := func(context.Context, []string) (map[string]string, error) { return nil, nil }
	for name, b := range map[string][]hybrid.RefreshBatch[string]{
		"nil load":   {hybrid.BatchRefresh[string](nil, 10, time.Millisecond)},
		"size 0":     {hybrid.BatchRefresh(strs, 0, time.Millisecond)},
		"size 10001": {hybrid.BatchRefresh(strs, 10_001, time.Millisecond)},
		"wait 0":     {hybrid.BatchRefresh(strs, 10, 0)},
		"wait 1h":    {hybrid.BatchRefresh(strs, 10, time.Hour)},
		"two":        {hybrid.BatchRefresh(strs, 10, time.Millisecond), hybrid.BatchRefresh(strs, 10, time.Millisecond)},
	} {
		if c, err := hybrid.New(s.options(), b...); err == nil {
			c.Close()
			t.Errorf("%s: New accepted it", name)
		} else if want := "RefreshBatch"; !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q does not name %s", name, err, want)
		}
	}
	if c, err := hybrid.New(s.options(), hybrid.BatchRefresh(strs, 10, time.Millisecond)); err != nil {
		t.Errorf("a valid RefreshBatch: %v", err)
	} else {
		c.Close()
	}
}
