package hybrid_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/keyslot"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// noLogTopologies are the deployments without a replay log: one Redis with
// ReplayLogLen -1, and the Redis Cluster of HYBRID_REDIS_CLUSTER (skipped
// without it), whose bus is sharded.
func noLogTopologies(t *testing.T, f func(t *testing.T, newClient clientFactory, o hybrid.Options, kill func(t *testing.T, ins ...*instance))) {
	t.Run("single", func(t *testing.T) {
		srv.NeedReal(t)
		f(t, singleNode(nil), hybrid.Options{Namespace: redistest.Prefix(t), ReplayLogLen: -1}, killPubSub)
	})
	t.Run("cluster", func(t *testing.T) {
		newClient := clusterNodes(t)
		f(t, newClient, hybrid.Options{Namespace: redistest.Prefix(t)}, func(t *testing.T, ins ...*instance) {
			killClusterPubSub(t, newClient, ins...)
		})
	})
}

// killClusterPubSub cuts every pub/sub connection of every master of the
// cluster and waits until each of ins has seen its connection drop.
func killClusterPubSub(t *testing.T, newClient clientFactory, ins ...*instance) {
	t.Helper()
	before := make([]uint64, len(ins))
	for i, in := range ins {
		before[i] = in.c.Stats().Bus.Losses
	}
	cc, ok := newClient(t).(*redis.ClusterClient)
	if !ok {
		t.Fatal("killClusterPubSub: not a cluster client")
	}
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, node *redis.Client) error {
		return node.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err()
	})
	if err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	for i, in := range ins {
		waitStat(t, in, "Bus.Losses", statBusLosses, before[i]+1)
	}
}

