package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/message"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// A holder cut off from Redis while it loads cannot keep its lease alive:
// another instance takes it over when it ends and answers. The holder's
// late write then finds a value and stores nothing, and its release leaves
// alone a lease that is no longer its own.
func TestLeaseHungHolderTakenOver(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, Secret: []byte("s"), LoadLease: 300 * time.Millisecond}
	p := startProxy(t, srv.Addr)
	storeA := via(p, shortTimeouts)(t)
	direct := singleNode(nil)
	a := newSplitInstance(t, "A", storeA, direct(t), l2.Options{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}, o, invalidate.Options{})
	b := newInstance(t, "B", direct, o, invalidate.Options{})

	resA, releaseA := holding(t, a, "k", "from A")
	setFault(t, p.BlackHole()) // A hangs, as far as Redis can tell

	began := time.Now()
	var bLoads atomic.Int64
	v, err := b.c.GetOrCreate(context.Background(), "k", func(context.Context, string) (string, error) {
		bLoads.Add(1)
		return "from B", nil
	})
	took := time.Since(began)
	if err != nil || v != "from B" {
		t.Fatalf("B: got %q, %v, want B's own load after taking the lease over", v, err)
	}
	if s := b.c.Stats(); s.Leases.TakenOver != 1 || s.Leases.Waited != 1 {
		t.Fatalf("B: %d leases taken over, %d waited, want 1 and 1", s.Leases.TakenOver, s.Leases.Waited)
	}
	if took > 3*time.Second {
		t.Errorf("B took %v to take over a 300 ms lease", took)
	}
	rdb := direct(t)
	// B's callers have their value before its write-back ends.
	waitFor(t, 5*time.Second, "B's value in Redis", func() bool {
		got, _ := redisValue(t, rdb, ns, "k")
		return got == "from B"
	}, func() string { got, _ := redisValue(t, rdb, ns, "k"); return fmt.Sprintf("Redis holds %q", got) })
	// Someone else holds the lease when A comes back: A's release must
	// leave it.
	lk := a.c.LeaseKey("k")
	if err := rdb.Set(context.Background(), lk, "someone-else", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	setFault(t, p.Pass())
	releaseA()
	if r := <-resA; r.err != nil || r.v != "from A" {
		t.Fatalf("A: got %q, %v, want its own load", r.v, r.err)
	}
	waitFor(t, 5*time.Second, "A's write and release", func() bool { return a.remote.calls().WriteReleasing > 0 }, nil)
	if got, _ := redisValue(t, rdb, ns, "k"); got != "from B" {
		t.Fatalf("Redis holds %q after A's late write, want B's value kept", got)
	}
	if got, err := rdb.Get(context.Background(), lk).Result(); err != nil || got != "someone-else" {
		t.Fatalf("the lease after A's release: %q, %v; want another holder's lease kept", got, err)
	}
	if v, ok := getStr(t, a, "k"); !ok || v != "from B" {
		t.Errorf("A serves %q, %v after its write lost; want B's value", v, ok)
	}
	rdb.Del(context.Background(), lk)
}

// With Redis unreachable, a lease cannot be asked for: each instance loads
// by itself within its bounds, and nothing hangs.
func TestLeaseRedisDown(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := leaseOptions(ns, []byte("s"))
	p := startProxy(t, srv.Addr)
	direct := singleNode(nil)
	so := l2.Options{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}
	var ins []*instance
	for i := range 3 {
		ins = append(ins, newSplitInstance(t, string(rune('A'+i)), via(p, shortTimeouts)(t), direct(t), so, o, invalidate.Options{}))
	}
	setFault(t, p.BlackHole())
	db := &fleetLoad{delay: 10 * time.Millisecond}
	began := time.Now()
	wantAll(t, ins, getOnAll(ins, "k", db.load), "db:k")
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("took %v with Redis unreachable", took)
	}
	if n := db.calls.Load(); n != 3 {
		t.Errorf("%d loads, want each of 3 instances to load by itself", n)
	}
	setFault(t, p.Pass())
}

