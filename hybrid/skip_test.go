package hybrid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// This file tests the per-call tier flags (WithSkip) against Redis, across
// two instances.

func skip(s hybrid.Skip) hybrid.EntryOption { return hybrid.WithSkip(s) }

// skipPair returns instances A and B of one namespace, both holding keys
// at "v1" in L1 (written by A, read by B from Redis).
func skipPair(t *testing.T, secret []byte, keys ...string) (a, b *instance, ns string) {
	t.Helper()
	o := hybrid.Options{Namespace: redistest.Prefix(t), Secret: secret}
	ins := newInstances(t, 2, singleNode(nil), o)
	warmMany(t, ins[0], ins[1], keys, "v1")
	return ins[0], ins[1], o.Namespace
}

// quietCheck makes A announce a last change, waits until B applied it, and
// checks that B applied nothing else since before (messages come in order
// on one Redis server): what came before it, B heard.
func quietCheck(t *testing.T, a, b *instance, before uint64, want uint64) {
	t.Helper()
	setStr(t, a, "sentinel", "x")
	waitStat(t, b, "Invalidations.Applied", statReceived, before+want+1)
	if got := b.c.Stats().Invalidations.Applied - before; got != want+1 {
		t.Errorf("B applied %d messages, want %d and the sentinel's", got-1, want)
	}
}

// TestSkipAnnounce: Set, Delete, SetMany and DeleteMany with SkipAnnounce
// write Redis and L1 here, and tell B nothing: B keeps serving its copies
// from L1, while a read past its L1 finds Redis's new state.
func TestSkipAnnounce(t *testing.T) {
	srv.NeedReal(t)
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := t.Context()
			keys := []string{"k1", "k2", "k3", "k4", "k5"}
			a, b, ns := skipPair(t, m.secret, keys...)
			sa, recv := a.c.Stats(), b.c.Stats().Invalidations.Applied
			q := skip(hybrid.SkipAnnounce)
			if err := a.c.Set(ctx, "k1", "v2", q); err != nil {
				t.Fatal(err)
			}
			if err := a.c.Delete(ctx, "k2", q); err != nil {
				t.Fatal(err)
			}
			if err := a.c.SetMany(ctx, map[string]string{"k3": "v2", "k4": "v2"}, q); err != nil {
				t.Fatal(err)
			}
			if err := a.c.DeleteMany(ctx, []string{"k5"}, q); err != nil {
				t.Fatal(err)
			}
			st := a.c.Stats()
			if got := st.Invalidations.Sent - sa.Invalidations.Sent; got != 0 {
				t.Errorf("A sent %d messages, want none", got)
			}
			if got := st.Skipped.Announces - sa.Skipped.Announces; got != 5 {
				t.Errorf("A: Skipped.Announces +%d, want 5 (one per key)", got)
			}
			gets := a.remote.gets.Load()
			for k, want := range map[string]string{"k1": "v2", "k3": "v2", "k4": "v2"} {
				fill(t, a, k, want)
				if v, ok := redisValue(t, a.rdb, ns, k); v != want || !ok {
					t.Errorf("Redis: %s = %q, %v; want %s", k, v, ok, want)
				}
			}
			for _, k := range []string{"k2", "k5"} {
				if v, ok := getStr(t, a, k); ok {
					t.Errorf("A: %s = %q after its delete, want a miss", k, v)
				}
			}
			if got := a.remote.gets.Load() - gets; got != 2 {
				t.Errorf("A read %d keys from Redis, want 2 (the deleted ones; its writes are in L1)", got)
			}
			quietCheck(t, a, b, recv, 0)
			hits := b.c.Stats().L1.Hits
			for _, k := range keys {
				fill(t, b, k, "v1")
			}
			if got := b.c.Stats().L1.Hits - hits; got != uint64(len(keys)) {
				t.Errorf("B: %d L1 hits of %d: want its old copies served", got, len(keys))
			}
			if v, ok, err := b.c.Get(ctx, "k1", skip(hybrid.SkipL1Read)); v != "v2" || !ok || err != nil {
				t.Errorf("B: Get(k1) past L1: %q, %v, %v; want v2 from Redis", v, ok, err)
			}
		})
	}
}

