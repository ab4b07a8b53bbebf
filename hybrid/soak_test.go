package hybrid_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/faultproxy"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// The nemesis soak: the instances of the history checker (history_test.go)
// on a redis-server of the test's own, while a nemesis injects faults at
// random, one at a time: the pub/sub connections killed, Redis stopped
// (SIGSTOP) or put to sleep (DEBUG SLEEP), one instance cut off from Redis,
// one instance's bus lagging, Redis killed and restarted from an AOF
// synced on every write, or restarted empty, or made to evict under
// maxmemory (allkeys-lru, allkeys-lfu or volatile-lru). Then the faults and the writes
// stop, every instance reads every key for a while, and the history is
// checked: no read older than its own instance's write that returned nil
// (promise 1), a smallest passing Δ within LossGrace plus the longest
// outage plus the propagation allowance (promise 4), and every instance
// serving what Redis holds, or missing (promise 2).

const (
	// soakDefault is how long the nemesis injects faults; HYBRID_SOAK
	// (a duration, such as 5m) sets another.
	soakDefault = 30 * time.Second

	// soakLossGrace is Options.LossGrace of the instances.
	soakLossGrace = 200 * time.Millisecond
	// soakReconnect is the buses' reconnect wait (jittered down by up to
	// half).
	soakReconnect = 300 * time.Millisecond
	// soakKeys is how many keys the clients use, and soakClients how
	// many clients each instance has: more keys and fewer clients than the
	// history checker's, so that porcupine's check of a history 12 times
	// longer, at a Δ of a second or more, ends within histCheckTimeout on
	// 2 busy cores (with 3 clients and 72 keys it did not, 1 run in 4).
	soakKeys    = 96
	soakClients = 2
	// soakGroups is how many parts the history is checked in, by key,
	// each with porcupine's time limit of its own: with 8 parts of 12
	// keys, one part's check at a Δ of 1 s ran out of time on a loaded
	// machine (unknown, so the next Δ was taken) once in 2 runs.
	soakGroups = 24
	// soakMaxPause and soakMinPause bound the calm between two faults.
	soakMinPause, soakMaxPause = 200 * time.Millisecond, 700 * time.Millisecond
	// soakReadTimeout is A's shared tier's read timeout: longer than any
	// fault, so that A's reads wait for Redis rather than fail.
	soakReadTimeout = 2 * time.Second
)

// soakFault is a kind of fault the nemesis injects.
type soakFault int

const (
	soakPubsubKill   soakFault = iota // CLIENT KILL TYPE pubsub: every bus drops
	soakStop                          // SIGSTOP, then SIGCONT 100-500 ms later
	soakSleep                         // DEBUG SLEEP 0.1-0.5 s
	soakCut                           // C's connections cut (or black-holed) for 100-1000 ms
	soakLag                           // B's bus holds its messages for 100-1000 ms
	soakRestartAOF                    // SIGKILL, then a restart from the AOF (appendfsync always)
	soakRestartEmpty                  // SIGKILL, then a restart with no data
	soakEvict                         // Redis evicts: a maxmemory just above what it holds, and a flood of other keys
	soakKinds
)

func (f soakFault) String() string {
	return [...]string{"pubsub-kill", "sigstop", "debug-sleep", "cut-C", "lag-B", "restart-aof", "restart-empty", "evict"}[f]
}

// soakScenario is one soak: the kinds of fault its nemesis injects.
type soakScenario struct {
	name  string
	kinds []soakFault
	// failFast: B and C give up on Redis at once (200 ms timeouts, no
	// retries), so that their reads fail during the faults, they load and
	// serve what they loaded; otherwise every instance waits a fault out
	// (go-redis's retries, a 2 s read timeout) and only its bus is lost.
	failFast bool
	// db: the loads read a database that each Set and Delete changes
	// first (histDB), as a cache's loads do, instead of making up new
	// values; then a key Redis lost is no delete in the history (its next
	// load reads what the last write left), and the clients read with
	// GetOrCreate only.
	db bool
	// onDemand says why this scenario is left out of the suite: it
	// runs only with HYBRID_SOAK_ALL=1.
	onDemand string
}

