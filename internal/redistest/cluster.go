package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	// Masters is the number of masters; the 16384 slots are split evenly
	// among them, in order. Default (zero): 3.
	Masters int

	// Replicas is the number of replicas of each master. Default (zero):
	// none, so Failover and KillMaster have nothing to promote.
	Replicas int

	// NodeTimeout is cluster-node-timeout: how long a node may not answer
	// before the others take it for failed, so a killed master is replaced
	// about two NodeTimeouts later. Default (zero): 1 second.
	NodeTimeout time.Duration

	// MigrateBatch is how many keys MigrateSlot moves with one MIGRATE.
	// Default (zero): 100.
	MigrateBatch int

	// MigratePause is how long MigrateSlot waits once the slot is
	// MIGRATING and IMPORTING, and after each MIGRATE, so that a test's
	// traffic meets the slot half moved. Default (zero): no pause.
	MigratePause time.Duration
}

// Cluster is a Redis Cluster of one test: redis-server processes on free
// loopback ports, cluster-enabled, with no persistence. Its methods are safe
// for concurrent use. StartCluster stops it when the test ends.
type Cluster struct {
	o   ClusterOptions
	dir string

	mu    sync.Mutex
	nodes []*clusterNode // masters first, then the replicas of each master in order
}

// clusterNode is one redis-server of a Cluster.
type clusterNode struct {
	addr  string
	port  int
	bus   int // cluster bus port
	id    string
	admin *redis.Client
	cmd   *exec.Cmd
	out   *lockedBuffer
	gone  chan struct{} // closed once the process has been reaped
	dead  bool          // killed by KillMaster
}

// clusterSettle bounds each wait for the cluster to agree on its
// topology when the caller's ctx has no deadline.
const clusterSettle = 30 * time.Second

// StartCluster starts a Redis Cluster for tb alone, waits until every node
// reports cluster_state:ok and all agree on who serves which slots (and
// every replica is in sync), and stops it (killing its processes by pid,
// removing its directory) when tb ends. Without a redis-server on PATH tb
// is skipped, or fails under HYBRID_REQUIRE_REDIS=1. It needs Redis 7.0 or
// later (cluster-port, CLUSTER ADDSLOTSRANGE).
func StartCluster(tb testing.TB, o ClusterOptions) *Cluster {
	tb.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if RequireReal() {
			tb.Fatal("HYBRID_REQUIRE_REDIS=1 but no redis-server on PATH to start a Redis Cluster")
		}
		tb.Skip("needs a redis-server on PATH to start a Redis Cluster")
	}
	c, err := startCluster(path, o)
	if err != nil {
		tb.Fatalf("redistest: start a Redis Cluster of %d masters with %d replicas each: %v", c.o.Masters, c.o.Replicas, err)
	}
	tb.Cleanup(c.Close)
	return c
}