// TestSkipRemoteWrite: with SkipRemoteWrite, Redis is left as it is. A Set
// keeps its value in A's L1 and makes B drop its copy (B reads Redis's);
// with SkipAnnounce too, B keeps its copy. A Delete drops the key from
// every L1 and keeps it in Redis. A fill keeps its loaded value in L1 only.
func TestSkipRemoteWrite(t *testing.T) {
	srv.NeedReal(t)
	ctx := t.Context()
	keys := []string{"k1", "k2", "k3", "k4", "k5"}
	a, b, ns := skipPair(t, []byte("s"), keys...)
	sa, recv, writes := a.c.Stats(), b.c.Stats().Invalidations.Applied, a.remote.writeCalls.Load()
	local := skip(hybrid.SkipRemoteWrite)
	if err := a.c.Set(ctx, "k1", "v2", local); err != nil {
		t.Fatal(err)
	}
	if err := a.c.Set(ctx, "k2", "v2", skip(hybrid.SkipRemoteWrite|hybrid.SkipAnnounce)); err != nil {
		t.Fatal(err)
	}
	if err := a.c.Delete(ctx, "k3", local); err != nil {
		t.Fatal(err)
	}
	if err := a.c.SetMany(ctx, map[string]string{"k4": "v2", "k5": "v2"}, local); err != nil {
		t.Fatal(err)
	}
	loads := &counter{value: "loaded"}
	if v, err := a.c.GetOrCreate(ctx, "new", loads.load, local); v != "loaded" || err != nil {
		t.Fatalf("A: GetOrCreate(new): %q, %v", v, err)
	}
	if got := a.remote.writeCalls.Load() - writes; got != 0 {
		t.Errorf("A made %d Write calls, want none", got)
	}
	if got := a.c.Stats().Skipped.RemoteWrites - sa.Skipped.RemoteWrites; got != 6 {
		t.Errorf("A: Skipped.RemoteWrites +%d, want 6 (one per key)", got)
	}
	for _, k := range append(keys, "new") {
		want := "v1"
		if k == "new" {
			want = ""
		}
		v, ok := redisValue(t, a.rdb, ns, k)
		if v != want || ok != (want != "") {
			t.Errorf("Redis: %s = %q, %v; want %q", k, v, ok, want)
		}
	}
	gets := a.remote.gets.Load()
	for k, want := range map[string]string{"k1": "v2", "k2": "v2", "k4": "v2", "k5": "v2", "new": "loaded"} {
		fill(t, a, k, want)
	}
	if got := a.remote.gets.Load() - gets; got != 0 {
		t.Errorf("A read %d keys from Redis, want 0: its local values are in L1", got)
	}
	fill(t, a, "k3", "v1") // dropped here, read from Redis
	if loads.calls.Load() != 1 {
		t.Errorf("A loaded %d times, want 1", loads.calls.Load())
	}
	quietCheck(t, a, b, recv, 3) // k1, k3, and the batch k4 k5
	gets, hits := b.remote.gets.Load(), b.c.Stats().L1.Hits
	for _, k := range keys {
		fill(t, b, k, "v1")
	}
	if got, hit := b.remote.gets.Load()-gets, b.c.Stats().L1.Hits-hits; got != 4 || hit != 1 {
		t.Errorf("B: %d Redis reads, %d L1 hits; want k1, k3, k4, k5 dropped and read again, k2 served from L1", got, hit)
	}
}

