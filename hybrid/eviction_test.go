package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

// The eviction tests run the cache on a Redis that evicts, as Redis used
// as a cache is set up in production: maxmemory and an evicting policy.
// Each writes data and deletes it (Clear, DeleteByTag, Delete), floods
// Redis with unrelated keys until the record the delete left is evicted,
// and then asks the instances that saw the delete, and a new one, for the
// deleted data: they must miss and load, never serve it again.

// evictionPolicies are the maxmemory policies the cache supports.
var evictionPolicies = []string{"allkeys-lru", "allkeys-lfu", "volatile-lru"}

// evictingServer starts a redis-server of the test's own with 4 MB of
// memory and policy, stopped when t ends. An access adds one to a key's
// LFU counter (lfu-log-factor 0), so that the flood's keys, each read a
// few times, count as used more than a record read a few times.
func evictingServer(t *testing.T, policy string) *redistest.Server {
	t.Helper()
	srv.NeedReal(t) // a redis-server of its own: not on the embedded fallback
	s, err := redistest.StartWith("--maxmemory", "4mb", "--maxmemory-policy", policy,
		"--maxmemory-samples", "10", "--lfu-log-factor", "0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// evictingClient returns a client of s, closed when t ends.
func evictingClient(t *testing.T, s *redistest.Server) redis.UniversalClient {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// floodUntilEvicted writes unrelated 1 KB keys (with a lifetime, so that
// volatile-lru may evict them too), each read a few times, until none of
// gone exists, reading the keys of hot between them as a workload reading
// its data would. It
// reports whether the keys of gone were evicted; under volatile-lru a key
// without a lifetime never is, and it gives up after a bounded flood.
func floodUntilEvicted(t *testing.T, rdb redis.UniversalClient, gone, hot []string) bool {
	t.Helper()
	ctx := context.Background()
	filler := strings.Repeat("x", 1024)
	for round := 0; round < 100; round++ {
		pipe := rdb.Pipeline()
		for i := range 300 {
			k := fmt.Sprintf("flood:%d:%d", round, i)
			pipe.Set(ctx, k, filler, time.Hour)
			// STRLEN reads a key (its LRU clock and LFU counter) with a
			// short reply: replies held in Redis count as its memory.
			for range 16 {
				pipe.StrLen(ctx, k)
			}
			if i%25 == 0 {
				for _, k := range hot {
					pipe.StrLen(ctx, k)
				}
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			t.Fatalf("flood: %v", err)
		}
		n, err := rdb.Exists(ctx, gone...).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return true
		}
	}
	return false
}

// surviving returns those of keys that Redis still holds.
func surviving(t *testing.T, rdb redis.UniversalClient, keys []string) []string {
	t.Helper()
	var out []string
	for _, k := range keys {
		n, err := rdb.Exists(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			out = append(out, k)
		}
	}
	return out
}

// evictionKeys returns n keys and their Redis keys in namespace ns.
func evictionKeys(ns string, n int) (keys, rkeys []string) {
	for i := range n {
		k := fmt.Sprintf("k%02d", i)
		keys, rkeys = append(keys, k), append(rkeys, ns+":"+k)
	}
	return keys, rkeys
}

// checkNotServed asks each of ins for every key and fails t for each that
// serves old, the deleted value: a miss that loads "new" is what it must do.
func checkNotServed(t *testing.T, ins []*instance, keys []string, old string) {
	t.Helper()
	for _, in := range ins {
		served := 0
		for _, k := range keys {
			v, err := in.c.GetOrCreate(context.Background(), k, func(context.Context, string) (string, error) { return "new", nil })
			if err != nil {
				t.Fatalf("%s: GetOrCreate(%q): %v", in.name, k, err)
			}
			if v == old {
				served++
			}
		}
		if served > 0 {
			t.Errorf("%s: served the deleted value for %d of %d keys, want 0 (a miss and a load)", in.name, served, len(keys))
		}
	}
}

// TestEvictedClearRecord: values written before a Clear stay deleted when
// Redis evicts the record the Clear left, for the instances that saw the
// Clear and for a new one.
func TestEvictedClearRecord(t *testing.T) {
	for _, policy := range evictionPolicies {
		t.Run(policy, func(t *testing.T) {
			testEvictedRecord(t, policy, "\x00clear", func(ctx context.Context, in *instance) error { return in.c.Clear(ctx) }, nil)
		})
	}
}

// TestEvictedTagRecord: values written with a tag stay deleted after
// DeleteByTag when Redis evicts the tag's record.
func TestEvictedTagRecord(t *testing.T) {
	for _, policy := range evictionPolicies {
		t.Run(policy, func(t *testing.T) {
			testEvictedRecord(t, policy, "\x00tag:t", func(ctx context.Context, in *instance) error { return in.c.DeleteByTag(ctx, "t") },
				[]hybrid.EntryOption{hybrid.WithTags("t")})
		})
	}
}

// testEvictedRecord writes 40 values with opts on instance A, deletes them
// with del, floods Redis until the record the delete wrote (the namespace's
// key ending in record) is evicted, and checks that A, B (which heard the
// delete) and a new instance C serve none of them.
//
// The values are older than the record, so an LRU flood evicts the record
// at a random place among them (Redis samples keys): about one run in 40
// it is the last to go, and nothing is left to check. Then the scenario
// runs again on a fresh namespace, up to 5 times.
func testEvictedRecord(t *testing.T, policy, record string, del func(context.Context, *instance) error, opts []hybrid.EntryOption) {
	es := evictingServer(t, policy)
	for try := 1; ; try++ {
		if evictedRecordOnce(t, es, policy, record, del, opts, try == 5) {
			return
		}
		t.Logf("try %d: the flood evicted every value too; again on a fresh namespace", try)
	}
}

// evictedRecordOnce is one run of testEvictedRecord; it reports false when
// the flood left no value to check (failing t instead when last).
func evictedRecordOnce(t *testing.T, es *redistest.Server, policy, record string, del func(context.Context, *instance) error, opts []hybrid.EntryOption, last bool) bool {
	ctx := context.Background()
	raw := evictingClient(t, es)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns}
	a := newInstanceOn(t, "A", evictingClient(t, es), o, invalidate.Options{})
	b := newInstanceOn(t, "B", evictingClient(t, es), o, invalidate.Options{})
	keys, rkeys := evictionKeys(ns, 40)
	for _, k := range keys {
		if err := a.c.Set(ctx, k, "old", opts...); err != nil {
			t.Fatal(err)
		}
	}
	if err := del(ctx, a); err != nil {
		t.Fatal(err)
	}
	records := []string{ns + ":" + record}
	if n, err := raw.Exists(ctx, records...).Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS of the delete's record: %d, %v; want 1", n, err)
	}
	evicted := floodUntilEvicted(t, raw, records, rkeys)
	left := surviving(t, raw, rkeys)
	t.Logf("%s: records %q evicted: %v; %d of %d values left in Redis", policy, records, evicted, len(left), len(keys))
	if evicted && len(left) == 0 {
		if last {
			t.Fatal("the flood evicted every value too: nothing to check")
		}
		return false
	}
	c := newInstanceOn(t, "C", evictingClient(t, es), o, invalidate.Options{})
	checkNotServed(t, []*instance{c, a, b}, keys, "old")
	return true
}

// floodTombstones floods Redis until the tombstones under rkeys are
// evicted, and fails t unless most of them were.
func floodTombstones(t *testing.T, rdb redis.UniversalClient, rkeys []string) {
	t.Helper()
	if !floodUntilEvicted(t, rdb, rkeys, nil) {
		if left := surviving(t, rdb, rkeys); 2*len(left) > len(rkeys) {
			t.Fatalf("%d of %d tombstones not evicted by the flood", len(left), len(rkeys))
		}
	}
}

// TestEvictedTombstone: a fill that read a key missing and loaded it
// before a Delete does not write its value back once Redis has evicted the
// Delete's tombstone (the Delete is unannounced, so that the fill's
// instance does not hear of it and only the shared tier can refuse the
// write). Redis, the deleter and a new instance must not serve the deleted
// value. With load leases on B, its write-back releases them. In a fresh
// namespace, B's fills find the keys' sequence counters missing as well,
// and the flood may evict the counters with the tombstones.
func TestEvictedTombstone(t *testing.T) {
	for _, policy := range evictionPolicies {
		for _, lease := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/lease=%v", policy, lease), func(t *testing.T) { testEvictedTombstone(t, policy, lease, false) })
		}
		t.Run(policy+"/fresh", func(t *testing.T) { testEvictedTombstone(t, policy, false, true) })
	}
}