// TestSoak runs the nemesis soak (see the top of the file) for 30 s of
// faults, or HYBRID_SOAK.
func TestSoak(t *testing.T) {
	run := soakDefault
	if v := os.Getenv("HYBRID_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("HYBRID_SOAK=%q: want a positive duration such as 5m", v)
		}
		run = d
	}
	held := []soakFault{soakPubsubKill, soakStop, soakSleep, soakCut, soakLag, soakRestartAOF}
	all := append(slices.Clone(held), soakRestartEmpty)
	for _, sc := range []soakScenario{
		{name: "nemesis", kinds: held},
		// With restarts that come back empty as well, and loads that
		// read a database (see nemesis-evict).
		{name: "nemesis-empty-restarts", kinds: all, db: true},
		// With Redis evicting as well, and loads that read a database
		// (a load that made up a new value would read as stale: a fill
		// after an eviction writes back a value the other instances do
		// not hear of, while they serve the last write from L1; with a
		// database the fill writes back that last write). A cache
		// write that failed is sent again until it returns nil, as an
		// application that writes its database first must: a fill
		// after a failed Set writes back the database's newer value,
		// unannounced, while the other instances keep the older one.
		{name: "nemesis-evict", kinds: append(slices.Clone(held), soakEvict), db: true},
		// With instances that give up on Redis at once: a read that
		// fails loads, and what it loaded is served until Redis answers
		// again (then it leaves L1, see hybrid/unverified.go); with
		// loads that read a database. 3 of 3 runs passed, one at the
		// bound itself (1.34 s), so it stays out of the suite. (With
		// loads that make up values it did not hold: 2-5 s in 2 of 2.)
		{name: "fail-fast", kinds: all, failFast: true, db: true, onDemand: "passed at its staleness bound itself in 1 of 3 runs"},
	} {
		if sc.onDemand != "" && os.Getenv("HYBRID_SOAK_ALL") != "1" {
			continue // on demand only: not a test of what holds
		}
		t.Run(sc.name, func(t *testing.T) { runSoak(t, sc, run) })
	}
}

// soakOutage is one fault injected: when, and how long Redis could not
// be reached by inst (-1: by any instance), or, for a lag, how late
// messages were.
type soakOutage struct {
	kind       soakFault
	inst       int
	start, end int64 // since the history began
}

func (o soakOutage) length() time.Duration { return time.Duration(o.end - o.start) }

// soakNemesis injects faults and records them.
type soakNemesis struct {
	rec   *histRecorder
	own   *redistest.Server
	admin *redis.Client
	proxy *faultproxy.Proxy // between C and Redis
	lag   *gatedBus         // B's bus
	keys  []string
	kinds []soakFault
	db    bool // the loads read a database (soakScenario.db)

	mu      sync.Mutex
	outages []soakOutage
	errs    failures
}

// run injects faults one at a time, with a calm of soakMinPause to
// soakMaxPause between them, until stop is closed; each fault is healed
// before the next and before run returns.
func (n *soakNemesis) run(stop <-chan struct{}) {
	for {
		calm := soakMinPause + rand.N(soakMaxPause-soakMinPause)
		select {
		case <-stop:
			return
		case <-time.After(calm):
		}
		n.inject(n.kinds[rand.IntN(len(n.kinds))])
	}
}