// A waiter whose bus misses the holder's message learns of the value when
// its bus is back (the restore makes it read what it waits for), not when
// the lease would have ended.
func TestLeaseMessageLost(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, Secret: []byte("s"), LoadLease: 20 * time.Second, LeaseWait: time.Minute}
	direct := singleNode(nil)
	a := newInstance(t, "A", direct, o, invalidate.Options{})
	p := startProxy(t, srv.Addr)
	b := newSplitInstance(t, "B", direct(t), via(p, shortTimeouts)(t), l2.Options{}, o,
		invalidate.Options{ReconnectMin: 50 * time.Millisecond, ReconnectMax: 100 * time.Millisecond, HealthInterval: 100 * time.Millisecond})

	resA, releaseA := holding(t, a, "k", "from A")
	var bLoads atomic.Int64
	resB := goGet(b, "k", func(context.Context, string) (string, error) {
		bLoads.Add(1)
		return "from B", nil
	})
	waitStat(t, b, "Leases.Waited", func(s hybrid.Stats) uint64 { return s.Leases.Waited }, 1)
	setFault(t, p.BlackHole())
	p.Cut() // B's bus is down while A announces
	releaseA()
	if r := <-resA; r.err != nil || r.v != "from A" {
		t.Fatalf("A: %q, %v", r.v, r.err)
	}
	waitFor(t, 5*time.Second, "A's write and release", func() bool { return a.remote.calls().WriteReleasing > 0 }, nil)
	began := time.Now()
	setFault(t, p.Pass())
	r := <-resB
	if r.err != nil || r.v != "from A" {
		t.Fatalf("B: %q, %v, want A's value", r.v, r.err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("B answered %v after its bus could reconnect, with 20 s left on the lease", took)
	}
	if n := bLoads.Load(); n != 0 {
		t.Errorf("B loaded %d times, want 0", n)
	}
	// The message was lost: B read the value after the restore.
	if s, rc := b.c.Stats(), b.remote.calls(); s.Bus.Losses == 0 || rc.Get+rc.GetBatch != 2 {
		t.Errorf("B: %d bus losses, %d reads of the value; want a loss and 2 reads (the miss, the one after the restore)", s.Bus.Losses, rc.Get+rc.GetBatch)
	}
}

// A holder that is alive but slow keeps its lease; a waiter gives up after
// LeaseWait and loads by itself, and the holder's later write, finding the
// waiter's value, stores nothing.
func TestLeaseWaitBounded(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, Secret: []byte("s"), LoadLease: 100 * time.Millisecond, LeaseWait: 300 * time.Millisecond}
	ins := newInstances(t, 2, singleNode(nil), o)
	a, b := ins[0], ins[1]
	resA, releaseA := holding(t, a, "k", "from A")
	began := time.Now()
	v, err := b.c.GetOrCreate(context.Background(), "k", func(context.Context, string) (string, error) { return "from B", nil })
	if err != nil || v != "from B" {
		t.Fatalf("B: %q, %v, want its own load after LeaseWait", v, err)
	}
	if took := time.Since(began); took < 300*time.Millisecond || took > 3*time.Second {
		t.Errorf("B loaded after %v, want about LeaseWait (300 ms)", took)
	}
	if s := b.c.Stats(); s.Leases.TimedOut != 1 || s.Leases.TakenOver != 0 {
		t.Errorf("B: %d timed out, %d taken over; want 1 and 0 (A kept its lease alive)", s.Leases.TimedOut, s.Leases.TakenOver)
	}
	waitFor(t, 5*time.Second, "B's write-back", func() bool { return b.remote.calls().WriteIfAbsent > 0 }, nil)
	releaseA()
	if r := <-resA; r.err != nil || r.v != "from A" {
		t.Fatalf("A: %q, %v", r.v, r.err)
	}
	waitFor(t, 5*time.Second, "A's write and release", func() bool { return a.remote.calls().WriteReleasing > 0 }, nil)
	if got, _ := redisValue(t, a.rdb, ns, "k"); got != "from B" {
		t.Errorf("Redis holds %q, want B's value, written first", got)
	}
	noLeaseLeft(t, a.rdb, ns, true)
}

// record subscribes to channel and returns what is published on it from
// now on, in order.
func record(t testing.TB, rdb redis.UniversalClient, channel string) <-chan []byte {
	t.Helper()
	ps := rdb.Subscribe(context.Background(), channel)
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := make(chan []byte, 100)
	go func() {
		for m := range ps.Channel() {
			select {
			case out <- []byte(m.Payload):
			default:
			}
		}
	}()
	t.Cleanup(func() { ps.Close() })
	return out
}

// recorded returns the first message of op from rec.
func recorded(t testing.TB, rec <-chan []byte, op message.Op) []byte {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case b := <-rec:
			if message.OpOf(b) == op {
				return b
			}
		case <-timeout:
			t.Fatalf("no %v message recorded", op)
		}
	}
}