func testEvictedTombstone(t *testing.T, policy string, lease, fresh bool) {
	ctx := context.Background()
	es := evictingServer(t, policy)
	raw := evictingClient(t, es)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns}
	a := newInstanceOn(t, "A", evictingClient(t, es), o, invalidate.Options{})
	ob := o
	if lease {
		ob.LoadLease = 10 * time.Second
	}
	b := newInstanceOn(t, "B", evictingClient(t, es), ob, invalidate.Options{})
	keys, rkeys := evictionKeys(ns, 40)
	if !fresh {
		// A namespace in use: its keys were written before, and their
		// values are gone from Redis (expired) when B reads them.
		for _, k := range keys {
			if err := a.c.Set(ctx, k, "before", hybrid.WithSkip(hybrid.SkipAnnounce)); err != nil {
				t.Fatal(err)
			}
		}
		if err := raw.Del(ctx, rkeys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	started, release := make(chan struct{}, len(keys)), make(chan struct{})
	load := func(ctx context.Context, key string) (string, error) {
		started <- struct{}{}
		<-release
		return "old", nil // read from the database before the Delete
	}
	fills := make([]<-chan result, len(keys))
	for i, k := range keys {
		fills[i] = goGetOrCreate(ctx, b.c, k, load)
	}
	for range keys {
		<-started
	}
	writes := b.remote.writeCalls.Load()
	for _, k := range keys {
		if err := a.c.Delete(ctx, k, hybrid.WithSkip(hybrid.SkipAnnounce)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := raw.Exists(ctx, rkeys...).Result(); err != nil || n != int64(len(keys)) {
		t.Fatalf("EXISTS of the tombstones: %d, %v; want %d", n, err, len(keys))
	}
	floodTombstones(t, raw, rkeys)
	close(release)
	for i, ch := range fills {
		if r := <-ch; r.err != nil || r.v != "old" {
			t.Fatalf("B: GetOrCreate(%q): %q, %v; want the load's \"old\"", keys[i], r.v, r.err)
		}
	}
	waitFor(t, 5*time.Second, "B's write-backs", func() bool { return b.remote.writeCalls.Load()-writes >= int64(len(keys)) }, nil)
	if left := surviving(t, raw, rkeys); len(left) > 0 {
		for _, k := range keys {
			if v, ok := redisValue(t, raw, ns, k); ok && v == "old" {
				t.Errorf("Redis holds the deleted value under %s", k)
			}
		}
	}
	c := newInstanceOn(t, "C", evictingClient(t, es), o, invalidate.Options{})
	checkNotServed(t, []*instance{c, a}, keys, "old")
}

// TestEvictedTombstoneQueuedSet: a Set queued while its instance could not
// reach Redis (QueueWrites), replayed after another instance deleted the
// key and Redis evicted the tombstone, does not write the deleted value
// back: Redis, a new instance and, once it heard of the Delete, the
// writer serve it no more.
func TestEvictedTombstoneQueuedSet(t *testing.T) {
	for _, policy := range evictionPolicies {
		t.Run(policy, func(t *testing.T) {
			ctx := context.Background()
			es := evictingServer(t, policy)
			raw := evictingClient(t, es)
			ns := redistest.Prefix(t)
			o := hybrid.Options{Namespace: ns, QueueWrites: 100}
			bo := invalidate.Options{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond}
			p := startProxy(t, es.Addr)
			a := newInstance(t, "A", via(p, shortTimeouts), o, bo)
			b := newInstanceOn(t, "B", evictingClient(t, es), o, bo)
			keys, rkeys := evictionKeys(ns, 40)
			for _, k := range keys {
				setStr(t, a, k, "v0")
			}
			p.Cut()
			waitStat(t, a, "Bus.Losses", statBusLosses, 1)
			for _, k := range keys {
				if err := a.c.Set(ctx, k, "a-old"); !errors.Is(err, hybrid.ErrQueued) {
					t.Fatalf("A: Set(%q) while cut off: got %v, want ErrQueued", k, err)
				}
			}
			time.Sleep(2 * time.Millisecond) // B's deletes are a later millisecond
			for _, k := range keys {
				if err := b.c.Delete(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
			floodTombstones(t, raw, rkeys)
			setFault(t, p.Pass())
			waitFor(t, 15*time.Second, "A's queue to be replayed", func() bool { return a.c.Stats().Queue.Length == 0 }, nil)
			for _, k := range keys {
				if v, ok := redisValue(t, raw, ns, k); ok && v == "a-old" {
					t.Errorf("Redis holds the deleted value under %s", k)
				}
			}
			c := newInstanceOn(t, "C", evictingClient(t, es), o, bo)
			checkNotServed(t, []*instance{c, b}, keys, "a-old")
			// A hears of B's deletes when its bus is back (a replay of the
			// log, or a flush of L1).
			waitFor(t, 10*time.Second, "A to drop the deleted values", func() bool {
				for _, k := range keys {
					if v, _ := getStr(t, a, k); v == "a-old" {
						return false
					}
				}
				return true
			}, func() string {
				var old []string
				for _, k := range keys {
					if v, _ := getStr(t, a, k); v == "a-old" {
						rv, ok := redisValue(t, raw, ns, k)
						old = append(old, fmt.Sprintf("%s (Redis %q %v)", k, rv, ok))
					}
				}
				return fmt.Sprintf("A: %+v %+v; serving a-old: %v", a.c.Stats().Bus, a.c.Stats().Queue, old)
			})
		})
	}
}
