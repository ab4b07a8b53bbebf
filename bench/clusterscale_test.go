package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// The Redis Cluster figures (bench/RESULTS.md, "Redis Cluster: classic vs
// sharded invalidation"): on throwaway clusters of 1 master, 3 masters and
// 3 masters with a replica each, N = 1, 4 and 16 instances of a cache
// (each its own cluster client, l2.Store, invalidate.Bus and
// hybrid.Cache), classic pub/sub against sharded, side by side in one run:
// how long a Subscribe takes, the Redis memory it holds, invalidations per
// second with writers at saturation, Redis CPU, bytes and cluster bus
// traffic per write, the busiest node's share of the CPU, and, after a bus
// blip, how many keys an instance reads again from Redis. The default run
// is a smoke version (3 masters, 2 instances per mode, a quarter second
// of writes per mode, a blip over 500 keys) that checks that every write reached every
// instance and that the blip's writes are served fresh afterwards;
// HYBRID_BENCH_CLUSTER=1 runs the figures and writes the chart to
// results/cluster-scale.svg:
//
//	HYBRID_BENCH_CLUSTER=1 go test -count=1 -v -timeout 30m -run TestFigureClusterScale .

// csTopo is a cluster's shape.
type csTopo struct {
	masters, replicas int
}

func (tp csTopo) String() string {
	s := fmt.Sprintf("%d master", tp.masters)
	if tp.masters > 1 {
		s += "s"
	}
	if tp.replicas > 0 {
		s += " + replica each"
	}
	return s
}

const (
	csKeys    = 10_000      // the keys writers pick from
	csWriters = 4           // writing goroutines, spread over the instances
	csBlipSet = 10          // keys written while the blip's bus is cut
	csIdle    = time.Second // the idle stretch before the writers
)

// csCell is one measured cell: a cluster shape, a number of instances, a
// mode.
type csCell struct {
	topo    csTopo
	n       int
	sharded bool

	subscribe []time.Duration // hybrid.New (its Subscribe) per instance
	memory    int64           // used_memory over all nodes, after the N subscriptions less before
	channels  int             // channels (shard channels) each instance subscribes

	writes      int64
	wall        time.Duration // the writers' stretch
	received    uint64        // messages the instances' buses read
	deliverWall time.Duration // from the writers' start to the last message read
	disconnects uint64        // pub/sub connections lost under load

	cpu       []float64     // per node, seconds, less its idle rate over the stretch
	idle      []float64     // per node, CPU seconds per second with the instances subscribed and no writes
	procCPU   time.Duration // this process's CPU over the stretch (instances and writers)
	netOut    int64         // total_net_output_bytes, all nodes
	busMsgs   int64         // cluster bus messages sent, all nodes
	busPubs   int64         // of them, publish and publishshard messages
	busBytes  int64         // cluster bus bytes (kernel TCP counters); -1: unknown
	publishes int64         // PUBLISH and SPUBLISH calls
	commands  map[string]int64

	blip *csBlip // measured in the cells with 4 instances (2 in the smoke run)
}

// csBlip is the reload after a bus blip on one instance.
type csBlip struct {
	held    int    // keys the instance held in L1 before the blip
	killed  int64  // pub/sub connections closed (every instance's)
	reads   uint64 // keys read from Redis while reading all held keys again
	flushed uint64 // Stats().Bus.Flushed delta
	down    time.Duration
}

// csInst is one instance of the service.
type csInst struct {
	rdb *redis.ClusterClient
	bus *invalidate.Bus
	c   *hybrid.Cache[*Record]
}

func (in *csInst) close() {
	if in.c != nil {
		in.c.Close()
	}
	in.bus.Close()
	in.rdb.Close()
}