func startCluster(path string, o ClusterOptions) (c *Cluster, err error) {
	if o.Masters <= 0 {
		o.Masters = 3
	}
	if o.Replicas < 0 {
		o.Replicas = 0
	}
	if o.NodeTimeout <= 0 {
		o.NodeTimeout = time.Second
	}
	if o.MigrateBatch <= 0 {
		o.MigrateBatch = 100
	}
	c = &Cluster{o: o}
	c.dir, err = os.MkdirTemp("", "redistest-cluster-")
	if err != nil {
		return c, err
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), clusterSettle)
	defer cancel()

	total := o.Masters * (1 + o.Replicas)
	for range total {
		n, err := c.startNode(path)
		if err != nil {
			return c, err
		}
		c.nodes = append(c.nodes, n)
	}
	for i, n := range c.nodes {
		id, err := n.admin.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return c, fmt.Errorf("%s: CLUSTER MYID: %w", n.addr, err)
		}
		n.id = id
		// Distinct epochs, as redis-cli --cluster create sets them, so that
		// no epoch collision has to be resolved before the slots settle.
		if err := n.admin.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return c, fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", n.addr, err)
		}
	}
	for i := range o.Masters {
		lo, hi := i*slotTotal/o.Masters, (i+1)*slotTotal/o.Masters-1
		if err := c.nodes[i].admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return c, fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE %d %d: %w", c.nodes[i].addr, lo, hi, err)
		}
	}
	first := c.nodes[0]
	for _, n := range c.nodes[1:] {
		if err := first.admin.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.port, n.bus).Err(); err != nil {
			return c, fmt.Errorf("%s: CLUSTER MEET %s: %w", first.addr, n.addr, err)
		}
	}
	// A replica can follow a master only once it knows it.
	if err := c.poll(ctx, "every node to know all others", func(ctx context.Context) error {
		for _, n := range c.nodes {
			v, err := n.view(ctx)
			if err != nil {
				return err
			}
			if len(v) != total {
				return fmt.Errorf("%s knows %d of %d nodes", n.addr, len(v), total)
			}
		}
		return nil
	}); err != nil {
		return c, err
	}
	for i := range o.Masters {
		for r := range o.Replicas {
			n := c.nodes[o.Masters+i*o.Replicas+r]
			if err := n.admin.Do(ctx, "CLUSTER", "REPLICATE", c.nodes[i].id).Err(); err != nil {
				return c, fmt.Errorf("%s: CLUSTER REPLICATE %s: %w", n.addr, c.nodes[i].addr, err)
			}
		}
	}
	return c, c.settle(ctx)
}

// slotTotal is the number of hash slots of a Redis Cluster.
const slotTotal = 16384

// startNode starts one cluster-enabled redis-server on free ports.
func (c *Cluster) startNode(path string) (*clusterNode, error) {
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		bus, err := freePort()
		if err != nil {
			return nil, err
		}
		if port == bus {
			continue
		}
		n := &clusterNode{
			addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			port: port,
			bus:  bus,
			out:  new(lockedBuffer),
			gone: make(chan struct{}),
		}
		if lastErr = c.spawn(path, n); lastErr == nil {
			return n, nil
		}
	}
	return nil, lastErr
}

func (c *Cluster) spawn(path string, n *clusterNode) error {
	args := []string{
		"--port", strconv.Itoa(n.port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", c.dir,
		"--loglevel", "warning",
		"--cluster-enabled", "yes",
		"--cluster-port", strconv.Itoa(n.bus),
		"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", n.port),
		"--cluster-node-timeout", strconv.FormatInt(c.o.NodeTimeout.Milliseconds(), 10),
		// A replica may always stand for election, however long its link
		// was down; replicas sync at once, without a disk.
		"--cluster-replica-validity-factor", "0",
		"--repl-diskless-sync", "yes",
		"--repl-diskless-sync-delay", "0",
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = n.out, n.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		_ = cmd.Wait()
		close(n.gone)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-n.gone:
			return fmt.Errorf("redis-server on port %d exited: %s", n.port, strings.TrimSpace(n.out.String()))
		default:
		}
		if ping(n.addr) == nil {
			n.cmd = cmd
			n.admin = redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 5 * time.Second})
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-n.gone
	return fmt.Errorf("redis-server on port %d did not answer PING: %s", n.port, strings.TrimSpace(n.out.String()))
}

// Close kills the cluster's processes by pid, waits until they are gone,
// and removes their directory. StartCluster calls it when the test ends.
func (c *Cluster) Close() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = nil
	c.mu.Unlock()
	for _, n := range nodes {
		n.kill()
	}
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
}

// kill stops n by its pid and waits until it is reaped.
func (n *clusterNode) kill() {
	if n.admin != nil {
		n.admin.Close()
	}
	if n.cmd != nil {
		_ = n.cmd.Process.Signal(syscall.SIGKILL)
		<-n.gone
	}
}

