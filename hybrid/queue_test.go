package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// replayModes are the ways a queued write is replayed: one atomic step,
// without an invalidation log or with one.
var replayModes = []struct {
	name         string
	replayLogLen int
}{
	{"atomic", -1},
	{"logged", 0},
}

var errDown = errors.New("shared tier down")

// waitQueue waits until c's queue is empty and has replayed replayed
// writes and dropped stale ones.
func waitQueue(t testing.TB, c *hybrid.Cache[string], replayed, stale uint64) {
	t.Helper()
	waitFor(t, 15*time.Second, "the queue to be replayed", func() bool {
		s := c.Stats()
		return s.Queue.Length == 0 && s.Queue.Replayed == replayed && s.Queue.Stale == stale
	}, func() string {
		s := c.Stats()
		return fmt.Sprintf("Queue.Length %d, Queue.Replayed %d, Queue.Stale %d", s.Queue.Length, s.Queue.Replayed, s.Queue.Stale)
	})
}

func TestQueueReplaysSetDeleteAndTagDelete(t *testing.T) {
	for _, mode := range replayModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx := t.Context()
			s := newSharedTier(t)
			o := s.options()
			o.QueueWrites, o.ReplayLogLen = 10, mode.replayLogLen
			p := newPeers(t, s, 2, o)
			a, b := p[0], p[1]
			set(t, a, "k", "v1")
			set(t, a, "d", "v1")
			if err := a.Set(ctx, "tagged", "v1", hybrid.WithTags("t")); err != nil {
				t.Fatal(err)
			}
			s.flush(t) // the messages of those writes would drop b's copies
			for _, k := range []string{"k", "d", "tagged"} {
				fillFromRemote(t, b, k, "v1")
			}

			s.remote.FailWith(errDown)
			err := a.Set(ctx, "k", "v2")
			if !errors.Is(err, hybrid.ErrQueued) || !errors.Is(err, errDown) {
				t.Fatalf("Set while down: got %v, want an error wrapping ErrQueued and the failure", err)
			}
			if v, ok := getString(t, a, "k"); !ok || v != "v2" {
				t.Errorf("Get after a queued Set: got %q, %v; want v2 (read-your-writes)", v, ok)
			}
			if err := a.Delete(ctx, "d"); !errors.Is(err, hybrid.ErrQueued) {
				t.Fatalf("Delete while down: got %v, want ErrQueued", err)
			}
			if _, ok := getString(t, a, "d"); ok {
				t.Error("Get after a queued Delete: still there")
			}
			if err := a.DeleteByTag(ctx, "t"); !errors.Is(err, hybrid.ErrQueued) {
				t.Fatalf("DeleteByTag while down: got %v, want ErrQueued", err)
			}
			if _, ok := getString(t, a, "tagged"); ok {
				t.Error("Get after a queued DeleteByTag: still there")
			}
			// A newer write by another instance (planted) during the outage.
			if err := a.Set(ctx, "n", "a-old"); !errors.Is(err, hybrid.ErrQueued) {
				t.Fatalf("Set while down: got %v, want ErrQueued", err)
			}
			time.Sleep(2 * time.Millisecond)
			s.remote.Put(testNS+":n", envelopeOf(t, "b-new", time.Minute), time.Minute)
			if st := a.Stats(); st.Queue.Queued != 4 || st.Queue.Refused != 0 {
				t.Errorf("Stats: Queue.Queued %d, Queue.Refused %d; want 4, 0", st.Queue.Queued, st.Queue.Refused)
			}
			if v, _ := getString(t, b, "k"); v != "v1" {
				t.Errorf("peer during the outage: got %q, want v1 (nothing shared yet)", v)
			}

			s.remote.FailWith(nil)
			waitQueue(t, a, 3, 1)
			s.flush(t)
			if v, ok := s.stored(t, "n"); !ok || v != "b-new" {
				t.Errorf("shared tier after the replay: n = %q, %v; want b-new (the newer write wins)", v, ok)
			}
			if v, ok := getString(t, a, "n"); !ok || v != "b-new" {
				t.Errorf("A after its outdated write was dropped: n = %q, %v; want b-new", v, ok)
			}
			calls := s.remote.Calls()
			if calls.IfNewer == 0 {
				t.Errorf("no IfNewer writes (%+v): the replays must write only over older values", calls)
			}
			if v, ok := s.stored(t, "k"); !ok || v != "v2" {
				t.Errorf("shared tier after the replay: got %q, %v; want v2", v, ok)
			}
			if v, ok := getString(t, b, "k"); !ok || v != "v2" {
				t.Errorf("peer after the replay: k = %q, %v; want v2", v, ok)
			}
			for _, k := range []string{"d", "tagged"} {
				if v, ok := getString(t, b, k); ok {
					t.Errorf("peer after the replay: %s = %q, want a miss", k, v)
				}
			}
			// A new instance reads the shared tier: the deletes hold there too.
			c := newPeers(t, s, 1, o)[0]
			for _, k := range []string{"d", "tagged"} {
				if v, ok := getString(t, c, k); ok {
					t.Errorf("new instance: %s = %q, want a miss", k, v)
				}
			}
		})
	}
}

