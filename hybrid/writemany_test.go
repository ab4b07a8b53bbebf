package hybrid_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

// This file tests SetMany and DeleteMany against Redis, across instances.

var manyKeys = []string{"k1", "k2", "k3"}

// warmMany sets keys to v through w and fills them into r's L1 from Redis.
func warmMany(t *testing.T, w, r *instance, keys []string, v string) {
	t.Helper()
	recv := r.c.Stats().Invalidations.Applied
	for _, k := range keys {
		setStr(t, w, k, v)
	}
	waitStat(t, r, "Invalidations.Applied", statReceived, recv+uint64(len(keys)))
	for _, k := range keys {
		fill(t, r, k, v)
	}
}

// atomicBatch reports whether in's Redis makes an announced batch atomic
// (one server: yes; Redis Cluster: no).
func atomicBatch(in *instance) bool { return in.remote.Info().AtomicBatch }

// TestSetManyAcrossInstances: A's SetMany of three keys that B holds is one
// Write call with one message for the batch. A reads its own writes from L1;
// Redis holds them; B applies the one message: with a Secret on one Redis
// server it swaps each value in (no Redis read), otherwise (no Secret, or
// Redis Cluster, whose batch message carries no values) it drops each key
// and reads it again. A's own message comes back and leaves its L1 as it
// is, and a later write of B's is swapped in on A again (the echo of every
// key of the batch is settled).
func TestSetManyAcrossInstances(t *testing.T) {
	srv.NeedReal(t)
	eachTopology(t, func(t *testing.T, newClient clientFactory, secret []byte) {
		ctx := t.Context()
		o := hybrid.Options{Namespace: redistest.Prefix(t), Secret: secret}
		ins := newInstances(t, 2, newClient, o)
		a, b := ins[0], ins[1]
		warmMany(t, a, b, manyKeys, "v1")
		time.Sleep(2 * time.Millisecond) // a swap needs a write in a later millisecond than the copy
		fill(t, a, "k1", "v1")
		writes, batches := a.remote.writeCalls.Load(), a.remote.batchMsgs.Load()
		sa, sb, bGets := a.c.Stats(), b.c.Stats(), b.remote.gets.Load()

		if err := a.c.SetMany(ctx, map[string]string{"k1": "v2", "k2": "v2", "k3": "v2"}); err != nil {
			t.Fatalf("A: SetMany: %v", err)
		}
		if got, gotB := a.remote.writeCalls.Load()-writes, a.remote.batchMsgs.Load()-batches; got != 1 || gotB != 1 {
			t.Errorf("A: SetMany of 3 keys made %d Write calls (%d announced as a batch), want 1 (1)", got, gotB)
		}
		if got := a.c.Stats().Invalidations.Sent - sa.Invalidations.Sent; got != 1 {
			t.Errorf("A: SetMany sent %d messages, want 1", got)
		}
		aGets := a.remote.gets.Load()
		for _, k := range manyKeys {
			if v, ok := getStr(t, a, k); v != "v2" || !ok {
				t.Errorf("A right after SetMany: %s = %q, %v; want v2", k, v, ok)
			}
			if v, ok := redisValue(t, a.rdb, o.Namespace, k); v != "v2" || !ok {
				t.Errorf("Redis after SetMany: %s = %q, %v; want v2", k, v, ok)
			}
		}
		if got := a.remote.gets.Load() - aGets; got != 0 {
			t.Errorf("A read %d keys from Redis after its SetMany, want 0 (L1 holds its writes)", got)
		}

		waitStat(t, b, "Invalidations.Applied", statReceived, sb.Invalidations.Applied+1)
		for _, k := range manyKeys {
			if v, ok := getStr(t, b, k); v != "v2" || !ok {
				t.Errorf("B after A's SetMany: %s = %q, %v; want v2", k, v, ok)
			}
		}
		st := b.c.Stats()
		swapped, reads := st.Invalidations.Swapped-sb.Invalidations.Swapped, b.remote.gets.Load()-bGets
		if got := st.Invalidations.Applied - sb.Invalidations.Applied; got != 1 {
			t.Errorf("B applied %d messages for A's SetMany, want 1", got)
		}
		if secret != nil && atomicBatch(a) {
			if swapped != 3 || reads != 0 {
				t.Errorf("B: swapped %d, read %d from Redis; want the 3 values swapped in from the message, no read", swapped, reads)
			}
		} else if swapped != 0 || reads != 3 {
			t.Errorf("B: swapped %d, read %d from Redis; want the 3 keys dropped and read again", swapped, reads)
		}

		// A's own message comes back, and changes nothing of A's.
		waitStat(t, a, "Invalidations.Own", statOwnIgnored, sa.Invalidations.Own+1)
		hits := a.c.Stats().L1.Hits
		for _, k := range manyKeys {
			fill(t, a, k, "v2")
		}
		if got := a.c.Stats().L1.Hits - hits; got != 3 {
			t.Errorf("A after its own message came back: %d L1 hits of 3", got)
		}
		if secret == nil {
			return
		}
		// Every key's echo is settled: B's next write is swapped in on A.
		swappedA := a.c.Stats().Invalidations.Swapped
		time.Sleep(2 * time.Millisecond) // a swap needs a write in a later millisecond than A's copy
		setStr(t, b, "k3", "v3")
		waitStat(t, a, "Invalidations.Swapped", func(s hybrid.Stats) uint64 { return s.Invalidations.Swapped }, swappedA+1)
		if v, _ := getStr(t, a, "k3"); v != "v3" {
			t.Errorf("A after B's Set: k3 = %q, want v3", v)
		}
	})
}

