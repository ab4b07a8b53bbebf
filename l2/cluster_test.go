package l2_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
	"github.com/hybridcache/hybridcache/tier"
)

// The tests in this file need a Redis Cluster: start one with
// scripts/cluster.sh and set HYBRID_REDIS_CLUSTER to the addresses it
// prints. Without it they are skipped.

// embedded hides a cluster client behind another type, as an application's
// wrapper might.
type embedded struct{ *redis.ClusterClient }

// clusterOf returns the cluster client in rdb.
func clusterOf(rdb redis.UniversalClient) *redis.ClusterClient {
	if e, ok := rdb.(embedded); ok {
		return e.ClusterClient
	}
	return rdb.(*redis.ClusterClient)
}

// clusterCase is one way a cluster client may reach New.
type clusterCase struct {
	name  string
	rdb   redis.UniversalClient
	nodes *counter // what the nodes were sent, if known
}

// clusterClients returns the ways a cluster client may reach New.
func clusterClients(t *testing.T) []clusterCase {
	t.Helper()
	addrs := redistest.ClusterAddrs(t)
	newCluster := func() (*redis.ClusterClient, *counter) {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { c.Close() })
		var nodes counter
		c.OnNewNode(func(n *redis.Client) { n.AddHook(&nodes) })
		return c, &nodes
	}
	c1, n1 := newCluster()
	c2, n2 := newCluster()
	universal := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs, IsClusterMode: true})
	t.Cleanup(func() { universal.Close() })
	if _, ok := universal.(*redis.ClusterClient); !ok {
		t.Fatalf("NewUniversalClient returned a %T, want a *redis.ClusterClient", universal)
	}
	return []clusterCase{
		{"ClusterClient", c1, n1},
		{"UniversalClient", universal, nil},
		{"embedded", embedded{c2}, n2},
	}
}

func TestClusterGetWriteIfAbsentBatch(t *testing.T) {
	for _, c := range clusterClients(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			prefix := redistest.Prefix(t) + ":"
			s := l2.New(c.rdb, l2.Options{Prefix: prefix, Classic: true})
			const n = 100
			var keys []string
			var values [][]byte
			for i := range n {
				keys = append(keys, fmt.Sprint("k", i))
				values = append(values, []byte(fmt.Sprint("v", i)))
			}
			// Two keys sharing a hash tag go in one MGET.
			keys = append(keys, "{tag}a", "{tag}b", "empty")
			values = append(values, []byte("ta"), []byte("tb"), []byte{})

			// The keys must span every master, and a plain MGET of them
			// fails.
			masters := make(map[string]bool)
			for _, k := range keys {
				m, err := clusterOf(c.rdb).MasterForKey(ctx, prefix+k)
				if err != nil {
					t.Fatalf("MasterForKey: %v", err)
				}
				masters[m.Options().Addr] = true
			}
			if len(masters) != 3 {
				t.Fatalf("keys on %d masters, want 3", len(masters))
			}
			if err := c.rdb.MGet(ctx, prefix+"k1", prefix+"k2", prefix+"k3").Err(); err == nil {
				t.Logf("note: a plain MGET across slots did not fail")
			}

			if c.nodes != nil {
				c.nodes.reset()
			}
			var ws []tier.Write
			for i, k := range keys {
				ws = append(ws, tier.Write{Key: k, Value: values[i], TTL: time.Minute, If: tier.IfAbsent})
			}
			stored, err := s.Write(ctx, ws, tier.Feed{})
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			if i := slices.Index(stored, false); i >= 0 {
				t.Errorf("Write (IfAbsent) did not store new key %s", keys[i])
			}
			if c.nodes != nil {
				if _, got := c.nodes.counts(); got != 3 {
					t.Errorf("Write sent %d pipelines, want 3 (one per node): %v", got, c.nodes)
				}
			}

			query := append(slices.Clone(keys), "missing1", "k7", "missing2", "{tag}b", "k0")
			want := append(slices.Clone(values), nil, []byte("v7"), nil, []byte("tb"), []byte("v0"))
			if c.nodes != nil {
				c.nodes.reset()
			}
			got, err := s.Get(ctx, query)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if c.nodes != nil {
				if cmds, pipelines := c.nodes.counts(); cmds+pipelines != 3 {
					t.Errorf("Get sent %d pipelines or commands, want 3 (one per node): %v", cmds+pipelines, c.nodes)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("Get: got %d values, want %d", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) || (got[i] == nil) != (want[i] == nil) {
					t.Errorf("Get[%d] (%s): got %q, want %q", i, query[i], got[i], want[i])
				}
			}

			stored, err = s.Write(ctx, []tier.Write{
				{Key: "k1", Value: []byte("x"), If: tier.IfAbsent},
				{Key: "new", Value: []byte("n"), TTL: time.Minute, If: tier.IfAbsent},
				{Key: "k2", Value: []byte("x"), If: tier.IfAbsent},
				{Key: "{tag}c", Value: []byte("tc"), TTL: time.Minute, If: tier.IfAbsent},
			}, tier.Feed{})
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			if want := []bool{false, true, false, true}; !slices.Equal(stored, want) {
				t.Errorf("Write: got %v, want %v", stored, want)
			}
		})
	}
}