func TestQueueClear(t *testing.T) {
	ctx := t.Context()
	s := newSharedTier(t)
	o := s.options()
	o.QueueWrites = 1
	p := newPeers(t, s, 2, o)
	a, b := p[0], p[1]
	set(t, a, "k", "v1")
	s.flush(t)
	fillFromRemote(t, b, "k", "v1")
	s.remote.FailWith(errDown)
	if err := a.Clear(ctx); !errors.Is(err, hybrid.ErrQueued) {
		t.Fatalf("Clear while down: got %v, want ErrQueued", err)
	}
	if _, ok := getString(t, a, "k"); ok {
		t.Error("Get after a queued Clear: still there")
	}
	s.remote.FailWith(nil)
	waitQueue(t, a, 1, 0)
	s.flush(t)
	if v, ok := getString(t, b, "k"); ok {
		t.Errorf("peer after the replayed Clear: got %q, want a miss", v)
	}
}

func TestQueueFull(t *testing.T) {
	ctx := t.Context()
	s := newSharedTier(t)
	o := s.options()
	o.QueueWrites = 2
	a := newPeers(t, s, 1, o)[0]
	// Older values, which the replays replace (over nothing, a queued Set
	// is replayed as a delete: see TestQueuedSetOverNothing).
	set(t, a, "k1", "0")
	set(t, a, "k2", "0")
	s.remote.FailWith(errDown)
	for _, kv := range [][2]string{{"k1", "a"}, {"k2", "a"}, {"k1", "b"}} { // k1 again: replaces, no growth
		if err := a.Set(ctx, kv[0], kv[1]); !errors.Is(err, hybrid.ErrQueued) {
			t.Fatalf("Set(%s, %s): got %v, want ErrQueued", kv[0], kv[1], err)
		}
	}
	err := a.Set(ctx, "k3", "a")
	if errors.Is(err, hybrid.ErrQueued) || !errors.Is(err, errDown) {
		t.Fatalf("Set(k3) with a full queue: got %v, want the failure, not ErrQueued", err)
	}
	if _, ok := getString(t, a, "k3"); ok {
		t.Error("a refused write is in L1")
	}
	if st := a.Stats(); st.Queue.Queued != 3 || st.Queue.Refused != 1 || st.Queue.Length != 2 {
		t.Errorf("Stats: Queue.Queued %d, Queue.Refused %d, Queue.Length %d; want 3, 1, 2", st.Queue.Queued, st.Queue.Refused, st.Queue.Length)
	}
	s.remote.FailWith(nil)
	waitQueue(t, a, 2, 0)
	for k, want := range map[string]string{"k1": "b", "k2": "a"} {
		if v, ok := s.stored(t, k); !ok || v != want {
			t.Errorf("shared tier: %s = %q, %v; want %q (the newest queued write)", k, v, ok, want)
		}
	}
	if v, ok := s.stored(t, "k3"); ok {
		t.Errorf("shared tier: k3 = %q, want nothing (refused)", v)
	}
}