// openCsInst opens instance i and returns how long hybrid.New (which
// subscribes) took.
func openCsInst(ctx context.Context, tc *testCluster, i int, ns string, secret []byte, sharded bool) (*csInst, time.Duration, error) {
	in := &csInst{rdb: tc.client("cs" + strconv.Itoa(i))}
	// Open the client's connections first, so that the memory figure is
	// the subscription's.
	if err := in.rdb.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		in.rdb.Close()
		return nil, 0, err
	}
	in.bus = invalidate.New(in.rdb, invalidate.Options{Classic: !sharded})
	t0 := time.Now()
	c, err := hybrid.New[*Record](hybrid.Options{
		Namespace: ns, Remote: l2.New(in.rdb, l2.Options{Classic: !sharded}), Bus: in.bus, Secret: secret,
		TTL: benchTTL, LocalTTL: benchLocalTTL, LocalMaxBytes: 256 << 20,
	})
	d := time.Since(t0)
	if err != nil {
		in.close()
		return nil, 0, err
	}
	if in.bus.Sharded() != sharded {
		in.c = c
		in.close()
		return nil, 0, fmt.Errorf("instance %d: bus sharded %v, want %v", i, in.bus.Sharded(), sharded)
	}
	in.c = c
	return in, d, nil
}

// errCsLoad is the load's error: every key read is in Redis.
var errCsLoad = errors.New("bench: load called in the cluster scenario")

func csNoLoad(context.Context, string) (*Record, error) { return nil, errCsLoad }

// runCsPair opens n classic and n sharded instances on tc (which first
// takes turns by first), measures the nodes' idle CPU with both sets
// subscribed, then drives writers through one set at a time in slices of
// slice, the sets taking turns, so that both see the same machine, and
// finally, when blipKeys > 0, measures a blip on each set.
func runCsPair(t *testing.T, tc *testCluster, topo csTopo, n, nslices int, slice time.Duration, blipKeys int, secret []byte, seq int, first bool) (classic, sharded *csCell) {
	ctx := t.Context()
	cells := [2]*csCell{}
	sets := [2][]*csInst{}
	defer func() {
		for _, insts := range sets {
			for _, in := range insts {
				in.close()
			}
		}
	}()
	for k := range 2 {
		m := k
		if first {
			m = 1 - k
		}
		cell := &csCell{topo: topo, n: n, sharded: m == 1, channels: 1, busBytes: -1, commands: map[string]int64{}, cpu: make([]float64, len(tc.nodes))}
		if cell.sharded {
			cell.channels = 16384
		}
		cells[m] = cell
		c0, err := tc.counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ns := fmt.Sprintf("cs%d.%d", seq, m)
		for i := range n {
			in, d, err := openCsInst(ctx, tc, i, ns, secret, cell.sharded)
			if err != nil {
				t.Fatal(err)
			}
			sets[m] = append(sets[m], in)
			cell.subscribe = append(cell.subscribe, d)
		}
		c1, err := tc.counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range c0 {
			cell.memory += c1[i].memory - c0[i].memory
		}
	}

	// What the nodes spend with both sets subscribed and idle.
	c0, err := tc.counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(csIdle)
	c1, err := tc.counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idle := make([]float64, len(c0))
	for i := range c0 {
		idle[i] = (c1[i].cpu - c0[i].cpu) / csIdle.Seconds()
	}
	cells[0].idle, cells[1].idle = idle, idle

	for s := range nslices {
		m := s % 2
		if first {
			m = 1 - m
		}
		csSlice(t, tc, sets[m], cells[m], slice, uint64(seq*100+s))
	}
	if blipKeys > 0 && n >= 2 {
		for m, insts := range sets {
			// The other set's blip cut these connections too: start
			// from a bus that is back.
			csWaitRestored(t, slices.Concat(sets[0], sets[1]))
			b := csRunBlip(t, tc, insts[0], insts[1], blipKeys)
			cells[m].blip = &b
		}
	}
	return cells[0], cells[1]
}