// TestDeleteManyAcrossInstances: A's DeleteMany (a key named twice) is one
// Write call of one tombstone per key with one message; A and B miss the
// keys afterwards, and Redis holds tombstones; the key not named stays.
func TestDeleteManyAcrossInstances(t *testing.T) {
	srv.NeedReal(t)
	eachTopology(t, func(t *testing.T, newClient clientFactory, secret []byte) {
		ctx := t.Context()
		o := hybrid.Options{Namespace: redistest.Prefix(t), Secret: secret}
		ins := newInstances(t, 2, newClient, o)
		a, b := ins[0], ins[1]
		warmMany(t, a, b, manyKeys, "v1")
		writes, keys := a.remote.writeCalls.Load(), a.remote.writeKeys.Load()
		sb := b.c.Stats()

		if err := a.c.DeleteMany(ctx, []string{"k2", "k1", "k2"}); err != nil {
			t.Fatalf("A: DeleteMany: %v", err)
		}
		if got, n := a.remote.writeCalls.Load()-writes, a.remote.writeKeys.Load()-keys; got != 1 || n != 2 {
			t.Errorf("A: DeleteMany made %d Write calls of %d writes, want 1 of 2", got, n)
		}
		waitStat(t, b, "Invalidations.Applied", statReceived, sb.Invalidations.Applied+1)
		for _, in := range ins {
			for _, k := range []string{"k1", "k2"} {
				if v, ok := getStr(t, in, k); ok {
					t.Errorf("%s after DeleteMany: %s = %q, want a miss", in.name, k, v)
				}
				if v, ok := redisValue(t, a.rdb, o.Namespace, k); ok {
					t.Errorf("Redis after DeleteMany: %s = %q, want a tombstone", k, v)
				}
			}
		}
		if got := b.c.Stats().Invalidations.Applied - sb.Invalidations.Applied; got != 1 {
			t.Errorf("B applied %d messages for A's DeleteMany, want 1", got)
		}
		gets := b.remote.gets.Load()
		fill(t, b, "k3", "v1")
		if got := b.remote.gets.Load() - gets; got != 0 {
			t.Errorf("B read k3, not deleted, from Redis (%d reads): want it still in L1", got)
		}
	})
}