func TestQueueOnlySharedTierFailures(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.QueueWrites = 10
	o.MaxValueBytes = 16
	a := newPeers(t, s, 1, o)[0]
	s.remote.FailWith(errDown)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"empty key", a.Set(t.Context(), "", "v"), hybrid.ErrEmptyKey},
		{"reserved key", a.Delete(t.Context(), "\x00k"), hybrid.ErrReservedKey},
		{"too large", a.Set(t.Context(), "k", strings.Repeat("x", 100)), hybrid.ErrValueTooLarge},
		{"ctx done before the call", a.Set(cancelled, "k", "v"), context.Canceled},
		{"ctx done before DeleteByTag", a.DeleteByTag(cancelled, "t"), context.Canceled},
	} {
		if !errors.Is(c.err, c.want) || errors.Is(c.err, hybrid.ErrQueued) {
			t.Errorf("%s: got %v, want %v and not ErrQueued", c.name, c.err, c.want)
		}
	}
	if st := a.Stats(); st.Queue.Queued != 0 || st.Queue.Length != 0 {
		t.Errorf("Stats: Queue.Queued %d, Queue.Length %d; want 0, 0", st.Queue.Queued, st.Queue.Length)
	}
	a.Close()
	if err := a.Set(t.Context(), "k", "v"); !errors.Is(err, hybrid.ErrClosed) {
		t.Errorf("Set after Close: got %v, want ErrClosed", err)
	}
	if _, err := hybrid.New[string](hybrid.Options{QueueWrites: -1}); err == nil || !strings.Contains(err.Error(), "QueueWrites") {
		t.Errorf("New with QueueWrites -1: got %v, want an error naming QueueWrites", err)
	}
}

func TestQueueOffByDefault(t *testing.T) {
	s := newSharedTier(t)
	a := newPeers(t, s, 1, s.options())[0]
	s.remote.FailWith(errDown)
	if err := a.Set(t.Context(), "k", "v"); !errors.Is(err, errDown) || errors.Is(err, hybrid.ErrQueued) {
		t.Errorf("Set: got %v, want the failure, not ErrQueued", err)
	}
	if st := a.Stats(); st.Queue.Queued != 0 || st.Queue.Refused != 0 {
		t.Errorf("Stats: Queue.Queued %d, Queue.Refused %d; want 0, 0", st.Queue.Queued, st.Queue.Refused)
	}
}

func TestQueueBreakerOpen(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.QueueWrites, o.BreakerThreshold, o.BreakerOpenFor = 10, 1, 50*time.Millisecond
	a := newPeers(t, s, 1, o)[0]
	s.remote.FailWith(errDown)
	if err := a.Set(t.Context(), "k1", "v"); !errors.Is(err, hybrid.ErrQueued) {
		t.Fatalf("Set: got %v, want ErrQueued", err)
	}
	if err := a.Set(t.Context(), "k2", "v"); !errors.Is(err, hybrid.ErrQueued) || !errors.Is(err, hybrid.ErrUnavailable) {
		t.Fatalf("Set with the breaker open: got %v, want ErrQueued and ErrUnavailable", err)
	}
	s.remote.FailWith(nil)
	waitQueue(t, a, 2, 0)
}

// TestQueueCloseWithPending closes a cache whose queue cannot be replayed
// (the replay fails, or is blocked in the Remote): Close returns, leaves
// no goroutine, and says how many writes it dropped, in one warning and in
// Stats.
func TestQueueCloseWithPending(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.QueueWrites = 10
	logger, logs := captureLogger()
	o.Logger = logger
	before := goleak.IgnoreCurrent()
	a, err := hybrid.New[string](o)
	if err != nil {
		t.Fatal(err)
	}
	s.remote.FailWith(errDown)
	for _, k := range []string{"a", "b", "c"} {
		if err := a.Set(t.Context(), k, "v"); !errors.Is(err, hybrid.ErrQueued) {
			t.Fatalf("Set: got %v, want ErrQueued", err)
		}
	}
	s.remote.SetLatency(time.Hour) // a replay in flight blocks until Close
	done := make(chan struct{})
	go func() { a.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return with writes queued")
	}
	s.remote.SetLatency(0)
	if err := goleak.Find(before); err != nil {
		t.Errorf("goroutines left after Close: %v", err)
	}
	if st := a.Stats(); st.Queue.DroppedOnClose != 3 || st.Queue.Length != 0 {
		t.Errorf("Stats after Close: Queue.DroppedOnClose %d, Queue.Length %d; want 3, 0", st.Queue.DroppedOnClose, st.Queue.Length)
	}
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "dropped=") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "dropped=3") {
		t.Errorf("log at Close: got %q, want one warning with dropped=3", lines)
	}
	a.Close() // a second Close logs and counts nothing more
	if st := a.Stats(); st.Queue.DroppedOnClose != 3 {
		t.Errorf("Stats after a second Close: Queue.DroppedOnClose %d, want 3", st.Queue.DroppedOnClose)
	}
	if n := strings.Count(logs.String(), "dropped="); n != 1 {
		t.Errorf("log lines with dropped= after a second Close: %d, want 1", n)
	}
}