func TestClusterWriteAnnouncedOrder(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { rdb.Close() })
	for run := range 3 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			prefix := redistest.Prefix(t) + ":"
			s := l2.New(rdb, l2.Options{Prefix: prefix, Classic: true})
			// Subscribe on a node that is not the key's master, so
			// messages cross the cluster bus.
			master, err := rdb.MasterForKey(t.Context(), prefix+"k")
			if err != nil {
				t.Fatalf("MasterForKey: %v", err)
			}
			other := ""
			for _, a := range addrs {
				if a != master.Options().Addr {
					other = a
					break
				}
			}
			if other == "" {
				t.Fatalf("no node other than the key's master %s among %v", master.Options().Addr, addrs)
			}
			sub := redis.NewClient(&redis.Options{Addr: other})
			t.Cleanup(func() { sub.Close() })
			channel := prefix + "ch"
			ps := subscribe(t, sub, channel)
			checkOrder(t, s, ps, "k", channel, 8, 200)
		})
	}
}

func TestClusterWriteAnnounced(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	prefix := redistest.Prefix(t) + ":"
	s := l2.New(rdb, l2.Options{Prefix: prefix, Classic: true})
	// One subscriber per node: every one gets every message.
	var all []*messages
	for _, a := range addrs {
		sub := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { sub.Close() })
		all = append(all, receive(subscribe(t, sub, prefix+"ch"), 20))
	}
	for i := range 10 {
		key := fmt.Sprint("k", i) // keys in several slots
		if _, err := s.Write(ctx, []tier.Write{{Key: key, Value: []byte("v"), TTL: time.Minute,
			Msg: []byte("set " + key)}}, tier.Feed{Channel: prefix + "ch"}); err != nil {
			t.Fatalf("Write(%s) with Msg: %v", key, err)
		}
		if vs, err := s.Get(ctx, []string{key}); err != nil || string(vs[0]) != "v" {
			t.Errorf("Get(%s) = %q, %v; want [\"v\"], nil", key, vs, err)
		}
		if _, err := s.Write(ctx, []tier.Write{{Key: key, Value: []byte("v2"), TTL: time.Minute,
			Msg: []byte("set2 " + key)}}, tier.Feed{Channel: prefix + "ch"}); err != nil {
			t.Fatalf("Write(%s) with Msg: %v", key, err)
		}
		if vs, err := s.Get(ctx, []string{key}); err != nil || string(vs[0]) != "v2" {
			t.Errorf("Get(%s) = %q, %v; want [\"v2\"], nil", key, vs, err)
		}
	}
	// Messages about one key keep their order. Messages about keys on
	// different masters need not: each master forwards its own over the
	// cluster bus.
	for n, ch := range all {
		got := wait(t, ch, 20)
		for i := range 10 {
			set := slices.Index(got, fmt.Sprint("set k", i))
			set2 := slices.Index(got, fmt.Sprint("set2 k", i))
			if set < 0 || set2 < 0 || set2 < set {
				t.Errorf("subscriber on %s: \"set k%d\" at %d, \"set2 k%d\" at %d; want both, set first (got %q)",
					addrs[n], i, set, i, set2, got)
			}
		}
	}
}

