package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file starts the throwaway Redis Clusters of the cluster scaling
// figures (clusterscale_test.go) and reads their counters.

// clusterNode is one redis-server of a cluster the test started.
type clusterNode struct {
	srv     *server
	port    int
	busPort int // its cluster bus port (--cluster-port)
	id      string
	master  bool
	rdb     *redis.Client
}

// testCluster is a cluster of masters, each with the same number of
// replicas, on loopback.
type testCluster struct {
	nodes   []*clusterNode
	masters []string // the masters' addresses
}

// startCluster starts masters redis-servers with cluster mode on, each on
// a free port with its own directory and bus port, splits the 16384 slots
// between them in ranges (CLUSTER ADDSLOTSRANGE), joins them (CLUSTER
// MEET), gives each master replicas replicas (CLUSTER REPLICATE) and waits
// until every node reports cluster_state:ok and every replica's link to
// its master is up. The servers are killed, by pid, when t ends.
func startCluster(t *testing.T, masters, replicas int) *testCluster {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip(errNoRedis)
	}
	tc := &testCluster{}
	t.Cleanup(tc.stop)
	for i := range masters * (1 + replicas) {
		n, err := startClusterNode(path)
		if err != nil {
			t.Fatal(err)
		}
		n.master = i < masters
		tc.nodes = append(tc.nodes, n)
		if n.master {
			tc.masters = append(tc.masters, n.srv.Addr)
		}
	}
	ctx := t.Context()
	for i, n := range tc.nodes {
		id, err := n.rdb.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("CLUSTER MYID: %v", err)
		}
		n.id = id
		if n.master {
			lo, hi := i*16384/masters, (i+1)*16384/masters-1
			if err := n.rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
				t.Fatalf("CLUSTER ADDSLOTSRANGE %d %d: %v", lo, hi, err)
			}
		}
	}
	for _, n := range tc.nodes[1:] {
		if err := tc.nodes[0].rdb.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.port, n.busPort).Err(); err != nil {
			t.Fatalf("CLUSTER MEET: %v", err)
		}
	}
	tc.wait(t, "every node to know every other", func(n *clusterNode) bool {
		s, err := n.rdb.Do(ctx, "CLUSTER", "NODES").Text()
		return err == nil && strings.Count(strings.TrimSpace(s), "\n")+1 == len(tc.nodes) && !strings.Contains(s, "handshake")
	})
	for i, n := range tc.nodes[masters:] {
		m := tc.nodes[i%masters]
		if err := n.rdb.Do(ctx, "CLUSTER", "REPLICATE", m.id).Err(); err != nil {
			t.Fatalf("CLUSTER REPLICATE: %v", err)
		}
	}
	tc.wait(t, "cluster_state:ok and replicas in sync", func(n *clusterNode) bool {
		s, err := n.rdb.Do(ctx, "CLUSTER", "INFO").Text()
		if err != nil || !strings.Contains(s, "cluster_state:ok") {
			return false
		}
		if n.master {
			return true
		}
		r, err := info(ctx, n.rdb, "replication")
		return err == nil && r["master_link_status"] == "up"
	})
	return tc
}

// startClusterNode starts one cluster-enabled redis-server.
func startClusterNode(path string) (*clusterNode, error) {
	var lastErr error
	for range 5 {
		dir, err := os.MkdirTemp("", "hybridcache-bench-cluster-")
		if err != nil {
			return nil, err
		}
		port, err1 := freePort()
		busPort, err2 := freePort()
		if err := errors.Join(err1, err2); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s := &server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), path: path, dir: dir}
		s.args = []string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(busPort),
			"--cluster-config-file", dir + "/nodes.conf",
			"--cluster-node-timeout", "5000",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
			"--protected-mode", "no",
			"--loglevel", "warning",
			"--logfile", "",
		}
		if lastErr = s.start(); lastErr == nil {
			return &clusterNode{srv: s, port: port, busPort: busPort, rdb: redis.NewClient(&redis.Options{Addr: s.Addr})}, nil
		}
		os.RemoveAll(dir)
	}
	return nil, fmt.Errorf("cluster node did not come up: %w", lastErr)
}