// TestQueueSetDuringClose races a failing Set with Close: the write is
// either queued before Close, and then counted as dropped by it, or
// refused with its failure; never reported queued and lost uncounted.
func TestQueueSetDuringClose(t *testing.T) {
	for range 50 {
		s := newSharedTier(t)
		o := s.options()
		o.QueueWrites = 10
		a, err := hybrid.New[string](o)
		if err != nil {
			t.Fatal(err)
		}
		s.remote.FailWith(errDown) // the replay fails until Close
		errs := make(chan error, 1)
		go func() { errs <- a.Set(context.Background(), "k", "v") }()
		a.Close()
		err = <-errs
		st := a.Stats()
		queued := errors.Is(err, hybrid.ErrQueued)
		if queued != (st.Queue.DroppedOnClose == 1) || st.Queue.Length != 0 {
			t.Fatalf("Set during Close: got %v with Queue.DroppedOnClose %d, Queue.Length %d; want ErrQueued and 1, 0, or no ErrQueued and 0, 0", err, st.Queue.DroppedOnClose, st.Queue.Length)
		}
	}
}

// Redis-backed: an instance whose connections to Redis (store and bus) go
// through a fault proxy, and a peer connected directly.

func TestIntegrationQueueOutage(t *testing.T) {
	srv.NeedReal(t)
	for _, mode := range replayModes[:2] { // the Redis-backed Remote has both capabilities
		t.Run(mode.name, func(t *testing.T) {
			ctx := t.Context()
			ns := redistest.Prefix(t)
			o := hybrid.Options{Namespace: ns, QueueWrites: 100, ReplayLogLen: mode.replayLogLen}
			bo := invalidate.Options{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond}
			p := startProxy(t, srv.Addr)
			a := newInstance(t, "A", via(p, shortTimeouts), o, bo)
			b := newInstance(t, "B", singleNode(shortTimeouts), o, bo)
			admin := srv.Client(t)
			setStr(t, a, "del", "v0")
			setStr(t, a, "k", "v0")
			waitStat(t, b, "Invalidations.Applied", statReceived, 2)
			fill(t, b, "del", "v0")
			fill(t, b, "k", "v0")

			p.Cut()
			// The writes below come after the bus loss.
			waitStat(t, a, "Bus.Losses", statBusLosses, 1)
			if err := a.c.Delete(ctx, "del"); !errors.Is(err, hybrid.ErrQueued) {
				t.Fatalf("A: Delete during the outage: got %v, want ErrQueued", err)
			}
			if err := a.c.Set(ctx, "k", "a-old"); !errors.Is(err, hybrid.ErrQueued) {
				t.Fatalf("A: Set during the outage: got %v, want ErrQueued", err)
			}
			time.Sleep(2 * time.Millisecond) // B's write is a later millisecond
			setStr(t, b, "k", "b-new")
			if v, _ := getStr(t, a, "k"); v != "a-old" {
				t.Errorf("A during the outage: k = %q, want its own a-old", v)
			}
			if v, _ := getStr(t, b, "del"); v != "v0" {
				t.Errorf("B during the outage: del = %q, want v0 (the delete is not shared yet)", v)
			}

			setFault(t, p.Pass())
			waitQueue(t, a.c, 1, 1)
			if v, ok := redisValue(t, admin, ns, "k"); !ok || v != "b-new" {
				t.Errorf("Redis after the replay: k = %q, %v; want b-new (the newer write wins)", v, ok)
			}
			if v, ok := redisValue(t, admin, ns, "del"); ok {
				t.Errorf("Redis after the replay: del = %q, want deleted", v)
			}
			for _, in := range []*instance{a, b} {
				waitFor(t, 10*time.Second, in.name+" to converge", func() bool {
					k, _ := getStr(t, in, "k")
					_, del := getStr(t, in, "del")
					return k == "b-new" && !del
				}, func() string {
					k, _ := getStr(t, in, "k")
					d, _ := getStr(t, in, "del")
					return in.name + ": k=" + k + " del=" + d
				})
			}
			if n := a.remote.newerSets.Load(); n == 0 {
				t.Error("no atomic replay (SetIfNewerAndPublish or SetIfNewerPublishAndLog)")
			}
		})
	}
}

