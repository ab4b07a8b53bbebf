package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// Scenario 9: a fleet of N instances starts cold, all at once, and asks for
// the same keys through a loader that takes 5 ms (the "database"): how many
// times the database is asked for each key, with and without
// Options.LoadLease, and what that costs the callers.

const (
	fleetCallers = 8                     // goroutines per instance
	fleetLoad    = 5 * time.Millisecond  // the database's time per load
	fleetLease   = 2 * time.Second       // Options.LoadLease in lease mode
	fleetQuiet   = 50 * time.Millisecond // no Redis call for this long: background writes are done
	fleetQuietAt = 2 * time.Second       // longest wait for that quiet
)

type fleetMode struct {
	name  string
	lease time.Duration // Options.LoadLease; 0: off
}

var fleetModes = []fleetMode{{"no lease", 0}, {"LoadLease " + fmtDur(float64(fleetLease)), fleetLease}}

// fleetTraffic is what the instances are asked, and in which order.
type fleetTraffic struct {
	name string
	same bool // caller g of every instance walks the same order
}

var fleetTraffics = []fleetTraffic{{"same", true}, {"independent", false}}

func scenarioFleet(ctx context.Context, e *env) (*section, error) {
	nKeys := pick(e, 300, 1000)
	sizes := pick(e, []int{2, 4}, []int{2, 4, 8})
	sec := &section{id: 9, title: "Fleet cold start: one load per key across instances"}
	sec.intro = fmt.Sprintf("N instances in this process (N = %s), each with its own go-redis client (ContextTimeoutEnabled, "+
		"DialTimeout 250 ms, DialerRetries 1, MaxRetries 1), its own l2.Store (behind the counting wrapper) and its own "+
		"invalidate.Bus (default options), same Namespace, Options.Secret set, msgpack records; a fresh Namespace per cell, so "+
		"every cell starts with nothing in Redis and empty L1s. The \"database\" is a load function that counts its calls, "+
		"sleeps %s and returns the record. Each instance runs %d callers; all callers of all instances wait at a barrier "+
		"and start at once; each calls GetOrCreate for each of the same %s keys once, in a shuffled order of its own, and "+
		"times every call. Traffic same: caller g of every instance walks the same order (the fleet is asked the same "+
		"things at the same moment: the stampede); independent: every caller of every instance has its own order. "+
		"Mode no lease is the default Options; LoadLease is Options.LoadLease = %s (LeaseWait at its default, 5 s).\n\n"+
		"Columns: database calls per key, summed over the instances; time until every instance has every key (for each "+
		"instance and key, when the first of its calls for that key returned; the latest of those, from the barrier); "+
		"Redis commands per key (INFO commandstats deltas on the harness's own server, which count the commands a script "+
		"runs as well as its EVALSHA; INFO excluded) from the barrier until no instance has called Redis for %s "+
		"(background write-backs done); round trips per key (the wrappers' counts over the same span, every Store call "+
		"that reaches Redis, lease calls included); p50 and p99 over every call of every caller (%d per key and instance, "+
		"so most are L1 hits); the lease modes' ratios to the no-lease cell of the same N and traffic in the same run; "+
		"the p50 of the calls that took at least the load's %s (those that waited for a load: what a cold key costs). "+
		"The cells take turns within each of %d runs (the modes' order alternating); figures are medians over runs, "+
		"min–max in parentheses.",
		joinInts(sizes), fmtDur(float64(fleetLoad)), fleetCallers, fmtCount(float64(nKeys)), fmtDur(float64(fleetLease)),
		fmtDur(float64(fleetQuiet)), fleetCallers, fmtDur(float64(fleetLoad)), e.reps)

	type cellKey struct {
		n    int
		t, m int // indexes into fleetTraffics, fleetModes
	}
	goroutines := runtime.NumGoroutine()
	res := map[cellKey][]*fleetResult{}
	for rep := range e.reps {
		for _, n := range sizes {
			for t, tr := range fleetTraffics {
				for j := range fleetModes {
					m := (j + rep) % len(fleetModes)
					k := cellKey{n, t, m}
					e.progressf("    N=%d, %s, %s (run %d of %d)", n, tr.name, fleetModes[m].name, rep+1, e.reps)
					settle()
					r, err := runFleetCell(ctx, e, n, nKeys, tr, fleetModes[m])
					if err != nil {
						return sec, fmt.Errorf("N=%d, %s, %s: %w", n, tr.name, fleetModes[m].name, err)
					}
					res[k] = append(res[k], r)
				}
			}
		}
	}

	var t table
	t.Header = []string{"N", "traffic", "mode", "DB calls / key", "time to all keys", "vs no lease", "Redis commands / key",
		"round trips / key", "p50", "p99", "p99 vs no lease", "p50 of calls ≥ " + fmtDur(float64(fleetLoad)), "leases " + strings.Join(fleetLeaseNames[:], " / ")}
	t.Align = []byte{'r', 'l', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'}
	var mixes table
	mixes.Header = []string{"N", "traffic", "mode", "Redis commands in the last run (mix)"}
	var remarks []string
	for _, n := range sizes {
		for ti, tr := range fleetTraffics {
			base := res[cellKey{n, ti, 0}]
			for mi, m := range fleetModes {
				k := cellKey{n, ti, mi}
				label := []string{fmt.Sprint(n), tr.name, m.name}
				rs := res[k]
				if len(rs) == 0 {
					continue
				}
				perKey := func(f func(*fleetResult) float64) []float64 {
					var out []float64
					for _, r := range rs {
						out = append(out, f(r)/float64(nKeys))
					}
					return out
				}
				field := func(rs []*fleetResult, f func(*fleetResult) float64) []float64 {
					var out []float64
					for _, r := range rs {
						out = append(out, f(r))
					}
					return out
				}
				toAll := func(r *fleetResult) float64 { return float64(r.toAll) }
				p99 := func(r *fleetResult) float64 { return r.p99 }
				vsTime, vsP99 := "1 (baseline)", "1 (baseline)"
				if mi > 0 {
					vsTime, vsP99 = "–", "–"
					if len(base) == len(rs) {
						vsTime = fmtSpread(summarize(ratios(field(rs, toAll), field(base, toAll))), "×")
						vsP99 = fmtSpread(summarize(ratios(field(rs, p99), field(base, p99))), "×")
					}
				}
				cmds := "n/a: server shared"
				last := rs[len(rs)-1]
				if last.commands >= 0 {
					cmds = fmtSpread(summarize(perKey(func(r *fleetResult) float64 { return float64(r.commands) })), "")
					mixes.Rows = append(mixes.Rows, append(slices.Clone(label), last.cmdMix))
				}
				leases := "–"
				if m.lease > 0 {
					var parts []string
					for _, n := range last.leases {
						parts = append(parts, fmtCount(float64(n)))
					}
					leases = strings.Join(parts, " / ")
				}
				t.Rows = append(t.Rows, append(label,
					fmtSpread(summarize(perKey(func(r *fleetResult) float64 { return float64(r.loads) })), ""),
					fmtSpreadDur(summarize(field(rs, toAll))),
					vsTime,
					cmds,
					fmtSpread(summarize(perKey(func(r *fleetResult) float64 { return float64(r.trips) })), ""),
					fmtSpreadDur(summarize(field(rs, func(r *fleetResult) float64 { return r.p50 }))),
					fmtSpreadDur(summarize(field(rs, p99))),
					vsP99,
					fmtSpreadDur(summarize(field(rs, func(r *fleetResult) float64 { return r.slowP50 }))),
					leases,
				))
				for ri, r := range rs {
					if r.remark != "" {
						remarks = append(remarks, fmt.Sprintf("N=%d, %s, %s, run %d: %s.", n, tr.name, m.name, ri+1, r.remark))
					}
				}
			}
			// The headline: the stampede, largest N.
			if !tr.same || n != sizes[len(sizes)-1] {
				continue
			}
			lr := res[cellKey{n, ti, 1}]
			if len(base) == 0 || len(lr) != len(base) {
				continue
			}
			calls := func(rs []*fleetResult) string {
				var out []float64
				for _, r := range rs {
					out = append(out, float64(r.loads)/float64(nKeys))
				}
				return sig3(summarize(out).Median)
			}
			var lp, bp []float64
			for i := range lr {
				lp, bp = append(lp, lr[i].p99), append(bp, base[i].p99)
			}
			sec.headline(fmt.Sprintf("fleet cold start, %d instances, same traffic: DB calls per key with / without LoadLease; p99 ratio", n),
				fmt.Sprintf("%s / %s; %s", calls(lr), calls(base), fmtSpread(summarize(ratios(lp, bp)), "×")),
				fmt.Sprintf("1.00 / %d.00; ≤ 1.2×", n))
		}
	}
	sec.addTable(t)
	sec.add("Leases are the lease rows' Stats, summed over the instances, of the last run: Leases.Taken (keys whose lease an " +
		"instance took, take-overs included), Leases.Waited (keys whose lease another instance held when asked: waited for), " +
		"Leases.Answered (waited keys answered by the holder's value or error, with no load), Leases.TakenOver (waited keys " +
		"whose lease ended without a value and were taken), Leases.TimedOut (waited keys loaded after LeaseWait) and " +
		"Leases.Skipped (keys loaded without a lease because Redis could not be asked).")
	if len(mixes.Rows) > 0 {
		sec.addTable(mixes)
	}
	for _, rm := range remarks {
		sec.add(rm)
	}
	// Every cache, bus and client of the cells is closed: their goroutines
	// must be gone (a moment after Close for the clients' dialers).
	left := runtime.NumGoroutine() - goroutines
	for deadline := time.Now().Add(time.Second); left > 0 && time.Now().Before(deadline); left = runtime.NumGoroutine() - goroutines {
		time.Sleep(10 * time.Millisecond)
	}
	if left > 0 {
		sec.add(fmt.Sprintf("%d goroutine(s) more than before the scenario remained after every instance was closed.", left))
	}
	return sec, nil
}

func joinInts(xs []int) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprint(x))
	}
	return strings.Join(s, ", ")
}