// wait polls ok on every node, for up to 30 s.
func (tc *testCluster) wait(t *testing.T, what string, ok func(*clusterNode) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		all := true
		for _, n := range tc.nodes {
			if !ok(n) {
				all = false
				break
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster: waited 30 s for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop kills every server, by pid, and removes its directory.
func (tc *testCluster) stop() {
	for _, n := range tc.nodes {
		n.rdb.Close()
		n.srv.kill()
	}
}

// client returns a new Redis Cluster client of tc, named name (as
// CLIENT LIST shows its connections, pub/sub ones included).
func (tc *testCluster) client(name string) *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: tc.masters, ClientName: name, ContextTimeoutEnabled: true})
}

// nodeCounters are one node's counters that the figures take deltas of.
type nodeCounters struct {
	cpu       float64 // used_cpu_sys + used_cpu_user, seconds
	netOut    int64   // total_net_output_bytes: replies, pub/sub deliveries, replication
	memory    int64   // used_memory
	busMsgs   int64   // cluster_stats_messages_sent
	busPubs   int64   // cluster_stats_messages_publish_sent + publishshard_sent
	publishes int64   // calls of PUBLISH and SPUBLISH, from scripts included
	calls     map[string]int64
}

// counters reads every node's counters, in tc.nodes' order.
func (tc *testCluster) counters(ctx context.Context) ([]nodeCounters, error) {
	out := make([]nodeCounters, len(tc.nodes))
	for i, n := range tc.nodes {
		all, err := n.rdb.Info(ctx, "stats", "cpu", "memory", "commandstats").Result()
		if err != nil {
			return nil, err
		}
		m := parseInfo(all)
		ci, err := n.rdb.Do(ctx, "CLUSTER", "INFO").Text()
		if err != nil {
			return nil, err
		}
		c := parseInfo(ci)
		num := func(m map[string]string, k string) int64 { v, _ := strconv.ParseInt(m[k], 10, 64); return v }
		sys, _ := strconv.ParseFloat(m["used_cpu_sys"], 64)
		usr, _ := strconv.ParseFloat(m["used_cpu_user"], 64)
		calls := commandCalls(m)
		out[i] = nodeCounters{
			cpu: sys + usr, netOut: num(m, "total_net_output_bytes"), memory: num(m, "used_memory"),
			busMsgs:   num(c, "cluster_stats_messages_sent"),
			busPubs:   num(c, "cluster_stats_messages_publish_sent") + num(c, "cluster_stats_messages_publishshard_sent"),
			publishes: calls["publish"] + calls["spublish"], calls: calls,
		}
	}
	return out, nil
}

// busBytes is the bytes sent so far over tc's cluster bus links, both
// ways, read from the kernel's TCP counters (ss -ti: bytes_sent of each
// socket whose local or peer port is one of tc's bus ports). ok is false
// when ss is not there (the figure is then left out).
func (tc *testCluster) busBytes() (total int64, ok bool) {
	out, err := exec.Command("ss", "-tinH", "state", "established").Output()
	if err != nil {
		return 0, false
	}
	ports := make(map[string]bool)
	for _, n := range tc.nodes {
		ports[strconv.Itoa(n.busPort)] = true
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	ours := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " ") {
			// A socket: Recv-Q Send-Q local peer.
			f := strings.Fields(line)
			ours = false
			if len(f) >= 4 {
				_, lp, _ := net.SplitHostPort(f[2])
				_, pp, _ := net.SplitHostPort(f[3])
				ours = ports[lp] || ports[pp]
			}
			continue
		}
		if !ours {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, found := strings.CutPrefix(f, "bytes_sent:"); found {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total, true
}

// killPubSub closes every pub/sub connection on every node (CLIENT KILL
// TYPE pubsub), as a network blip would, and returns how many it closed.
func (tc *testCluster) killPubSub(ctx context.Context) (int64, error) {
	var killed int64
	for _, n := range tc.nodes {
		k, err := n.rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Int64()
		if err != nil {
			return killed, err
		}
		killed += k
	}
	return killed, nil
}