// TestIntegrationQueueTimedOutWriteLanded stalls Redis (SIGSTOP) under a
// Set: the Set times out and is queued, and lands when Redis resumes. The
// replay must neither write it again over a newer write of a peer nor do
// harm when nothing newer came.
func TestIntegrationQueueTimedOutWriteLanded(t *testing.T) {
	srv.NeedOwned(t)
	for _, mode := range replayModes[:2] { // the Redis-backed Remote has both capabilities
		t.Run(mode.name, func(t *testing.T) {
			ctx := t.Context()
			ns := redistest.Prefix(t)
			o := hybrid.Options{Namespace: ns, QueueWrites: 10, ReplayLogLen: mode.replayLogLen}
			a := newInstance(t, "A", singleNode(shortTimeouts), o, invalidate.Options{})
			b := newInstance(t, "B", singleNode(shortTimeouts), o, invalidate.Options{})
			admin := srv.Client(t)
			setStr(t, a, "k", "v0") // loads the write script: a retry needs no EVAL
			setStr(t, a, "solo", "v0")
			waitStat(t, b, "Invalidations.Applied", statReceived, 2)
			fill(t, b, "k", "v0")

			stopped := true
			if err := srv.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if stopped {
					srv.Signal(syscall.SIGCONT)
				}
			})
			errK := a.c.Set(ctx, "k", "a1")
			errSolo := a.c.Set(ctx, "solo", "a1")
			if err := srv.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			stopped = false
			for _, err := range []error{errK, errSolo} {
				if !errors.Is(err, hybrid.ErrQueued) {
					t.Fatalf("Set on a stalled Redis: got %v, want ErrQueued", err)
				}
			}
			// The timed-out writes land when Redis resumes.
			waitFor(t, 5*time.Second, "the timed-out writes to land", func() bool {
				k, _ := redisValue(t, admin, ns, "k")
				solo, _ := redisValue(t, admin, ns, "solo")
				return k == "a1" && solo == "a1"
			}, nil)
			setStr(t, b, "k", "b2") // newer than A's queued write
			waitFor(t, 15*time.Second, "the queue to be replayed", func() bool {
				s := a.c.Stats()
				return s.Queue.Length == 0 && s.Queue.Replayed+s.Queue.Stale == 2
			}, nil)
			if v, _ := redisValue(t, admin, ns, "k"); v != "b2" {
				t.Errorf("Redis after the replay: k = %q, want b2 (the peer's newer write)", v)
			}
			if v, _ := redisValue(t, admin, ns, "solo"); v != "a1" {
				t.Errorf("Redis after the replay: solo = %q, want a1", v)
			}
			for _, in := range []*instance{a, b} {
				waitFor(t, 10*time.Second, in.name+" to converge", func() bool {
					k, _ := getStr(t, in, "k")
					solo, _ := getStr(t, in, "solo")
					return k == "b2" && solo == "a1"
				}, nil)
			}
			st := a.c.Stats()
			t.Logf("replayed %d, dropped as stale %d", st.Queue.Replayed, st.Queue.Stale)
		})
	}
}

