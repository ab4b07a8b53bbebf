package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/faultproxy"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// lossKeys are the warm keys of the loss tests.
func lossKey(i int) string { return fmt.Sprint("k", i) }

// warm sets n keys to v through w and fills them into each of readers'
// L1 from Redis.
func warm(t *testing.T, w *instance, readers []*instance, n int, v string) {
	t.Helper()
	for i := range n {
		setStr(t, w, lossKey(i), v)
	}
	for _, r := range readers {
		waitStat(t, r, "Invalidations.Applied", statReceived, uint64(n))
		for i := range n {
			fill(t, r, lossKey(i), v)
		}
	}
}

// killPubSub cuts every pub/sub connection of the package's Redis (tests
// of this package do not run in parallel) and waits until each of ins has
// seen its connection drop.
func killPubSub(t *testing.T, ins ...*instance) {
	t.Helper()
	before := make([]uint64, len(ins))
	for i, in := range ins {
		before[i] = in.c.Stats().Bus.Losses
	}
	if err := srv.Client(t).Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	for i, in := range ins {
		waitStat(t, in, "Bus.Losses", statBusLosses, before[i]+1)
	}
}

// slowReconnect keeps a bus away for 300 ms after its connection drops.
var slowReconnect = invalidate.Options{ReconnectMin: 300 * time.Millisecond, ReconnectMax: 300 * time.Millisecond}

// TestLossReplayKeepsL1: the pub/sub connections are killed while A writes
// 10 of 1,000 keys that B and C hold. Once their buses are back, B and C
// replay the 10 messages they missed from Redis's log: the 10 keys are new
// on both, and the other 990 are still L1 hits (no flush, no load, no
// Redis read). One replay each, no fallback flush.
func TestLossReplayKeepsL1(t *testing.T) {
	srv.NeedReal(t)
	const n, changed = 1000, 10
	o := hybrid.Options{Namespace: redistest.Prefix(t), Secret: []byte("s")}
	a := newInstance(t, "A", singleNode(nil), o, invalidate.Options{})
	b := newInstance(t, "B", singleNode(nil), o, slowReconnect)
	c := newInstance(t, "C", singleNode(nil), o, slowReconnect)
	readers := []*instance{b, c}
	warm(t, a, readers, n, "v1")

	killPubSub(t, b, c)
	recv := []uint64{b.c.Stats().Invalidations.Applied, c.c.Stats().Invalidations.Applied}
	for i := range changed {
		setStr(t, a, lossKey(i), "v2")
	}
	expired := lossKey(changed) // and one expired, logged too
	if err := a.c.Expire(context.Background(), expired); err != nil {
		t.Fatal(err)
	}
	for i, r := range readers {
		if got := r.c.Stats().Invalidations.Applied; got != recv[i] {
			t.Fatalf("%s received %d message(s) while its connection was down: the test did not make it miss A's writes", r.name, got-recv[i])
		}
		waitStat(t, r, "Bus.Replays", func(s hybrid.Stats) uint64 { return s.Bus.Replays }, 1)
	}
	for _, r := range readers {
		if v, err := r.c.GetOrCreate(context.Background(), expired, func(context.Context, string) (string, error) { return "reloaded", nil }); err != nil || v != "reloaded" {
			t.Errorf("%s: %s after its Expire was replayed: got %q, %v, want it reloaded", r.name, expired, v, err)
		}
		before, gets := r.c.Stats(), r.remote.gets.Load()
		for i := range n {
			if i == changed {
				continue
			}
			want := "v1"
			if i < changed {
				want = "v2"
			}
			fill(t, r, lossKey(i), want)
		}
		st := r.c.Stats()
		if got := r.remote.gets.Load() - gets; got != changed {
			t.Errorf("%s: %d Redis GETs after the replay, want %d (only the keys changed during the loss)", r.name, got, changed)
		}
		if got := st.L1.Hits - before.L1.Hits; got != n-changed-1 {
			t.Errorf("%s: %d L1 hits after the replay, want %d", r.name, got, n-changed-1)
		}
		// At most the expired key is loaded (the other instance may have
		// written its reload back already).
		if st.Bus.Replays != 1 || st.Bus.Flushed != 0 || st.Bus.Replayed < changed+1 || st.Load.Calls > 1 {
			t.Errorf("%s: Bus.Replays %d, Bus.Flushed %d, Bus.Replayed %d, Load.Calls %d; want 1, 0, >= %d, <= 1", r.name, st.Bus.Replays, st.Bus.Flushed, st.Bus.Replayed, st.Load.Calls, changed+1)
		}
	}
}