// TestSkipL1Write: a Set with SkipL1Write writes Redis and announces, and
// drops the key from L1 here, so that A's next read finds the new value in
// Redis; a read with it returns the value without storing it in L1.
func TestSkipL1Write(t *testing.T) {
	srv.NeedReal(t)
	ctx := t.Context()
	a, b, ns := skipPair(t, nil, "k1", "k2", "k3")
	recv := b.c.Stats().Invalidations.Applied
	noL1 := skip(hybrid.SkipL1Write)
	if err := a.c.Set(ctx, "k1", "v2", noL1); err != nil {
		t.Fatal(err)
	}
	if err := a.c.SetMany(ctx, map[string]string{"k2": "v2", "k3": "v2"}, noL1); err != nil {
		t.Fatal(err)
	}
	if got := a.c.Stats().Skipped.L1Writes; got != 3 {
		t.Errorf("A: Skipped.L1Writes %d, want 3", got)
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		if v, ok := redisValue(t, a.rdb, ns, k); v != "v2" || !ok {
			t.Errorf("Redis: %s = %q, %v; want v2", k, v, ok)
		}
	}
	gets := a.remote.gets.Load()
	for _, k := range []string{"k1", "k2", "k3"} {
		fill(t, a, k, "v2")
	}
	if got := a.remote.gets.Load() - gets; got != 3 {
		t.Errorf("A read %d keys from Redis, want 3 (its L1 dropped them)", got)
	}
	waitStat(t, b, "Invalidations.Applied", statReceived, recv+2)
	fill(t, b, "k1", "v2")

	// Reads: found in Redis, or loaded, and returned, not stored in L1.
	setStr(t, b, "r", "vr")
	gets = a.remote.gets.Load()
	for range 2 {
		if v, err := a.c.GetOrCreate(ctx, "r", neverLoad(t), noL1); v != "vr" || err != nil {
			t.Errorf("A: GetOrCreate(r) without the L1 write: %q, %v; want vr", v, err)
		}
		if v, ok, err := a.c.Get(ctx, "r", noL1); v != "vr" || !ok || err != nil {
			t.Errorf("A: Get(r) without the L1 write: %q, %v, %v; want vr", v, ok, err)
		}
	}
	fill(t, a, "r", "vr")
	if got := a.remote.gets.Load() - gets; got != 5 {
		t.Errorf("A read r from Redis %d times in 5 reads, want 5 (none stored it in L1)", got)
	}
	loads := &counter{value: "loaded"}
	if v, err := a.c.GetOrCreate(ctx, "new", loads.load, noL1); v != "loaded" || err != nil {
		t.Errorf("A: GetOrCreate(new): %q, %v", v, err)
	}
	waitFor(t, 5*time.Second, "the fill's write to Redis", func() bool {
		v, ok := redisValue(t, a.rdb, ns, "new")
		return ok && v == "loaded"
	}, nil)
	gets = a.remote.gets.Load()
	fill(t, a, "new", "loaded")
	if got := a.remote.gets.Load() - gets; got != 1 {
		t.Errorf("A read new from Redis %d times, want 1 (the load did not store it in L1)", got)
	}
	if err := a.c.Delete(ctx, "k1", noL1); err == nil {
		t.Error("Delete with SkipL1Write: no error, want it refused")
	}
}