// inject applies one fault of kind and heals it.
func (n *soakNemesis) inject(kind soakFault) {
	ctx := context.Background()
	between := func(lo, hi time.Duration) time.Duration { return lo + rand.N(hi-lo) }
	o := soakOutage{kind: kind, inst: -1, start: n.rec.now()}
	switch kind {
	case soakPubsubKill:
		if err := n.admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
			n.errs.addf("CLIENT KILL TYPE pubsub: %v", err)
			return
		}
		n.rec.killed()
		o.end = o.start // Redis answers all along: no outage
	case soakStop:
		d := between(100*time.Millisecond, 500*time.Millisecond)
		if err := n.own.Signal(syscall.SIGSTOP); err != nil {
			n.errs.addf("SIGSTOP: %v", err)
			return
		}
		time.Sleep(d)
		if err := n.own.Signal(syscall.SIGCONT); err != nil {
			n.errs.addf("SIGCONT: %v", err)
		}
		o.end = n.rec.now()
	case soakSleep:
		d := between(100*time.Millisecond, 500*time.Millisecond)
		if err := n.admin.Do(ctx, "DEBUG", "SLEEP", fmt.Sprintf("%.3f", d.Seconds())).Err(); err != nil {
			n.errs.addf("DEBUG SLEEP: %v", err)
		}
		o.end = n.rec.now()
	case soakCut:
		d := between(100*time.Millisecond, time.Second)
		o.inst = 2
		if rand.IntN(2) == 0 {
			n.proxy.Cut()
		} else if err := n.proxy.BlackHole(); err != nil {
			n.errs.addf("black hole: %v", err)
			return
		}
		time.Sleep(d)
		if err := n.proxy.Pass(); err != nil {
			n.errs.addf("proxy pass: %v", err)
		}
		o.end = n.rec.now()
	case soakLag:
		// Messages reaching B meanwhile are held until the release, at
		// most d late; in order, none lost, and no loss reported.
		d := between(100*time.Millisecond, time.Second)
		o.inst = 1
		n.lag.hold()
		time.Sleep(d)
		n.lag.release()
		o.end = n.rec.now()
	case soakRestartAOF, soakRestartEmpty:
		if err := n.own.Kill(); err != nil {
			n.errs.addf("kill Redis: %v", err)
			return
		}
		if kind == soakRestartEmpty {
			if err := n.own.Wipe(); err != nil {
				n.errs.addf("wipe Redis: %v", err)
			}
		}
		if err := n.own.Restart(); err != nil {
			// Nothing can go on without Redis.
			n.errs.addf("restart Redis: %v", err)
		}
		o.end = n.rec.now()
		if kind == soakRestartEmpty {
			n.lost(o)
		}
	case soakEvict:
		n.evict()
		o.end = o.start // Redis answers all along: no outage
		n.lost(soakOutage{start: o.start, end: n.rec.now()})
	}
	n.mu.Lock()
	n.outages = append(n.outages, o)
	n.mu.Unlock()
}

// lost records that Redis may have lost any key in o: the nemesis's
// writes, 'D' in the history (see runSoak for how the checks take them).
func (n *soakNemesis) lost(o soakOutage) {
	if n.db {
		return // the database holds what Redis lost
	}
	for _, k := range n.keys {
		n.rec.add(histOp{inst: histInstances, kind: histDelete, key: k, call: o.start, ret: o.end})
	}
}

// evict makes Redis evict for 100-500 ms, under a policy drawn from those
// the cache supports: a maxmemory just above what it holds, and a flood
// of unrelated 4 KB keys (with a lifetime, so that volatile-lru evicts
// too); then the flood is removed and the limit lifted. Any key may go:
// values, tombstones, the records of Clear and tags, sequence counters,
// leases, the log.
func (n *soakNemesis) evict() {
	ctx := context.Background()
	policy := evictionPolicies[rand.IntN(len(evictionPolicies))]
	info, err := n.admin.Info(ctx, "memory").Result()
	if err != nil {
		n.errs.addf("INFO memory: %v", err)
		return
	}
	var mem int64
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			mem, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if mem == 0 {
		n.errs.addf("INFO memory: no used_memory in %q", info)
		return
	}
	set := func(k, v string) error { return n.admin.ConfigSet(ctx, k, v).Err() }
	if err := set("maxmemory-policy", policy); err != nil {
		n.errs.addf("CONFIG SET maxmemory-policy: %v", err)
		return
	}
	if err := set("maxmemory", strconv.FormatInt(mem+256<<10, 10)); err != nil {
		n.errs.addf("CONFIG SET maxmemory: %v", err)
		return
	}
	filler := strings.Repeat("x", 4096)
	end := time.Now().Add(100*time.Millisecond + rand.N(400*time.Millisecond))
	var flood []string
	for i := 0; time.Now().Before(end); i++ {
		k := fmt.Sprintf("flood:%d", i)
		flood = append(flood, k)
		if err := n.admin.Set(ctx, k, filler, time.Minute).Err(); err != nil {
			break // OOM: nothing left to evict under this policy
		}
	}
	if err := set("maxmemory", "0"); err != nil {
		n.errs.addf("CONFIG SET maxmemory 0: %v", err)
	}
	for len(flood) > 0 {
		m := min(len(flood), 500)
		if err := n.admin.Unlink(ctx, flood[:m]...).Err(); err != nil {
			n.errs.addf("UNLINK the flood: %v", err)
			return
		}
		flood = flood[m:]
	}
}