// TestClusterLogUnsupported: on Redis Cluster a Store keeps no invalidation
// log, and its log calls say so without a round trip.
func TestClusterLogUnsupported(t *testing.T) {
	for _, c := range clusterClients(t) {
		t.Run(c.name, func(t *testing.T) {
			s := l2.New(c.rdb, l2.Options{Prefix: redistest.Prefix(t) + ":"})
			checkLogUnsupported(t, s, c.nodes)
		})
	}
}

// TestClusterLeases: 50 leases spread over every master are taken,
// extended and released in one call each, one pipeline per node (and for
// the take, a second round trip to read the keys of the leases taken), with
// the results in the order of the keys; a failed take marks the lease it
// found held; the release's message, sent because one lease was asked for,
// reaches a subscriber on every node; a release of leases no one asked for
// sends none.
func TestClusterLeases(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	for _, c := range clusterClients(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			prefix := redistest.Prefix(t) + ":"
			s := l2.New(c.rdb, l2.Options{Prefix: prefix, Classic: true})
			const n = 50
			var keys, guarded, others []string
			masters := make(map[string]bool)
			for i := range n {
				// As package hybrid names them: never in the slot of the
				// key they guard, nor of each other.
				keys = append(keys, fmt.Sprint("ns:\x00lease:user:", i))
				guarded = append(guarded, fmt.Sprint("ns:user:", i))
				if i%3 == 0 {
					others = append(others, keys[i])
				}
				if i%2 == 0 {
					if _, err := s.Write(ctx, []tier.Write{{Key: guarded[i], Value: []byte(fmt.Sprint("v", i)),
						TTL: time.Minute}}, tier.Feed{}); err != nil {
						t.Fatal(err)
					}
				}
				m, err := clusterOf(c.rdb).MasterForKey(ctx, prefix+keys[i])
				if err != nil {
					t.Fatalf("MasterForKey: %v", err)
				}
				masters[m.Options().Addr] = true
			}
			if len(masters) != 3 {
				t.Fatalf("keys on %d masters, want 3", len(masters))
			}
			var all []*messages
			for _, a := range addrs {
				sub := redis.NewClient(&redis.Options{Addr: a})
				t.Cleanup(func() { sub.Close() })
				all = append(all, receive(subscribe(t, sub, prefix+"ch"), 2))
			}
			// Every third key is held by another token. The other calls
			// load each script on every node, so that what follows makes
			// no NOSCRIPT round trip.
			if ls, err := s.TakeLeases(ctx, others, guards(others), "other", 20*time.Second); err != nil || slices.Contains(takenOf(ls), false) {
				t.Fatalf("TakeLeases(other) = %v, %v; want all taken", takenOf(ls), err)
			}
			// Taking none reads nothing.
			if c.nodes != nil {
				c.nodes.reset()
			}
			if ls, err := s.TakeLeases(ctx, others, guards(others), "nobody", time.Minute); err != nil || slices.ContainsFunc(ls, func(l tier.Lease) bool { return l.Taken || l.Value != nil }) {
				t.Fatalf("TakeLeases(nobody) = %+v, %v; want none taken, no values", ls, err)
			}
			if c.nodes != nil {
				if cmds, pipes := c.nodes.counts(); cmds+pipes > 3 || strings.Contains(c.nodes.String(), "get") {
					t.Errorf("TakeLeases taking none sent %v; want at most 3 pipelines (one per node) of scripts", c.nodes)
				}
			}
			if held, err := s.ExtendLeases(ctx, keys, "nobody", time.Minute); err != nil || slices.Contains(held, true) {
				t.Fatalf("ExtendLeases(nobody) = %v, %v; want none held", held, err)
			}
			if err := s.ReleaseLeases(ctx, keys, "nobody", nil, tier.Feed{}); err != nil {
				t.Fatalf("ReleaseLeases(nobody): %v", err)
			}
			pipelines := func(call string, want int) {
				t.Helper()
				if c.nodes == nil {
					return
				}
				if _, got := c.nodes.counts(); got != want {
					t.Errorf("%s sent %d pipelines, want %d (one per node): %v", call, got, want, c.nodes)
				}
				c.nodes.reset()
			}
			check := func(call string, ttlAtMost time.Duration) {
				t.Helper()
				for i, k := range keys {
					want := "me"
					if i%3 == 0 {
						want = "other*" // asked for by nobody and me
					}
					if got := holder(t, c.rdb, prefix+k); got != want {
						t.Errorf("after %s, %q holds %q, want %q", call, k, got, want)
					}
					if d := pttl(t, c.rdb, prefix+k); d <= 0 || d > ttlAtMost {
						t.Errorf("after %s, PTTL of %q = %v, want in (0, %v]", call, k, d, ttlAtMost)
					}
				}
			}
			if c.nodes != nil {
				c.nodes.reset()
			}

			ls, err := s.TakeLeases(ctx, keys, guarded, "me", 10*time.Second)
			if err != nil {
				t.Fatalf("TakeLeases(me): %v", err)
			}
			// The takes, then the reads of the keys guarded by the leases
			// taken, spread over every master too.
			pipelines("TakeLeases", 6)
			for i := range n {
				if want := i%3 != 0; ls[i].Taken != want {
					t.Errorf("[%d].Taken: got %v, want %v", i, ls[i].Taken, want)
				}
				var want []byte
				if i%3 != 0 && i%2 == 0 {
					want = []byte(fmt.Sprint("v", i))
				}
				if v := ls[i].Value; !bytes.Equal(v, want) || (v == nil) != (want == nil) {
					t.Errorf("[%d].Value: got %q, want %q", i, v, want)
				}
				if left := ls[i].Left; i%3 == 0 && (left <= 15*time.Second || left > 20*time.Second) {
					t.Errorf("[%d].Left: got %v, want in (15s, 20s] (the other lease's)", i, left)
				}
				if i%3 != 0 && ls[i].Left != 0 {
					t.Errorf("[%d].Left of a taken lease: got %v, want 0", i, ls[i].Left)
				}
			}
			check("TakeLeases", 20*time.Second)

			held, err := s.ExtendLeases(ctx, keys, "me", time.Minute)
			if err != nil {
				t.Fatalf("ExtendLeases(me): %v", err)
			}
			pipelines("ExtendLeases", 3)
			for i := range n {
				if want := i%3 != 0; held[i] != want {
					t.Errorf("held[%d]: got %v, want %v", i, held[i], want)
				}
			}
			check("ExtendLeases", time.Minute)
			for i, k := range keys {
				if d := pttl(t, c.rdb, prefix+k); i%3 != 0 && d <= 50*time.Second {
					t.Errorf("PTTL of %q after ExtendLeases(1m) = %v, want over 50s", k, d)
				}
			}

			// One of me's leases is asked for: marked, and still held.
			askFor(t, s, keys[1])
			if got := holder(t, c.rdb, prefix+keys[1]); got != "me*" {
				t.Errorf("asked for, %q holds %q, want \"me*\"", keys[1], got)
			}
			if d := pttl(t, c.rdb, prefix+keys[1]); d <= 50*time.Second || d > time.Minute {
				t.Errorf("asked for, PTTL of %q = %v, want in (50s, 1m] (its own)", keys[1], d)
			}
			if c.nodes != nil {
				c.nodes.reset()
			}
			if err := s.ReleaseLeases(ctx, keys, "me", []byte("released"), tier.Feed{Channel: prefix + "ch"}); err != nil {
				t.Fatalf("ReleaseLeases(me): %v", err)
			}
			if c.nodes != nil {
				if cmds, pipes := c.nodes.counts(); cmds != 1 || pipes != 3 {
					t.Errorf("ReleaseLeases sent %d commands and %d pipelines, want a PUBLISH after 3 pipelines: %v", cmds, pipes, c.nodes)
				}
			}
			for i, k := range keys {
				want := ""
				if i%3 == 0 {
					want = "other*"
				}
				if got := holder(t, c.rdb, prefix+k); got != want {
					t.Errorf("after ReleaseLeases, %q holds %q, want %q", k, got, want)
				}
			}
			for j, m := range all {
				if got := wait(t, m, 1); got[0] != "released" {
					t.Errorf("subscriber on %s: got %q, want \"released\"", addrs[j], got[0])
				}
			}

			// Leases no one asked for: released by their scripts, and no
			// PUBLISH. A PUBLISH would reach the subscriber on its node
			// before the "end" published after it.
			quiet := make([]string, n)
			for i := range quiet {
				quiet[i] = fmt.Sprint("ns:\x00lease:quiet:", i)
			}
			if ls, err := s.TakeLeases(ctx, quiet, guards(quiet), "me", time.Minute); err != nil || slices.Contains(takenOf(ls), false) {
				t.Fatalf("TakeLeases(me, quiet) = %v, %v; want all taken", takenOf(ls), err)
			}
			if c.nodes != nil {
				c.nodes.reset()
			}
			if err := s.ReleaseLeases(ctx, quiet, "me", []byte("not sent"), tier.Feed{Channel: prefix + "ch"}); err != nil {
				t.Fatalf("ReleaseLeases(me, quiet): %v", err)
			}
			if c.nodes != nil {
				if cmds, pipes := c.nodes.counts(); cmds != 0 || pipes != 3 {
					t.Errorf("ReleaseLeases of leases not asked for sent %d commands and %d pipelines, want 3 pipelines, no PUBLISH: %v", cmds, pipes, c.nodes)
				}
			}
			for _, k := range quiet {
				if got := holder(t, c.rdb, prefix+k); got != "" {
					t.Errorf("after ReleaseLeases, %q holds %q, want it released", k, got)
				}
			}
			if err := c.rdb.Publish(ctx, prefix+"ch", "end").Err(); err != nil {
				t.Fatal(err)
			}
			for j, m := range all {
				if got := wait(t, m, 1); got[0] != "end" {
					t.Errorf("subscriber on %s: got %q, want \"end\" (no message for leases not asked for)", addrs[j], got[0])
				}
			}
		})
	}
}