// TestLossLogTrimmed: more writes during the loss than the log keeps. The
// replay cannot cover the gap, so L1 is flushed (Bus.Flushed) and
// nothing stale is served.
func TestLossLogTrimmed(t *testing.T) {
	srv.NeedReal(t)
	const n = 300
	o := hybrid.Options{Namespace: redistest.Prefix(t), ReplayLogLen: 10}
	a := newInstance(t, "A", singleNode(nil), o, invalidate.Options{})
	b := newInstance(t, "B", singleNode(nil), o, slowReconnect)
	warm(t, a, []*instance{b}, n, "v1")

	killPubSub(t, b)
	for i := range n {
		setStr(t, a, lossKey(i), "v2")
	}
	waitStat(t, b, "Bus.Flushed", func(s hybrid.Stats) uint64 { return s.Bus.Flushed }, 1)
	if st := b.c.Stats(); st.Bus.Replays != 0 {
		t.Errorf("B: Bus.Replays %d, want 0 (the log was trimmed past its position)", st.Bus.Replays)
	}
	for i := range n {
		fill(t, b, lossKey(i), "v2")
	}
}

// TestLossRedisRestartedEmpty: Redis restarts without its data. The log is
// gone with it, so once B's bus is back L1 is flushed, and B serves what
// Redis now holds (nothing), not what it held before.
func TestLossRedisRestartedEmpty(t *testing.T) {
	srv.NeedOwned(t)
	const n = 50
	o := hybrid.Options{Namespace: redistest.Prefix(t)}
	a := newInstance(t, "A", singleNode(nil), o, invalidate.Options{})
	b := newInstance(t, "B", singleNode(nil), o, invalidate.Options{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond})
	warm(t, a, []*instance{b}, n, "v1")

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitStat(t, b, "Bus.Flushed", func(s hybrid.Stats) uint64 { return s.Bus.Flushed }, 1)
	for i := range n {
		if v, ok := getStr(t, b, lossKey(i)); ok {
			t.Fatalf("B: %s = %q after Redis restarted empty, want a miss", lossKey(i), v)
		}
	}
}

// TestLossHeldEntries walks through a loss on the in-memory doubles, on a
// fake clock: within the grace period entries from before the loss are
// served as they are; past it, each is read again from the shared tier
// (and stored anew, then served as usual); while the shared tier fails, it
// is served as it is (Bus.HeldServed), and the load is not called.
func TestLossHeldEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := s.options()
		o.LossGrace = time.Second
		c := newTestCache[string](t, o)
		ctx := context.Background()
		for _, k := range []string{"a", "b"} {
			set(t, c, k, "v1")
		}
		var loads atomic.Int64
		load := func(context.Context, string) (string, error) { loads.Add(1); return "loaded", nil }

		s.bus.SimulateDrop()
		s.flush(t)
		gets := s.remote.Calls().Get
		if v, err := c.GetOrCreate(ctx, "a", load); err != nil || v != "v1" {
			t.Fatalf("within the grace period: got %q, %v, want \"v1\"", v, err)
		}
		if got := s.remote.Calls().Get - gets; got != 0 {
			t.Errorf("within the grace period: %d Remote Gets, want 0", got)
		}

		time.Sleep(2 * time.Second)
		if v, err := c.GetOrCreate(ctx, "a", load); err != nil || v != "v1" {
			t.Fatalf("past the grace period: got %q, %v, want \"v1\" (read again)", v, err)
		}
		// The entry, and the clear record (what is known of records is
		// dropped with a loss).
		if got := s.remote.Calls().Get - gets; got != 2 {
			t.Errorf("past the grace period: %d Remote Gets, want 2 (the entry is checked)", got)
		}
		if v, err := c.GetOrCreate(ctx, "a", load); err != nil || v != "v1" {
			t.Fatalf("after the check: got %q, %v", v, err)
		}
		if got := s.remote.Calls().Get - gets; got != 2 {
			t.Errorf("after the check: %d Remote Gets, want still 2 (stored anew)", got)
		}

		s.remote.FailWith(fmt.Errorf("redis down"))
		if v, err := c.GetOrCreate(ctx, "b", load); err != nil || v != "v1" {
			t.Fatalf("shared tier down: got %q, %v, want the held \"v1\"", v, err)
		}
		if st := c.Stats(); st.Bus.HeldServed != 1 || loads.Load() != 0 {
			t.Errorf("shared tier down: Bus.HeldServed %d, loads %d; want 1, 0", st.Bus.HeldServed, loads.Load())
		}
		s.remote.FailWith(nil)
	})
}