// TestSetManyInlineMax: with a Secret on one Redis server, a SetMany's
// message carries values while their total stays within InlineMaxBytes;
// a peer swaps those in and reads the others again.
func TestSetManyInlineMax(t *testing.T) {
	srv.NeedReal(t)
	ctx := t.Context()
	o := hybrid.Options{Namespace: redistest.Prefix(t), Secret: []byte("s"), InlineMaxBytes: 64}
	ins := newInstances(t, 2, singleNode(nil), o)
	a, b := ins[0], ins[1]
	warmMany(t, a, b, manyKeys, "v1")
	time.Sleep(2 * time.Millisecond) // a swap needs a write in a later millisecond than the copy
	sb, gets := b.c.Stats(), b.remote.gets.Load()
	big := strings.Repeat("b", 100)
	if err := a.c.SetMany(ctx, map[string]string{"k1": "a", "k2": big, "k3": "c"}); err != nil {
		t.Fatal(err)
	}
	waitStat(t, b, "Invalidations.Applied", statReceived, sb.Invalidations.Applied+1)
	for k, want := range map[string]string{"k1": "a", "k2": big, "k3": "c"} {
		fill(t, b, k, want)
	}
	if swapped, reads := b.c.Stats().Invalidations.Swapped-sb.Invalidations.Swapped, b.remote.gets.Load()-gets; swapped != 2 || reads != 1 {
		t.Errorf("B: swapped %d, read %d from Redis; want k1 and k3 swapped in, k2 (over InlineMaxBytes) read", swapped, reads)
	}
}

// TestWriteManyReplayAfterLoss: B's bus is cut while A makes a SetMany and
// a DeleteMany of keys B holds. Once its bus is back, B replays the two log
// entries (one per batch) and drops each key they name; the keys they do
// not name are still L1 hits.
func TestWriteManyReplayAfterLoss(t *testing.T) {
	srv.NeedReal(t)
	ctx := t.Context()
	o := hybrid.Options{Namespace: redistest.Prefix(t), Secret: []byte("s")}
	a := newInstance(t, "A", singleNode(nil), o, invalidate.Options{})
	b := newInstance(t, "B", singleNode(nil), o, slowReconnect)
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	warmMany(t, a, b, keys, "v1")

	killPubSub(t, b)
	recv := b.c.Stats().Invalidations.Applied
	if err := a.c.SetMany(ctx, map[string]string{"k0": "v2", "k1": "v2"}); err != nil {
		t.Fatal(err)
	}
	if err := a.c.DeleteMany(ctx, []string{"k2", "k3"}); err != nil {
		t.Fatal(err)
	}
	if got := b.c.Stats().Invalidations.Applied; got != recv {
		t.Fatalf("B received %d message(s) while its connection was down: the test did not make it miss A's writes", got-recv)
	}
	waitStat(t, b, "Bus.Replays", statReplays, 1)
	st := b.c.Stats()
	if st.Bus.Replayed < 2 || st.Bus.Flushed != 0 {
		t.Errorf("B: Bus.Replayed %d, Bus.Flushed %d; want at least the 2 batches' entries, no flush", st.Bus.Replayed, st.Bus.Flushed)
	}
	gets := b.remote.gets.Load()
	for k, want := range map[string]string{"k0": "v2", "k1": "v2", "k4": "v1", "k5": "v1"} {
		fill(t, b, k, want)
	}
	for _, k := range []string{"k2", "k3"} {
		if v, ok := getStr(t, b, k); ok {
			t.Errorf("B after the replay: %s = %q, want a miss", k, v)
		}
	}
	if got := b.remote.gets.Load() - gets; got != 4 {
		t.Errorf("B read %d keys from Redis after the replay, want 4 (the keys of the two batches)", got)
	}
}