// TestSkipL1Read: a read with SkipL1Read reads Redis, not A's L1, which
// holds an older value that no message replaced, and stores what it read.
func TestSkipL1Read(t *testing.T) {
	srv.NeedReal(t)
	ctx := t.Context()
	keys := []string{"k1", "k2", "k3", "k4"}
	a, b, _ := skipPair(t, nil, keys...)
	for _, k := range keys {
		fill(t, a, k, "v1")
	}
	// B changes the keys without telling A.
	if err := b.c.SetMany(ctx, map[string]string{"k1": "v2", "k2": "v2", "k3": "v2", "k4": "v2"}, skip(hybrid.SkipAnnounce)); err != nil {
		t.Fatal(err)
	}
	fill(t, a, "k1", "v1") // A's L1
	past := skip(hybrid.SkipL1Read)
	sa, gets := a.c.Stats(), a.remote.gets.Load()
	if v, ok, err := a.c.Get(ctx, "k1", past); v != "v2" || !ok || err != nil {
		t.Errorf("A: Get(k1) past L1: %q, %v, %v; want v2", v, ok, err)
	}
	if v, err := a.c.GetOrCreate(ctx, "k2", neverLoad(t), past); v != "v2" || err != nil {
		t.Errorf("A: GetOrCreate(k2) past L1: %q, %v; want v2", v, err)
	}
	got, err := a.c.GetOrCreateMany(ctx, []string{"k3"}, func(context.Context, []string) (map[string]string, error) {
		t.Error("load called")
		return nil, nil
	}, past)
	if err != nil || got["k3"] != "v2" {
		t.Errorf("A: GetOrCreateMany(k3) past L1: %v, %v; want v2", got, err)
	}
	if got, err := a.c.GetMany(ctx, []string{"k4"}, past); err != nil || got["k4"] != "v2" {
		t.Errorf("A: GetMany(k4) past L1: %v, %v; want v2", got, err)
	}
	st := a.c.Stats()
	if reads, hits := a.remote.gets.Load()-gets, st.L2.Hits-sa.L2.Hits; reads != 4 || hits != 4 {
		t.Errorf("A: %d reads of Redis, %d L2 hits; want 4 and 4", reads, hits)
	}
	if st.Skipped.L1Reads-sa.Skipped.L1Reads != 4 || st.L1.Hits != sa.L1.Hits || st.L1.Misses != sa.L1.Misses {
		t.Errorf("A: Skipped.L1Reads +%d, L1 hits +%d, misses +%d; want 4, and no L1 lookup", st.Skipped.L1Reads-sa.Skipped.L1Reads, st.L1.Hits-sa.L1.Hits, st.L1.Misses-sa.L1.Misses)
	}
	gets = a.remote.gets.Load()
	for _, k := range keys {
		fill(t, a, k, "v2") // now in L1
	}
	if got := a.remote.gets.Load() - gets; got != 0 {
		t.Errorf("A read %d keys from Redis, want 0: the reads past L1 stored what they found", got)
	}
}

// TestSkipRemoteRead: on an L1 miss, GetOrCreate with SkipRemoteRead loads
// without reading Redis; the loaded value is written back only where Redis
// holds nothing, so Redis's value, unread, wins and the loaded one leaves
// L1. Get with it misses. A default load lease is not taken.
func TestSkipRemoteRead(t *testing.T) {
	srv.NeedReal(t)
	ctx := t.Context()
	o := hybrid.Options{Namespace: redistest.Prefix(t), LoadLease: time.Second}
	ins := newInstances(t, 2, singleNode(nil), o)
	a, b := ins[0], ins[1]
	setStr(t, a, "k1", "v1")
	noRedis := skip(hybrid.SkipRemoteRead)
	gets := b.remote.gets.Load()
	if v, ok, err := b.c.Get(ctx, "k1", noRedis); ok || err != nil {
		t.Errorf("B: Get(k1) without Redis: %q, %v, %v; want a miss", v, ok, err)
	}
	loads := &counter{value: "loaded"}
	if v, err := b.c.GetOrCreate(ctx, "k1", loads.load, noRedis); v != "loaded" || err != nil {
		t.Errorf("B: GetOrCreate(k1) without Redis: %q, %v; want loaded", v, err)
	}
	if v, err := b.c.GetOrCreate(ctx, "new", loads.load, noRedis); v != "loaded" || err != nil {
		t.Errorf("B: GetOrCreate(new) without Redis: %q, %v; want loaded", v, err)
	}
	if got := b.remote.gets.Load() - gets; got != 0 {
		t.Errorf("B read Redis %d times, want 0", got)
	}
	st := b.c.Stats()
	if st.Skipped.RemoteReads != 3 || st.Leases.Taken != 0 || loads.calls.Load() != 2 {
		t.Errorf("B: Skipped.RemoteReads %d, Leases.Taken %d, loads %d; want 3, 0, 2", st.Skipped.RemoteReads, st.Leases.Taken, loads.calls.Load())
	}
	waitFor(t, 5*time.Second, "the fills' write-backs", func() bool {
		v, ok := redisValue(t, b.rdb, o.Namespace, "new")
		k1, _ := getStr(t, b, "k1") // Redis's value won: the loaded one left L1
		return ok && v == "loaded" && k1 == "v1"
	}, nil)
	if v, _ := redisValue(t, b.rdb, o.Namespace, "k1"); v != "v1" {
		t.Errorf("Redis: k1 = %q, want v1", v)
	}
	gets = b.remote.gets.Load()
	fill(t, b, "new", "loaded")
	if got := b.remote.gets.Load() - gets; got != 0 {
		t.Errorf("B read new from Redis %d times, want 0 (its loaded value is in L1)", got)
	}
	if _, err := b.c.GetOrCreate(ctx, "x", loads.load, noRedis, hybrid.WithLoadLease(time.Second)); err == nil {
		t.Error("GetOrCreate with SkipRemoteRead and a load lease: no error")
	}
}