// TestLossStrict: with StrictLoss, a drop flushes L1 at once.
func TestLossStrict(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.StrictLoss = true
	c := newTestCache[string](t, o)
	set(t, c, "a", "v1")
	s.bus.SimulateDrop()
	s.flush(t)
	if st := c.Stats(); st.L1.Entries != 0 || st.Bus.Losses != 1 {
		t.Errorf("after a drop: L1.Entries %d, Bus.Losses %d; want 0, 1", st.L1.Entries, st.Bus.Losses)
	}
}

// TestLossRedisStopped: Redis stops answering (SIGSTOP) for 3 s under
// reads of 200 warm keys. The bus sees its connection die; past the grace
// period the entries from before are checked, the check fails, and they are
// served as they are: no call waits past its bounds, and the database
// (load) is never called. Once Redis is back, nothing stale is served.
func TestLossRedisStopped(t *testing.T) {
	const n = 200
	own, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Close)
	if !own.Owned() {
		srv.NeedOwned(t)
	}
	newClient := func(t testing.TB) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: own.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
		t.Cleanup(func() { c.Close() })
		return c
	}
	o := hybrid.Options{Namespace: redistest.Prefix(t), LossGrace: 300 * time.Millisecond}
	so := l2.Options{ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond}
	bo := invalidate.Options{HealthInterval: 100 * time.Millisecond, ReconnectMin: 50 * time.Millisecond, ReconnectMax: 100 * time.Millisecond}
	a := newSplitInstance(t, "A", newClient(t), newClient(t), so, o, bo)
	b := newSplitInstance(t, "B", newClient(t), newClient(t), so, o, bo)
	warm(t, a, []*instance{b}, n, "v1")

	var loads atomic.Int64
	load := func(context.Context, string) (string, error) { loads.Add(1); return "loaded", nil }
	if err := own.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var slowest time.Duration
	for time.Since(stopped) < 3*time.Second {
		for i := range n {
			start := time.Now()
			v, err := b.c.GetOrCreate(context.Background(), lossKey(i), load)
			slowest = max(slowest, time.Since(start))
			if err != nil || v != "v1" {
				t.Fatalf("B during the stop: %s = %q, %v; want \"v1\"", lossKey(i), v, err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := own.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	st := b.c.Stats()
	t.Logf("B during the stop: slowest read %v, Bus.HeldServed %d, Bus.Losses %d", slowest.Round(time.Millisecond), st.Bus.HeldServed, st.Bus.Losses)
	if loads.Load() != 0 {
		t.Errorf("B: %d loads while Redis was stopped, want 0 (every key was within its L1 lifetime)", loads.Load())
	}
	if st.Bus.Losses == 0 || st.Bus.HeldServed == 0 {
		t.Errorf("B: Bus.Losses %d, Bus.HeldServed %d; want both > 0 (the loss was seen and entries held through it)", st.Bus.Losses, st.Bus.HeldServed)
	}
	if slowest > time.Second {
		t.Errorf("B: the slowest read took %v, want well under a second (the store bounds reads at 100 ms)", slowest)
	}
	// Back: A writes, B converges.
	waitFor(t, 10*time.Second, "B's bus to be back", func() bool {
		return b.c.Stats().Bus.Losses >= st.Bus.Losses+1 && b.c.Stats().Bus.Replays+b.c.Stats().Bus.Flushed > 0
	}, nil)
	setStr(t, a, lossKey(0), "v2")
	waitFor(t, 5*time.Second, "B to see A's write", func() bool { v, ok := getStr(t, b, lossKey(0)); return ok && v == "v2" }, nil)
}

// TestLossLogUnreadableForAWhile: when the bus is back before Redis answers
// (the log cannot be read yet), the replay tries again rather than flush L1;
// once Redis answers, the loss ends with a replay, and L1 was kept.
func TestLossLogUnreadableForAWhile(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	set(t, c, "a", "v1")
	s.bus.SimulateDrop()
	s.flush(t)
	s.remote.FailWith(fmt.Errorf("redis still down"))
	s.bus.SimulateLoss()
	s.flush(t)
	time.Sleep(200 * time.Millisecond) // a few failed reads of the log
	if st := c.Stats(); st.Bus.Flushed != 0 || st.Bus.Replays != 0 {
		t.Fatalf("while the log cannot be read: Bus.Flushed %d, Bus.Replays %d; want 0, 0 (still trying)", st.Bus.Flushed, st.Bus.Replays)
	}
	s.remote.FailWith(nil)
	waitFor(t, 5*time.Second, "the replay", func() bool { return c.Stats().Bus.Replays == 1 }, nil)
	gets := s.remote.Calls().Get
	if v, err := c.GetOrCreate(context.Background(), "a", neverLoad(t)); err != nil || v != "v1" {
		t.Fatalf("after the replay: got %q, %v", v, err)
	}
	if got := s.remote.Calls().Get - gets; got != 0 || c.Stats().Bus.Flushed != 0 {
		t.Errorf("after the replay: %d Remote Gets, Bus.Flushed %d; want 0, 0 (L1 kept)", got, c.Stats().Bus.Flushed)
	}
}

// TestLossPartition: B alone is cut off from Redis (its store and its bus go
// through a proxy that is cut) while A writes. B serves what it held,
// within the documented bound: as it was during LossGrace, and afterwards
// as it was because Redis cannot be reached (Bus.HeldServed), never calling
// the database. Once the proxy passes again, B's bus is back, the replay
// applies A's write, and B converges.
func TestLossPartition(t *testing.T) {
	srv.NeedReal(t)
	p := startProxy(t, srv.Addr)
	o := hybrid.Options{Namespace: redistest.Prefix(t), LossGrace: 200 * time.Millisecond}
	a := newInstance(t, "A", singleNode(nil), o, invalidate.Options{})
	cut := func(o *redis.Options) {
		o.ContextTimeoutEnabled, o.MaxRetries, o.DialTimeout = true, -1, 100*time.Millisecond
	}
	so := l2.Options{ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond}
	bo := invalidate.Options{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond}
	b := newSplitInstance(t, "B", via(p, cut)(t), via(p, cut)(t), so, o, bo)
	warm(t, a, []*instance{b}, 10, "v1")
	losses := b.c.Stats().Bus.Losses

	var loads atomic.Int64
	load := func(context.Context, string) (string, error) { loads.Add(1); return "loaded", nil }
	p.Cut()
	waitStat(t, b, "Bus.Losses", statBusLosses, losses+1)
	setStr(t, a, lossKey(0), "v2")
	time.Sleep(300 * time.Millisecond) // past LossGrace
	for i := range 10 {
		if v, err := b.c.GetOrCreate(context.Background(), lossKey(i), load); err != nil || v != "v1" {
			t.Fatalf("B cut off: %s = %q, %v; want the held \"v1\"", lossKey(i), v, err)
		}
	}
	if st := b.c.Stats(); st.Bus.HeldServed == 0 || loads.Load() != 0 {
		t.Errorf("B cut off: Bus.HeldServed %d, loads %d; want > 0, 0", st.Bus.HeldServed, loads.Load())
	}
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "B's replay", func() bool { return b.c.Stats().Bus.Replays == 1 }, func() string { return fmt.Sprintf("%+v", b.c.Stats()) })
	if v, err := b.c.GetOrCreate(context.Background(), lossKey(0), load); err != nil || v != "v2" {
		t.Errorf("B after the partition: %s = %q, %v; want A's \"v2\"", lossKey(0), v, err)
	}
	if loads.Load() != 0 {
		t.Errorf("B: %d loads, want 0", loads.Load())
	}
}

// namedInstance is an instance whose client is named, so that killBus can
// cut its pub/sub connection alone.
func namedInstance(t *testing.T, name string, o hybrid.Options, bo invalidate.Options) *instance {
	t.Helper()
	cn := clientName(o.Namespace + "-" + name)
	in := newInstance(t, name, singleNode(func(ro *redis.Options) { ro.ClientName = cn }), o, bo)
	in.clientName = cn
	return in
}

// killBus cuts in's pub/sub connection alone and waits until in has seen
// it drop.
func killBus(t *testing.T, in *instance) {
	t.Helper()
	before := in.c.Stats().Bus.Losses
	admin := srv.Client(t)
	id := pubsubID(t, admin, in.clientName)
	if err := admin.Do(context.Background(), "CLIENT", "KILL", "ID", id).Err(); err != nil {
		t.Fatalf("CLIENT KILL ID %s: %v", id, err)
	}
	waitStat(t, in, "Bus.Losses", statBusLosses, before+1)
}

// statReplays is Stats.Bus.Replays.
func statReplays(s hybrid.Stats) uint64 { return s.Bus.Replays }

// TestLossStoredDuringLoss: while B's bus is down and Redis answers, what
// B reads is held to LossGrace too (promise 4): a value read for
// the first time during the loss, and one read again after LossGrace, is
// checked against Redis once it has been served for LossGrace. With
// StrictLoss, B serves nothing from L1 while its bus is down: every
// read sees Redis at once.
func TestLossStoredDuringLoss(t *testing.T) {
	srv.NeedReal(t)
	const grace = 100 * time.Millisecond
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			o := hybrid.Options{Namespace: redistest.Prefix(t), LossGrace: grace, StrictLoss: strict}
			a := newInstance(t, "A", singleNode(nil), o, invalidate.Options{})
			p := startProxy(t, srv.Addr)
			b := newSplitInstance(t, "B", singleNode(nil)(t), via(p, nil)(t), l2.Options{}, o, slowReconnect)
			setStr(t, a, "k", "v1")
			p.Cut()
			waitStat(t, b, "Bus.Losses", statBusLosses, 1)

			for i, v := range []string{"v2", "v3"} {
				fill(t, b, "k", map[int]string{0: "v1", 1: "v2"}[i]) // read during the loss
				setStr(t, a, "k", v)                                 // B cannot hear of it
				if !strict {
					time.Sleep(3 * grace)
				}
				if got, ok := getStr(t, b, "k"); !ok || got != v {
					t.Errorf("B, bus down, Redis up, %v after A's Set: got %q, %v, want %q (Redis holds it)", map[bool]string{false: "past LossGrace", true: "at once"}[strict], got, ok, v)
				}
			}
			if strict {
				before := b.remote.gets.Load()
				fill(t, b, "k", "v3")
				fill(t, b, "k", "v3")
				if got := b.remote.gets.Load() - before; got < 2 {
					t.Errorf("strict, bus down: %d Redis reads for 2 reads, want 2 (nothing served from L1)", got)
				}
			}
			setFault(t, p.Pass())
			waitStat(t, b, "Bus.Losses", statBusLosses, 2)
			setStr(t, a, "k", "v4")
			waitFor(t, 5*time.Second, "B to see v4 once its bus is back", func() bool {
				v, _ := getStr(t, b, "k")
				return v == "v4"
			}, nil)
		})
	}
}