// longest returns the longest outage of the faults injected (a lag
// counts as an outage of the lagging instance: its messages arrive that
// much later, with no loss reported).
func (n *soakNemesis) longest() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	var d time.Duration
	for _, o := range n.outages {
		d = max(d, o.length())
	}
	return d
}

// timeline returns the faults injected, as text.
func (n *soakNemesis) timeline() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var parts []string
	for _, o := range n.outages {
		parts = append(parts, fmt.Sprintf("%v [%s, %s]", o.kind, histTime(o.start), histTime(o.end)))
	}
	return strings.Join(parts, ", ")
}

// soakBus is an instance's Bus that records when it reported a loss
// (dropped) and when it was back (restored), for the log.
type soakBus struct {
	hybrid.Bus
	rec    *histRecorder
	mu     sync.Mutex
	events []string
}

func (b *soakBus) Subscribe(ctx context.Context, channel string, onMessage func([]byte), onLoss func(bool)) (func(), error) {
	return b.Bus.Subscribe(ctx, channel, onMessage, func(restored bool) {
		what := "dropped"
		if restored {
			what = "back"
		}
		b.mu.Lock()
		b.events = append(b.events, what+" "+histTime(b.rec.now()))
		b.mu.Unlock()
		onLoss(restored)
	})
}

// soakRemote is an instance's Remote that records when its reads failed.
type soakRemote struct {
	tier.Remote
	rec    *histRecorder
	mu     sync.Mutex
	failed [][2]int64               // call and return of each failed Get
	stored map[string]soakWriteBack // loaded values written
	keys   []string                 // the keys the clients use
	db     bool                     // the loads read a database (soakScenario.db)
	// trail holds, by loaded value, what the shared tier was asked and
	// answered about it: writes of it, and reads that returned it.
	trail map[string][]string
}

// note adds to v's trail.
func (r *soakRemote) note(v, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.trail == nil {
		r.trail = map[string][]string{}
	}
	r.trail[v] = append(r.trail[v], fmt.Sprintf(format, args...))
}

// loadedValue returns the loaded value b encodes ("l..."), if it does.
func loadedValue(b []byte) (string, bool) {
	var v string
	if _, payload, err := envelope.Decode(b); err != nil || json.Unmarshal(payload, &v) != nil || !strings.HasPrefix(v, "l") {
		return "", false
	}
	return v, true
}

func (r *soakRemote) Get(ctx context.Context, keys []string) ([][]byte, error) {
	call := r.rec.now()
	v, err := r.Remote.Get(ctx, keys)
	for i, b := range v {
		if lv, ok := loadedValue(b); ok {
			r.note(lv, "read under %q [%s, %s]", keys[i], histTime(call), histTime(r.rec.now()))
		}
	}
	if err != nil {
		ret := r.rec.now()
		r.mu.Lock()
		r.failed = append(r.failed, [2]int64{call, ret})
		r.mu.Unlock()
	}
	return v, err
}

