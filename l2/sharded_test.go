package l2_test

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
	"github.com/hybridcache/hybridcache/internal/message"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
	"github.com/hybridcache/hybridcache/tier"
)

// heardLog collects what a Bus subscriber hears.
type heardLog struct {
	mu   sync.Mutex
	msgs []string
	more chan struct{}
}

func (h *heardLog) add(b []byte) {
	h.mu.Lock()
	h.msgs = append(h.msgs, string(b))
	h.mu.Unlock()
	select {
	case h.more <- struct{}{}:
	default:
	}
}

// waitFor waits until every one of want was heard, and returns all heard.
func (h *heardLog) waitFor(t *testing.T, want ...string) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		h.mu.Lock()
		got := slices.Clone(h.msgs)
		h.mu.Unlock()
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool {
			return slices.ContainsFunc(got, func(g string) bool { return strings.HasSuffix(g, w) })
		})
		if len(missing) == 0 {
			return got
		}
		select {
		case <-h.more:
		case <-deadline:
			t.Fatalf("never heard %q (heard %q)", missing, got)
		}
	}
}

// TestClusterSharded: on Redis Cluster a Store announces over sharded
// pub/sub by default, and a Bus (sharded by default too) hears every
// message, whatever master wrote it: a write's script SPUBLISHes in its
// key's slot, sequenced at the slot's counter; a lease's release in the
// lease's slot; a batch's message and ReleaseLeases' in the channel's.
// A classic subscriber hears none of it.
func TestClusterSharded(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	prefix := redistest.Prefix(t) + ":"
	s := l2.New(rdb, l2.Options{Prefix: prefix})
	if !s.Info().Sharded {
		t.Fatal("Info().Sharded on Redis Cluster: false, want true")
	}
	if l2.New(rdb, l2.Options{Classic: true}).Info().Sharded {
		t.Error("Info().Sharded with Options.Classic: true, want false")
	}
	channel := prefix + "ch"
	busClient := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { busClient.Close() })
	bus := invalidate.New(busClient, invalidate.Options{})
	t.Cleanup(func() { bus.Close() })
	h := &heardLog{more: make(chan struct{}, 1)}
	unsub, err := bus.Subscribe(ctx, channel, h.add, func(bool) { h.add([]byte("loss")) })
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	classic := subscribe(t, redis.NewClient(&redis.Options{Addr: addrs[0]}), channel)

	var want []string
	for i := range 12 { // keys in several slots, on every master
		key := fmt.Sprint("{k", i, "}")
		for _, v := range []string{"a", "b"} {
			m := fmt.Sprintf("set %s %s", key, v)
			if _, err := s.Write(ctx, []tier.Write{{Key: key, Value: []byte(v), Seq: key + "seq", Msg: []byte(m)}}, tier.Feed{Channel: channel}); err != nil {
				t.Fatalf("Write(%s): %v", key, err)
			}
			want = append(want, m)
		}
	}
	got := h.waitFor(t, want...)
	for i := range 12 {
		a := slices.IndexFunc(got, func(g string) bool { return strings.HasSuffix(g, fmt.Sprintf("set {k%d} a", i)) })
		b := slices.IndexFunc(got, func(g string) bool { return strings.HasSuffix(g, fmt.Sprintf("set {k%d} b", i)) })
		if a > b {
			t.Errorf("k%d: its second write heard first", i)
		}
		if got[b][0] != message.VersionSequenced {
			t.Errorf("k%d: message %q not sequenced", i, got[b])
		}
	}

	// A holder's write with a lease someone asked for: the release, in
	// the lease's slot, announces.
	if ls, err := s.TakeLeases(ctx, []string{"lease:x"}, []string{"x"}, "me", time.Minute); err != nil || !ls[0].Taken {
		t.Fatalf("TakeLeases: %v, %v", ls, err)
	}
	if _, err := s.TakeLeases(ctx, []string{"lease:x"}, []string{"x"}, "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, []tier.Write{{Key: "x", Value: []byte("X"), If: tier.IfAbsent, Lease: "lease:x", Token: "me", Msg: []byte("filled x")}}, tier.Feed{Channel: channel}); err != nil {
		t.Fatal(err)
	}
	// ReleaseLeases and a batch's message go on the channel's own slot.
	if ls, err := s.TakeLeases(ctx, []string{"lease:y"}, []string{"y"}, "me", time.Minute); err != nil || !ls[0].Taken {
		t.Fatalf("TakeLeases: %v, %v", ls, err)
	}
	if _, err := s.TakeLeases(ctx, []string{"lease:y"}, []string{"y"}, "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLeases(ctx, []string{"lease:y"}, "me", []byte("failed y"), tier.Feed{Channel: channel}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, []tier.Write{{Key: "p", Value: []byte("P")}, {Key: "q", Value: []byte("Q")}}, tier.Feed{Channel: channel, Msg: []byte("batch p q")}); err != nil {
		t.Fatal(err)
	}
	got = h.waitFor(t, "filled x", "failed y", "batch p q")
	if slices.Contains(got, "loss") {
		t.Errorf("the bus reported a loss: %q", got)
	}
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if m, err := classic.ReceiveMessage(tctx); err == nil {
		t.Errorf("a classic subscriber heard %q", m.Payload)
	}
}