// WaitRedials waits up to d until no go-redis connection pool is retrying
// a dial in the background. A pool that failed to dial (a killed node)
// retries once a second on a goroutine of its own, which sees the pool
// closed only when it wakes: a test that killed a node calls this after
// closing its clients, before a goroutine leak check.
func WaitRedials(d time.Duration) error {
	deadline := time.Now().Add(d)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte("pool.(*ConnPool).tryDial")) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: a go-redis pool still retries a dial after %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Dir returns the directory of the nodes' cluster configuration files,
// removed by Close.
func (c *Cluster) Dir() string { return c.dir }

// Addrs returns the addresses of the nodes still running, masters and
// replicas, as seeds for a cluster client.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, n := range c.live() {
		out = append(out, n.addr)
	}
	return out
}

// BusPorts returns the cluster bus ports of the nodes Addrs returns, in
// its order.
func (c *Cluster) BusPorts() []int {
	var out []int
	for _, n := range c.live() {
		out = append(out, n.bus)
	}
	return out
}

// Client returns a go-redis cluster client seeded with Addrs, closed when
// tb ends.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

// Admin returns a client of the one node at addr (for CLIENT KILL, INFO
// and such), owned by the Cluster: do not close it.
func (c *Cluster) Admin(addr string) (*redis.Client, error) {
	n, err := c.node(addr)
	if err != nil {
		return nil, err
	}
	return n.admin, nil
}

// Masters returns the addresses of the masters serving slots, in slot
// order, as the cluster sees them now.
func (c *Cluster) Masters(ctx context.Context) ([]string, error) {
	v, err := c.anyView(ctx)
	if err != nil {
		return nil, err
	}
	var ms []viewNode
	for _, e := range v {
		if e.master == "" && len(e.slots) > 0 && !e.failed {
			ms = append(ms, e)
		}
	}
	slices.SortFunc(ms, func(a, b viewNode) int { return a.slots[0][0] - b.slots[0][0] })
	var out []string
	for _, e := range ms {
		out = append(out, e.addr)
	}
	return out, nil
}

// MasterOf returns the address of the master that serves slot, as the
// cluster sees it now.
func (c *Cluster) MasterOf(ctx context.Context, slot int) (string, error) {
	v, err := c.anyView(ctx)
	if err != nil {
		return "", err
	}
	for _, e := range v {
		if e.master == "" && !e.failed && e.serves(slot) {
			return e.addr, nil
		}
	}
	return "", fmt.Errorf("redistest: no master serves slot %d", slot)
}

