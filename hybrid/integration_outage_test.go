package hybrid_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// pubsubID returns the CLIENT LIST id of the pub/sub connection named name.
func pubsubID(t *testing.T, admin *redis.Client, name string) string {
	t.Helper()
	var id string
	waitFor(t, 5*time.Second, "a pub/sub connection named "+name, func() bool {
		list, err := admin.Do(context.Background(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
		if err != nil {
			t.Fatalf("CLIENT LIST: %v", err)
		}
		sc := bufio.NewScanner(strings.NewReader(list))
		for sc.Scan() {
			var lineID string
			named := false
			for _, f := range strings.Fields(sc.Text()) {
				if v, ok := strings.CutPrefix(f, "id="); ok {
					lineID = v
				}
				if f == "name="+name {
					named = true
				}
			}
			if named {
				id = lineID
				return true
			}
		}
		return false
	}, nil)
	return id
}

// TestIntegrationBusConnectionKilled is promise 4 across a lost bus
// connection: B's pub/sub connection is killed, A writes while it is down
// (the message is lost to B), and once B has reconnected it does not serve
// the value it filled before the loss.
func TestIntegrationBusConnectionKilled(t *testing.T) {
	srv.NeedReal(t)
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := context.Background()
			ns := redistest.Prefix(t)
			o := hybrid.Options{Namespace: ns, Secret: m.secret}
			a := newInstance(t, "A", singleNode(nil), o, invalidate.Options{})
			name := clientName(ns)
			// A reconnect wait of 250-500 ms leaves B down while A writes.
			b := newInstance(t, "B", singleNode(func(o *redis.Options) { o.ClientName = name }), o,
				invalidate.Options{ReconnectMin: 500 * time.Millisecond, ReconnectMax: 500 * time.Millisecond})
			admin := srv.Client(t)

			setStr(t, a, "k", "old")
			waitStat(t, b, "Received", statReceived, 1)
			fill(t, b, "k", "old")
			recv, losses := b.c.Stats().Received, b.c.Stats().BusLosses

			// CLIENT KILL TYPE pubsub would cut every pub/sub connection of a
			// shared server: kill only B's.
			id := pubsubID(t, admin, name)
			if err := admin.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
				t.Fatalf("CLIENT KILL ID %s: %v", id, err)
			}
			killed := time.Now()
			setStr(t, a, "k", "new") // B's connection is gone: B misses this message
			waitStat(t, b, "BusLosses", statBusLosses, losses+2)
			t.Logf("B: lost and restored its subscription %v after the kill (Stats.BusLosses %d -> %d)",
				time.Since(killed).Round(time.Millisecond), losses, b.c.Stats().BusLosses)
			if got := b.c.Stats().Received; got != recv {
				t.Fatalf("B received %d message(s) while its connection was down: the test did not make it miss A's Set", got-recv)
			}
			if v, ok := getStr(t, b, "k"); !ok || v != "new" {
				t.Errorf("B: Get after the reconnect: got %q, %v, want \"new\" (the value filled before the loss must not be served)", v, ok)
			}

			// Messages flow again.
			setStr(t, a, "k", "newer")
			waitStat(t, b, "Received", statReceived, recv+1)
			if v, ok := getStr(t, b, "k"); !ok || v != "newer" {
				t.Errorf("B: Get after A's next Set: got %q, %v, want \"newer\"", v, ok)
			}
		})
	}
}

// shortTimeouts makes a client that gives up on a dead server quickly and
// does not retry.
func shortTimeouts(o *redis.Options) {
	o.DialTimeout = 200 * time.Millisecond
	o.ReadTimeout = 200 * time.Millisecond
	o.WriteTimeout = 200 * time.Millisecond
	o.PoolTimeout = 200 * time.Millisecond
	o.MaxRetries = -1
	o.DialerRetries = 1
}

