package redistest_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/internal/keyslot"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// TestCluster starts a cluster of three masters with a replica each, and
// checks that a cluster client works on it, that MigrateSlot moves a slot
// with its keys, that Failover and KillMaster promote a replica that
// serves the slots with their keys, and that Close leaves no process and
// no goroutine behind.
func TestCluster(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	var pids []int
	var dir string
	t.Run("run", func(t *testing.T) {
		ctx := t.Context()
		c := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Replicas: 1})
		for _, addr := range c.Addrs() {
			admin, err := c.Admin(addr)
			if err != nil {
				t.Fatal(err)
			}
			info, err := admin.Info(ctx, "server").Result()
			if err != nil {
				t.Fatal(err)
			}
			_, after, _ := strings.Cut(info, "process_id:")
			var n int
			if _, err := fmt.Sscanf(after, "%d", &n); err != nil {
				t.Fatalf("%s: no process_id in INFO server: %v", addr, err)
			}
			pids = append(pids, n)
		}
		if got := len(pids); got != 6 {
			t.Fatalf("got %d nodes, want 6", got)
		}
		masters, err := c.Masters(ctx)
		if err != nil || len(masters) != 3 {
			t.Fatalf("Masters: got %v, %v, want three", masters, err)
		}
		rdb := c.Client(t)

		// Keys in one slot, on the first master.
		const tag = "{a}"
		slot := int(keyslot.Of(tag))
		keys := make([]string, 250) // more than one MIGRATE batch
		for i := range keys {
			keys[i] = fmt.Sprint(tag, i)
			if err := rdb.Set(ctx, keys[i], i, 0).Err(); err != nil {
				t.Fatalf("SET %s: %v", keys[i], err)
			}
		}
		checkKeys := func(when string) {
			t.Helper()
			for i, k := range keys {
				got, err := rdb.Get(ctx, k).Int()
				if err != nil || got != i {
					t.Fatalf("%s: GET %s: got %d, %v, want %d", when, k, got, err, i)
				}
			}
		}
		from, err := c.MasterOf(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		to := masters[0]
		if to == from {
			to = masters[1]
		}
		start := time.Now()
		if err := c.MigrateSlot(ctx, slot, to); err != nil {
			t.Fatalf("MigrateSlot: %v", err)
		}
		t.Logf("MigrateSlot of %d keys took %v", len(keys), time.Since(start).Round(time.Millisecond))
		if got, err := c.MasterOf(ctx, slot); err != nil || got != to {
			t.Fatalf("MasterOf(%d) after MigrateSlot: got %q, %v, want %s", slot, got, err, to)
		}
		checkKeys("after MigrateSlot")
		if err := c.MigrateSlot(ctx, slot, to); err == nil {
			t.Error("MigrateSlot to the master serving the slot: got nil, want an error")
		}

		replicas, err := c.ReplicasOf(ctx, to)
		if err != nil || len(replicas) != 1 {
			t.Fatalf("ReplicasOf(%s): got %v, %v, want one", to, replicas, err)
		}
		start = time.Now()
		promoted, err := c.Failover(ctx, to)
		if err != nil {
			t.Fatalf("Failover: %v", err)
		}
		t.Logf("Failover took %v", time.Since(start).Round(time.Millisecond))
		if promoted != replicas[0] {
			t.Errorf("Failover promoted %s, want %s", promoted, replicas[0])
		}
		if got, err := c.MasterOf(ctx, slot); err != nil || got != promoted {
			t.Fatalf("MasterOf(%d) after Failover: got %q, %v, want %s", slot, got, err, promoted)
		}
		if got, err := c.ReplicasOf(ctx, promoted); err != nil || !slices.Equal(got, []string{to}) {
			t.Errorf("ReplicasOf(%s) after Failover: got %v, %v, want the old master %s", promoted, got, err, to)
		}
		checkKeys("after Failover")

		start = time.Now()
		next, err := c.KillMaster(ctx, promoted)
		if err != nil {
			t.Fatalf("KillMaster: %v", err)
		}
		t.Logf("KillMaster took %v until the replica served", time.Since(start).Round(time.Millisecond))
		if next != to {
			t.Errorf("KillMaster: got %s promoted, want %s", next, to)
		}
		if slices.Contains(c.Addrs(), promoted) {
			t.Errorf("Addrs after KillMaster still lists %s", promoted)
		}
		if _, err := c.Admin(promoted); err == nil {
			t.Errorf("Admin(%s) of a killed node: got nil error", promoted)
		}
		// A fresh client finds the new master at once. One that knew the
		// killed master keeps dialling it until it reloads the slots:
		// go-redis v9 reloads on MOVED, ASK or READONLY, or every
		// ClusterStateReloadInterval (default 60 s), not on a refused
		// connection.
		old := rdb
		rdb = c.Client(t)
		checkKeys("after KillMaster")
		if err := old.Get(ctx, keys[0]).Err(); err == nil {
			t.Log("a client of before KillMaster read at once")
		}
		old.ReloadState(ctx)
		start = time.Now()
		for old.Get(ctx, keys[0]).Err() != nil {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("a client of before KillMaster still fails %v after ReloadState", time.Since(start))
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := c.KillMaster(ctx, next); err == nil {
			t.Error("KillMaster of a master without replicas: got nil, want an error")
		}
		dir = c.Dir()
	})
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("redis-server pid %d still there after the test: kill -0 says %v", pid, err)
		}
	}
	if dir != "" {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the cluster's directory %s after the test: stat says %v, want it gone", dir, err)
		}
	}
	if err := redistest.WaitRedials(3 * time.Second); err != nil {
		t.Error(err)
	}
	goleak.VerifyNone(t, ignore)
}