// lateRestore is a Bus that reports a restore only after the first
// message that follows it, as a bus goroutine would look to a replay that
// started late: the replay must still cover everything missed before the
// loss (promise 4).
type lateRestore struct {
	hybrid.Bus
	restored chan struct{} // closed at the first restore
	once     sync.Once
}

func (b *lateRestore) Subscribe(ctx context.Context, channel string, onMessage func([]byte), onLoss func(bool)) (func(), error) {
	pending := false
	return b.Bus.Subscribe(ctx, channel, func(msg []byte) {
		onMessage(msg)
		if pending {
			pending = false
			onLoss(true)
		}
	}, func(restored bool) {
		if !restored {
			onLoss(false)
			return
		}
		pending = true
		b.once.Do(func() { close(b.restored) })
	})
}

// TestLossReplayFromLossStart: B holds k, its bus drops, A deletes k, and
// B's first message after its bus is back (a Set of another key) is applied
// before the replay starts. The replay starts from where B was when the
// loss began, so k's delete is replayed.
func TestLossReplayFromLossStart(t *testing.T) {
	srv.NeedReal(t)
	for _, secret := range [][]byte{nil, []byte("s")} {
		t.Run(fmt.Sprintf("secret=%v", secret != nil), func(t *testing.T) {
			o := hybrid.Options{Namespace: redistest.Prefix(t), Secret: secret}
			a := newInstance(t, "A", singleNode(nil), o, invalidate.Options{})
			cn := clientName(o.Namespace + "-B")
			late := &lateRestore{restored: make(chan struct{})}
			b := newInstanceWrapped(t, "B", singleNode(func(ro *redis.Options) { ro.ClientName = cn })(t), o, slowReconnect,
				func(bus hybrid.Bus) hybrid.Bus { late.Bus = bus; return late })
			b.clientName = cn
			setStr(t, a, "k", "v1")
			waitStat(t, b, "Invalidations.Applied", statReceived, 1)
			fill(t, b, "k", "v1")

			killBus(t, b)
			if err := a.c.Delete(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-late.restored:
			case <-time.After(10 * time.Second):
				t.Fatal("B's bus did not come back")
			}
			for i := 0; b.c.Stats().Bus.Replays == 0; i++ {
				if i == 500 {
					t.Fatal("B did not replay")
				}
				setStr(t, a, "other", fmt.Sprint(i))
				time.Sleep(10 * time.Millisecond)
			}
			if v, ok := getStr(t, b, "k"); ok {
				t.Errorf("B after the replay: k = %q, want it deleted (Bus.Replayed %d)", v, b.c.Stats().Bus.Replayed)
			}
		})
	}
}