// TestClusterLeasesScriptReloaded: a node that lost its scripts (restarted,
// or SCRIPT FLUSH) gets them by EVAL, while the others run them by EVALSHA.
func TestClusterLeasesScriptReloaded(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	prefix := redistest.Prefix(t) + ":"
	s := l2.New(rdb, l2.Options{Prefix: prefix, Classic: true})
	var keys []string
	for i := range 30 {
		keys = append(keys, fmt.Sprint("lease:", i))
	}
	if _, err := s.TakeLeases(ctx, keys, guards(keys), "warm", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLeases(ctx, keys, "warm", nil, tier.Feed{}); err != nil {
		t.Fatal(err)
	}
	node := redis.NewClient(&redis.Options{Addr: addrs[0]})
	t.Cleanup(func() { node.Close() })
	if err := node.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH on %s: %v", addrs[0], err)
	}
	ls, err := s.TakeLeases(ctx, keys, guards(keys), "me", time.Minute)
	if err != nil || slices.Contains(takenOf(ls), false) {
		t.Fatalf("TakeLeases after SCRIPT FLUSH on one node = %v, %v; want all taken", takenOf(ls), err)
	}
	if err := node.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH on %s: %v", addrs[0], err)
	}
	held, err := s.ExtendLeases(ctx, keys, "me", time.Minute)
	if err != nil || slices.Contains(held, false) {
		t.Fatalf("ExtendLeases after SCRIPT FLUSH on one node = %v, %v; want all held", held, err)
	}
	if err := node.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH on %s: %v", addrs[0], err)
	}
	if err := s.ReleaseLeases(ctx, keys, "me", nil, tier.Feed{}); err != nil {
		t.Fatalf("ReleaseLeases after SCRIPT FLUSH on one node: %v", err)
	}
	// The scripts of a write IfEqual with Lease (the write, the release) on
	// every node.
	for i, k := range keys {
		if _, err := s.Write(ctx, []tier.Write{{Key: fmt.Sprint("v:", i), Value: []byte("v"), TTL: time.Minute,
			If: tier.IfEqual, Old: []byte("x"), Lease: k, Token: "me"}}, tier.Feed{}); err != nil {
			t.Fatalf("Write with Lease: %v", err)
		}
	}
	if err := node.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH on %s: %v", addrs[0], err)
	}
	for i, k := range keys {
		if _, err := s.TakeLeases(ctx, []string{k}, []string{"x"}, "fill", time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(ctx, []tier.Write{{Key: fmt.Sprint("v:", i), Value: []byte("old"), TTL: time.Minute}}, tier.Feed{}); err != nil {
			t.Fatal(err)
		}
		wrote, err := s.Write(ctx, []tier.Write{{Key: fmt.Sprint("v:", i), Value: []byte("new"), TTL: time.Minute,
			If: tier.IfEqual, Old: []byte("old"), Lease: k, Token: "fill"}}, tier.Feed{})
		if err != nil || !wrote[0] {
			t.Fatalf("Write with Lease %s after SCRIPT FLUSH on one node = %v, %v; want [true], nil", k, wrote, err)
		}
		if n, err := rdb.Exists(ctx, prefix+k).Result(); err != nil || n != 0 {
			t.Errorf("lease %s after the write: %d, %v; want released", k, n, err)
		}
	}
	ls, err = s.TakeLeases(ctx, keys, guards(keys), "again", time.Minute)
	if err != nil || slices.Contains(takenOf(ls), false) {
		t.Fatalf("TakeLeases after the release = %v, %v; want all taken", takenOf(ls), err)
	}
	if err := s.ReleaseLeases(ctx, keys, "again", nil, tier.Feed{}); err != nil {
		t.Fatal(err)
	}
}