// TestClusterLeaseInKeySlot: on Redis Cluster a lease in its key's slot (a
// hash tag, as package hybrid names leases) is taken together with the
// read of its key, and released by the write's own script, which
// announces: one round trip each, where a lease in another slot costs two.
func TestClusterLeaseInKeySlot(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	prefix := redistest.Prefix(t) + ":"
	s := l2.New(rdb, l2.Options{Prefix: prefix})
	channel := prefix + "ch"
	busClient := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { busClient.Close() })
	bus := invalidate.New(busClient, invalidate.Options{})
	t.Cleanup(func() { bus.Close() })
	h := &heardLog{more: make(chan struct{}, 1)}
	unsub, err := bus.Subscribe(ctx, channel, h.add, func(bool) {})
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	var c counter
	rdb.AddHook(&c)
	for _, tc := range []struct {
		key, lease string
		roundTrips int
	}{
		{"{u1}", "lease:{u1}", 1},
		{"u2", "lease:u2", 2}, // other slots
	} {
		if _, err := s.Write(ctx, []tier.Write{{Key: tc.key, Value: []byte("old")}}, tier.Feed{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.TakeLeases(ctx, []string{tc.lease}, []string{tc.key}, "warm", time.Millisecond); err != nil {
			t.Fatal(err) // loads the script
		}
		time.Sleep(5 * time.Millisecond)
		c.reset()
		ls, err := s.TakeLeases(ctx, []string{tc.lease}, []string{tc.key}, "me", time.Minute)
		if err != nil || !ls[0].Taken || string(ls[0].Value) != "old" {
			t.Fatalf("%s: TakeLeases = %+v, %v; want taken, with the key's value", tc.key, ls, err)
		}
		if cmds, pipes := c.counts(); cmds+pipes != tc.roundTrips {
			t.Errorf("%s: take: %d commands, %d pipelines; want %d round trips (%s)", tc.key, cmds, pipes, tc.roundTrips, &c)
		}
		if _, err := s.TakeLeases(ctx, []string{tc.lease}, []string{tc.key}, "other", time.Minute); err != nil {
			t.Fatal(err)
		}
		c.reset()
		w := tier.Write{Key: tc.key, Value: []byte("new"), If: tier.IfEqual, Old: []byte("old"), Lease: tc.lease, Token: "me", Msg: []byte("filled " + tc.key)}
		if stored, err := s.Write(ctx, []tier.Write{w}, tier.Feed{Channel: channel}); err != nil || !stored[0] {
			t.Fatalf("%s: Write = %v, %v", tc.key, stored, err)
		}
		if cmds, pipes := c.counts(); cmds+pipes != tc.roundTrips {
			t.Errorf("%s: write: %d commands, %d pipelines; want %d round trips (%s)", tc.key, cmds, pipes, tc.roundTrips, &c)
		}
		if n, err := rdb.Exists(ctx, prefix+tc.lease).Result(); err != nil || n != 0 {
			t.Errorf("%s: the lease is still there (%d, %v)", tc.key, n, err)
		}
		h.waitFor(t, "filled "+tc.key)
	}
}

// TestClusterSlotBatchAtomic: on Redis Cluster a batch announced as a
// whole whose keys share one slot goes as one transaction on the slot's
// master, its message published in it (Info().AtomicSlotBatch); one over
// several slots announces after its writes.
func TestClusterSlotBatchAtomic(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	prefix := redistest.Prefix(t) + ":"
	for _, classic := range []bool{false, true} {
		s := l2.New(rdb, l2.Options{Prefix: prefix, Classic: classic})
		if !s.Info().AtomicSlotBatch || s.Info().AtomicBatch {
			t.Fatalf("Info() = %+v, want AtomicSlotBatch only", s.Info())
		}
		channel := fmt.Sprint(prefix, "ch", classic)
		busClient := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { busClient.Close() })
		bus := invalidate.New(busClient, invalidate.Options{Classic: classic})
		t.Cleanup(func() { bus.Close() })
		h := &heardLog{more: make(chan struct{}, 1)}
		unsub, err := bus.Subscribe(ctx, channel, h.add, func(bool) {})
		if err != nil {
			t.Fatal(err)
		}
		var c counter
		rdb.AddHook(&c)
		ws := []tier.Write{
			{Key: "{s}a", Value: []byte("A"), Seq: "{s}seq"},
			{Key: "{s}b", Value: []byte("B"), Seq: "{s}seq", If: tier.IfEqual, Old: []byte("x"), Msg: []byte("own b")},
		}
		c.reset()
		stored, err := s.Write(ctx, ws, tier.Feed{Channel: channel, Msg: []byte("batch a b")})
		if err != nil || !stored[0] || stored[1] {
			t.Fatalf("classic %v: Write = %v, %v", classic, stored, err)
		}
		if cmds, pipes := c.counts(); cmds != 0 || pipes != 1 {
			t.Errorf("classic %v: %d commands, %d pipelines; want one transaction (%s)", classic, cmds, pipes, &c)
		}
		h.waitFor(t, "batch a b")
		if v, err := rdb.Get(ctx, prefix+"{s}a").Result(); err != nil || v != "A" {
			t.Errorf("classic %v: {s}a = %q, %v", classic, v, err)
		}
		unsub()
	}
}