// heldPair is A, writing straight to Redis, and B, whose store and bus
// each reach Redis through a proxy of their own, so that a test can cut
// B's bus and its store apart. B's entries are held after grace.
func heldPair(t *testing.T, grace time.Duration) (a, b *instance, store, bus *faultproxy.Proxy) {
	t.Helper()
	o := hybrid.Options{Namespace: redistest.Prefix(t), LossGrace: grace}
	a = newInstance(t, "A", singleNode(nil), o, invalidate.Options{})
	store, bus = startProxy(t, srv.Addr), startProxy(t, srv.Addr)
	so := l2.Options{ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond}
	b = newSplitInstance(t, "B", via(store, shortTimeouts)(t), via(bus, nil)(t), so, o, slowReconnect)
	return a, b, store, bus
}

// TestLossHeldEntryDroppedOnceRedisShowedItOutdated: B holds d, g, m and c
// through a bus loss; A deletes d, g and m and changes c meanwhile. B's
// reads past LossGrace find that in Redis (not found, not found from a
// load that finds nothing, not found in a batch, the new value). Then B's
// store is cut too: B must not serve the held values Redis showed
// outdated, with Get, GetOrCreate or GetMany.
func TestLossHeldEntryDroppedOnceRedisShowedItOutdated(t *testing.T) {
	srv.NeedReal(t)
	const grace = 50 * time.Millisecond
	a, b, store, bus := heldPair(t, grace)
	ctx := t.Context()
	for _, k := range []string{"d", "g", "m", "c"} {
		setStr(t, a, k, "v1")
	}
	waitStat(t, b, "Invalidations.Applied", statReceived, 4)
	for _, k := range []string{"d", "g", "m", "c"} {
		fill(t, b, k, "v1")
	}
	bus.Cut()
	waitStat(t, b, "Bus.Losses", statBusLosses, 1)
	for _, k := range []string{"d", "g", "m"} {
		if err := a.c.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	setStr(t, a, "c", "v2")
	time.Sleep(3 * grace) // past LossGrace: B's entries are held
	notFound := func(context.Context, string) (string, error) { return "", hybrid.ErrNotFound }
	check := func(when string) {
		t.Helper()
		if v, ok := getStr(t, b, "d"); ok {
			t.Errorf("B %s: Get(d) = %q, want not found (A deleted it)", when, v)
		}
		if v, err := b.c.GetOrCreate(ctx, "g", notFound); !errors.Is(err, hybrid.ErrNotFound) {
			t.Errorf("B %s: GetOrCreate(g) = %q, %v; want ErrNotFound (A deleted it)", when, v, err)
		}
		if m, err := b.c.GetMany(ctx, []string{"m"}); err != nil || m["m"] != "" {
			t.Errorf("B %s: GetMany(m) = %v, %v; want no m (A deleted it)", when, m, err)
		}
		if v, ok := getStr(t, b, "c"); ok && v != "v2" {
			t.Errorf("B %s: Get(c) = %q, want v2 or not found (A changed it)", when, v)
		}
	}
	check("bus down, Redis answering")
	store.Cut()
	check("bus down, then Redis unreachable")
	check("bus down, Redis unreachable, again")
}

// TestLossHeldRecheckWhenRedisAnswers: B's bus is down and a read of a
// held entry found Redis unreachable, so held entries are served as they
// are. Once Redis answers again, B rechecks them at once (not a second
// after the failed read): A's change made meanwhile is served within a
// fraction of heldRecheck.
func TestLossHeldRecheckWhenRedisAnswers(t *testing.T) {
	srv.NeedReal(t)
	const grace = 50 * time.Millisecond
	a, b, store, bus := heldPair(t, grace)
	setStr(t, a, "k", "v1")
	waitStat(t, b, "Invalidations.Applied", statReceived, 1)
	fill(t, b, "k", "v1")
	bus.Cut()
	waitStat(t, b, "Bus.Losses", statBusLosses, 1)
	time.Sleep(3 * grace) // past LossGrace
	store.Cut()
	if v, _ := getStr(t, b, "k"); v != "v1" {
		t.Fatalf("B, bus down, Redis unreachable: got %q, want the held v1", v)
	}
	setStr(t, a, "k", "v2") // B cannot hear of it
	setFault(t, store.Pass())
	back := time.Now()
	waitFor(t, 5*time.Second, "B to see v2 once Redis answers", func() bool {
		v, _ := getStr(t, b, "k")
		return v == "v2"
	}, nil)
	took := time.Since(back)
	t.Logf("B served the held v1 for %v after Redis answered again", took)
	if took > 400*time.Millisecond {
		t.Errorf("B served the held v1 for %v after Redis answered again, want well under the 1 s recheck", took)
	}
}

// TestLossLogWentBackwards: A writes k=1, then k=2, which B sees. While
// B's bus is down, Redis loses the second write, log entry included, as a
// failover to a replica that missed it or a restart from an older
// snapshot would (the log and k are put back as they were after k=1, with
// DUMP and RESTORE); in one case a later write of another key follows, so
// that the log's newest entry is newer than B's position again. Once B's
// bus is back, its replay must notice that the log lost what B applied,
// and B must serve what Redis holds (k=1), not k=2.
func TestLossLogWentBackwards(t *testing.T) {
	srv.NeedReal(t)
	for _, later := range []bool{false, true} {
		for _, m := range invalidationModes {
			t.Run(fmt.Sprintf("%s/later=%v", m.name, later), func(t *testing.T) {
				ctx := t.Context()
				ns := redistest.Prefix(t)
				o := hybrid.Options{Namespace: ns, Secret: m.secret, LossGrace: time.Minute}
				a := newInstance(t, "A", singleNode(nil), o, invalidate.Options{})
				bus := startProxy(t, srv.Addr)
				bo := invalidate.Options{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond}
				b := newSplitInstance(t, "B", singleNode(nil)(t), via(bus, nil)(t), l2.Options{}, o, bo)
				admin := srv.Client(t)
				setStr(t, a, "k", "1")
				waitStat(t, b, "Invalidations.Applied", statReceived, 1)
				fill(t, b, "k", "1")
				keys := []string{ns + ":k", ns + ":\x00log"}
				dumps := make([]string, len(keys))
				for i, key := range keys {
					d, err := admin.Dump(ctx, key).Result()
					if err != nil {
						t.Fatalf("DUMP %q: %v", key, err)
					}
					dumps[i] = d
				}
				setStr(t, a, "k", "2")
				waitStat(t, b, "Invalidations.Applied", statReceived, 2)
				fill(t, b, "k", "2")

				bus.Cut()
				waitStat(t, b, "Bus.Losses", statBusLosses, 1)
				for i, key := range keys {
					if err := admin.RestoreReplace(ctx, key, 0, dumps[i]).Err(); err != nil {
						t.Fatalf("RESTORE %q: %v", key, err)
					}
				}
				if later {
					time.Sleep(2 * time.Millisecond) // the next log position is newer than k=2's
					setStr(t, a, "j", "1")
				}
				if v, _ := redisValue(t, admin, ns, "k"); v != "1" {
					t.Fatalf("Redis after losing the second write: k = %q, want 1", v)
				}
				setFault(t, bus.Pass())
				waitStat(t, b, "Bus.Losses", statBusLosses, 2)
				if v, ok := getStr(t, b, "k"); !ok || v != "1" {
					t.Errorf("B after its replay: k = %q, %v; want 1, what Redis holds", v, ok)
				}
				st := b.c.Stats()
				t.Logf("B: Bus.Replays %d, Bus.Flushed %d, Bus.Replayed %d", st.Bus.Replays, st.Bus.Flushed, st.Bus.Replayed)
			})
		}
	}
}