// ReplicasOf returns the addresses of the running replicas of the master
// at addr.
func (c *Cluster) ReplicasOf(ctx context.Context, addr string) ([]string, error) {
	m, err := c.node(addr)
	if err != nil {
		return nil, err
	}
	v, err := c.anyView(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range v {
		if e.master == m.id && !e.failed {
			out = append(out, e.addr)
		}
	}
	slices.Sort(out)
	return out, nil
}

// MigrateSlot moves slot from the master serving it to the master at to,
// as an operator resharding does: CLUSTER SETSLOT IMPORTING on to,
// MIGRATING on the source, MIGRATE of the slot's keys in batches
// (CLUSTER GETKEYSINSLOT), then SETSLOT NODE on the target, the source
// and every other master, and waits until all nodes agree. Keys written
// meanwhile are moved too: the loop ends when the source holds none.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, to string) error {
	ctx, cancel := withSettleTimeout(ctx)
	defer cancel()
	srcAddr, err := c.MasterOf(ctx, slot)
	if err != nil {
		return err
	}
	src, err := c.node(srcAddr)
	if err != nil {
		return err
	}
	dst, err := c.node(to)
	if err != nil {
		return err
	}
	if src == dst {
		return fmt.Errorf("redistest: MigrateSlot: slot %d is served by %s already", slot, to)
	}
	if err := dst.admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id).Err(); err != nil {
		return fmt.Errorf("redistest: %s: CLUSTER SETSLOT %d IMPORTING: %w", dst.addr, slot, err)
	}
	if err := src.admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id).Err(); err != nil {
		return fmt.Errorf("redistest: %s: CLUSTER SETSLOT %d MIGRATING: %w", src.addr, slot, err)
	}
	if err := pause(ctx, c.o.MigratePause); err != nil {
		return err
	}
	for {
		keys, err := src.admin.Do(ctx, "CLUSTER", "GETKEYSINSLOT", slot, c.o.MigrateBatch).StringSlice()
		if err != nil {
			return fmt.Errorf("redistest: %s: CLUSTER GETKEYSINSLOT %d: %w", src.addr, slot, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.admin.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("redistest: %s: MIGRATE %d keys of slot %d to %s: %w", src.addr, len(keys), slot, dst.addr, err)
		}
		if err := pause(ctx, c.o.MigratePause); err != nil {
			return err
		}
	}
	// The target first, so that it serves the slot before the source
	// starts sending MOVED there; then the source, then everyone else.
	order := []*clusterNode{dst, src}
	c.mu.Lock()
	for _, n := range c.nodes {
		if n != dst && n != src && !n.dead {
			order = append(order, n)
		}
	}
	c.mu.Unlock()
	for _, n := range order {
		if n != dst && n != src {
			if isMaster, err := n.isMaster(ctx); err != nil || !isMaster {
				continue // replicas learn it from their masters
			}
		}
		if err := n.admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err(); err != nil {
			return fmt.Errorf("redistest: %s: CLUSTER SETSLOT %d NODE %s: %w", n.addr, slot, dst.addr, err)
		}
	}
	if err := c.settle(ctx); err != nil {
		return err
	}
	if got, err := c.MasterOf(ctx, slot); err != nil || got != to {
		return fmt.Errorf("redistest: after MigrateSlot, slot %d is served by %q (%v), want %s", slot, got, err, to)
	}
	return nil
}

// Failover makes a replica of the master at addr take its place with
// CLUSTER FAILOVER (the manual failover that waits until the replica has
// caught up, so no acknowledged write is lost), waits until the cluster
// agrees and the old master follows the new one, and returns the new
// master's address.
func (c *Cluster) Failover(ctx context.Context, addr string) (string, error) {
	ctx, cancel := withSettleTimeout(ctx)
	defer cancel()
	replicas, err := c.ReplicasOf(ctx, addr)
	if err != nil {
		return "", err
	}
	if len(replicas) == 0 {
		return "", fmt.Errorf("redistest: Failover: %s has no replica", addr)
	}
	r, err := c.node(replicas[0])
	if err != nil {
		return "", err
	}
	if err := r.admin.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		return "", fmt.Errorf("redistest: %s: CLUSTER FAILOVER: %w", r.addr, err)
	}
	if err := c.poll(ctx, fmt.Sprintf("%s to be promoted", r.addr), func(ctx context.Context) error {
		if m, err := r.isMaster(ctx); err != nil || !m {
			return fmt.Errorf("%s is not a master yet (%v)", r.addr, err)
		}
		return nil
	}); err != nil {
		return "", err
	}
	return r.addr, c.settle(ctx)
}

// KillMaster kills the master at addr (SIGKILL, by pid), waits until the
// other nodes have marked it failed and one of its replicas has been
// elected in its place, and the cluster agrees again; it returns the new
// master's address. The killed node stays down. It needs 3 masters or
// more: failing a master takes the votes of a majority of them.
func (c *Cluster) KillMaster(ctx context.Context, addr string) (string, error) {
	ctx, cancel := withSettleTimeout(ctx)
	defer cancel()
	replicas, err := c.ReplicasOf(ctx, addr)
	if err != nil {
		return "", err
	}
	if len(replicas) == 0 {
		return "", fmt.Errorf("redistest: KillMaster: %s has no replica to take its place", addr)
	}
	masters, err := c.Masters(ctx)
	if err != nil {
		return "", err
	}
	if len(masters) < 3 {
		// The others must be a majority of the masters to mark it failed.
		return "", fmt.Errorf("redistest: KillMaster: with %d masters the others cannot elect a replica; start 3 or more", len(masters))
	}
	n, err := c.node(addr)
	if err != nil {
		return "", err
	}
	slots, err := n.ownSlots(ctx)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	n.dead = true
	c.mu.Unlock()
	n.kill()
	if err := c.settle(ctx); err != nil {
		return "", err
	}
	if len(slots) == 0 {
		return "", nil
	}
	return c.MasterOf(ctx, slots[0][0])
}