// Write records, for the values of loads (see soakLocalLoads), whether a
// write reported them stored, or failed (then they may have been).
func (r *soakRemote) Write(ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error) {
	call := r.rec.now()
	stored, err := r.Remote.Write(ctx, ws, f)
	for i, w := range ws {
		if !r.db && strings.HasSuffix(w.Key, "\x00clear") && w.If == tier.IfAbsent && i < len(stored) && stored[i] {
			// The clear record was found missing (evicted, or lost in an
			// empty restart) and made anew: every value written before
			// counts as cleared, as after a Clear made now. 'D' deletes
			// every key (see runSoak). With a database behind the
			// loads, a loss is no delete: the next load reads what the
			// last write left.
			ret := r.rec.now()
			for _, k := range r.keys {
				r.rec.add(histOp{inst: histInstances, kind: histDelete, key: k, call: call, ret: ret})
			}
		}
	}
	for i, w := range ws {
		v, ok := loadedValue(w.Value)
		if !ok {
			continue
		}
		r.note(v, "write under %q (cond %d, seq was %q) [%s, %s]: stored %v, err %v", w.Key, w.If, w.SeqWas, histTime(call), histTime(r.rec.now()), i < len(stored) && stored[i], err)
		r.mu.Lock()
		switch {
		case i < len(stored) && stored[i]:
			r.stored[v] = soakStored
		case err != nil && r.stored[v] == soakNotStored:
			r.stored[v] = soakMaybeStored
		}
		r.mu.Unlock()
	}
	return stored, err
}

// soakWriteBack is what the writes of a loaded value reported.
type soakWriteBack int

const (
	soakNotStored   soakWriteBack = iota // not stored, or never written
	soakMaybeStored                      // a write failed: it may have landed
	soakStored                           // a write reported it stored
)

// failedDuring reports whether a read of r failed during op.
func (r *soakRemote) failedDuring(op histOp) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.failed, func(f [2]int64) bool { return f[0] <= op.ret && f[1] >= op.call })
}

// counts returns the number of faults of each kind, as text.
func (n *soakNemesis) counts() (string, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var by [soakKinds]int
	for _, o := range n.outages {
		by[o.kind]++
	}
	var parts []string
	for k, c := range by {
		parts = append(parts, fmt.Sprintf("%v %d", soakFault(k), c))
	}
	return strings.Join(parts, ", "), len(n.outages)
}