// TestSkipRefused: flags a call cannot apply, or that leave it nothing to
// do, are refused with an error, also on an L1 hit; the others pass.
func TestSkipRefused(t *testing.T) {
	ctx := context.Background()
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	l1only := newTestCache[string](t, hybrid.Options{Namespace: testNS})
	set(t, c, "hit", "v")
	load := func(context.Context, string) (string, error) { return "v", nil }
	loadMany := func(context.Context, []string) (map[string]string, error) { return nil, nil }
	for _, tc := range []struct {
		what string
		call func() error
		ok   bool
	}{
		{"GetOrCreate hit, SkipAnnounce", func() error { _, err := c.GetOrCreate(ctx, "hit", load, skip(hybrid.SkipAnnounce)); return err }, false},
		{"GetOrCreate miss, SkipAnnounce", func() error { _, err := c.GetOrCreate(ctx, "miss", load, skip(hybrid.SkipAnnounce)); return err }, false},
		{"GetOrCreate, every read and write skipped", func() error {
			_, err := c.GetOrCreate(ctx, "k", load, skip(hybrid.SkipL1Read|hybrid.SkipL1Write|hybrid.SkipRemoteRead|hybrid.SkipRemoteWrite))
			return err
		}, true},
		{"GetOrCreateMany, SkipAnnounce", func() error {
			_, err := c.GetOrCreateMany(ctx, []string{"k"}, loadMany, skip(hybrid.SkipAnnounce))
			return err
		}, false},
		{"Get hit, SkipRemoteWrite", func() error { _, _, err := c.Get(ctx, "hit", skip(hybrid.SkipRemoteWrite)); return err }, false},
		{"Get hit, WithTTL (checked, of no effect)", func() error { _, _, err := c.Get(ctx, "hit", hybrid.WithTTL(time.Second)); return err }, true},
		{"Get miss, a bad WithTTL", func() error { _, _, err := c.Get(ctx, "nothing", hybrid.WithTTL(-time.Second)); return err }, false},
		{"Get, both reads skipped", func() error { _, _, err := c.Get(ctx, "k", skip(hybrid.SkipL1Read|hybrid.SkipRemoteRead)); return err }, false},
		{"Get without a Remote, SkipL1Read", func() error { _, _, err := l1only.Get(ctx, "k", skip(hybrid.SkipL1Read)); return err }, false},
		{"GetMany, SkipAnnounce", func() error { _, err := c.GetMany(ctx, []string{"k"}, skip(hybrid.SkipAnnounce)); return err }, false},
		{"Set, SkipL1Read", func() error { return c.Set(ctx, "k", "v", skip(hybrid.SkipL1Read)) }, false},
		{"Set, SkipRemoteRead", func() error { return c.Set(ctx, "k", "v", skip(hybrid.SkipRemoteRead)) }, false},
		{"Set, both writes skipped", func() error { return c.Set(ctx, "k", "v", skip(hybrid.SkipL1Write|hybrid.SkipRemoteWrite)) }, false},
		{"Set without a Remote, SkipL1Write", func() error { return l1only.Set(ctx, "k", "v", skip(hybrid.SkipL1Write)) }, false},
		{"SetMany, both writes skipped", func() error {
			return c.SetMany(ctx, map[string]string{"k": "v"}, skip(hybrid.SkipL1Write|hybrid.SkipRemoteWrite))
		}, false},
		{"Delete, SkipL1Write", func() error { return c.Delete(ctx, "k", skip(hybrid.SkipL1Write)) }, false},
		{"Delete, WithTTL", func() error { return c.Delete(ctx, "k", hybrid.WithTTL(time.Second)) }, false},
		{"Delete, L1 here only", func() error { return c.Delete(ctx, "k", skip(hybrid.SkipRemoteWrite|hybrid.SkipAnnounce)) }, true},
		{"DeleteMany, SkipL1Read", func() error { return c.DeleteMany(ctx, []string{"k"}, skip(hybrid.SkipL1Read)) }, false},
		{"WithSkip(0)", func() error { return c.Set(ctx, "k", "v", skip(0)) }, false},
		{"WithSkip of an unknown step", func() error { return c.Set(ctx, "k", "v", skip(1<<7)) }, false},
		{"a load lease and SkipRemoteWrite", func() error {
			_, err := c.GetOrCreate(ctx, "k", load, skip(hybrid.SkipRemoteWrite), hybrid.WithLoadLease(time.Second))
			return err
		}, false},
	} {
		err := tc.call()
		if tc.ok && err != nil {
			t.Errorf("%s: %v, want no error", tc.what, err)
		}
		if !tc.ok && err == nil {
			t.Errorf("%s: no error, want it refused", tc.what)
		}
		if !tc.ok && errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v", tc.what, err)
		}
	}
	if got := hybrid.Skip(hybrid.SkipL1Read | hybrid.SkipAnnounce).String(); got != "SkipL1Read|SkipAnnounce" {
		t.Errorf("Skip.String() = %q", got)
	}
}