// TestWriteManyQueued: while A cannot reach Redis, its SetMany and
// DeleteMany fail with ErrQueued; A serves its new values (and misses the
// deleted key) meanwhile. Once Redis is back, each key is replayed as a
// write of its own, and B, which held the old values, converges.
func TestWriteManyQueued(t *testing.T) {
	srv.NeedReal(t)
	ctx := t.Context()
	o := hybrid.Options{Namespace: redistest.Prefix(t), QueueWrites: 100}
	bo := invalidate.Options{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond}
	p := startProxy(t, srv.Addr)
	a := newInstance(t, "A", via(p, shortTimeouts), o, bo)
	b := newInstance(t, "B", singleNode(shortTimeouts), o, bo)
	warmMany(t, a, b, manyKeys, "v1")

	p.Cut()
	waitStat(t, a, "Bus.Losses", statBusLosses, 1)
	if err := a.c.SetMany(ctx, map[string]string{"k1": "v2", "k2": "v2"}); !errors.Is(err, hybrid.ErrQueued) {
		t.Fatalf("A: SetMany during the outage: got %v, want ErrQueued", err)
	}
	if err := a.c.DeleteMany(ctx, []string{"k3"}); !errors.Is(err, hybrid.ErrQueued) {
		t.Fatalf("A: DeleteMany during the outage: got %v, want ErrQueued", err)
	}
	if got := a.c.Stats().Queue.Queued; got != 3 {
		t.Errorf("A: Queue.Queued %d, want 3 (each key of the batches)", got)
	}
	for k, want := range map[string]string{"k1": "v2", "k2": "v2"} {
		if v, _ := getStr(t, a, k); v != want {
			t.Errorf("A during the outage: %s = %q, want its own %s", k, v, want)
		}
	}
	if v, ok := getStr(t, a, "k3"); ok {
		t.Errorf("A during the outage: k3 = %q, want its own delete", v)
	}

	setFault(t, p.Pass())
	waitQueue(t, a.c, 3, 0)
	admin := srv.Client(t)
	for k, want := range map[string]string{"k1": "v2", "k2": "v2"} {
		if v, ok := redisValue(t, admin, o.Namespace, k); v != want || !ok {
			t.Errorf("Redis after the replay: %s = %q, %v; want %s", k, v, ok, want)
		}
	}
	waitFor(t, 10*time.Second, "B to converge", func() bool {
		k1, _ := getStr(t, b, "k1")
		k2, _ := getStr(t, b, "k2")
		_, k3 := getStr(t, b, "k3")
		return k1 == "v2" && k2 == "v2" && !k3
	}, nil)
}