// csWaitRestored waits until no instance's bus has a loss in progress
// (the bus reports each loss twice: lost, then restored).
func csWaitRestored(t *testing.T, insts []*csInst) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, in := range insts {
		for in.bus.Stats().Losses%2 != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("an instance's bus not back after 20 s: %+v", in.bus.Stats())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// csSlice drives csWriters writers through insts for dur, waits for their
// messages to reach every instance, and adds what it measured to cell.
func csSlice(t *testing.T, tc *testCluster, insts []*csInst, cell *csCell, dur time.Duration, seed uint64) {
	ctx := t.Context()
	n := len(insts)
	c0, err := tc.counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recv0, disc0 := csReceived(insts)
	bb0, bbOK := tc.busBytes()
	proc0 := cpuTime()
	var writes atomic.Int64
	var failed atomic.Value
	start := time.Now()
	stop := start.Add(dur)
	var wg sync.WaitGroup
	for w := range csWriters {
		wg.Go(func() {
			rng := mrand.New(mrand.NewPCG(seed, uint64(w)))
			for k := 0; time.Now().Before(stop); k++ {
				in := insts[(w+k)%n]
				i := rng.IntN(csKeys)
				v := makeRecord(i)
				v.Score = float64(k)
				if err := in.c.Set(ctx, "k"+strconv.Itoa(i), v); err != nil {
					failed.Store(err)
					return
				}
				writes.Add(1)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	nw := writes.Load()
	// Wait for the last message to arrive (or for 2 s without progress).
	want := uint64(nw) * uint64(n)
	last, lastAt := recv0, time.Now()
	for {
		got, _ := csReceived(insts)
		if got != last {
			last, lastAt = got, time.Now()
		}
		if got-recv0 >= want || time.Since(lastAt) > 2*time.Second {
			break
		}
		time.Sleep(time.Millisecond)
	}
	recv1, disc1 := csReceived(insts)
	deliverWall := max(lastAt.Sub(start), wall)
	cell.procCPU += cpuTime() - proc0
	c1, err := tc.counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bb1, ok := tc.busBytes(); ok && bbOK {
		cell.busBytes = max(cell.busBytes, 0) + bb1 - bb0
	}
	cell.writes += nw
	cell.wall += wall
	cell.received += recv1 - recv0
	cell.disconnects += disc1 - disc0
	cell.deliverWall += deliverWall
	for i := range c0 {
		cell.cpu[i] += max(c1[i].cpu-c0[i].cpu-cell.idle[i]*deliverWall.Seconds(), 0)
		cell.netOut += c1[i].netOut - c0[i].netOut
		cell.busMsgs += c1[i].busMsgs - c0[i].busMsgs
		cell.busPubs += c1[i].busPubs - c0[i].busPubs
		cell.publishes += c1[i].publishes - c0[i].publishes
		for k, v := range c1[i].calls {
			if d := v - c0[i].calls[k]; d > 0 {
				cell.commands[k] += d
			}
		}
	}
}

// csReceived sums the messages the instances' buses read and the pub/sub
// connections they lost.
func csReceived(insts []*csInst) (received, disconnects uint64) {
	for _, in := range insts {
		st := in.bus.Stats()
		received += st.Received
		disconnects += st.Disconnects
	}
	return received, disconnects
}

// csRunBlip fills a's L1 with held keys over all slots, cuts every
// pub/sub connection, writes csBlipSet of the keys from b meanwhile, waits
// for a's bus to be back and reads all held keys on a again, counting the
// reads that went to Redis. The keys b wrote must read as b wrote them.
func csRunBlip(t *testing.T, tc *testCluster, a, b *csInst, held int) csBlip {
	ctx := t.Context()
	items := make(map[string]*Record, 500)
	for i := range held {
		items["h"+strconv.Itoa(i)] = makeRecord(i)
		if len(items) == 500 || i == held-1 {
			if err := a.c.SetMany(ctx, items); err != nil {
				t.Fatal(err)
			}
			clear(items)
		}
	}
	if got := a.c.Stats().L1.Entries; got < held {
		t.Fatalf("blip: instance holds %d entries, want at least %d", got, held)
	}
	st0, bus0 := a.c.Stats(), a.bus.Stats()
	t0 := time.Now()
	killed, err := tc.killPubSub(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range csBlipSet {
		v := makeRecord(i)
		v.Score = -1
		if err := b.c.Set(ctx, "h"+strconv.Itoa(i*(held/csBlipSet)), v); err != nil {
			t.Fatal(err)
		}
	}
	for a.bus.Stats().Losses < bus0.Losses+2 { // lost, then restored
		if time.Since(t0) > 20*time.Second {
			t.Fatalf("blip: instance's bus not back after 20 s: %+v", a.bus.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	down := time.Since(t0)
	// The cache ends the loss once L1 reflects it (a catch-up per slot, a
	// flush): until then its held entries are served for LossGrace, as
	// promise 4 allows. Stats.Bus.Losses counts the loss and its end then.
	for a.c.Stats().Bus.Losses < st0.Bus.Losses+2 {
		if time.Since(t0) > 40*time.Second {
			t.Fatalf("blip: the cache did not end the loss within 40 s: %+v", a.c.Stats().Bus)
		}
		time.Sleep(5 * time.Millisecond)
	}
	st1 := a.c.Stats()
	for i := range held {
		v, err := a.c.GetOrCreate(ctx, "h"+strconv.Itoa(i), csNoLoad)
		if err != nil {
			t.Fatal(err)
		}
		if i%(held/csBlipSet) == 0 && i/(held/csBlipSet) < csBlipSet && v.Score != -1 {
			t.Errorf("blip: h%d has score %v after the bus came back, Redis holds -1", i, v.Score)
		}
	}
	st2 := a.c.Stats()
	return csBlip{
		held: held, killed: killed, down: down,
		reads:   st2.L2.Hits + st2.L2.Misses - st1.L2.Hits - st1.L2.Misses,
		flushed: st2.Bus.Flushed - st0.Bus.Flushed,
	}
}

// TestFigureClusterScale measures classic against sharded invalidation on
// Redis Cluster (see the comment at the top of the file).
func TestFigureClusterScale(t *testing.T) {
	full := os.Getenv("HYBRID_BENCH_CLUSTER") == "1"
	topos := []csTopo{{3, 0}}
	ns := []int{2}
	rounds, nslices, slice, blipKeys, blipN := 1, 2, 250*time.Millisecond, 500, 2
	if full {
		topos = []csTopo{{1, 0}, {3, 0}, {3, 1}}
		ns = []int{1, 4, 16}
		rounds, nslices, slice, blipKeys, blipN = 3, 6, 500*time.Millisecond, 10_000, 4
	}
	dur := time.Duration(nslices/2) * slice
	secret := make([]byte, 32)
	rand.Read(secret)
	var cells []csCell
	seq := 0
	for _, topo := range topos {
		tc := startCluster(t, topo.masters, topo.replicas)
		for round := range rounds {
			for _, n := range ns {
				seq++
				bk := 0
				if n == blipN {
					bk = blipKeys
				}
				cl, sh := runCsPair(t, tc, topo, n, nslices, slice, bk, secret, seq, seq%2 == 0)
				for _, c := range []*csCell{cl, sh} {
					t.Logf("round %d: %s", round, c.describe())
					if c.received != uint64(c.writes)*uint64(n) && c.disconnects == 0 {
						t.Errorf("%s: %d messages read for %d writes to %d instances, with no disconnect", c.name(), c.received, c.writes, n)
					}
					cells = append(cells, *c)
				}
			}
		}
		tc.stop()
	}
	fmt.Printf("\nRedis %s, %d writers, %v of writes per cell in %d slices taking turns with the other mode, %d rounds (medians; ratios sharded/classic of the same round), values ~100 B, %s\n\n",
		redisVersion(), csWriters, dur, nslices/2, rounds, time.Now().UTC().Format(time.DateOnly))
	groups := csGroups(cells)
	fmt.Print(csTable(groups))
	if full {
		path := filepath.Join("results", "cluster-scale.svg")
		if err := os.WriteFile(path, []byte(csChart(groups).svg()), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Println("\nchart:", path)
	}
}

// csGroup is one cluster shape and N: its classic and sharded cells, one
// of each per round, in round order.
type csGroup struct {
	topo   csTopo
	n      int
	cl, sh []csCell
}

func csGroups(cells []csCell) []*csGroup {
	var out []*csGroup
	find := func(c csCell) *csGroup {
		for _, g := range out {
			if g.topo == c.topo && g.n == c.n {
				return g
			}
		}
		g := &csGroup{topo: c.topo, n: c.n}
		out = append(out, g)
		return g
	}
	for _, c := range cells {
		g := find(c)
		if c.sharded {
			g.sh = append(g.sh, c)
		} else {
			g.cl = append(g.cl, c)
		}
	}
	return out
}

// med is the median of f over cs.
func med(cs []csCell, f func(csCell) float64) float64 {
	xs := make([]float64, len(cs))
	for i, c := range cs {
		xs[i] = f(c)
	}
	return medianOf(xs)
}

// ratio is the median, over rounds, of f(sharded) / f(classic).
func (g *csGroup) ratio(f func(csCell) float64) float64 {
	var xs []float64
	for i := range min(len(g.cl), len(g.sh)) {
		xs = append(xs, f(g.sh[i])/f(g.cl[i]))
	}
	return medianOf(xs)
}

func (c csCell) invalidationsPerSec() float64 { return float64(c.received) / c.deliverWall.Seconds() }
func (c csCell) writesPerSec() float64        { return float64(c.writes) / c.wall.Seconds() }
func (c csCell) cpuPerWrite() float64         { return 1e6 * c.cpuTotal() / float64(c.writes) }
func (c csCell) perWrite(x int64) float64     { return float64(x) / float64(c.writes) }
func (c csCell) memPerInstance() float64      { return float64(c.memory) / float64(c.n) }
func (c csCell) procPerMessage() float64 {
	return float64(c.procCPU.Microseconds()) / float64(c.received)
}
func (c csCell) idleTotal() float64 {
	var s float64
	for _, x := range c.idle {
		s += x
	}
	return s
}

// csTable is the markdown table: a row per cluster shape and N, classic
// and sharded side by side, and their ratio.
func csTable(groups []*csGroup) string {
	var b strings.Builder
	b.WriteString("| cluster | N | invalidations/s classic, sharded (×) | writes/s classic, sharded (×) | Redis CPU µs/write classic, sharded (×) | net out B/write classic, sharded | cluster bus B/write classic, sharded (msgs/write) | busiest node's CPU share classic, sharded | Redis idle CPU, % of a core | client CPU µs per message read classic, sharded (×) | Redis memory per instance classic, sharded (per shard channel) | Subscribe classic, sharded | pub/sub disconnects classic, sharded | keys read after a blip (of held) classic, sharded |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, g := range groups {
		bus := func(cs []csCell) string {
			msgs := med(cs, func(c csCell) float64 { return c.perWrite(c.busMsgs) })
			if cs[0].busBytes < 0 {
				return fmt.Sprintf("? (%.2f)", msgs)
			}
			return fmt.Sprintf("%.0f (%.2f)", med(cs, func(c csCell) float64 { return c.perWrite(c.busBytes) }), msgs)
		}
		blip := "–"
		if g.cl[0].blip != nil && g.sh[0].blip != nil {
			reads := func(c csCell) float64 { return float64(c.blip.reads) }
			down := func(c csCell) float64 { return float64(c.blip.down) }
			blip = fmt.Sprintf("%.0f, %.0f (of %d; bus back after %v, %v)", med(g.cl, reads), med(g.sh, reads), g.cl[0].blip.held,
				roundDur(time.Duration(med(g.cl, down))), roundDur(time.Duration(med(g.sh, down))))
		}
		sub := func(c csCell) float64 { return float64(medianDur(c.subscribe)) }
		disc := func(c csCell) float64 { return float64(c.disconnects) }
		fmt.Fprintf(&b, "| %v | %d | %.0f, %.0f (%.2f×) | %.0f, %.0f (%.2f×) | %.1f, %.1f (%.2f×) | %.0f, %.0f | %s, %s | %.0f%%, %.0f%% | %.1f | %.1f, %.1f (%.2f×) | %s, %s (%.0f B) | %v, %v | %.0f, %.0f | %s |\n",
			g.topo, g.n,
			med(g.cl, csCell.invalidationsPerSec), med(g.sh, csCell.invalidationsPerSec), g.ratio(csCell.invalidationsPerSec),
			med(g.cl, csCell.writesPerSec), med(g.sh, csCell.writesPerSec), g.ratio(csCell.writesPerSec),
			med(g.cl, csCell.cpuPerWrite), med(g.sh, csCell.cpuPerWrite), g.ratio(csCell.cpuPerWrite),
			med(g.cl, func(c csCell) float64 { return c.perWrite(c.netOut) }), med(g.sh, func(c csCell) float64 { return c.perWrite(c.netOut) }),
			bus(g.cl), bus(g.sh),
			100*med(g.cl, csCell.busiest), 100*med(g.sh, csCell.busiest),
			100*med(g.cl, csCell.idleTotal), // both sets subscribed: one figure for the pair
			med(g.cl, csCell.procPerMessage), med(g.sh, csCell.procPerMessage), g.ratio(csCell.procPerMessage),
			kb(med(g.cl, csCell.memPerInstance)), kb(med(g.sh, csCell.memPerInstance)), med(g.sh, csCell.memPerInstance)/float64(g.sh[0].channels),
			roundDur(time.Duration(med(g.cl, sub))), roundDur(time.Duration(med(g.sh, sub))),
			med(g.cl, disc), med(g.sh, disc),
			blip)
	}
	return b.String()
}

func redisVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "?"
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return "?"
}

func (c csCell) mode() string {
	if c.sharded {
		return "sharded"
	}
	return "classic"
}

func (c csCell) name() string { return fmt.Sprintf("%v, N=%d, %s", c.topo, c.n, c.mode()) }

func (c csCell) cpuTotal() float64 {
	var s float64
	for _, x := range c.cpu {
		s += x
	}
	return s
}

// busiest is the busiest node's share of the nodes' CPU.
func (c csCell) busiest() float64 {
	if t := c.cpuTotal(); t > 0 {
		return slices.Max(c.cpu) / t
	}
	return 0
}

func (c csCell) describe() string {
	w := float64(c.writes)
	s := fmt.Sprintf("%s: subscribe median %v max %v; memory %.0f B per instance; %d writes in %v (%.0f/s), %d messages read in %v (%.0f/s), %d disconnects; Redis CPU %.1f µs/write (idle %.1f%% of a core over the nodes, taken out), busiest node %.0f%% %v; process CPU %.1f µs per message read; net out %.0f B/write; cluster bus %.2f msgs (%.2f publish) %.0f B /write; %d publishes",
		c.name(), medianDur(c.subscribe), slices.Max(c.subscribe), float64(c.memory)/float64(c.n),
		c.writes, c.wall.Round(time.Millisecond), w/c.wall.Seconds(), c.received, c.deliverWall.Round(time.Millisecond), float64(c.received)/c.deliverWall.Seconds(), c.disconnects,
		1e6*c.cpuTotal()/w, 100*c.idleTotal(), 100*c.busiest(), c.cpu, c.procPerMessage(), float64(c.netOut)/w, float64(c.busMsgs)/w, float64(c.busPubs)/w, float64(c.busBytes)/w, c.publishes)
	s += fmt.Sprintf("; commands: %v", c.commands)
	if b := c.blip; b != nil {
		s += fmt.Sprintf("; blip: %d pub/sub connections cut, back in %v, %d of %d held keys read from Redis, flushed %d", b.killed, b.down.Round(time.Millisecond), b.reads, b.held, b.flushed)
	}
	return s
}

func medianDur(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2]
}

func kb(x float64) string {
	switch {
	case x >= 1<<20:
		return fmt.Sprintf("%.1f MiB", x/(1<<20))
	case x >= 10<<10:
		return fmt.Sprintf("%.0f KiB", x/(1<<10))
	}
	return fmt.Sprintf("%.0f B", x)
}

func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Millisecond:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// csChart is Redis CPU per write, classic against sharded, per cluster
// shape and N: medians, whiskers over the rounds.
func csChart(groups []*csGroup) barChart {
	c := barChart{
		Title: "Redis Cluster: Redis CPU per write, all nodes (lower is better)",
		Unit:  "µs",
		Note:  "blue: sharded pub/sub; grey: classic; 2 cores, loopback, medians with whiskers over rounds",
	}
	for _, g := range groups {
		for _, cs := range [][]csCell{g.sh, g.cl} {
			var xs []float64
			for _, x := range cs {
				xs = append(xs, x.cpuPerWrite())
			}
			series := 1
			if cs[0].sharded {
				series = 0
			}
			c.Bars = append(c.Bars, bar{
				Label:  fmt.Sprintf("%v, N=%d, %s", g.topo, g.n, cs[0].mode()),
				Value:  medianOf(xs),
				Lo:     slices.Min(xs),
				Hi:     slices.Max(xs),
				Series: series,
			})
		}
	}
	return c
}