// Pause stops the node at addr (SIGSTOP, by pid): it keeps its
// connections and answers nothing, as a hung server does, until resume
// (SIGCONT), which is also run when tb ends. The other nodes take it for
// failed after ClusterOptions.NodeTimeout, and a replica of a master then
// takes its place: a test that wants neither pauses for less.
func (c *Cluster) Pause(tb testing.TB, addr string) (resume func(), err error) {
	n, err := c.node(addr)
	if err != nil {
		return nil, err
	}
	if err := n.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("redistest: Pause %s: %w", addr, err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { _ = n.cmd.Process.Signal(syscall.SIGCONT) }) }
	tb.Cleanup(resume)
	return resume, nil
}

// node returns the node at addr.
func (c *Cluster) node(addr string) (*clusterNode, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.addr == addr {
			if n.dead {
				return nil, fmt.Errorf("redistest: node %s was killed", addr)
			}
			return n, nil
		}
	}
	return nil, fmt.Errorf("redistest: no node %s in this cluster", addr)
}

// live returns the nodes still running.
func (c *Cluster) live() []*clusterNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*clusterNode
	for _, n := range c.nodes {
		if !n.dead {
			out = append(out, n)
		}
	}
	return out
}

// anyView returns the topology as the first running node that answers
// sees it.
func (c *Cluster) anyView(ctx context.Context) (map[string]viewNode, error) {
	var lastErr error
	for _, n := range c.live() {
		v, err := n.view(ctx)
		if err == nil {
			return v, nil
		}
		lastErr = err
	}
	if lastErr == nil {
		lastErr = errors.New("no node running")
	}
	return nil, fmt.Errorf("redistest: read the cluster's topology: %w", lastErr)
}

// settle waits until every running node reports cluster_state:ok, all
// see the same nodes in the same roles with the same slots, no node is
// suspected (PFAIL) or in a handshake, a killed node is marked failed
// and serves nothing, every slot is served, and every running replica's
// link to its master is up.
func (c *Cluster) settle(ctx context.Context) error {
	return c.poll(ctx, "the cluster to settle", func(ctx context.Context) error {
		live := c.live()
		var first string
		var ref map[string]viewNode
		for _, n := range live {
			info, err := n.admin.Do(ctx, "CLUSTER", "INFO").Text()
			if err != nil {
				return fmt.Errorf("%s: CLUSTER INFO: %w", n.addr, err)
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster_state is not ok", n.addr)
			}
			v, err := n.view(ctx)
			if err != nil {
				return err
			}
			canon := canonical(v)
			if ref == nil {
				first, ref = canon, v
			} else if canon != first {
				return fmt.Errorf("%s sees\n%s\nwhere %s sees\n%s", n.addr, canon, live[0].addr, first)
			}
		}
		covered := 0
		for _, e := range ref {
			if e.pending {
				return fmt.Errorf("node %s is suspected or in a handshake", e.addr)
			}
			if e.master == "" && !e.failed {
				for _, r := range e.slots {
					covered += r[1] - r[0] + 1
				}
			}
		}
		if covered != slotTotal {
			return fmt.Errorf("%d of %d slots served", covered, slotTotal)
		}
		c.mu.Lock()
		nodes := slices.Clone(c.nodes)
		c.mu.Unlock()
		for _, n := range nodes {
			e, ok := ref[n.id]
			if !ok {
				return fmt.Errorf("node %s unknown to the others", n.addr)
			}
			if n.dead && (!e.failed || len(e.slots) > 0) {
				return fmt.Errorf("killed node %s not yet failed and replaced", n.addr)
			}
			if !n.dead && e.failed {
				return fmt.Errorf("running node %s marked failed", n.addr)
			}
			if !n.dead && e.master != "" {
				info, err := n.admin.Info(ctx, "replication").Result()
				if err != nil {
					return fmt.Errorf("%s: INFO replication: %w", n.addr, err)
				}
				if !strings.Contains(info, "master_link_status:up") {
					return fmt.Errorf("replica %s: link to its master not up", n.addr)
				}
			}
		}
		return nil
	})
}

