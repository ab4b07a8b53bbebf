package main

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/redistest"
)

// This file starts the throwaway Redis Clusters of the cluster scaling
// figures (clusterscale_test.go) and reads their counters.

// testCluster is a cluster of masters, each with the same number of
// replicas, on loopback (internal/redistest.StartCluster), with a client
// of each node.
type testCluster struct {
	cl       *redistest.Cluster
	nodes    []*redis.Client // one per node, owned by cl
	masters  []string        // the masters' addresses
	busPorts []int           // the nodes' cluster bus ports
}

// startCluster starts masters redis-servers with cluster mode on, each
// with replicas replicas, and waits until the cluster agrees (see
// redistest.StartCluster). The servers are killed, by pid, when t ends, or
// by stop.
func startCluster(t *testing.T, masters, replicas int) *testCluster {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip(errNoRedis)
	}
	// A node timeout long enough that a node the figures keep busy is
	// never taken for failed.
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: masters, Replicas: replicas, NodeTimeout: 5 * time.Second})
	tc := &testCluster{cl: cl, busPorts: cl.BusPorts()}
	for _, addr := range cl.Addrs() {
		n, err := cl.Admin(addr)
		if err != nil {
			t.Fatal(err)
		}
		tc.nodes = append(tc.nodes, n)
	}
	var err error
	if tc.masters, err = cl.Masters(t.Context()); err != nil {
		t.Fatal(err)
	}
	return tc
}

// stop kills every server, by pid.
func (tc *testCluster) stop() { tc.cl.Close() }

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
		all, err := n.Info(ctx, "stats", "cpu", "memory", "commandstats").Result()
		if err != nil {
			return nil, err
		}
		m := parseInfo(all)
		ci, err := n.Do(ctx, "CLUSTER", "INFO").Text()
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
	for _, p := range tc.busPorts {
		ports[strconv.Itoa(p)] = true
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
		k, err := n.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Int64()
		if err != nil {
			return killed, err
		}
		killed += k
	}
	return killed, nil
}
