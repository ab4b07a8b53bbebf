package hybrid_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/keyslot"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// The promises on Redis Cluster through its faults: three instances on a
// private cluster (redistest.StartCluster: three masters with a replica
// each) take the calls of the history checker (history_test.go) while a
// slot holding their keys migrates to another master, while that slot's
// master fails over to its replica (CLUSTER FAILOVER), and while it is
// killed (with the bus's master or another); and, for the history
// checker's bounds, with no fault and with the pub/sub connections cut.
// Each run checks read-your-writes on every instance (promise 1), that
// once writes stop and clusterSettle has passed every instance serves
// what Redis holds (promise 2), and staleness (promise 4): with no fault
// the smallest passing Δ within the single-server bound of the scenario;
// with a fault, no read older by more than the bound than a Set or Delete
// that returned nil (see staleBehindAcks). The smallest passing Δ is
// logged for every run.
//
// A promise known to break is asserted only with
// HYBRID_CLUSTER_KNOWN_GAPS=1 (clusterScenario.gap); the run logs it
// otherwise.

// clusterMode is how the instances of a fault test reach the cluster: the
// options of their l2.Store and of their invalidate.Bus. Every fault test
// runs once per mode.
type clusterMode struct {
	name  string
	store l2.Options
	bus   invalidate.Options
}

// clusterModes are the modes the fault tests run in.
var clusterModes = []clusterMode{
	{name: "sharded"}, // SPUBLISH and SSUBSCRIBE, the default on Cluster
	{name: "classic", store: l2.Options{Classic: true}, bus: invalidate.Options{Classic: true}}, // PUBLISH and SUBSCRIBE
}

// Timings of the fault tests.
const (
	// clusterReload is the instances' ClusterStateReloadInterval. go-redis
	// v9 reloads the slot map on MOVED, ASK or READONLY, and otherwise
	// only this often (default 60 s): a client keeps dialling a killed
	// master until then, so with the default an instance could not reach
	// the killed master's slots for up to a minute whatever the cache did.
	clusterReload = 500 * time.Millisecond

	// clusterBefore and clusterAfter are how long clients run before a
	// fault starts and after it ended; clusterHealthyRun is a run with no
	// fault.
	clusterBefore     = 500 * time.Millisecond
	clusterAfter      = 700 * time.Millisecond
	clusterHealthyRun = 1500 * time.Millisecond

	// clusterSettle is how long after writes stop the instances may take
	// to serve what Redis holds (promise 2): a message's propagation, or
	// after a bus loss the reconnect (histReconnect at most) and the L1
	// flush that follows it on Cluster.
	clusterSettle = 500 * time.Millisecond

	// clusterMigratePause is redistest.ClusterOptions.MigratePause: the
	// slot stays MIGRATING/IMPORTING this long before its keys move, and
	// this long after, so that writes meet both halves.
	clusterMigratePause = 200 * time.Millisecond

	// clusterHeldRecheck is how long after a read of a slot failed held
	// entries of the slot may be served as they are, without a look
	// (package hybrid's heldRecheck).
	clusterHeldRecheck = time.Second

	// clusterClients is the number of clients per instance.
	clusterClients = 2
)

// clusterKnownGaps reports whether HYBRID_CLUSTER_KNOWN_GAPS=1 asks for
// the runs that assert a promise known to break on Cluster.
func clusterKnownGaps() bool { return os.Getenv("HYBRID_CLUSTER_KNOWN_GAPS") == "1" }

// clusterInstance is an instance of the fault tests, with the shared-tier
// reads of its cache that failed.
type clusterInstance struct {
	*instance
	failed *failedGets
	losses *busLosses
}

// newClusterInstances returns one instance of one cache on cl per Options
// given, named A, B, C, ..., each with its own cluster client, and an
// l2.Store and an invalidate.Bus made with m's options (the Store's
// ReadTimeout raised to 2 s unless m sets one, as the history checker's
// is). Namespace must be set in each; Remote and Bus are filled in. The
// caches are closed when t ends, then the buses, then the clients.
func newClusterInstances(t testing.TB, cl *redistest.Cluster, m clusterMode, opts ...hybrid.Options) []*clusterInstance {
	t.Helper()
	so, bo := m.store, m.bus
	if so.ReadTimeout == 0 {
		so.ReadTimeout = 2 * time.Second
	}
	if bo.Logger == nil {
		bo.Logger = quiet
	}
	out := make([]*clusterInstance, len(opts))
	for i, o := range opts {
		if o.Namespace == "" {
			t.Fatal("newClusterInstances: empty namespace")
		}
		rdb := clusterClient(t, cl)
		in := &instance{name: string(rune('A' + i)), rdb: rdb, remote: &countingRemote{s: l2.New(rdb, so)}}
		in.bus = invalidate.New(rdb, bo)
		t.Cleanup(func() { in.bus.Close() })
		f := &failedGets{countingRemote: in.remote}
		l := &busLosses{Bus: in.bus}
		o.Remote, o.Bus = f, l
		in.c = newTestCache[string](t, o)
		out[i] = &clusterInstance{instance: in, failed: f, losses: l}
	}
	return out
}