// TestClusterTakeLeasesValues: in Redis Cluster, TakeLeases reads the keys
// guarded by the leases it took, from their own slots, after the takes.
func TestClusterTakeLeasesValues(t *testing.T) {
	for _, c := range clusterClients(t) {
		t.Run(c.name, func(t *testing.T) {
			prefix := redistest.Prefix(t) + ":"
			s := l2.New(c.rdb, l2.Options{Prefix: prefix, Classic: true})
			checkTakeLeasesValues(t, s, c.rdb, prefix)
			checkTakeSeesFill(t, s, 30)
		})
	}
}

// TestClusterWriteReleasing: in Redis Cluster, a write with Lease writes
// on the key's master, then releases and publishes on the lease's: its
// semantics are those of one server, in two round trips.
func TestClusterWriteReleasing(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	for _, c := range clusterClients(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			// Leases and keys of checkWriteWithLease are in other slots,
			// and some on other masters. A key and its lease share most of
			// their name, so their slots are often close, on one master: a
			// prefix is drawn until some are not.
			var prefix string
			for attempt := 0; ; attempt++ {
				if attempt == 100 {
					t.Fatal("for 100 prefixes, a key shares its lease's slot or none is on another master")
				}
				prefix = redistest.Prefix(t) + ":"
				apart, other := true, 0
				for _, k := range []string{"a", "b", "c", "e", "q", "s", "t", "u", "v", "w"} {
					if slotOf(t, c.rdb, prefix+k) == slotOf(t, c.rdb, prefix+"lease:"+k) {
						apart = false
					}
					if masterOf(t, c.rdb, prefix+k) != masterOf(t, c.rdb, prefix+"lease:"+k) {
						other++
					}
				}
				if apart && other > 0 {
					break
				}
			}
			s := l2.New(c.rdb, l2.Options{Prefix: prefix, Classic: true})
			channel := prefix + "ch"
			sub := redis.NewClient(&redis.Options{Addr: addrs[len(addrs)-1]})
			t.Cleanup(func() { sub.Close() })
			checkWriteWithLease(t, s, c.rdb, prefix, channel, receive(subscribe(t, sub, channel), 32))

			if c.nodes == nil {
				return
			}
			// Two round trips: the write, then the release, which publishes
			// (the lease is gone: someone may wait).
			for _, old := range [][]byte{nil, []byte("v")} {
				if _, err := s.Write(ctx, []tier.Write{{Key: "r", Value: []byte("v"), TTL: time.Minute}}, tier.Feed{}); err != nil {
					t.Fatal(err)
				}
				w := tier.Write{Key: "r", Value: []byte("v"), TTL: time.Minute, If: tier.IfAbsent, Lease: "lease:r", Token: "me"}
				if old != nil {
					w.If, w.Old = tier.IfEqual, old
				}
				if _, err := s.Write(ctx, []tier.Write{w}, tier.Feed{Channel: channel}); err != nil {
					t.Fatal(err) // loads the scripts
				}
				c.nodes.reset()
				if _, err := s.Write(ctx, []tier.Write{w}, tier.Feed{Channel: channel}); err != nil {
					t.Fatal(err)
				}
				want := "commands [set evalsha], pipelines []"
				if old != nil {
					want = "commands [evalsha evalsha], pipelines []"
				}
				if got := c.nodes.String(); got != want {
					t.Errorf("Write with Lease (Old %q) sent %s; want %s", old, got, want)
				}
			}
		})
	}
}