// TestIntegrationQueueLossDuringWrite: A's Set is still failing (its store
// does not answer) when its bus reports the loss, the usual order, since
// the write waits for its timeout and the bus notices a drop at once. The
// queued value is what A serves until the replay (promise 1), and
// also after a flush of L1 while it is still queued.
func TestIntegrationQueueLossDuringWrite(t *testing.T) {
	srv.NeedReal(t)
	ctx := t.Context()
	o := hybrid.Options{Namespace: redistest.Prefix(t), QueueWrites: 100, ReplayLogLen: -1}
	store, bus := startProxy(t, srv.Addr), startProxy(t, srv.Addr)
	a := newSplitInstance(t, "A", via(store, shortTimeouts)(t), via(bus, nil)(t),
		l2.Options{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}, o,
		invalidate.Options{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond})
	setStr(t, a, "k", "v0")

	setFault(t, store.BlackHole())
	done := make(chan error, 1)
	go func() { done <- a.c.Set(ctx, "k", "mine") }()
	time.Sleep(20 * time.Millisecond) // the write has started and waits
	bus.Cut()
	waitStat(t, a, "Bus.Losses", statBusLosses, 1)
	if err := <-done; !errors.Is(err, hybrid.ErrQueued) {
		t.Fatalf("Set: got %v, want ErrQueued", err)
	}
	if v, ok := getStr(t, a, "k"); !ok || v != "mine" {
		t.Errorf("A after its queued Set: got %q, %v, want \"mine\"", v, ok)
	}
	// The bus comes back: without a log, the catch-up waits for Redis to
	// read the slots' counters, and the queued value stays meanwhile.
	setFault(t, bus.Pass())
	waitFor(t, 5*time.Second, "A's bus back", func() bool { return a.bus.Stats().Reconnects >= 1 }, nil)
	if v, ok := getStr(t, a, "k"); !ok || v != "mine" {
		t.Errorf("A with its bus back, its Set still queued: got %q, %v, want \"mine\"", v, ok)
	}
	setFault(t, store.Pass())
	waitStat(t, a, "Bus.Losses", statBusLosses, 2)
	if st := a.c.Stats(); st.Bus.CaughtUp != 1 || st.Bus.Flushed != 0 {
		t.Errorf("A: Bus.CaughtUp %d, Bus.Flushed %d; want 1, 0", st.Bus.CaughtUp, st.Bus.Flushed)
	}
	waitQueue(t, a.c, 1, 0)
	if v, ok := getStr(t, a, "k"); !ok || v != "mine" {
		t.Errorf("A after the replay: got %q, %v, want \"mine\"", v, ok)
	}
}

// TestIntegrationQueuedDeleteReadBeforeReplay: A's Delete is queued while
// its store is cut; Redis answers again, and a read of the key on A just
// before the replay finds the old value in Redis and stores it in L1. Once
// the delete is replayed, A must not go on serving that value (its own
// message does not reach its own L1).
func TestIntegrationQueuedDeleteReadBeforeReplay(t *testing.T) {
	srv.NeedReal(t)
	ctx := t.Context()
	o := hybrid.Options{Namespace: redistest.Prefix(t), QueueWrites: 100}
	p := startProxy(t, srv.Addr)
	a := newSplitInstance(t, "A", via(p, shortTimeouts)(t), singleNode(nil)(t),
		l2.Options{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}, o, invalidate.Options{})
	setStr(t, a, "k", "v0")
	p.Cut()
	if err := a.c.Delete(ctx, "k"); !errors.Is(err, hybrid.ErrQueued) {
		t.Fatalf("Delete with the store cut: got %v, want ErrQueued", err)
	}
	var read atomic.Bool
	f := func(string) {
		if read.CompareAndSwap(false, true) {
			v, _, _ := a.c.Get(ctx, "k") // Redis still holds v0
			t.Logf("A read %q just before the replay", v)
		}
	}
	a.remote.beforeNewer.Store(&f)
	setFault(t, p.Pass())
	waitQueue(t, a.c, 1, 0)
	if v, ok := getStr(t, a, "k"); ok {
		t.Errorf("A after its Delete was replayed: got %q, want a miss", v)
	}
}