// busLosses is a Bus that keeps when its subscriber was told of a loss
// and of the bus being back.
type busLosses struct {
	*invalidate.Bus
	mu     sync.Mutex
	events []lossEvent
}

type lossEvent struct {
	at       time.Time
	restored bool
}

func (b *busLosses) Subscribe(ctx context.Context, channel string, onMessage func([]byte), onLoss func(restored bool)) (func(), error) {
	return b.Bus.Subscribe(ctx, channel, onMessage, func(restored bool) {
		b.mu.Lock()
		b.events = append(b.events, lossEvent{time.Now(), restored})
		b.mu.Unlock()
		onLoss(restored)
	})
}

// since describes the losses and restores, in times since start.
func (b *busLosses) since(start time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, e := range b.events {
		what := "lost"
		if e.restored {
			what = "back"
		}
		out = append(out, what+" "+histTime(int64(e.at.Sub(start))))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// failedGets is a Remote that keeps when each of its Gets failed, and for
// which keys: a Get of the cache counts such a failure as a miss, which a
// history would otherwise take for a read of "not found".
type failedGets struct {
	*countingRemote
	mu   sync.Mutex
	gets []failedGet
}

type failedGet struct {
	keys     []string
	from, to time.Time
}

func (f *failedGets) Get(ctx context.Context, keys []string) ([][]byte, error) {
	from := time.Now()
	v, err := f.countingRemote.Get(ctx, keys)
	if err != nil {
		f.mu.Lock()
		f.gets = append(f.gets, failedGet{keys: slices.Clone(keys), from: from, to: time.Now()})
		f.mu.Unlock()
	}
	return v, err
}

// slotDuring reports whether a Get of a key in slot (of a key as the
// shared tier stores it) failed within [from, to].
func (f *failedGets) slotDuring(slot uint16, from, to time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, g := range f.gets {
		if !g.to.Before(from) && !g.from.After(to) && slices.ContainsFunc(g.keys, func(k string) bool { return keyslot.Of(k) == slot }) {
			return true
		}
	}
	return false
}

// during reports whether a Get failed within [from, to]: of any key, as a
// read of a value also reads records of other slots (its tags', the Clear
// record), and a value whose records cannot be read is a miss.
func (f *failedGets) during(from, to time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, g := range f.gets {
		if !g.to.Before(from) && !g.from.After(to) {
			return true
		}
	}
	return false
}

// clusterClient returns a client of cl for one instance, closed when t
// ends, reloading the slot map every clusterReload.
func clusterClient(t testing.TB, cl *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ClusterStateReloadInterval: clusterReload})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// clusterScenario is one run of TestClusterFaults.
type clusterScenario struct {
	name string
	cut  bool // kill the pub/sub connections on every node every histCutEvery
	// fault, if set, runs once the clients have run clusterBefore, on the
	// master serving the keys' slot; the clients go on until clusterAfter
	// after it returned.
	fault func(ctx context.Context, cl *redistest.Cluster, slot int, master string) (string, error)
	// busOnTarget names the bus channel so that it hashes to a slot of
	// the faulted master: a classic Bus then subscribes there.
	busOnTarget bool
	// bound is promise 4's bound, always asserted (zero: none). With no
	// fault, the history must be bound-stale (the smallest passing Δ at
	// most bound). With a fault, whose misses and failed writes and fills
	// the history cannot tell apart from writes, no read may be more than
	// bound older than a Set or Delete that returned nil (see
	// staleBehindAcks).
	bound time.Duration
	// goal, if not zero, is a tighter bound that the run is known to
	// miss, for the reason gap gives: asserted only with
	// HYBRID_CLUSTER_KNOWN_GAPS=1, and otherwise logged.
	goal time.Duration
	gap  string
	// lossy: the fault may lose writes Redis acknowledged (a killed
	// master's asynchronous replication), so keys on the faulted master
	// are left out of the staleness check.
	lossy bool
}

// clusterPropagation is the bound of promise 4 with the bus up on Cluster
// with classic pub/sub, whose messages cross the cluster bus from the
// writer's master to the subscribers': twice the single server's.
const clusterPropagation = 2 * histPropagation

// clusterFaultBound is the bound of promise 4 for the fault runs with
// the bus up: clusterPropagation again for the load a fault adds on a
// small machine (in one failover run of eight under -race on 2 cores,
// reads 200-224 ms behind Deletes on a master the failover did not touch,
// no message applied meanwhile).
const clusterFaultBound = 2 * clusterPropagation

// gapPropagation is why Cluster misses the single server's bound.
const gapPropagation = "classic PUBLISH crosses the cluster bus to the subscribers' master; " +
	"measured under -race on 2 cores: smallest passing Δ 20-100 ms in 15 runs of 16, 200 ms in one, its late reads applying no message meanwhile"

// gapShardedFault is why a fault misses the single server's bound over
// sharded pub/sub.
const gapShardedFault = "a slot that moves or fails over unsubscribes the instances from its master: " +
	"held entries are served for LossGrace until they resubscribe and catch up by the slot's counter; " +
	"measured under -race on 2 cores: reads 100-280 ms behind a write around the move's end"

// TestClusterFaults runs the scenarios on one private cluster per mode, in
// order: healthy, cut, migrate, failover, kill (the last leaves the
// killed master down).
func TestClusterFaults(t *testing.T) {
	for _, m := range clusterModes {
		t.Run(m.name, func(t *testing.T) { testClusterFaults(t, m) })
	}
}

func testClusterFaults(t *testing.T, m clusterMode) {
	// Last, once the clients are closed: their pools that dialled a killed
	// master stop retrying within a second.
	t.Cleanup(func() {
		if err := redistest.WaitRedials(3 * time.Second); err != nil {
			t.Error(err)
		}
	})
	start := time.Now()
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Replicas: 1, MigratePause: clusterMigratePause})
	t.Logf("cluster of 3 masters with a replica each up in %v", time.Since(start).Round(time.Millisecond))
	for _, sc := range []clusterScenario{
		{name: "healthy", bound: clusterPropagation, goal: histPropagation, gap: gapPropagation},
		{name: "cut", cut: true, bound: histCutBound},
		{name: "migrate", fault: func(ctx context.Context, cl *redistest.Cluster, slot int, master string) (string, error) {
			masters, err := cl.Masters(ctx)
			if err != nil {
				return "", err
			}
			to := masters[0]
			if to == master {
				to = masters[1]
			}
			return fmt.Sprintf("slot %d moved from %s to %s", slot, master, to), cl.MigrateSlot(ctx, slot, to)
		}, bound: clusterFaultBound, goal: histPropagation, gap: gapPropagation},
		{name: "failover", fault: func(ctx context.Context, cl *redistest.Cluster, _ int, master string) (string, error) {
			to, err := cl.Failover(ctx, master)
			return fmt.Sprintf("%s failed over to %s", master, to), err
		}, bound: clusterFaultBound, goal: histPropagation, gap: gapPropagation},
		{name: "kill", fault: killMaster, lossy: true, bound: clusterFaultBound, goal: histPropagation, gap: gapPropagation},
		// The bus's master killed too: a loss for as long as the election
		// takes, which LossGrace bounds. A read that fails on the killed
		// master takes only its slot as down: held entries of keys on
		// the masters that answer are read again past LossGrace.
		{name: "kill-bus", fault: killMaster, busOnTarget: true, lossy: true, bound: histCutBound},
	} {
		if sc.busOnTarget && !m.bus.Classic {
			// Over sharded pub/sub each master carries its own slots'
			// messages: there is no one bus master, and "kill" kills
			// the bus of the keys it faults already.
			continue
		}
		if sc.fault != nil && !m.bus.Classic {
			sc.gap = gapShardedFault
		}
		t.Run(sc.name, func(t *testing.T) { runClusterScenario(t, cl, m, sc) })
	}
}