// TestClusterWriteReleasingAnnouncesAfter: a subscriber, on hearing the
// message of a write with Lease, finds the value written and the lease
// released; a lease no one asked for is released without a message. The
// rounds' keys and leases are spread over every master, so a subscriber on
// any node hears messages that crossed the cluster bus.
func TestClusterWriteReleasingAnnouncesAfter(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { rdb.Close() })
	for _, a := range addrs {
		t.Run(a, func(t *testing.T) {
			prefix := redistest.Prefix(t) + ":"
			s := l2.New(rdb, l2.Options{Prefix: prefix, Classic: true})
			sub := redis.NewClient(&redis.Options{Addr: a})
			t.Cleanup(func() { sub.Close() })
			channel := prefix + "ch"
			checkFillAnnouncesAfter(t, s, rdb, subscribe(t, sub, channel), prefix, channel, 50)
		})
	}
}

// slotOf returns the hash slot of key, as the cluster computes it.
func slotOf(t *testing.T, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := rdb.ClusterKeySlot(t.Context(), key).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
	}
	return n
}

// masterOf returns the address of the master of key's slot.
func masterOf(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	m, err := clusterOf(rdb).MasterForKey(t.Context(), key)
	if err != nil {
		t.Fatalf("MasterForKey: %v", err)
	}
	return m.Options().Addr
}