// TestIntegrationQueuedWritesServedBeforeReplay: A's writes are queued
// while its store is cut (a Set then a Delete of k, a Delete of d, a Set
// of s), and Redis answers again before the replay. Until the replay, A
// serves its own queued state, never the older values Redis still holds:
// Get, GetOrCreate, GetMany and GetOrCreateMany, also after ClearL1
// dropped the queued Set's copy from L1, and no read stores an older
// value in L1 meanwhile.
func TestIntegrationQueuedWritesServedBeforeReplay(t *testing.T) {
	srv.NeedReal(t)
	ctx := t.Context()
	o := hybrid.Options{Namespace: redistest.Prefix(t), QueueWrites: 100}
	p := startProxy(t, srv.Addr)
	a := newSplitInstance(t, "A", via(p, shortTimeouts)(t), singleNode(nil)(t),
		l2.Options{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}, o, invalidate.Options{})
	for _, k := range []string{"k", "d", "s"} {
		setStr(t, a, k, "1")
	}
	p.Cut()
	for _, err := range []error{a.c.Set(ctx, "k", "2"), a.c.Delete(ctx, "k"), a.c.Delete(ctx, "d"), a.c.Set(ctx, "s", "2")} {
		if !errors.Is(err, hybrid.ErrQueued) {
			t.Fatalf("write with the store cut: got %v, want ErrQueued", err)
		}
	}
	var armed, ran atomic.Bool
	var seen []string // what A served while its writes were queued and Redis answered
	f := func(string) {
		if !armed.Load() || !ran.CompareAndSwap(false, true) {
			return
		}
		load := func(_ context.Context, key string) (string, error) { return "loaded", nil }
		for round := range 2 { // the second round finds what the first stored in L1
			if round == 1 {
				if err := a.c.ClearL1(ctx); err != nil {
					t.Errorf("ClearL1: %v", err)
				}
			}
			for _, key := range []string{"k", "d", "s"} {
				v, ok, err := a.c.Get(ctx, key)
				seen = append(seen, fmt.Sprintf("Get(%s)=%q,%v,%v", key, v, ok, err))
				v, err = a.c.GetOrCreate(ctx, key, load)
				seen = append(seen, fmt.Sprintf("GetOrCreate(%s)=%q,%v", key, v, err))
			}
			m, err := a.c.GetMany(ctx, []string{"k", "d", "s"})
			seen = append(seen, fmt.Sprintf("GetMany=%v,%v", m, err))
			m, err = a.c.GetOrCreateMany(ctx, []string{"k", "d", "s"}, func(_ context.Context, keys []string) (map[string]string, error) {
				out := make(map[string]string)
				for _, k := range keys {
					out[k] = "loaded"
				}
				return out, nil
			})
			seen = append(seen, fmt.Sprintf("GetOrCreateMany=%v,%v", m, err))
		}
	}
	a.remote.beforeNewer.Store(&f)
	setFault(t, p.Pass())
	armed.Store(true)
	waitQueue(t, a.c, 3, 0)
	if !ran.Load() {
		t.Fatal("the queue was replayed before the reads ran")
	}
	for _, s := range seen {
		if strings.Contains(s, `"1"`) || strings.Contains(s, ":1") {
			t.Errorf("A served the older value Redis held while its writes were queued: %s", s)
		}
	}
	t.Logf("served while queued: %s", strings.Join(seen, "; "))
	// A load after a Delete may have written its value back over the
	// Delete's tombstone once the replay wrote it: newer, so it may stay.
	for key, want := range map[string][]string{"k": {"", "loaded"}, "d": {"", "loaded"}, "s": {"2"}} {
		if v, _ := getStr(t, a, key); !slices.Contains(want, v) {
			t.Errorf("A after the replay: %s = %q, want one of %q", key, v, want)
		}
	}
}

// TestQueuedSetOverNothing: a queued Set whose key the shared tier holds
// nothing for when it is replayed (Redis restarted empty, or evicted the
// key, maybe a newer Delete's tombstone) is replayed as a delete: the
// shared tier holds a tombstone, and every instance loads the key, the
// writer too (a newer Delete may have outdated its value).
func TestQueuedSetOverNothing(t *testing.T) {
	ctx := t.Context()
	s := newSharedTier(t)
	o := s.options()
	o.QueueWrites = 10
	peers := newPeers(t, s, 2, o)
	a := peers[0]
	s.remote.FailWith(errDown)
	if err := a.Set(ctx, "k", "1"); !errors.Is(err, hybrid.ErrQueued) {
		t.Fatalf("A: Set: got %v, want ErrQueued", err)
	}
	s.remote.FailWith(nil)
	waitQueue(t, a, 1, 0)
	if v, ok := s.stored(t, "k"); ok {
		t.Errorf("shared tier after the replay: k = %q, want a tombstone", v)
	}
	if err := s.bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range peers {
		if v, err := c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) { return "db", nil }); err != nil || v != "db" {
			t.Errorf("GetOrCreate after the replay: %q, %v; want db, loaded", v, err)
		}
	}
}