// TestClusterAskedWriteAnnounced: while a slot migrates, a write of a key
// that has moved to the importing master is asked there (ASK), and its
// script's SPUBLISH reaches that master's shard only, while the
// instances listen on the slot's owner until the move ends. The Store
// announces such a write again on the owner: a subscriber hears it.
func TestClusterAskedWriteAnnounced(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 2})
	ctx := t.Context()
	prefix := redistest.Prefix(t) + ":"
	// A client that reached every node before New: the Store hooks the
	// node clients it has already, not only those it makes later.
	rdb := cl.Client(t)
	if err := rdb.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	s := l2.New(rdb, l2.Options{Prefix: prefix})
	channel := prefix + "ch"
	bus := invalidate.New(cl.Client(t), invalidate.Options{})
	t.Cleanup(func() { bus.Close() })
	h := &heardLog{more: make(chan struct{}, 1)}
	unsub, err := bus.Subscribe(ctx, channel, h.add, func(bool) { h.add([]byte("loss")) })
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()

	key, seq := "{m}k", "{m}seq"
	write := func(v, msg string) {
		t.Helper()
		if _, err := s.Write(ctx, []tier.Write{{Key: key, Value: []byte(v), Seq: seq, Msg: []byte(msg)}}, tier.Feed{Channel: channel}); err != nil {
			t.Fatalf("Write(%s): %v", msg, err)
		}
	}
	write("a", "before the move")
	h.waitFor(t, "before the move")

	// Half a move: the slot MIGRATING on its master, IMPORTING on the
	// other, the key and its counter moved there; the slot still served by
	// its master, where the bus listens.
	slot := int(keyslot.Of(prefix + key))
	srcAddr, err := cl.MasterOf(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dstAddr := masters[0]
	if dstAddr == srcAddr {
		dstAddr = masters[1]
	}
	src, err := cl.Admin(srcAddr)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := cl.Admin(dstAddr)
	if err != nil {
		t.Fatal(err)
	}
	srcID, err := src.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := dst.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		t.Fatal(err)
	}
	port := dstAddr[strings.LastIndex(dstAddr, ":")+1:]
	if err := src.Do(ctx, "MIGRATE", "127.0.0.1", port, "", 0, 5000, "KEYS", prefix+key, prefix+seq).Err(); err != nil {
		t.Fatal(err)
	}

	write("b", "during the move")
	pipe := dst.Pipeline()
	pipe.Do(ctx, "ASKING")
	held := pipe.Get(ctx, prefix+key)
	if _, err := pipe.Exec(ctx); err != nil || !strings.HasSuffix(held.Val(), "b") {
		t.Fatalf("the key on the importing master: %q, %v; want the write made there", held.Val(), err)
	}
	got := h.waitFor(t, "during the move")
	if slices.Contains(got, "loss") {
		t.Errorf("the bus reported a loss: %q", got)
	}
}