// killMaster is the fault of the kill scenarios.
func killMaster(ctx context.Context, cl *redistest.Cluster, _ int, master string) (string, error) {
	to, err := cl.KillMaster(ctx, master)
	return fmt.Sprintf("%s killed, %s elected", master, to), err
}

// faultTarget returns a master of cl that has a replica and, where there
// is a choice, does not serve ns's default bus channel (so that a fault on
// it hits the keys and not the classic bus), a hash tag whose slot it
// serves, and a hash tag of a slot served by another master.
func faultTarget(t *testing.T, cl *redistest.Cluster, ns string) (master, tag string, slot int, other string) {
	t.Helper()
	ctx := t.Context()
	busMaster, err := cl.MasterOf(ctx, int(keyslot.Of("hybridcache:"+ns)))
	if err != nil {
		t.Fatal(err)
	}
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range masters {
		r, err := cl.ReplicasOf(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if len(r) > 0 && (master == "" || master == busMaster) {
			master = m
		}
	}
	if master == "" {
		t.Fatalf("no master with a replica among %v", masters)
	}
	for i := 0; tag == "" || other == ""; i++ {
		s := "f" + strconv.Itoa(i)
		m, err := cl.MasterOf(ctx, int(keyslot.Of(s)))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case m == master && tag == "":
			tag, slot = s, int(keyslot.Of(s))
		case m != master && other == "":
			other = s
		}
	}
	return master, tag, slot, other
}