// --- one cell ---

// fleetInst is one instance of the fleet.
type fleetInst struct {
	c      *hybrid.Cache[*Record]
	remote *countingRemote
	rdb    *redis.Client
	bus    *invalidate.Bus
}

func (in *fleetInst) close() {
	if in.c != nil {
		in.c.Close()
	}
	in.bus.Close()
	in.rdb.Close()
}

// fleetDB is the cell's database: a load that takes fleetLoad, counted per
// key.
type fleetDB struct {
	index map[string]int
	calls []atomic.Int32
	total atomic.Int64
}

func (d *fleetDB) load(ctx context.Context, key string) (*Record, error) {
	i, ok := d.index[key]
	if !ok {
		return nil, fmt.Errorf("bench: %q is not a fleet key", key)
	}
	d.total.Add(1)
	d.calls[i].Add(1)
	t := time.NewTimer(fleetLoad)
	defer t.Stop()
	select {
	case <-t.C:
		return makeRecord(i), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fleetResult is what one cell measured, over all its instances.
type fleetResult struct {
	loads    int64         // database calls
	toAll    time.Duration // until every instance had every key
	commands int64         // Redis commands; -1: not attributable
	cmdMix   string
	trips    int64 // the wrappers' round trips
	p50, p99 float64
	slowP50  float64   // p50 of the calls that took fleetLoad or longer
	leases   [6]uint64 // see fleetLeases
	remark   string
}

func openFleet(e *env, ns string, n int, m fleetMode) ([]*fleetInst, error) {
	var ins []*fleetInst
	closeAll := func() {
		for _, in := range ins {
			in.close()
		}
	}
	for range n {
		co := outageClient
		co.Addr = e.addr
		in := &fleetInst{rdb: redis.NewClient(&co)}
		in.bus = invalidate.New(in.rdb, invalidate.Options{})
		in.remote = &countingRemote{s: l2.New(in.rdb, l2.Options{})}
		ins = append(ins, in)
		o := oursOptions(e, spec{kind: nameOurs, prefix: ns, f: fmtMsgpack}, in.remote, in.bus)
		o.LoadLease = m.lease
		c, err := hybrid.New[*Record](o)
		if err != nil {
			closeAll()
			return nil, err
		}
		in.c = c
	}
	return ins, nil
}

func runFleetCell(ctx context.Context, e *env, n, nKeys int, tr fleetTraffic, m fleetMode) (*fleetResult, error) {
	ns := e.k(fmt.Sprintf("fleet-%d", time.Now().UnixNano()))
	ins, err := openFleet(e, ns, n, m)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, in := range ins {
			in.close()
		}
	}()
	db := &fleetDB{index: make(map[string]int, nKeys), calls: make([]atomic.Int32, nKeys)}
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = recordKey(i)
		db.index[keys[i]] = i
	}
	orders := make([][][]int, n) // [instance][caller]
	for i := range orders {
		orders[i] = make([][]int, fleetCallers)
		for g := range orders[i] {
			if tr.same && i > 0 {
				orders[i][g] = orders[0][g]
			} else {
				orders[i][g] = e.perm(nKeys)
			}
		}
	}
	trips := func() (sum int64) {
		for _, in := range ins {
			sum += in.remote.trips.Load()
		}
		return sum
	}

	// ends[i][g][k]: when caller g of instance i got key k, since the barrier.
	ends := make([][][]time.Duration, n)
	lats := make([][]float64, n*fleetCallers)
	var failed, wrong atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	start := make(chan struct{})
	var wg sync.WaitGroup
	var t0 time.Time
	for i, in := range ins {
		ends[i] = make([][]time.Duration, fleetCallers)
		for g := range fleetCallers {
			end := make([]time.Duration, nKeys)
			lat := make([]float64, 0, nKeys)
			ends[i][g] = end
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for _, k := range orders[i][g] {
					s := time.Now()
					v, err := in.c.GetOrCreate(ctx, keys[k], db.load)
					now := time.Now()
					lat = append(lat, float64(now.Sub(s)))
					end[k] = now.Sub(t0)
					switch {
					case err != nil:
						failed.Add(1)
						errMu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						errMu.Unlock()
					case v == nil || v.ID != k:
						wrong.Add(1)
					}
				}
				lats[i*fleetCallers+g] = lat
			}()
		}
	}
	r := &fleetResult{commands: -1}
	trips0 := trips()
	before := readServerCounters(ctx, e.rdb)
	t0 = time.Now()
	close(start)
	wg.Wait()
	// Background write-backs: wait until no instance has called Redis for
	// fleetQuiet.
	last, quietSince := trips(), time.Now()
	for deadline := time.Now().Add(fleetQuietAt); time.Since(quietSince) < fleetQuiet && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		if now := trips(); now != last {
			last, quietSince = now, time.Now()
		}
	}
	after := readServerCounters(ctx, e.rdb)

	r.loads = db.total.Load()
	r.trips = trips() - trips0
	r.toAll = timeToAll(ends)
	if dl := before.delta(after); dl.available && e.ownRedis {
		r.commands, r.cmdMix = dl.commands, dl.describe()
	}
	var all []float64
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	r.p50, r.p99 = percentileSorted(all, 0.5), percentileSorted(all, 0.99)
	if i, _ := slices.BinarySearch(all, float64(fleetLoad)); i < len(all) {
		r.slowP50 = percentileSorted(all[i:], 0.5)
	}
	var sts []hybrid.Stats
	for _, in := range ins {
		sts = append(sts, in.c.Stats())
	}
	r.leases = fleetLeases(sts)

	var notes []string
	if nf := failed.Load(); nf > 0 {
		notes = append(notes, fmt.Sprintf("%d call(s) failed (first: %v)", nf, firstErr))
	}
	if nw := wrong.Load(); nw > 0 {
		notes = append(notes, fmt.Sprintf("%d call(s) returned another key's record", nw))
	}
	if m.lease > 0 && r.loads != int64(nKeys) {
		var over []string
		for i := range db.calls {
			if c := db.calls[i].Load(); c != 1 && len(over) < 5 {
				over = append(over, fmt.Sprintf("%s %d×", keys[i], c))
			}
		}
		notes = append(notes, fmt.Sprintf("%s database calls for %s keys (e.g. %s)", fmtCount(float64(r.loads)),
			fmtCount(float64(nKeys)), strings.Join(over, ", ")))
	}
	r.remark = strings.Join(notes, "; ")
	return r, nil
}

// timeToAll returns when every instance had every key: for each instance
// and key, the earliest end of its callers' calls for the key; the latest
// of those. ends[i][g][k] is when caller g of instance i got key k.
func timeToAll(ends [][][]time.Duration) time.Duration {
	var worst time.Duration
	for _, inst := range ends {
		if len(inst) == 0 {
			continue
		}
		for k := range inst[0] {
			first := inst[0][k]
			for _, g := range inst[1:] {
				first = min(first, g[k])
			}
			worst = max(worst, first)
		}
	}
	return worst
}

// fleetLeases sums the instances' lease counters, in the order of
// fleetLeaseNames.
func fleetLeases(sts []hybrid.Stats) (sums [6]uint64) {
	for _, st := range sts {
		for i, n := range [6]uint64{st.Leases.Taken, st.Leases.Waited, st.Leases.Answered, st.Leases.TakenOver, st.Leases.TimedOut, st.Leases.Skipped} {
			sums[i] += n
		}
	}
	return sums
}

var fleetLeaseNames = [6]string{"taken", "waited", "answered", "taken over", "timed out", "skipped"}