// waiterAfter publishes the messages msgs returns while B waits for A's
// lease on k, then releases A (whose load returns "new") and returns B's
// result. B's result comes early if a message ended its wait.
func waiterAfter(t *testing.T, a, b *instance, ns string, msgs func() [][]byte) result {
	t.Helper()
	resA, releaseA := waitHolding(t, a, "k", "new", nil)
	waited := b.c.Stats().Leases.Waited
	resB := goGet(b, "k", func(context.Context, string) (string, error) { return "from B", nil })
	waitStat(t, b, "Leases.Waited", func(s hybrid.Stats) uint64 { return s.Leases.Waited }, waited+1)
	for _, msg := range msgs() {
		if err := a.rdb.Publish(context.Background(), "hybridcache:"+ns, msg).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var r result
	select {
	case r = <-resB: // the message ended B's wait
		releaseA()
	case <-time.After(300 * time.Millisecond):
		releaseA()
		r = <-resB
	}
	if ra := <-resA; ra.err != nil || ra.v != "new" {
		t.Fatalf("A: got %q, %v", ra.v, ra.err)
	}
	return r
}

// A signed lease holder's message recorded from an earlier fill, published
// again while another fill of the key waits, is not taken by that fill:
// lease news is bound to the holder's lease token.
func TestLeaseReplayedNews(t *testing.T) {
	for _, c := range []struct {
		op  message.Op
		v   string
		err error
	}{
		{message.OpFilled, "old", nil},
		{message.OpLoadFailed, "", errors.New("db down")},
		{message.OpNotFound, "", hybrid.ErrNotFound},
	} {
		t.Run(c.op.String(), func(t *testing.T) {
			srv.NeedReal(t)
			ns := redistest.Prefix(t)
			ins := newInstances(t, 2, singleNode(nil), leaseOptions(ns, []byte("s")))
			a, b := ins[0], ins[1]
			rec := record(t, a.rdb, "hybridcache:"+ns)
			resA, releaseA := waitHolding(t, a, "k", c.v, c.err)
			resB := goGet(b, "k", func(context.Context, string) (string, error) { return "from B", nil })
			waitStat(t, b, "Leases.Waited", func(s hybrid.Stats) uint64 { return s.Leases.Waited }, 1)
			releaseA()
			<-resA
			<-resB
			old := recorded(t, rec, c.op)
			// Each hears the other's Delete before the next fill, which it
			// would otherwise discard.
			ra, rb := a.c.Stats().Invalidations.Applied, b.c.Stats().Invalidations.Applied
			for _, in := range ins {
				if err := in.c.Delete(context.Background(), "k"); err != nil {
					t.Fatal(err)
				}
			}
			waitStat(t, a, "Invalidations.Applied", statReceived, ra+1)
			waitStat(t, b, "Invalidations.Applied", statReceived, rb+1)
			r := waiterAfter(t, a, b, ns, func() [][]byte { return [][]byte{old} })
			if r.err != nil || r.v != "new" {
				t.Errorf("B: got %q, %v after a replayed %v message, want the new holder's value", r.v, r.err, c.op)
			}
			if s := b.c.Stats(); s.Load.Calls != 0 {
				t.Errorf("B loaded %d times, want 0", s.Load.Calls)
			}
		})
	}
}

// Without a Secret, a forged load_failed, not_found or not_stored does not
// end the waiters' wait while the holder still holds its lease: news not
// from the holder they found only makes them read the key, and news that
// names it (its token can be read in Redis) makes them check the lease.
func TestLeaseForgedFailure(t *testing.T) {
	for _, op := range []message.Op{message.OpLoadFailed, message.OpNotFound, message.OpNotStored} {
		for _, named := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/holder named=%v", op, named), func(t *testing.T) {
				srv.NeedReal(t)
				ns := redistest.Prefix(t)
				ins := newInstances(t, 2, singleNode(nil), leaseOptions(ns, nil))
				a, b := ins[0], ins[1]
				r := waiterAfter(t, a, b, ns, func() [][]byte {
					m := message.Message{Op: op, Namespace: ns, Keys: []string{"k"}}
					if named {
						tok, err := a.rdb.Get(context.Background(), a.c.LeaseKey("k")).Result()
						if err != nil {
							t.Fatalf("the holder's lease: %v", err)
						}
						m.Token = strings.TrimSuffix(tok, "*")
					}
					return [][]byte{message.Encode(m, nil)}
				})
				if r.err != nil || r.v != "new" {
					t.Errorf("B: got %q, %v after a forged %v message, want the holder's value", r.v, r.err, op)
				}
				if s := b.c.Stats(); s.Load.Calls != 0 {
					t.Errorf("B loaded %d times, want 0", s.Load.Calls)
				}
			})
		}
	}
}