// runClusterScenario runs sc on cl: three instances, clusterClients
// clients each calling as the history checker's do, the fault (or none);
// then writes stop, and after clusterSettle every instance must serve
// what Redis holds, for three rounds of reads.
func runClusterScenario(t *testing.T, cl *redistest.Cluster, m clusterMode, sc clusterScenario) {
	ns := redistest.Prefix(t)
	// With no fault, the keys of TestHistory, in six slots; with one,
	// four keys in the faulted slot and two in a slot of another master.
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	var master, channel string
	var slot int
	if sc.fault != nil {
		var tag, other string
		master, tag, slot, other = faultTarget(t, cl, ns)
		keys = []string{"{" + tag + "}a", "{" + tag + "}b", "{" + tag + "}c", "{" + tag + "}d", "{" + other + "}x", "{" + other + "}y"}
		if sc.busOnTarget {
			channel = "hybridcache:" + ns + ":{" + tag + "}"
		}
	}
	// Where each key lives before the fault.
	keyMaster := map[string]string{}
	for _, k := range keys {
		m, err := cl.MasterOf(t.Context(), int(keyslot.Of(ns+":"+k)))
		if err != nil {
			t.Fatal(err)
		}
		keyMaster[k] = m
	}
	rec := &histRecorder{start: time.Now(), msgs: map[instKey][]int64{}}
	if sc.cut {
		m.bus.ReconnectMin, m.bus.ReconnectMax = histReconnect, histReconnect
	}
	opts := make([]hybrid.Options, histInstances)
	for i := range opts {
		opts[i] = hybrid.Options{
			Namespace: ns,
			Secret:    []byte("history"), // messages carry values: peers swap them in
			LossGrace: histLossGrace,
			Channel:   channel,
			Logger:    quiet,
			Events:    hybrid.Events{Invalidated: func(_ hybrid.Op, keys []string) { rec.applied(i, keys) }},
		}
	}
	ins := newClusterInstances(t, cl, m, opts...)
	raw := clusterClient(t, cl)

	var (
		wg        sync.WaitGroup
		stop      = make(chan struct{})
		errs      failures // calls that failed: counted, not a failure of the test
		kills     int
		loadSeqs  [histInstances]int64
		loadMu    sync.Mutex
		faultNote string
	)
	if sc.cut {
		wg.Go(func() {
			tick := time.NewTicker(histCutEvery)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				for _, addr := range cl.Addrs() {
					admin, err := cl.Admin(addr)
					if err != nil {
						continue
					}
					if err := admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
						t.Errorf("%s: CLIENT KILL TYPE pubsub: %v", addr, err)
					}
				}
				kills++
				rec.killed()
			}
		})
	}
	for i, in := range ins {
		load := func(_ context.Context, key string) (string, error) {
			loadMu.Lock()
			loadSeqs[i]++
			n := loadSeqs[i]
			loadMu.Unlock()
			l := histOp{inst: i, kind: histLoad, key: key, value: fmt.Sprintf("l%d.%d", i, n), call: rec.now()}
			time.Sleep(histLoadTime)
			l.ret = rec.now()
			rec.addLoad(l)
			return l.value, nil
		}
		for client := range clusterClients {
			wg.Go(func() { runHistClient(rec, &errs, in.c, i, client, keys, load, nil, stop) })
		}
	}
	if sc.fault == nil {
		time.Sleep(clusterHealthyRun)
	} else {
		time.Sleep(clusterBefore)
		from := rec.now()
		note, err := sc.fault(t.Context(), cl, slot, master)
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("%s: %v", sc.name, err)
		}
		faultNote = fmt.Sprintf("%s from %s to %s", note, histTime(from), histTime(rec.now()))
		time.Sleep(clusterAfter)
	}
	close(stop)
	wg.Wait()
	stopped := rec.now()

	// Writes have stopped: after clusterSettle every instance serves what
	// Redis holds (promise 2), in each of three rounds.
	time.Sleep(clusterSettle)
	var mismatched, unread failures
	for round := range 3 {
		for _, k := range keys {
			want, wantOK := redisValue(t, raw, ns, k)
			for i, in := range ins {
				o := histOp{inst: i, client: clusterClients, kind: histGet, key: k, call: rec.now()}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				v, ok, err := in.c.Get(ctx, k)
				cancel()
				o.ret = rec.now()
				if err != nil {
					unread.addf("round %d: %s: Get(%q): %v", round, in.name, k, err)
					continue
				}
				if ok {
					o.value = v
				}
				rec.add(o)
				if v != want || ok != wantOK {
					mismatched.addf("round %d, %v after writes stopped: %s: Get(%q) = %q, %v; Redis holds %q, %v", round, time.Duration(rec.now()-stopped).Round(time.Millisecond), in.name, k, v, ok, want, wantOK)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}

	var st []string
	for _, in := range ins {
		s := in.c.Stats()
		st = append(st, fmt.Sprintf("%s: Invalidations.Applied %d, Invalidations.Swapped %d, Bus.Losses %d, Bus.HeldServed %d, L1.FillsDiscarded %d, L2.Errors %d",
			in.name, s.Invalidations.Applied, s.Invalidations.Swapped, s.Bus.Losses, s.Bus.HeldServed, s.L1.FillsDiscarded, s.L2.Errors))
	}
	where := "keys in six slots"
	if sc.fault != nil {
		where = fmt.Sprintf("keys in slot %d on %s", slot, master)
	}
	t.Logf("%s: %s; %s; %d pub/sub kills; %d calls failed; %s", sc.name, where, faultNote, kills, errs.n, strings.Join(st, "; "))
	for i, msg := range errs.msgs {
		if i == 3 {
			break
		}
		t.Logf("%s: a failed call: %s", sc.name, msg)
	}

	h := rec.assemble(t)
	// A miss of a Get whose shared-tier read failed is the documented
	// degradation (a failure counts as a miss), not a read of "not
	// found": it is left out of the history.
	degraded := 0
	h.ops = slices.DeleteFunc(h.ops, func(o histOp) bool {
		if o.kind != histGet || o.value != "" {
			return false
		}
		from, to := rec.start.Add(time.Duration(o.call)), rec.start.Add(time.Duration(o.ret))
		if ins[o.inst].failed.during(from, to) {
			degraded++
			return true
		}
		return false
	})
	// What Redis holds at the end, read as by one more instance, R: a
	// value stale by the model means Redis itself lost a write that it
	// had acknowledged (a failover's asynchronous replication), or did
	// not keep a load's value (a fill's write-back refused).
	end := rec.now()
	redisOps := slices.Clone(h.ops)
	for _, k := range keys {
		v, _ := redisValue(t, raw, ns, k)
		redisOps = append(redisOps, histOp{inst: 'R' - 'A', kind: histGet, key: k, value: v, call: end, ret: end})
	}
	var redisWorst stale
	for _, st := range histStaleness(redisOps) {
		if st.read.inst == 'R'-'A' && st.by > redisWorst.by {
			redisWorst = st
		}
	}
	if redisWorst.by > 0 {
		t.Logf("%s: Redis itself holds a value the model calls stale: %v", sc.name, redisWorst)
	}
	ds := smallestDelta(h.ops, withBound(max(sc.bound, histCutBound)))
	ryw := rywViolations(h.ops)
	got := "no Δ tried passes"
	if ds.found {
		got = fmt.Sprintf("smallest passing Δ %v", ds.delta)
	}
	var worst stale
	for _, st := range histStaleness(h.ops) {
		if st.by > worst.by {
			worst = st
		}
	}
	t.Logf("%s: %d calls (and %d misses of a failed Redis read left out); %s; %d reads older than their own instance's write; %d stale and %d failed reads %v after writes stopped",
		sc.name, len(h.ops), degraded, got, len(ryw), mismatched.n, unread.n, clusterSettle)
	if worst.by > 0 {
		t.Logf("%s: the stalest read: %v; %s; %s was on %s; %c's bus: %s", sc.name, worst, h.explain(worst), worst.read.key, keyMaster[worst.read.key], 'A'+worst.read.inst, ins[worst.read.inst].losses.since(rec.start))
	}
	if len(ryw) > 0 {
		t.Errorf("%s: %d reads older than a write of their own instance that returned before them, want none (promise 1)", sc.name, len(ryw))
		for i, v := range ryw {
			if i == 3 {
				break
			}
			t.Logf("%s: read older than its own write: %s", sc.name, v)
		}
	}
	if mismatched.n > 0 || unread.n > 0 {
		t.Errorf("%s: %d reads differ from Redis and %d failed, %v after writes stopped; want every instance to serve what Redis holds (promise 2)", sc.name, mismatched.n, unread.n, clusterSettle)
		mismatched.report(t)
		unread.report(t)
	}

	// Promise 4: the bound, then the goal.
	// With a fault or cuts, a read's staleness is measured against the
	// Sets and Deletes that returned nil (staleBehindAcks); a read served
	// from L1 while reads of its slot were failing is the documented
	// degradation (held entries served as they are while their part of
	// the shared tier does not answer: on Cluster, while a master is
	// down, and while the cluster as a whole refuses calls, CLUSTERDOWN,
	// until a replica takes its place), counted apart.
	acked := sc.fault != nil || sc.cut
	outage := 0
	over := func(bound time.Duration) []stale {
		if acked {
			bad := staleBehindAcks(h.ops, bound, func(key string) bool { return !sc.lossy || keyMaster[key] != master })
			n := len(bad)
			bad = slices.DeleteFunc(bad, func(st stale) bool {
				from, to := rec.start.Add(time.Duration(st.read.call)-clusterHeldRecheck), rec.start.Add(time.Duration(st.read.ret))
				return ins[st.read.inst].failed.slotDuring(keyslot.Of(ns+":"+st.read.key), from, to)
			})
			outage = n - len(bad)
			return bad
		}
		if ds.found && ds.delta <= bound {
			return nil
		}
		var bad []stale
		for _, st := range histStaleness(h.ops) {
			if st.phantom || st.by > bound {
				bad = append(bad, st)
			}
		}
		if len(bad) == 0 {
			bad = append(bad, stale{}) // no read alone, but their order
		}
		return bad
	}
	check := func(bound time.Duration, report func(string, ...any)) {
		bad := over(bound)
		if len(bad) == 0 {
			return
		}
		if !acked {
			report("%s: %s, want one of at most %v (promise 4)", sc.name, got, bound)
		} else {
			report("%s: %d reads more than %v older than a Set or Delete that returned nil, want none (promise 4; keys on the faulted master left out: %v)", sc.name, len(bad), bound, sc.lossy)
		}
		for i, st := range bad {
			if i == 3 || st.newer == nil {
				break
			}
			t.Logf("%s: violating read: %v; %s; %s was on %s; %c's bus: %s", sc.name, st, h.explain(st), st.read.key, keyMaster[st.read.key], 'A'+st.read.inst, ins[st.read.inst].losses.since(rec.start))
		}
	}
	if sc.bound > 0 {
		check(sc.bound, t.Errorf)
		if outage > 0 {
			t.Logf("%s: %d reads more than %v older than a Set or Delete that returned nil were served while reads of their slot failed (held entries served as they are)", sc.name, outage, sc.bound)
		}
	}
	if sc.goal > 0 && len(over(sc.goal)) > 0 {
		if clusterKnownGaps() {
			check(sc.goal, t.Errorf)
		} else {
			t.Logf("%s: a known gap, asserted with HYBRID_CLUSTER_KNOWN_GAPS=1: %s", sc.name, sc.gap)
			check(sc.goal, t.Logf)
		}
	}
}

// staleBehindAcks returns the reads of h, of keys that consider accepts,
// more than bound older than a Set or Delete that returned nil: the
// promise 4 check of a history in which failed reads and fills also show
// as writes (a fill whose write-back failed or was refused, as another
// write of its slot refuses it), which a plain Δ check takes for writes
// that landed.
func staleBehindAcks(h []histOp, bound time.Duration, consider func(key string) bool) []stale {
	var out []stale
	for _, st := range histStaleness(h) {
		if st.phantom || st.newer == nil || st.by <= bound || !consider(st.read.key) {
			continue
		}
		if k := st.newer.kind; (k == histSet || k == histDelete) && st.newer.ret != histPending {
			out = append(out, st)
		}
	}
	return out
}
