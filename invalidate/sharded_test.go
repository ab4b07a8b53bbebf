package invalidate_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/keyslot"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

// newClusterClient returns a client of the test cluster, closed when t
// ends.
func newClusterClient(t *testing.T) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.ClusterAddrs(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestShardedCluster: on Redis Cluster a Bus subscribes a channel's shard
// channel in every slot, each on its slot's master; a message published
// on any of them (by a script's SPUBLISH on the node of its key, or by
// Publish) reaches every subscriber, and a classic PUBLISH does not.
func TestShardedCluster(t *testing.T) {
	ch := redistest.Prefix(t)
	rdb := newClusterClient(t)
	pub := newBus(t, newClusterClient(t), invalidate.Options{})
	b := newBus(t, newClusterClient(t), invalidate.Options{})
	r1, r2 := newRecorder(), newRecorder()
	subscribe(t, b, ch, r1)
	subscribe(t, b, ch, r2)

	publish(t, pub, ch, "through Publish")
	r1.expect(t, "through Publish")
	r2.expect(t, "through Publish")

	ctx := t.Context()
	slots := []uint16{0, 1, 5000, 5461, 5462, 10922, 10923, 16383}
	for _, s := range slots {
		if err := rdb.SPublish(ctx, keyslot.Channel(ch, s), fmt.Sprintf("slot %d", s)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Each master's messages come on a connection of their own: in order
	// per master, in any order between masters.
	var want []string
	for _, s := range slots {
		want = append(want, fmt.Sprintf("slot %d", s))
	}
	for _, r := range []*recorder{r1, r2} {
		var got []string
		for range slots {
			got = append(got, r.next(t))
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("messages: got %q, want %q in any order", got, want)
		}
	}
	// A script on the node of a key publishes in its key's slot.
	key := ch + ":k"
	script := redis.NewScript(`redis.call('SET', KEYS[1], ARGV[2]) redis.call('SPUBLISH', ARGV[1], ARGV[2]) return 1`)
	if err := script.Run(ctx, rdb, []string{key}, keyslot.Channel(ch, keyslot.Of(key)), "from a script").Err(); err != nil {
		t.Fatal(err)
	}
	r1.expect(t, "from a script")
	if err := rdb.Publish(ctx, ch, "classic").Err(); err != nil {
		t.Fatal(err)
	}
	publish(t, pub, ch, "after")
	r1.expect(t, "after") // the classic message never came
	if st := b.Stats(); st.Losses != 0 || st.Disconnects != 0 || st.Moved != 0 {
		t.Errorf("Stats %+v: want no loss", st)
	}
	if st := pub.Stats(); st.Received != 0 {
		t.Errorf("publisher's Stats %+v: it subscribed nothing", st)
	}
}

// TestShardedTagged: a channel with a hash tag is one shard channel, in
// its tag's slot, which Publish and a script in that slot both reach.
func TestShardedTagged(t *testing.T) {
	ch := "{" + redistest.Prefix(t) + "}:ch"
	rdb := newClusterClient(t)
	b := newBus(t, newClusterClient(t), invalidate.Options{})
	r := newRecorder()
	subscribe(t, b, ch, r)
	publish(t, b, ch, "one")
	r.expect(t, "one")
	if err := rdb.SPublish(t.Context(), ch, "two").Err(); err != nil {
		t.Fatal(err)
	}
	r.expect(t, "two")
	if n, err := rdb.Do(t.Context(), "PUBSUB", "SHARDNUMSUB", ch).Slice(); err != nil || len(n) != 2 {
		t.Fatalf("PUBSUB SHARDNUMSUB: %v, %v", n, err)
	}
}

// TestShardedConnectionKilled: when Redis closes a master's pub/sub
// connection, the Bus reports a loss, subscribes that master's slots on a
// new connection, reports the restore, and messages flow again in every
// slot.
func TestShardedConnectionKilled(t *testing.T) {
	ch := redistest.Prefix(t)
	rdb := newClusterClient(t)
	b := newBus(t, newClusterClient(t), invalidate.Options{ReconnectMin: 10 * time.Millisecond})
	r := newRecorder()
	subscribe(t, b, ch, r)
	ctx := t.Context()
	var mu sync.Mutex
	var victim string
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		if victim == "" {
			victim = node.Options().Addr
			return node.ClientKillByFilter(ctx, "TYPE", "pubsub").Err()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r.waitLoss(t, "the connection killed")
	r.waitLoss(t, "the restore")
	if n := r.losses.Load(); n != 2 {
		t.Fatalf("onLoss calls: %d, want 2 (lost, restored)", n)
	}
	for s := range uint16(keyslot.Count) {
		if s%1024 != 7 {
			continue
		}
		if err := rdb.SPublish(ctx, keyslot.Channel(ch, s), fmt.Sprint(s)).Err(); err != nil {
			t.Fatal(err)
		}
		r.expect(t, fmt.Sprint(s))
	}
	if st := b.Stats(); st.Disconnects != 1 || st.Reconnects != 1 {
		t.Errorf("Stats %+v: want 1 disconnect, 1 reconnect", st)
	}
}

// TestShardedSlotMigrates: when a slot moves to another master, the old
// one ends its subscriptions there (SUNSUBSCRIBE); the Bus reports a loss,
// subscribes the slot on its new master, reports the restore, and the
// slot's messages come from there. On a cluster of its own: moving a slot
// would disturb the other packages' tests on the shared one.
func TestShardedSlotMigrates(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 2})
	ch := redistest.Prefix(t)
	rdb := cl.Client(t)
	b := newBus(t, cl.Client(t), invalidate.Options{})
	r := newRecorder()
	subscribe(t, b, ch, r)
	ctx := t.Context()
	slot := keyslot.Of(ch + "{mig}")
	from, err := cl.MasterOf(ctx, int(slot))
	if err != nil {
		t.Fatal(err)
	}
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	to := masters[0]
	if to == from {
		to = masters[1]
	}
	if err := cl.MigrateSlot(ctx, int(slot), to); err != nil {
		t.Fatal(err)
	}
	r.waitLoss(t, "the slot moved")
	r.waitLoss(t, "the restore")
	node, err := cl.Admin(to)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.SPublish(ctx, keyslot.Channel(ch, slot), "moved").Err(); err != nil {
		t.Fatal(err)
	}
	r.expect(t, "moved")
	if err := rdb.SPublish(ctx, keyslot.Channel(ch, slot+1), "next").Err(); err != nil {
		t.Fatal(err)
	}
	r.expect(t, "next")
	if st := b.Stats(); st.Moved == 0 || st.Losses != 2 {
		t.Errorf("Stats %+v: want Moved > 0, Losses 2", st)
	}
}

// TestShardedFailover: when a master fails over to its replica, the Bus
// reports a loss, subscribes its slots on the new master, reports the
// restore, and messages of those slots flow from there.
func TestShardedFailover(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Replicas: 1})
	ch := redistest.Prefix(t)
	b := newBus(t, cl.Client(t), invalidate.Options{ReconnectMin: 10 * time.Millisecond})
	r := newRecorder()
	subscribe(t, b, ch, r)
	ctx := t.Context()
	const slot = 7
	old, err := cl.MasterOf(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	to, err := cl.Failover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	r.waitLoss(t, "the failover")
	r.waitLoss(t, "the restore")
	node, err := cl.Admin(to)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.SPublish(ctx, keyslot.Channel(ch, slot), "from the new master").Err(); err != nil {
		t.Fatal(err)
	}
	r.expect(t, "from the new master")
}

// TestShardedSlotNoOwner: a slot that no master owns keeps the
// subscription lost (the manager retries with backoff, the Bus says why
// Subscribe cannot finish); once it has a master again, the Bus restores.
func TestShardedSlotNoOwner(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 2})
	ctx := t.Context()
	const slot = 100
	owner, err := cl.MasterOf(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, m := range masters {
		c, err := cl.Admin(m)
		if err != nil {
			t.Fatal(err)
		}
		if ids[m], err = c.ClusterMyID(ctx).Result(); err != nil {
			t.Fatal(err)
		}
		if err := c.ClusterDelSlots(ctx, slot).Err(); err != nil {
			t.Fatalf("CLUSTER DELSLOTS on %s: %v", m, err)
		}
	}
	b := newBus(t, cl.Client(t), invalidate.Options{ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
	r := newRecorder()
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = b.Subscribe(sctx, redistest.Prefix(t), r.onMessage, r.onLoss)
	if err == nil || !strings.Contains(err.Error(), "no master") {
		t.Fatalf("Subscribe with a slot unowned: %v, want an error naming it", err)
	}
	// Owned again: a Subscribe completes.
	c, err := cl.Admin(owner)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ClusterAddSlots(ctx, slot).Err(); err != nil {
		t.Fatal(err)
	}
	for _, m := range masters {
		if m == owner {
			continue
		}
		a, err := cl.Admin(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ids[owner]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ch := redistest.Prefix(t) + ".2"
	subscribe(t, b, ch, r)
	if err := c.SPublish(ctx, keyslot.Channel(ch, slot), "owned").Err(); err != nil {
		t.Fatal(err)
	}
	r.expect(t, "owned")
}

// TestShardedUnsubscribe: a channel's shard channels stay subscribed while
// it has a subscriber, and its last subscriber's unsubscribe takes every
// one of them off every master, on the connections that go on serving
// the Bus's other channels.
func TestShardedUnsubscribe(t *testing.T) {
	ch, other := redistest.Prefix(t)+":a", redistest.Prefix(t)+":b"
	rdb := newClusterClient(t)
	b := newBus(t, newClusterClient(t), invalidate.Options{})
	ctx := t.Context()
	count := func() int {
		var mu sync.Mutex
		n := 0
		err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			names, err := node.Do(ctx, "PUBSUB", "SHARDCHANNELS", ch+"*").StringSlice()
			mu.Lock()
			n += len(names)
			mu.Unlock()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	r1, r2, ro := newRecorder(), newRecorder(), newRecorder()
	unsub1 := subscribe(t, b, ch, r1)
	unsub2 := subscribe(t, b, ch, r2)
	subscribe(t, b, other, ro)
	if n := count(); n != 16384 {
		t.Fatalf("subscribed: %d shard channels of %q on the masters, want 16384", n, ch)
	}
	unsub1()
	if n := count(); n != 16384 {
		t.Errorf("one of two subscribers gone: %d shard channels, want 16384", n)
	}
	publish(t, b, ch, "to the second")
	r2.expect(t, "to the second")
	unsub2()
	deadline := time.Now().Add(wait)
	for n := count(); n != 0; n = count() {
		if time.Now().After(deadline) {
			t.Fatalf("the last subscriber gone: %d shard channels left, want 0", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	publish(t, b, other, "still")
	ro.expect(t, "still")
	if st := b.Stats(); st.Losses != 0 || st.Disconnects != 0 {
		t.Errorf("Stats %+v: want no loss", st)
	}
}