// TestSkipL1HitAllocs: an L1 hit with a flag that does not skip L1 stays
// free of allocations, as one without options.
func TestSkipL1HitAllocs(t *testing.T) {
	ctx := context.Background()
	c := newTestCache[string](t, newSharedTier(t).options())
	set(t, c, "k", "v")
	opts := []hybrid.EntryOption{skip(hybrid.SkipRemoteRead | hybrid.SkipL1Write)}
	if n := testing.AllocsPerRun(100, func() { _, _ = c.GetOrCreate(ctx, "k", loadTop, opts...) }); n != 0 {
		t.Errorf("GetOrCreate L1 hit with a flag: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _, _ = c.Get(ctx, "k", opts[:0]...) }); n != 0 {
		t.Errorf("Get L1 hit: %v allocations, want 0", n)
	}
}

// TestSkipL1WriteQueued: a Set or SetMany with SkipL1Write that is queued
// for replay keeps its value in L1 all the same: no other tier holds it
// until the replay.
func TestSkipL1WriteQueued(t *testing.T) {
	ctx := t.Context()
	s := newSharedTier(t)
	o := s.options()
	o.QueueWrites = 10
	c := newTestCache[string](t, o)
	for _, k := range []string{"a", "b", "c"} {
		set(t, c, k, "0") // older values, which the replays replace
	}
	s.remote.FailWith(errDown)
	noL1 := skip(hybrid.SkipL1Write)
	if err := c.Set(ctx, "a", "1", noL1); !errors.Is(err, hybrid.ErrQueued) {
		t.Fatalf("Set: got %v, want ErrQueued", err)
	}
	if err := c.SetMany(ctx, map[string]string{"b": "2", "c": "3"}, noL1); !errors.Is(err, hybrid.ErrQueued) {
		t.Fatalf("SetMany: got %v, want ErrQueued", err)
	}
	for k, want := range map[string]string{"a": "1", "b": "2", "c": "3"} {
		if v, ok := getString(t, c, k); v != want || !ok {
			t.Errorf("Get(%s) while queued: %q, %v; want %s, its own write", k, v, ok, want)
		}
	}
	s.remote.FailWith(nil)
	waitQueue(t, c, 3, 0)
	for k, want := range map[string]string{"a": "1", "b": "2", "c": "3"} {
		if v, ok := s.stored(t, k); v != want || !ok {
			t.Errorf("shared tier after the replay: %s = %q, %v; want %s", k, v, ok, want)
		}
	}
}