// TestWriteManyRefusesBadKeys: a batch with keys no call accepts, or a
// value too large, is refused whole: the error names each, wraps each
// sentinel, and nothing is written or announced.
func TestWriteManyRefusesBadKeys(t *testing.T) {
	srv.NeedReal(t)
	ctx := t.Context()
	o := hybrid.Options{Namespace: redistest.Prefix(t), MaxValueBytes: 64}
	ins := newInstances(t, 2, singleNode(nil), o)
	a, b := ins[0], ins[1]
	warmMany(t, a, b, []string{"ok"}, "v1")
	writes, sent := a.remote.writeCalls.Load(), a.c.Stats().Invalidations.Sent

	err := a.c.SetMany(ctx, map[string]string{"": "x", "\x00r": "y", "ok": "v2"})
	if !errors.Is(err, hybrid.ErrEmptyKey) || !errors.Is(err, hybrid.ErrReservedKey) || !strings.Contains(err.Error(), `"\x00r"`) {
		t.Errorf("SetMany with an empty and a reserved key: got %v, want both named and wrapped", err)
	}
	err = a.c.SetMany(ctx, map[string]string{"big": strings.Repeat("x", 100), "ok": "v2"})
	if !errors.Is(err, hybrid.ErrValueTooLarge) || !strings.Contains(err.Error(), `"big"`) {
		t.Errorf("SetMany with a value over MaxValueBytes: got %v, want ErrValueTooLarge naming it", err)
	}
	// Bad keys and a bad value in one batch: each is named, each sentinel
	// wrapped.
	err = a.c.SetMany(ctx, map[string]string{"": "x", "\x00r": "y", "big": strings.Repeat("x", 100), "ok": "v2"})
	for _, want := range []error{hybrid.ErrEmptyKey, hybrid.ErrReservedKey, hybrid.ErrValueTooLarge} {
		if !errors.Is(err, want) {
			t.Errorf("SetMany with bad keys and a value over MaxValueBytes: got %v, want it to wrap %v", err, want)
		}
	}
	for _, name := range []string{`""`, `"\x00r"`, `"big"`} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("SetMany with bad keys and a value over MaxValueBytes: got %v, want it to name %s", err, name)
		}
	}
	if err := a.c.DeleteMany(ctx, []string{"ok", ""}); !errors.Is(err, hybrid.ErrEmptyKey) {
		t.Errorf("DeleteMany with an empty key: got %v, want ErrEmptyKey", err)
	}
	if err := a.c.SetMany(ctx, nil); err != nil {
		t.Errorf("SetMany of nothing: %v", err)
	}
	if err := a.c.DeleteMany(ctx, nil); err != nil {
		t.Errorf("DeleteMany of nothing: %v", err)
	}
	if got := a.remote.writeCalls.Load() - writes; got != 0 {
		t.Errorf("refused batches made %d Write calls, want 0", got)
	}
	if got := a.c.Stats().Invalidations.Sent - sent; got != 0 {
		t.Errorf("refused batches sent %d messages, want 0", got)
	}
	if v, _ := redisValue(t, a.rdb, o.Namespace, "ok"); v != "v1" {
		t.Errorf("Redis after refused batches: ok = %q, want v1", v)
	}
	for _, in := range ins {
		if v, _ := getStr(t, in, "ok"); v != "v1" {
			t.Errorf("%s after refused batches: ok = %q, want v1", in.name, v)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.c.SetMany(ctx, map[string]string{"ok": "v3"}); !errors.Is(err, context.Canceled) {
		t.Errorf("SetMany with a cancelled ctx: got %v, want context.Canceled", err)
	}
}

// TestSetManyAnnounceFails: a batch whose writes are made but whose message
// cannot go out returns the error, unqueued (nothing is left to replay),
// and keeps the written values in L1 here.
func TestSetManyAnnounceFails(t *testing.T) {
	ctx := t.Context()
	s := newSharedTier(t)
	o := s.options()
	o.QueueWrites = 10
	c := newTestCache[string](t, o)
	errBus := errors.New("bus down")
	s.bus.FailWith(errBus)
	err := c.SetMany(ctx, map[string]string{"a": "1", "b": "2"})
	if !errors.Is(err, errBus) || errors.Is(err, hybrid.ErrQueued) {
		t.Errorf("SetMany with the bus failing: got %v, want %v, not queued", err, errBus)
	}
	if q := c.Stats().Queue.Queued; q != 0 {
		t.Errorf("Queue.Queued %d, want 0", q)
	}
	s.bus.FailWith(nil)
	for k, want := range map[string]string{"a": "1", "b": "2"} {
		if v, ok := s.stored(t, k); v != want || !ok {
			t.Errorf("shared tier: %s = %q, %v; want %s", k, v, ok, want)
		}
		if v, err := c.GetOrCreate(ctx, k, neverLoad(t)); v != want || err != nil {
			t.Errorf("GetOrCreate(%s) = %q, %v; want %s", k, v, err, want)
		}
	}
	if calls := s.remote.Calls(); calls.Get != 1 {
		t.Errorf("%d reads of the shared tier, want 1 (the clear record, before the write): L1 keeps what was written", calls.Get)
	}
}

// TestWriteManyBreaker: with the breaker open, a batch makes no call to the
// shared tier and returns ErrUnavailable; its keys leave L1 (a SetMany's
// new values are not kept: nothing holds them), as a Set's.
func TestWriteManyBreaker(t *testing.T) {
	ctx := t.Context()
	s := newSharedTier(t)
	o := s.options()
	o.BreakerThreshold, o.BreakerOpenFor = 1, time.Minute
	c := newTestCache[string](t, o)
	set(t, c, "a", "old")
	s.remote.FailWith(errDown)
	if err := c.SetMany(ctx, map[string]string{"a": "1", "b": "2"}); !errors.Is(err, errDown) {
		t.Fatalf("SetMany: got %v, want %v", err, errDown)
	}
	s.remote.FailWith(nil)
	writes := s.remote.Calls().Write
	if err := c.SetMany(ctx, map[string]string{"a": "1"}); !errors.Is(err, hybrid.ErrUnavailable) {
		t.Errorf("SetMany with the breaker open: got %v, want ErrUnavailable", err)
	}
	if err := c.DeleteMany(ctx, []string{"a", "b"}); !errors.Is(err, hybrid.ErrUnavailable) {
		t.Errorf("DeleteMany with the breaker open: got %v, want ErrUnavailable", err)
	}
	if got := s.remote.Calls().Write - writes; got != 0 {
		t.Errorf("%d Write calls with the breaker open, want 0", got)
	}
	if v, ok := getString(t, c, "a"); ok {
		t.Errorf("Get(a) after failed batches: %q, want a miss (the breaker keeps the read away too)", v)
	}
	if st := c.Stats(); st.L2.Skipped < 2 || st.L2.BreakerOpens != 1 {
		t.Errorf("L2.Skipped %d, L2.BreakerOpens %d; want at least 2, and 1", st.L2.Skipped, st.L2.BreakerOpens)
	}
}
