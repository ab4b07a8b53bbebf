package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// TestL1BoundEveryPath drives each path that stores into L1 with values
// whose total is 20 times LocalMaxBytes, and checks that L1 holds no more
// than the bound by its own count (L1.Size), by the number of entries it
// keeps, and by the live heap. A path that weighed an entry by less than its
// value (fail-safe once did) keeps thousands of entries.
//
// The heap is this process's. With the embedded fallback server, it also
// holds the server's copy of every value written (20 MB, never expired by
// miniredis), which is no part of L1: the test's keys are deleted from the
// server before the heap is read, by the namespace's SCAN pattern, in both
// modes alike (with a real server, a no-op for this heap).
func TestL1BoundEveryPath(t *testing.T) {
	const (
		maxBytes = 1 << 20
		valSize  = 10 << 10
		keys     = 2000
		lifetime = time.Minute
		short    = 300 * time.Millisecond // for the paths that need values past their lifetime
	)
	big := strings.Repeat("v", valSize)
	key := func(i int) string { return fmt.Sprint("k", i) }
	failing := func(context.Context, string) (string, error) { return "", errors.New("database down") }
	loadBig := func(context.Context, string) (string, error) { return big, nil }

	// expire sets every key to big through a, then waits until every value
	// has passed its lifetime (kept for fail-safe).
	expire := func(t *testing.T, a *instance) {
		for i := range keys {
			setStr(t, a, key(i), big)
		}
		time.Sleep(short + 100*time.Millisecond)
	}
	smallToo := false // a path leaves small values in L1 too: the count of entries says nothing
	paths := []struct {
		name string
		o    hybrid.Options
		run  func(t *testing.T, a, b *instance) *instance // returns the instance to check
	}{
		{"fill", hybrid.Options{}, func(t *testing.T, a, _ *instance) *instance {
			for i := range keys {
				if _, err := a.c.GetOrCreate(context.Background(), key(i), loadBig); err != nil {
					t.Fatal(err)
				}
			}
			return a
		}},
		{"batch fill", hybrid.Options{}, func(t *testing.T, a, _ *instance) *instance {
			page := make([]string, 0, 100)
			for i := range keys {
				page = append(page, key(i))
				if len(page) == cap(page) {
					if _, err := a.c.GetOrCreateMany(context.Background(), page, func(_ context.Context, miss []string) (map[string]string, error) {
						m := make(map[string]string, len(miss))
						for _, k := range miss {
							m[k] = big
						}
						return m, nil
					}); err != nil {
						t.Fatal(err)
					}
					page = page[:0]
				}
			}
			return a
		}},
		{"set", hybrid.Options{}, func(t *testing.T, a, _ *instance) *instance {
			for i := range keys {
				setStr(t, a, key(i), big)
			}
			return a
		}},
		{"swap from a message", hybrid.Options{Secret: []byte("s")}, func(t *testing.T, a, b *instance) *instance {
			// b holds every key small; a's Sets swap the big value in.
			for i := range keys {
				setStr(t, b, key(i), "small")
			}
			before := b.c.Stats().Invalidations.Applied
			for i := range keys {
				setStr(t, a, key(i), big)
			}
			waitStat(t, b, "Invalidations.Applied", statReceived, before+keys)
			if b.c.Stats().Invalidations.Swapped == 0 {
				t.Fatal("no value was swapped in: the path is not exercised")
			}
			return b
		}},
		{"fail-safe re-store", hybrid.Options{FailSafeMaxAge: time.Hour, TTL: short}, func(t *testing.T, a, _ *instance) *instance {
			expire(t, a)
			for i := range keys {
				if v, err := a.c.GetOrCreate(context.Background(), key(i), failing); err != nil || v != big {
					t.Fatalf("GetOrCreate(%q): %d bytes, %v; want the stale value", key(i), len(v), err)
				}
			}
			return a
		}},
		{"soft timeout", hybrid.Options{FailSafeMaxAge: time.Hour, SoftTimeout: time.Millisecond, TTL: short}, func(t *testing.T, a, _ *instance) *instance {
			expire(t, a)
			var wg sync.WaitGroup
			for g := range 20 {
				wg.Go(func() {
					for i := g; i < keys; i += 20 {
						_, _ = a.c.GetOrCreate(context.Background(), key(i), func(context.Context, string) (string, error) {
							time.Sleep(5 * time.Millisecond)
							return big, nil
						})
					}
				})
			}
			wg.Wait()
			if a.c.Stats().Load.SoftTimeouts == 0 {
				t.Fatal("no soft timeout: the path is not exercised")
			}
			return a
		}},
		{"eager refresh", hybrid.Options{EagerRefresh: 0.001}, func(t *testing.T, a, _ *instance) *instance {
			smallToo = true // the keys not refreshed yet hold small values
			for i := range keys {
				setStr(t, a, key(i), "small")
			}
			time.Sleep(lifetime / 500)
			for i := range keys {
				_, _ = a.c.GetOrCreate(context.Background(), key(i), loadBig)
			}
			if a.c.Stats().Load.Refreshes == 0 {
				t.Fatal("no refresh: the path is not exercised")
			}
			return a
		}},
	}
	for _, p := range paths {
		smallToo = false
		t.Run(p.name, func(t *testing.T) {
			o := p.o
			o.Namespace = redistest.Prefix(t)
			o.LocalMaxBytes = maxBytes
			if o.TTL == 0 {
				o.TTL = lifetime
			}
			o.LocalTTL = o.TTL
			var base runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&base)
			in := newInstances(t, 2, singleNode(nil), o)
			checked := p.run(t, in[0], in[1])
			// Otter evicts in its upkeep, which follows writes, and refreshes
			// and write-backs run after their callers return: a write of ours
			// (here, a delete) runs what is pending. An entry weighed too
			// light is never evicted, so this wait cannot hide one.
			most := maxBytes / valSize
			deadline := time.Now().Add(5 * time.Second)
			for st := checked.c.Stats(); (st.L1.Size > maxBytes || st.L1.Entries > most) && time.Now().Before(deadline); st = checked.c.Stats() {
				checked.c.DropLocal("upkeep")
				time.Sleep(10 * time.Millisecond)
			}
			checked.c.Close() // waits for what is still running
			dropServerKeys(t, in[0], o.Namespace)

			st := checked.c.Stats()
			if st.L1.Size > maxBytes {
				t.Errorf("L1.Size %d, want <= LocalMaxBytes %d", st.L1.Size, maxBytes)
			}
			if st.L1.Entries > most && !smallToo {
				t.Errorf("L1 holds %d entries of up to %d bytes (%d bytes by its count), want <= %d in %d bytes", st.L1.Entries, valSize, st.L1.Size, most, maxBytes)
			}
			var now runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&now)
			grown := int64(now.HeapAlloc) - int64(base.HeapAlloc)
			t.Logf("live heap grew by %d bytes (server: %s)", grown, serverKind())
			if grown > 8*maxBytes {
				t.Errorf("live heap grew by %d bytes, want <= %d (8 x LocalMaxBytes; the values total %d)", grown, 8*maxBytes, keys*valSize)
			}
		})
	}
}

// dropServerKeys deletes every key of namespace ns from in's server, so
// that an embedded server's copies leave this process's heap.
func dropServerKeys(t *testing.T, in *instance, ns string) {
	t.Helper()
	ctx := context.Background()
	// All first, then DEL: miniredis's SCAN cursor is an index into the
	// sorted keys, which a delete during the scan would shift.
	var keys []string
	it := in.rdb.Scan(ctx, 0, ns+":*", 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	for batch := range slices.Chunk(keys, 500) {
		if err := in.rdb.Del(ctx, batch...).Err(); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	if len(keys) == 0 {
		t.Fatalf("SCAN MATCH %q: no keys, want the test's", ns+":*")
	}
	if n, err := in.rdb.Exists(ctx, keys...).Result(); err != nil || n != 0 {
		t.Fatalf("after DEL: %d of %d keys still there (%v)", n, len(keys), err)
	}
}

// serverKind names the Redis the package's tests run against.
func serverKind() string {
	if srv.Real() {
		return "redis-server"
	}
	return "embedded miniredis"
}