// poll calls check every 20 ms until it returns nil, and returns an error
// naming what and check's last error if ctx ends first.
func (c *Cluster) poll(ctx context.Context, what string, check func(context.Context) error) error {
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: waiting for %s: %w; last: %v", what, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// withSettleTimeout bounds ctx by clusterSettle unless it has a deadline.
func withSettleTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, clusterSettle)
}

func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// viewNode is one line of CLUSTER NODES.
type viewNode struct {
	id, addr string
	master   string   // the id of its master; "" for a master
	failed   bool     // flagged fail
	pending  bool     // flagged fail?, handshake or noaddr
	slots    [][2]int // served slot ranges, migration marks left out
}

func (e viewNode) serves(slot int) bool {
	for _, r := range e.slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// view reads CLUSTER NODES from n, by node id.
func (n *clusterNode) view(ctx context.Context) (map[string]viewNode, error) {
	s, err := n.admin.Do(ctx, "CLUSTER", "NODES").Text()
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %w", n.addr, err)
	}
	return parseNodes(s)
}

// parseNodes parses the reply of CLUSTER NODES.
func parseNodes(s string) (map[string]viewNode, error) {
	out := map[string]viewNode{}
	for line := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES: short line %q", line)
		}
		e := viewNode{id: f[0], addr: f[1]}
		if i := strings.IndexAny(e.addr, "@,"); i >= 0 {
			e.addr = e.addr[:i]
		}
		for flag := range strings.SplitSeq(f[2], ",") {
			switch flag {
			case "fail":
				e.failed = true
			case "fail?", "handshake", "noaddr":
				e.pending = true
			}
		}
		if f[3] != "-" {
			e.master = f[3]
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot importing or migrating
			}
			lo, hi, _ := strings.Cut(r, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				return nil, fmt.Errorf("CLUSTER NODES: slot %q in %q", r, line)
			}
			b := a
			if hi != "" {
				if b, err = strconv.Atoi(hi); err != nil {
					return nil, fmt.Errorf("CLUSTER NODES: slot %q in %q", r, line)
				}
			}
			e.slots = append(e.slots, [2]int{a, b})
		}
		slices.SortFunc(e.slots, func(x, y [2]int) int { return x[0] - y[0] })
		out[e.id] = e
	}
	return out, nil
}

// canonical describes v in a form equal on every node that sees the same
// topology.
func canonical(v map[string]viewNode) string {
	var lines []string
	for _, e := range v {
		role := "master"
		if e.master != "" {
			role = "replica of " + e.master
		}
		lines = append(lines, fmt.Sprintf("%s %s %s failed=%v pending=%v slots=%v", e.id, e.addr, role, e.failed, e.pending, e.slots))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// isMaster reports whether n is a master now.
func (n *clusterNode) isMaster(ctx context.Context) (bool, error) {
	v, err := n.view(ctx)
	if err != nil {
		return false, err
	}
	e, ok := v[n.id]
	return ok && e.master == "", nil
}

// ownSlots returns the slot ranges n serves, as n sees it.
func (n *clusterNode) ownSlots(ctx context.Context) ([][2]int, error) {
	v, err := n.view(ctx)
	if err != nil {
		return nil, err
	}
	return v[n.id].slots, nil
}