// TestIntegrationRedisRestart is promise 6 with Redis killed: under
// concurrent GetOrCreate on two instances nothing panics, every call
// returns within 2 s, loads stand in for Redis and L1 serves what they
// loaded; writes return errors. Once Redis is back, the shared tier and the
// bus work again.
//
// NOTE: it kills the package's shared redis-server and starts it again; no
// test of this package runs in parallel with another.
func TestIntegrationRedisRestart(t *testing.T) {
	srv.NeedOwned(t)
	ctx := context.Background()
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns}
	bo := invalidate.Options{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond}
	p := []*instance{
		newInstance(t, "A", singleNode(shortTimeouts), o, bo),
		newInstance(t, "B", singleNode(shortTimeouts), o, bo),
	}
	a, b := p[0], p[1]
	setStr(t, a, "k0", "v0")
	waitStat(t, b, "Received", statReceived, 1)
	fill(t, b, "k0", "v0")

	down := false
	t.Cleanup(func() {
		if down {
			if err := srv.Restart(); err != nil {
				t.Errorf("restarting redis-server: %v", err)
			}
		}
	})
	if err := srv.Kill(); err != nil {
		t.Fatalf("kill redis-server: %v", err)
	}
	down = true
	killed := time.Now()
	for _, in := range p {
		waitStat(t, in, "BusLosses", statBusLosses, 1)
	}

	const (
		goroutines = 8
		rounds     = 25
		nkeys      = 5
		bound      = 2 * time.Second
	)
	var panics atomic.Int64
	var mu sync.Mutex
	var errs []string
	var slowest time.Duration
	hammer := func() {
		var wg sync.WaitGroup
		for g := range goroutines {
			in := p[g%len(p)]
			wg.Go(func() {
				defer func() {
					if r := recover(); r != nil {
						panics.Add(1)
					}
				}()
				for i := range rounds {
					key := fmt.Sprint("k", (g+i)%nkeys)
					cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					start := time.Now()
					v, err := in.c.GetOrCreate(cctx, key, func(_ context.Context, key string) (string, error) {
						return "loaded:" + key, nil
					})
					d := time.Since(start)
					cancel()
					mu.Lock()
					slowest = max(slowest, d)
					if (err != nil || v != "loaded:"+key || d > bound) && len(errs) < 10 {
						errs = append(errs, fmt.Sprintf("%s: GetOrCreate(%s) = %q, %v in %v; want \"loaded:%s\", nil within %v", in.name, key, v, err, d, key, bound))
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	hammer()
	first := []hybrid.Stats{a.c.Stats(), b.c.Stats()}
	firstCalls := []remoteCalls{a.remote.calls(), b.remote.calls()}
	hammer() // everything is in L1 now
	for i, in := range p {
		st, calls := in.c.Stats(), in.remote.calls()
		t.Logf("%s while Redis is down: Loads %d, L2Errors %d, L1Hits %d, WriteRetries %d, WritesDropped %d",
			in.name, st.Loads, st.L2Errors, st.L1Hits, st.WriteRetries, st.WritesDropped)
		if st.Loads == 0 || st.Loads > nkeys {
			t.Errorf("%s: Loads %d while Redis is down, want 1..%d (one per key: loads stand in, L1 keeps them)", in.name, st.Loads, nkeys)
		}
		if st.L2Errors == 0 {
			t.Errorf("%s: L2Errors 0 while Redis is down, want the failed reads counted", in.name)
		}
		// The second round is answered by L1: no load, no Redis read.
		// (Background write-backs of the first round may still be retried.)
		reads := calls.Get + calls.GetMany - firstCalls[i].Get - firstCalls[i].GetMany
		if st.Loads != first[i].Loads || reads != 0 || st.L1Hits <= first[i].L1Hits {
			t.Errorf("%s: second round: Loads %d -> %d, %d Redis reads, L1Hits %d -> %d; want the same loads, no reads, more hits (L1 serves)",
				in.name, first[i].Loads, st.Loads, reads, first[i].L1Hits, st.L1Hits)
		}
	}
	t.Logf("%d GetOrCreate calls while Redis was down: slowest %v, %d panics", 2*goroutines*rounds, slowest.Round(time.Microsecond), panics.Load())
	if panics.Load() != 0 {
		t.Errorf("%d goroutines panicked", panics.Load())
	}
	for _, e := range errs {
		t.Error(e)
	}

	// Writes report the outage (promise 8); reads still answer.
	start := time.Now()
	if err := a.c.Set(ctx, "k1", "written"); err == nil {
		t.Error("A: Set while Redis is down: got nil, want an error")
	} else {
		t.Logf("A: Set while Redis is down: %v", err)
	}
	if err := a.c.Delete(ctx, "k1"); err == nil {
		t.Error("A: Delete while Redis is down: got nil, want an error")
	}
	if v, ok := getStr(t, a, "k0"); !ok || v != "loaded:k0" {
		t.Errorf("A: Get(k0) while Redis is down: got %q, %v, want \"loaded:k0\" from L1", v, ok)
	}
	if v, ok := getStr(t, a, "nothing"); ok {
		t.Errorf("A: Get(nothing) while Redis is down: got %q, want a miss", v)
	}
	if v, err := a.c.GetOrCreate(ctx, "k1", func(context.Context, string) (string, error) { return "reloaded", nil }); err != nil || v != "reloaded" {
		t.Errorf("A: GetOrCreate(k1) after the failed writes: got %q, %v, want \"reloaded\" (not the value of the failed Set)", v, err)
	}
	if d := time.Since(start); d > 4*bound {
		t.Errorf("writes and reads while Redis is down took %v, want each within %v", d, bound)
	}

	// Redis comes back, empty.
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart redis-server: %v", err)
	}
	down = false
	restarted := time.Now()
	for _, in := range p {
		waitFor(t, 10*time.Second, in.name+"'s bus to be restored", func() bool { return in.c.Stats().BusLosses >= 2 },
			func() string { return fmt.Sprintf("BusLosses %d", in.c.Stats().BusLosses) })
	}
	busBack := time.Since(restarted)
	waitFor(t, 5*time.Second, "A's Set to succeed", func() bool { return a.c.Set(ctx, "k2", "after") == nil }, nil)
	setBack := time.Since(restarted)
	l2Hits := b.c.Stats().L2Hits
	waitFor(t, 5*time.Second, "B to read A's value from Redis", func() bool {
		v, ok := getStr(t, b, "k2")
		return ok && v == "after"
	}, nil)
	if b.c.Stats().L2Hits <= l2Hits {
		t.Errorf("B: L2Hits did not grow after the restart")
	}
	recv := b.c.Stats().Received
	setStr(t, a, "k2", "after2")
	waitStat(t, b, "Received", statReceived, recv+1)
	if v, ok := getStr(t, b, "k2"); !ok || v != "after2" {
		t.Errorf("B: Get after A's Set over the restored bus: got %q, %v, want \"after2\"", v, ok)
	}
	t.Logf("Redis down %v; after the restart: buses restored in %v, writes work in %v, B sees A's Set over the bus",
		restarted.Sub(killed).Round(time.Millisecond), busBack.Round(time.Millisecond), setBack.Round(time.Millisecond))
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestIntegrationWritesFailRedisDown (promise 6, write path): with no Redis
// to reach, Set and Delete return errors, and a failed Set leaves nothing
// behind in L1; GetOrCreate still answers from load, Get without error.
func TestIntegrationWritesFailRedisDown(t *testing.T) {
	ctx := context.Background()
	ro := &redis.Options{Addr: deadAddr(t)}
	shortTimeouts(ro)
	rdb := redis.NewClient(ro)
	t.Cleanup(func() { rdb.Close() })
	remote := &countingRemote{s: l2.New(rdb, l2.Options{})}
	c := newTestCache[string](t, hybrid.Options{Namespace: redistest.Prefix(t), Remote: remote})
	var loads atomic.Int64
	load := func(context.Context, string) (string, error) {
		loads.Add(1)
		return "loaded", nil
	}
	const bound = 2 * time.Second
	timed := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		if d := time.Since(start); d > bound {
			t.Errorf("%s took %v, want at most %v", what, d, bound)
		}
	}
	timed("GetOrCreate", func() {
		if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "loaded" {
			t.Errorf("GetOrCreate: got %q, %v, want \"loaded\", nil", v, err)
		}
	})
	timed("Set", func() {
		if err := c.Set(ctx, "k", "written"); err == nil {
			t.Error("Set with Redis down: got nil, want an error")
		}
	})
	timed("Get", func() {
		v, ok, err := c.Get(ctx, "k")
		if err != nil || (ok && v == "written") {
			t.Errorf("Get after the failed Set: got %q, %v, %v; want no error and never the value of the failed Set", v, ok, err)
		}
	})
	timed("GetOrCreate", func() {
		if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "loaded" {
			t.Errorf("GetOrCreate after the failed Set: got %q, %v, want \"loaded\" (load stands in)", v, err)
		}
	})
	timed("Delete", func() {
		if err := c.Delete(ctx, "k"); err == nil {
			t.Error("Delete with Redis down: got nil, want an error")
		}
	})
	timed("GetOrCreate", func() {
		if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "loaded" {
			t.Errorf("GetOrCreate after the failed Delete: got %q, %v, want \"loaded\"", v, err)
		}
	})
	st := c.Stats()
	t.Logf("Redis unreachable: %d loads, L2Errors %d", loads.Load(), st.L2Errors)
	if loads.Load() != 3 {
		t.Errorf("loads: got %d, want 3 (the failed Set and Delete each drop the key from L1)", loads.Load())
	}
	if st.L2Errors == 0 {
		t.Error("L2Errors: got 0, want the failures counted")
	}
}