// runSoak runs one soak of sc for run and checks it.
func runSoak(t *testing.T, sc soakScenario, run time.Duration) {
	own := redistest.StartOwn(t, "--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "local")
	proxy := startProxy(t, own.Addr)
	admin := redis.NewClient(&redis.Options{Addr: own.Addr, ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { admin.Close() })

	ns := redistest.Prefix(t)
	rec := &histRecorder{start: time.Now(), msgs: map[instKey][]int64{}}
	lag := &gatedBus{}
	keys := make([]string, soakKeys)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	caches := make([]*hybrid.Cache[string], histInstances)
	remotes := make([]*soakRemote, histInstances)
	buses := make([]*soakBus, histInstances)
	for i := range caches {
		addr := own.Addr
		if i == 2 {
			addr = proxy.Addr()
		}
		ro := &redis.Options{Addr: addr}
		// go-redis's retries stay on: a write whose reply a cut lost is
		// sent again once the cut heals, which may make a Set a second
		// time over a newer write of another instance (seen once, as a
		// smallest passing Δ of 2 s; operations.md, "Writes sent twice").
		// Without them, the fills that C's cuts make fail their
		// write-backs with errors, and the soak cannot tell those that
		// landed from those that did not (then it models them as writes
		// of unknown outcome, which no read afterwards agrees with).
		lo := l2.Options{ReadTimeout: soakReadTimeout}
		if i > 0 && sc.failFast {
			// B and C give up quickly and do not retry: their reads
			// fail during the faults, their writes return errors, and
			// they serve held entries; A waits the faults out.
			shortTimeouts(ro)
			lo = l2.Options{}
		}
		rdb := redis.NewClient(ro)
		t.Cleanup(func() { rdb.Close() })
		bus := invalidate.New(rdb, invalidate.Options{Logger: quiet, ReconnectMin: soakReconnect, ReconnectMax: soakReconnect})
		t.Cleanup(func() { bus.Close() })
		var b hybrid.Bus = bus
		if i == 1 {
			lag.Bus = bus
			b = lag
		}
		buses[i] = &soakBus{Bus: b, rec: rec}
		remotes[i] = &soakRemote{Remote: l2.New(rdb, lo), rec: rec, stored: map[string]soakWriteBack{}, keys: keys, db: sc.db}
		caches[i] = newTestCache[string](t, hybrid.Options{
			Namespace: ns,
			Secret:    []byte("soak"), // messages carry values: peers swap them in
			LossGrace: soakLossGrace,
			Logger:    quiet,
			Remote:    remotes[i],
			Bus:       buses[i],
			Events:    hybrid.Events{Invalidated: func(_ hybrid.Op, keys []string) { rec.applied(i, keys) }},
		})
	}
	n := &soakNemesis{rec: rec, own: own, admin: admin, proxy: proxy, lag: lag, keys: keys, kinds: sc.kinds, db: sc.db}

	// Clients call until the faults stop; errors are expected (writes
	// fail while Redis is down: pending in the history) and only counted.
	var (
		wg       sync.WaitGroup
		stop     = make(chan struct{})
		faulting = make(chan struct{})
		opErrs   failures
		loadSeqs [histInstances]atomic.Int64
	)
	var db *histDB
	if sc.db {
		db = newHistDB(keys)
	}
	loads := make([]func(context.Context, string) (string, error), len(caches))
	for i, c := range caches {
		load := func(_ context.Context, key string) (string, error) {
			l := histOp{inst: i, kind: histLoad, key: key, value: fmt.Sprintf("l%d.%d", i, loadSeqs[i].Add(1)), call: rec.now()}
			time.Sleep(histLoadTime)
			l.ret = rec.now()
			rec.addLoad(l)
			return l.value, nil
		}
		if db != nil {
			load = func(_ context.Context, key string) (string, error) {
				v, ok := db.get(key)
				time.Sleep(histLoadTime)
				if !ok {
					return "", hybrid.ErrNotFound
				}
				return v, nil
			}
		}
		loads[i] = load
		for client := range soakClients {
			wg.Go(func() { runHistClient(rec, &opErrs, c, i, client, keys, load, db, stop) })
		}
	}
	var nemesis sync.WaitGroup
	nemesis.Go(func() { n.run(faulting) })
	time.Sleep(run)
	close(faulting)
	nemesis.Wait()
	close(stop)
	wg.Wait()

	// Quiescence: no faults, no writes. Each instance reads every key for
	// a while (as in the history checker's tail), so that one that does
	// not converge shows as a stale read; then its Get of each key must
	// be what Redis holds, or a miss.
	for i, c := range caches {
		wg.Go(func() {
			for range histTail / histTailEvery {
				for _, k := range keys {
					if db != nil {
						histFill(rec, &opErrs, c, i, histClients, k, loads[i])
					} else {
						histRead(rec, &opErrs, c, i, histClients, k)
					}
				}
				time.Sleep(histTailEvery)
			}
		})
	}
	wg.Wait()
	n.errs.report(t)
	type serving struct {
		inst           int
		key, got, want string
		inRedis        bool
	}
	var served []serving
	for _, k := range keys {
		want, inRedis := redisValue(t, admin, ns, k)
		for i, c := range caches {
			got, ok := getString(t, c, k)
			if ok && (!inRedis || got != want) {
				served = append(served, serving{inst: i, key: k, got: got, want: want, inRedis: inRedis})
			}
		}
	}

	h := rec.assemble(t)
	// An instance serving the last value written of a key that Redis
	// evicted holds what Redis lost, nothing stale: a miss there would be
	// the cost, and it needs none.
	latest := map[string]histOp{}
	for _, o := range h.ops {
		if o.isWrite() && o.inst < histInstances && o.ret != histPending && o.ret > latest[o.key].ret {
			latest[o.key] = o
		}
	}
	var diverged []string
	var divergedKeys []string
	for _, sv := range served {
		if !sv.inRedis && latest[sv.key].kind != histDelete && latest[sv.key].value == sv.got {
			continue
		}
		diverged = append(diverged, fmt.Sprintf("%c serves %s = %q, Redis holds %q (found %v)", 'A'+sv.inst, sv.key, sv.got, sv.want, sv.inRedis))
		divergedKeys = append(divergedKeys, sv.key)
	}
	all := slices.Clone(h.ops)
	// A Get that missed while a read of its instance's failed says
	// nothing about the key (a failed read is a miss, promise 6): left
	// out, counted.
	dropped := 0
	h.ops = slices.DeleteFunc(h.ops, func(o histOp) bool {
		if o.kind == histGet && o.value == "" && o.inst < histInstances && remotes[o.inst].failedDuring(o) {
			dropped++
			return true
		}
		return false
	})
	// Read-your-writes with the loads as the history checker takes them
	// (soakLocalLoads takes some out, whose later reads would then seem
	// older than any write).
	rywBad := soakByKeys(h.ops, rywViolations)
	local := soakLocalLoads(h, remotes)
	// An empty restart deletes every key between the kill and the
	// restart (an eviction, any key during its flood): a read that misses after it is no read-your-writes
	// violation of a write made before it, but one that misses after an
	// own write made after it is. For staleness it is no write that
	// supersedes the values before it, only a loss: a write-back that
	// Redis took after the restart (a fill that loaded before the kill),
	// or an instance serving the old value from L1 when nothing newer was
	// written, is not stale, so the deletes take effect at any time after
	// the kill, or never: up to the return of the key's next write, as
	// if just before it (pending when there is none; not pending always,
	// which makes porcupine's search too long). What an instance goes on
	// serving that Redis lost is the convergence check's to find.
	for i, o := range h.ops {
		if o.inst != histInstances {
			continue
		}
		h.ops[i].ret = histPending
		for _, w := range h.ops {
			if w.isWrite() && w.key == o.key && w.call > o.ret && w.ret != histPending {
				h.ops[i].ret = min(h.ops[i].ret, w.ret)
			}
		}
	}
	longest := n.longest()
	bound := soakLossGrace + longest + 2*histPropagation
	faults, total := n.counts()
	var st []string
	for i, c := range caches {
		s := c.Stats()
		st = append(st, fmt.Sprintf("%c: Bus.Losses %d, Bus.Replays %d, Bus.Flushed %d, Bus.HeldServed %d, L2.Errors %d, Invalidations.Applied %d",
			'A'+i, s.Bus.Losses, s.Bus.Replays, s.Bus.Flushed, s.Bus.HeldServed, s.L2.Errors, s.Invalidations.Applied))
	}
	opErrs.mu.Lock()
	failed := opErrs.n
	opErrs.mu.Unlock()
	t.Logf("%s: %v of faults: %d faults (%s); longest outage %v, bound LossGrace %v + longest outage + 2 × propagation %v = %v",
		sc.name, run, total, faults, longest.Round(time.Millisecond), soakLossGrace, histPropagation, bound.Round(time.Millisecond))
	t.Logf("%s: %d calls recorded, %d calls failed (errors expected under faults; writes pending), %d Get misses during failed reads and %d reads of loads that reached no other instance left out; %s",
		sc.name, len(h.ops), failed, dropped, local, strings.Join(st, "; "))
	t.Logf("%s: faults: %s", sc.name, n.timeline())
	for i, b := range buses {
		b.mu.Lock()
		t.Logf("%s: %c's bus: %s", sc.name, 'A'+i, strings.Join(b.events, ", "))
		b.mu.Unlock()
	}
	// The history checked a few keys at a time: each key's history is
	// checked on its own anyway (histPartition), but porcupine's time
	// limit is for the whole: a 30 s soak's is 8 times the history
	// checker's, too long for one check under -race on 2 busy cores.
	keyGroup := map[string]int{}
	for i, k := range keys {
		keyGroup[k] = i * soakGroups / len(keys)
	}
	for g := range soakGroups {
		part := &history{msgs: h.msgs, kills: h.kills}
		for _, o := range h.ops {
			if keyGroup[o.key] == g {
				part.ops = append(part.ops, o)
			}
		}
		historyVerdict(t, fmt.Sprintf("%s-keys-%d-of-%d", sc.name, g+1, soakGroups), part, bound)
	}
	if len(rywBad) > 0 {
		t.Errorf("%s: %d reads older than a write of their own instance that returned nil before them, with the empty restarts' deletes taking effect by the restart, want none (README promise 1)", sc.name, len(rywBad))
		for i, v := range rywBad {
			if i == 3 {
				break
			}
			t.Logf("%s: read older than its own write: %s", sc.name, v)
			if m := regexp.MustCompile(`= (l\d+\.\d+) `).FindStringSubmatch(v); m != nil {
				for j, r := range remotes {
					r.mu.Lock()
					for _, e := range r.trail[m[1]] {
						t.Logf("%s: %s, by %c's shared tier: %s", sc.name, m[1], 'A'+j, e)
					}
					r.mu.Unlock()
				}
			}
		}
	}
	for _, d := range diverged {
		t.Errorf("%s: not converged after quiescence: %s (README promise 2)", sc.name, d)
	}
	if t.Failed() {
		// The calls of the stalest read's key from its source's write on.
		var worst stale
		for _, st := range histStaleness(h.ops) {
			if st.by > worst.by {
				worst = st
			}
		}
		if worst.source != nil {
			for _, o := range all {
				if o.key == worst.read.key && o.ret >= worst.source.call && o.call <= worst.read.ret {
					t.Logf("%s: around the stalest read: %v", sc.name, o)
				}
			}
		}
	}
	if len(divergedKeys) > 0 {
		// The writes of the first such key, and the reads in the fault
		// phase of the values that ended up in L1 and in Redis.
		k := divergedKeys[0]
		for _, o := range all {
			if o.key == k && (o.isWrite() || o.call < int64(run)) {
				t.Logf("%s: %s: %v", sc.name, k, o)
			}
		}
	}
}

// soakLocalLoads adjusts h for the loads that reached no other instance,
// and returns how many reads of them it took out. The history checker
// models a load as a write, ordered before the write it lost to when its
// write-back found another value; but a load whose read of Redis failed
// (promise 6: reads degrade to L1 and load), or whose fill a bus loss or
// a message made stale (promise 3: it answers its callers, is stored
// nowhere), lost to none: Redis held the other value all along. A load
// counts as one of them when no other instance read its value. Then:
//   - if no write reported it stored or failed (it never reached Redis),
//     the load and the reads by its fill's callers are taken out: it was
//     served to them only. A read of it after the load returned stays, a
//     read of a value never written: the instance kept in L1 a value that
//     Redis never held;
//   - if a write of it failed, it may have landed: it stays a write, whose
//     outcome is unknown (pending).
func soakLocalLoads(h *history, remotes []*soakRemote) (reads int) {
	readBy := map[string]map[int]bool{}
	for _, o := range h.ops {
		if o.isRead() && o.value != "" {
			if readBy[o.value] == nil {
				readBy[o.value] = map[int]bool{}
			}
			readBy[o.value][o.inst] = true
		}
	}
	local := map[string]int64{} // value: its load's return
	for i, o := range h.ops {
		if o.kind != histLoad || len(readBy[o.value]) != 1 {
			continue
		}
		r := remotes[o.inst]
		r.mu.Lock()
		wb := r.stored[o.value]
		r.mu.Unlock()
		switch wb {
		case soakNotStored:
			local[o.value] = o.ret
		case soakMaybeStored:
			h.ops[i].ret = histPending
		}
	}
	h.ops = slices.DeleteFunc(h.ops, func(o histOp) bool {
		ret, ok := local[o.value]
		switch {
		case !ok:
			return false
		case o.kind == histLoad:
			return true
		case o.call <= ret:
			reads++
			return true
		}
		return false
	})
	return reads
}

// soakByKeys returns f of the calls of each key of h, joined, for an f
// that compares calls of one key only (rywViolations, quadratic in the
// calls it is given).
func soakByKeys(h []histOp, f func([]histOp) []string) []string {
	byKey := map[string][]histOp{}
	for _, o := range h {
		byKey[o.key] = append(byKey[o.key], o)
	}
	var out []string
	for _, ops := range byKey {
		out = append(out, f(ops)...)
	}
	return out
}