// TestClusterWriteBatch: a batch of writes over every master, plain, by
// script with a message, and releasing leases, is one pipeline per node
// for the writes, then one per node for the releases, which publish the
// messages of the leases asked for; every subscriber, on any node, hears
// each message once, and nothing for the leases no one asked for.
func TestClusterWriteBatch(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	for _, c := range clusterClients(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			prefix := redistest.Prefix(t) + ":"
			s := l2.New(c.rdb, l2.Options{Prefix: prefix, Classic: true})
			if s.Info().Log {
				t.Error("Info().Log on Redis Cluster: true, want false")
			}
			channel := prefix + "ch"
			var all []*messages
			for _, a := range addrs {
				sub := redis.NewClient(&redis.Options{Addr: a})
				t.Cleanup(func() { sub.Close() })
				all = append(all, receive(subscribe(t, sub, channel), 32))
			}
			// batch returns the writes of keys k<i><tail>: i%3 == 0 a
			// plain SET; 1 an IfEqual by script, announced; 2 a holder's
			// IfAbsent, its lease asked for when i%6 == 2.
			const n = 30
			batch := func(tail string) (ws []tier.Write, leases, asked, want []string) {
				for i := range n {
					k := fmt.Sprint("k", i, tail)
					switch i % 3 {
					case 0:
						ws = append(ws, tier.Write{Key: k, Value: []byte("v")})
					case 1:
						ws = append(ws, tier.Write{Key: k, Value: []byte("v"), If: tier.IfEqual, Old: []byte("o"),
							TTL: time.Minute, Msg: []byte("m " + k), Else: []byte("e " + k)})
						want = append(want, "m "+k)
					case 2:
						l := "lease:" + k
						ws = append(ws, tier.Write{Key: k, Value: []byte("v"), If: tier.IfAbsent, TTL: time.Minute,
							Lease: l, Token: "me", Msg: []byte("filled " + k), Else: []byte("unfilled " + k)})
						leases = append(leases, l)
						if i%6 == 2 {
							asked = append(asked, l)
							if i == 8 {
								want = append(want, "unfilled "+k)
							} else {
								want = append(want, "filled "+k)
							}
						}
					}
				}
				return ws, leases, asked, want
			}
			prepare := func(tail string) ([]tier.Write, []string) {
				ws, leases, asked, want := batch(tail)
				for i := range n {
					if i%3 == 1 || i == 8 {
						if _, err := s.Write(ctx, []tier.Write{{Key: fmt.Sprint("k", i, tail), Value: []byte("o"),
							TTL: time.Minute}}, tier.Feed{}); err != nil {
							t.Fatal(err)
						}
					}
				}
				if ls, err := s.TakeLeases(ctx, leases, guards(leases), "me", time.Minute); err != nil || slices.Contains(takenOf(ls), false) {
					t.Fatalf("TakeLeases(me) = %v, %v; want all taken", takenOf(ls), err)
				}
				askFor(t, s, asked...)
				return ws, want
			}
			// The same batch once on other keys and channel loads the
			// scripts on every node.
			warm, _ := prepare("w")
			if _, err := s.Write(ctx, warm, tier.Feed{Channel: prefix + "warm"}); err != nil {
				t.Fatal(err)
			}
			ws, want := prepare("")
			if c.nodes != nil {
				c.nodes.reset()
			}
			stored, err := s.Write(ctx, ws, tier.Feed{Channel: channel})
			if err != nil {
				t.Fatal(err)
			}
			if c.nodes != nil {
				if cmds, pipes := c.nodes.counts(); cmds != 0 || pipes != 6 {
					t.Errorf("Write sent %d commands and %d pipelines, want 6 pipelines (writes, then releases, on 3 nodes): %v", cmds, pipes, c.nodes)
				}
			}
			for i, w := range ws {
				if want := i != 8; stored[i] != want {
					t.Errorf("stored[%d] (%s): got %v, want %v", i, w.Key, stored[i], want)
				}
				wantValue := "v"
				if i == 8 {
					wantValue = "o"
				}
				if vs, err := s.Get(ctx, []string{w.Key}); err != nil || string(vs[0]) != wantValue {
					t.Errorf("%s holds %q, %v; want %q", w.Key, vs, err, wantValue)
				}
				if w.Lease != "" {
					if got := holder(t, c.rdb, prefix+w.Lease); got != "" {
						t.Errorf("%s holds %q, want it released", w.Lease, got)
					}
				}
			}
			ends := publishEverywhere(t, c.rdb, channel, "end")
			for j, m := range all {
				got := wait(t, m, len(want)+ends)
				slices.Sort(got)
				wantAll := append(slices.Repeat([]string{"end"}, ends), want...)
				slices.Sort(wantAll)
				if !slices.Equal(got, wantAll) {
					t.Errorf("subscriber on %s heard %q, want %q", addrs[j], got, wantAll)
				}
			}
		})
	}
}