// agedClear records a Clear of namespace ns an hour ago, as a namespace
// in use has: a catch-up judges an L1 entry whose write time it does not
// know by when it was stored, which must be a while after the last Clear.
func agedClear(t *testing.T, rdb redis.UniversalClient, ns string) {
	t.Helper()
	at := binary.BigEndian.AppendUint64(nil, uint64(time.Now().Add(-time.Hour).UnixMilli()))
	if err := rdb.Set(context.Background(), ns+":\x00clear", at, 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// slotOf is the hash slot of a cache key, as the cache's counters cover it.
func slotOf(in *instance, ns, key string) uint16 {
	return keyslot.Of(in.remote.Info().Prefix + ns + ":" + key)
}

// valueReads is how many values in read from Redis (records and counters
// not counted).
func valueReads(in *instance) int64 { return in.remote.gets.Load() + in.remote.getBatchKeys.Load() }

// TestLossCatchUp: without a replay log, the pub/sub connections are cut
// while A writes 10 of 1,000 keys that B and C hold and deletes a tag that
// 5 more carry. Once their buses are back, B and C read every slot's
// sequence counter and drop only the entries of slots written meanwhile
// (and the tagged ones): no one serves an old value, and every other key
// is still an L1 hit, with no flush.
func TestLossCatchUp(t *testing.T) {
	noLogTopologies(t, func(t *testing.T, newClient clientFactory, o hybrid.Options, kill func(*testing.T, ...*instance)) {
		const n, changed, tagged = 1000, 10, 5
		ctx := context.Background()
		agedClear(t, newClient(t), o.Namespace)
		a := newInstance(t, "A", newClient, o, invalidate.Options{})
		b := newInstance(t, "B", newClient, o, slowReconnect)
		c := newInstance(t, "C", newClient, o, slowReconnect)
		readers := []*instance{b, c}
		warm(t, a, readers, n, "v1")
		for i := range tagged {
			if err := a.c.Set(ctx, fmt.Sprint("t", i), "v1", hybrid.WithTags("grp")); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range readers {
			waitStat(t, r, "Invalidations.Applied", statReceived, n+tagged)
			for i := range tagged {
				fill(t, r, fmt.Sprint("t", i), "v1")
			}
		}

		kill(t, a, b, c)
		recv := []uint64{b.c.Stats().Invalidations.Applied, c.c.Stats().Invalidations.Applied}
		dirty := map[uint16]bool{}
		for i := range changed {
			setStr(t, a, lossKey(i), "v2")
			dirty[slotOf(a, o.Namespace, lossKey(i))] = true
		}
		if err := a.c.DeleteByTag(ctx, "grp"); err != nil {
			t.Fatal(err)
		}
		for i, r := range readers {
			if got := r.c.Stats().Invalidations.Applied; got != recv[i] {
				t.Fatalf("%s received %d message(s) while its connection was down: the test did not make it miss A's writes", r.name, got-recv[i])
			}
		}
		// Keys that share a slot with a changed key are dropped with it.
		reread := 0
		for i := range n {
			if dirty[slotOf(a, o.Namespace, lossKey(i))] {
				reread++
			}
		}
		for _, r := range readers {
			waitFor(t, 20*time.Second, r.name+": Bus.CaughtUp >= 1", func() bool { return r.c.Stats().Bus.CaughtUp >= 1 }, nil)
		}
		for _, r := range readers {
			before, reads := r.c.Stats(), valueReads(r)
			for i := range tagged {
				v, err := r.c.GetOrCreate(ctx, fmt.Sprint("t", i), func(context.Context, string) (string, error) { return "reloaded", nil })
				if err != nil || v != "reloaded" {
					t.Errorf("%s: t%d after its tag was deleted: got %q, %v, want it reloaded", r.name, i, v, err)
				}
			}
			for i := range n {
				want := "v1"
				if i < changed {
					want = "v2"
				}
				fill(t, r, lossKey(i), want)
			}
			st := r.c.Stats()
			got := valueReads(r) - reads
			t.Logf("%s: %d values read from Redis after the blip for %d keys (%d changed, %d tagged); %d L1 hits; Bus %+v",
				r.name, got, n+tagged, changed, tagged, st.L1.Hits-before.L1.Hits, st.Bus)
			if got != int64(reread+tagged) {
				t.Errorf("%s: %d values read from Redis after the catch-up, want %d (the keys of the %d slots written, and the tagged ones)", r.name, got, reread+tagged, len(dirty))
			}
			if hits := st.L1.Hits - before.L1.Hits; hits != uint64(n-reread) {
				t.Errorf("%s: %d L1 hits after the catch-up, want %d", r.name, hits, n-reread)
			}
			if st.Bus.Flushed != 0 || st.Bus.CatchUpDropped < uint64(reread+tagged) {
				t.Errorf("%s: Bus.Flushed %d, Bus.CatchUpDropped %d; want 0, >= %d", r.name, st.Bus.Flushed, st.Bus.CatchUpDropped, reread+tagged)
			}
		}
	})
}

// TestLossCatchUpClear: a Clear missed during the loss drops what L1 held
// before it, on the instance that missed it.
func TestLossCatchUpClear(t *testing.T) {
	noLogTopologies(t, func(t *testing.T, newClient clientFactory, o hybrid.Options, kill func(*testing.T, ...*instance)) {
		const n = 50
		a := newInstance(t, "A", newClient, o, invalidate.Options{})
		b := newInstance(t, "B", newClient, o, slowReconnect)
		warm(t, a, []*instance{b}, n, "v1")
		kill(t, a, b)
		if err := a.c.Clear(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "B: Bus.CaughtUp >= 1", func() bool { return b.c.Stats().Bus.CaughtUp >= 1 }, nil)
		for i := range n {
			if v, ok := getStr(t, b, lossKey(i)); ok {
				t.Fatalf("B: %s after a Clear it missed: got %q, want a miss", lossKey(i), v)
			}
		}
	})
}

// TestLossFlushCounted: where no counters can be named (a Remote prefix
// whose hash tag puts them in another slot than the keys), a loss without
// a log flushes all of L1, and Bus.Flushed counts it: every key is read
// again.
func TestLossFlushCounted(t *testing.T) {
	srv.NeedReal(t)
	const n = 1000
	o := hybrid.Options{Namespace: redistest.Prefix(t), ReplayLogLen: -1}
	so := l2.Options{Prefix: "{"}
	newIn := func(name string, bo invalidate.Options) *instance {
		rdb := singleNode(nil)(t)
		return newSplitInstance(t, name, rdb, rdb, so, o, bo)
	}
	a := newIn("A", invalidate.Options{})
	b := newIn("B", slowReconnect)
	warm(t, a, []*instance{b}, n, "v1")
	killPubSub(t, a, b)
	setStr(t, a, lossKey(0), "v2")
	waitStat(t, b, "Bus.Flushed", func(s hybrid.Stats) uint64 { return s.Bus.Flushed }, 1)
	reads := valueReads(b)
	for i := range n {
		want := "v1"
		if i == 0 {
			want = "v2"
		}
		fill(t, b, lossKey(i), want)
	}
	got := valueReads(b) - reads
	t.Logf("B: %d values read from Redis after the blip for %d keys (1 changed) with a flush; Bus %+v", got, n, b.c.Stats().Bus)
	if got != n {
		t.Errorf("B: %d values read from Redis after a flush, want %d", got, n)
	}
	if st := b.c.Stats(); st.Bus.CaughtUp != 0 {
		t.Errorf("B: Bus.CaughtUp %d, want 0", st.Bus.CaughtUp)
	}
}

// TestSeqRegression: a slot's counter goes back (as after a failover to a
// replica that had not seen the last writes); the next message in that
// slot carries a sequence lower than one B applied: B drops the slot's
// entries and counts it, and keeps the other slots'.
func TestSeqRegression(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	o := hybrid.Options{Namespace: redistest.Prefix(t), ReplayLogLen: -1}
	a := newInstance(t, "A", singleNode(nil), o, invalidate.Options{})
	b := newInstance(t, "B", singleNode(nil), o, invalidate.Options{})
	// Three keys: two in one slot, one in another.
	k1 := lossKey(0)
	var k2, k3 string
	s1 := slotOf(a, o.Namespace, k1)
	for i := 1; k2 == "" || k3 == ""; i++ {
		k := lossKey(i)
		if slotOf(a, o.Namespace, k) == s1 {
			if k2 == "" {
				k2 = k
			}
		} else if k3 == "" {
			k3 = k
		}
	}
	for _, k := range []string{k1, k1, k2, k3} { // k1 twice: its counter at 2 or more
		setStr(t, a, k, "v1")
	}
	waitStat(t, b, "Invalidations.Applied", statReceived, 4)
	for _, k := range []string{k2, k3} {
		fill(t, b, k, "v1")
	}
	counter := o.Namespace + ":\x00seq:{" + keyslot.Tag(s1) + "}"
	admin := srv.Client(t)
	if err := admin.DecrBy(ctx, counter, 2).Err(); err != nil {
		t.Fatal(err)
	}
	setStr(t, a, k1, "v2")
	waitStat(t, b, "Bus.SeqRegressions", func(s hybrid.Stats) uint64 { return s.Bus.SeqRegressions }, 1)
	reads := valueReads(b)
	fill(t, b, k2, "v1")
	if got := valueReads(b) - reads; got != 1 {
		t.Errorf("B: %s read %d times from Redis after its slot went back, want 1 (dropped)", k2, got)
	}
	fill(t, b, k3, "v1")
	if got := valueReads(b) - reads; got != 1 {
		t.Errorf("B: %s, in another slot, read from Redis: want an L1 hit", k3)
	}
}

// TestLossCatchUpSigned: with a Secret, sequences (outside the signature)
// move nothing an instance knows, so a catch-up drops every slot written
// since the counters were last read: more is read again than unsigned,
// nothing old is served, and L1 is not flushed.
func TestLossCatchUpSigned(t *testing.T) {
	noLogTopologies(t, func(t *testing.T, newClient clientFactory, o hybrid.Options, kill func(*testing.T, ...*instance)) {
		const n, changed = 100, 5
		o.Secret = []byte("s")
		agedClear(t, newClient(t), o.Namespace)
		a := newInstance(t, "A", newClient, o, invalidate.Options{})
		b := newInstance(t, "B", newClient, o, slowReconnect)
		warm(t, a, []*instance{b}, n, "v1")
		kill(t, a, b)
		for i := range changed {
			setStr(t, a, lossKey(i), "v2")
		}
		waitFor(t, 20*time.Second, "B: Bus.CaughtUp >= 1", func() bool { return b.c.Stats().Bus.CaughtUp >= 1 }, nil)
		for i := range n {
			want := "v1"
			if i < changed {
				want = "v2"
			}
			fill(t, b, lossKey(i), want)
		}
		if st := b.c.Stats(); st.Bus.Flushed != 0 {
			t.Errorf("B: Bus.Flushed %d, want 0", st.Bus.Flushed)
		}
	})
}
