package hybrid_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/maypok86/otter/v2"
	"github.com/redis/go-redis/v9"
)

// The paired benchmarks time the cache and its raw baseline in the same
// loop, one operation of each per iteration, in alternating order, and
// report the median of each and their ratio. On a shared machine whose
// speed drifts from one second to the next, two benchmarks run one after
// the other can differ by 30% for the same code; operations interleaved
// this way see the same drift, so their ratio holds still where the ratio
// of two separate runs does not.

// paired runs ours(i) and base(i) alternately and reports their medians
// (ours-ns, base-ns) and the ratio of the medians (x-base). Only the calls
// are timed; prepare, if not nil, runs untimed before each pair.
func paired(b *testing.B, prepare func(i int), ours, base func(i int)) {
	b.Helper()
	pairedBlocks(b, 1, prepare, ours, base)
}

// pairedBlocks is paired for operations too quick to time one by one: it
// times blocks of n calls, and reports the medians per call.
func pairedBlocks(b *testing.B, n int, prepare func(i int), ours, base func(i int)) {
	b.Helper()
	var to, tb []time.Duration
	run := func(f func(int), i int) time.Duration {
		t0 := time.Now()
		for j := range n {
			f(i*n + j)
		}
		return time.Since(t0)
	}
	i := 0
	for b.Loop() {
		if prepare != nil {
			prepare(i)
		}
		if i%2 == 0 {
			to = append(to, run(ours, i))
			tb = append(tb, run(base, i))
		} else {
			tb = append(tb, run(base, i))
			to = append(to, run(ours, i))
		}
		i++
	}
	mo, mb := float64(median(to))/float64(n), float64(median(tb))/float64(n)
	b.ReportMetric(mo, "ours-ns")
	b.ReportMetric(mb, "base-ns")
	b.ReportMetric(mo/mb, "x-base")
	b.ReportMetric(0, "ns/op") // the time of a pair; the three above say more
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkPaired_L2Hit is BenchmarkGetOrCreate_L2Hit against
// BenchmarkRedis_GetDecode, interleaved: an L1 miss served by Redis
// against a raw GET of the same record and its msgpack decode. The caller's
// ctx is context.Background, so the cache reads Redis on the caller's
// goroutine.
func BenchmarkPaired_L2Hit(b *testing.B) {
	pairedL2Hit(b, context.Background(), benchClient(b))
}

// BenchmarkPaired_L2HitCancelable is BenchmarkPaired_L2Hit with a ctx that
// can end, as a request's. On a client with ContextTimeoutEnabled the store
// bounds its reads, so the leader reads Redis itself.
func BenchmarkPaired_L2HitCancelable(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pairedL2Hit(b, ctx, benchClient(b))
}

// BenchmarkPaired_L2HitCancelableHandoff is BenchmarkPaired_L2HitCancelable
// on go-redis's default client, whose reads the store cannot bound: the
// cache hands the read to a worker goroutine so that the caller can leave
// when its ctx ends.
func BenchmarkPaired_L2HitCancelableHandoff(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pairedL2Hit(b, ctx, srv.Client(b))
}

// BenchmarkPaired_L2HitExpired is BenchmarkPaired_L2Hit with the L1 entry
// gone by its lifetime rather than deleted, the usual L1 miss: the read
// finds the expired entry, which otter still holds.
func BenchmarkPaired_L2HitExpired(b *testing.B) {
	pairedL2HitExpired(b, context.Background(), benchClient(b), nil)
}

// BenchmarkPaired_L2HitExpiredCancelable is BenchmarkPaired_L2HitExpired
// with a ctx that can end (see BenchmarkPaired_L2HitCancelable).
func BenchmarkPaired_L2HitExpiredCancelable(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pairedL2HitExpired(b, ctx, benchClient(b), nil)
}

// BenchmarkPaired_L2HitExpiredCancelableHandoff is
// BenchmarkPaired_L2HitExpiredCancelable on go-redis's default client (see
// BenchmarkPaired_L2HitCancelableHandoff).
func BenchmarkPaired_L2HitExpiredCancelableHandoff(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pairedL2HitExpired(b, ctx, srv.Client(b), nil)
}

// BenchmarkPaired_L2HitExpiredFloor is BenchmarkPaired_L2HitExpiredCancelable
// against the raw GET and decode followed by an otter Set of the value into
// an otter cache configured as L1 configures it (see newPageOtter): the
// least that an L1 miss which fills L1 can cost.
func BenchmarkPaired_L2HitExpiredFloor(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	oc, stop := newRecordOtter()
	defer stop()
	pairedL2HitExpired(b, ctx, benchClient(b), func(rdb *redis.Client, key string) error {
		p, err := rdb.Get(context.Background(), key).Bytes()
		if err != nil {
			return err
		}
		var r Record
		if err := (codec.Msgpack{}).Unmarshal(p, &r); err != nil {
			return err
		}
		oc.Set(key, r)
		return nil
	})
}

// BenchmarkPaired_GetToBuffer is go-redis's zero-copy read (GetToBuffer,
// into a buffer kept from one read to the next) and a decode, against
// BenchmarkRedis_GetDecode's GET and decode, of the same records: what
// reading into a buffer saves at the size of a record.
func BenchmarkPaired_GetToBuffer(b *testing.B) {
	const n = 200
	rdb := benchClient(b)
	rawKeys := storeRawRecords(b, n)
	buf := make([]byte, 4096)
	ctx := context.Background()
	b.ReportAllocs()
	paired(b, nil, func(i int) {
		p, err := rdb.GetToBuffer(ctx, rawKeys[i%n], buf).Result()
		if err != nil {
			b.Fatal(err)
		}
		var r Record
		if err := (codec.Msgpack{}).Unmarshal(buf[:p], &r); err != nil {
			b.Fatal(err)
		}
	}, func(i int) {
		if err := getRawRecord(rdb, rawKeys[i%n]); err != nil {
			b.Fatal(err)
		}
	})
}

func pairedL2Hit(b *testing.B, ctx context.Context, rdb *redis.Client) {
	const n = 1000
	c := newRedisBenchCache(b, rdb, n, 0)
	rawKeys := storeRawRecords(b, n)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
		c.DropLocal(keys[i])
	}
	b.ReportAllocs()
	// The L1 entry that a read stores is dropped before the next pair,
	// untimed: the delete is no part of an L2 hit.
	paired(b, func(i int) {
		if i > 0 {
			c.DropLocal(keys[(i-1)%n])
		}
	}, func(i int) {
		if _, err := c.GetOrCreate(ctx, keys[i%n], loadRecord); err != nil {
			b.Fatal(err)
		}
	}, func(i int) {
		if err := getRawRecord(rdb, rawKeys[i%n]); err != nil {
			b.Fatal(err)
		}
	})
	if s := c.Stats(); s.Load.Calls != 0 {
		b.Fatalf("%d loads: the benchmark measured misses, not L2 hits", s.Load.Calls)
	}
}

// pairedL2HitExpired times GetOrCreate after expiry against base (nil:
// getRawRecord) reading the same record as stored raw.
func pairedL2HitExpired(b *testing.B, ctx context.Context, rdb *redis.Client, base func(rdb *redis.Client, key string) error) {
	if base == nil {
		base = getRawRecord
	}
	// Otter removes an expired entry when its timer wheel reaches it, about
	// once a second; a read in between finds it. Few keys, so that a key is
	// read again soon after it expires, and a lifetime of 1ms, which the L1
	// clock (read every 10ms) passes by the time the key comes round again.
	const n = 200
	const ttl = time.Millisecond
	c := newRedisBenchCache(b, rdb, n, ttl)
	rawKeys := storeRawRecords(b, n)
	keys := make([]string, n)
	stored := make([]int64, n) // the L1 clock after key i was last stored
	for i := range keys {
		keys[i] = strconv.Itoa(i)
		stored[i] = c.LocalNow()
	}
	b.ReportAllocs()
	// Before each pair, untimed, wait until L1's clock has passed the
	// lifetime of the entry the pair will read.
	paired(b, func(i int) {
		if i > 0 {
			stored[(i-1)%n] = c.LocalNow()
		}
		for c.LocalNow() < stored[i%n]+int64(ttl) {
			time.Sleep(time.Millisecond)
		}
	}, func(i int) {
		if _, err := c.GetOrCreate(ctx, keys[i%n], loadRecord); err != nil {
			b.Fatal(err)
		}
	}, func(i int) {
		if err := base(rdb, rawKeys[i%n]); err != nil {
			b.Fatal(err)
		}
	})
	if s := c.Stats(); s.Load.Calls != 0 || s.L1.Hits != 0 {
		b.Fatalf("%d loads, %d L1 hits: the benchmark measured other than L2 hits after expiry", s.Load.Calls, s.L1.Hits)
	}
}

// BenchmarkPaired_ColdPage is BenchmarkGetOrCreateMany_ColdPage against
// BenchmarkRedis_MGetDecode, interleaved: a page of 50 keys that Redis
// holds and L1 does not, against a raw MGET of the same 50 envelopes and
// the decode of each.
func BenchmarkPaired_ColdPage(b *testing.B) {
	ps := storedPages(b)
	full := ps.stored()
	rdb := srv.Client(b)
	pairedColdPage(b, rdb, ps, nil, func(p int) {
		mgetPage(b, rdb, full[p%pageCount], make([]Item, pageLen))
	})
}

// pairedColdPage times cold pages (see coldCache) against base. Every
// pageCount pages, untimed, the cache is renewed, and so is what base reads
// into with renewBase if not nil.
func pairedColdPage(b *testing.B, rdb redis.UniversalClient, ps pageSet, renewBase func(), base func(p int)) {
	cc := newColdCache(b, rdb, ps.ns)
	defer cc.close()
	b.ReportAllocs()
	paired(b, func(p int) {
		if cc.due(p) {
			cc.renew()
			if renewBase != nil {
				renewBase()
			}
		}
	}, func(p int) { cc.read(ps.pages[p%pageCount]) }, base)
}

// BenchmarkPaired_L1Hit is BenchmarkGetOrCreate_L1Hit against
// BenchmarkOtterFair_GetIfPresent (otter with the features L1 uses: a
// weigher, a lifetime per entry, a coarse clock), in blocks of 1,000
// reads. Both report 0 allocations.
func BenchmarkPaired_L1Hit(b *testing.B) {
	keys := benchKeyNames()
	pairedL1Hit(b, keys, newBenchOtterFair(b, keys))
}

// BenchmarkPaired_L1HitBare is BenchmarkPaired_L1Hit against a bare otter
// cache (a count bound only): BenchmarkOtter_GetIfPresent.
func BenchmarkPaired_L1HitBare(b *testing.B) {
	keys := benchKeyNames()
	pairedL1Hit(b, keys, newBenchOtter(b, keys))
}

func pairedL1Hit(b *testing.B, keys []string, oc *otter.Cache[string, *User]) {
	c := newBenchCache(b, keys)
	ctx := context.Background()
	b.ReportAllocs()
	pairedBlocks(b, 1000, nil, func(i int) {
		if _, err := c.GetOrCreate(ctx, keys[i&(benchKeys-1)], loadBenchUser); err != nil {
			b.Fatal(err)
		}
	}, func(i int) {
		if _, ok := oc.GetIfPresent(keys[i&(benchKeys-1)]); !ok {
			b.Fatal("miss")
		}
	})
}

// BenchmarkPaired_ColdPageFloor is BenchmarkGetOrCreateMany_ColdPage
// against BenchmarkRedis_MGetDecodeOtterSet: the raw MGET and decode
// followed by an otter Set of each value into a fresh otter cache, the
// least that a page read filling a local tier can cost.
func BenchmarkPaired_ColdPageFloor(b *testing.B) {
	ps := storedPages(b)
	full := ps.stored()
	rdb := srv.Client(b)
	f := newPageFloor()
	defer func() { f.stop() }()
	pairedColdPage(b, rdb, ps, f.renew, func(p int) {
		f.read(b, rdb, ps.pages[p%pageCount], full[p%pageCount])
	})
}

// BenchmarkPaired_WarmPage is a page of 50 keys that L1 holds, read by 50
// GetOrCreate calls, against the same page read from Redis by 50
// sequential GETs and decodes: the speed-up of the README's warm-page row. The
// pages are read in turn from pageCount pages stored once.
func BenchmarkPaired_WarmPage(b *testing.B) {
	ps := storedPages(b)
	full := ps.stored()
	rdb := srv.Client(b)
	ctx := context.Background()
	c, err := newPageCache(rdb, ps.ns)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, page := range ps.pages {
		if m, err := c.GetOrCreateMany(ctx, page, noLoadMany); err != nil || len(m) != pageLen {
			b.Fatalf("warming: got %d values, err %v", len(m), err)
		}
	}
	b.ReportAllocs()
	paired(b, nil, func(p int) {
		for _, k := range ps.pages[p%pageCount] {
			if _, err := c.GetOrCreate(ctx, k, noLoad); err != nil {
				b.Fatal(err)
			}
		}
	}, func(p int) {
		for _, k := range full[p%pageCount] {
			s, err := rdb.Get(ctx, k).Bytes()
			if err != nil {
				b.Fatal(err)
			}
			var it Item
			decodeStored(b, s, &it)
		}
	})
	if s := c.Stats(); s.Load.Calls != 0 || s.L2.Hits != pageCount*pageLen {
		b.Fatalf("%d loads, %d L2 hits: want 0 and %d (the warm-up only)", s.Load.Calls, s.L2.Hits, pageCount*pageLen)
	}
}

func noLoad(context.Context, string) (Item, error) { return Item{}, errUnexpectedLoad }

// BenchmarkPaired_ClusterColdPage is BenchmarkCluster_GetOrCreateManyColdPage
// against BenchmarkCluster_PipelinedGetDecode, interleaved, on the 3-master
// cluster of HYBRID_REDIS_CLUSTER (skipped without one).
func BenchmarkPaired_ClusterColdPage(b *testing.B) {
	ps, rdb := clusterPages(b)
	full := ps.stored()
	pairedColdPage(b, rdb, ps, nil, func(p int) {
		pipelinedPage(b, rdb, full[p%pageCount], make([]Item, pageLen))
	})
}

// BenchmarkPaired_L1HitFloor times, against BenchmarkOtter_GetIfPresent's
// bare otter, two otter caches that L1 cannot do better than, in blocks of
// 1,000 reads as BenchmarkPaired_L1HitBare:
//
//   - expiry: otter holding what L1 holds (a four-word cell, see l1.cell)
//     with what L1 asks of it (a weigher, a lifetime per entry set on
//     writes, a coarse clock), its upkeep never run, so that a read finds
//     the read buffer full and records nothing: the least a read of otter
//     with expiry costs. L1 adds its hit counter (one atomic add) to it.
//   - half-full: the bare otter at half its bound, as a cache in use is.
//     The bare baseline holds a tenth of its bound, and below half otter
//     leaves its frequency sketch unmade and a read skips the read buffer;
//     with expiry a read never skips it.
func BenchmarkPaired_L1HitFloor(b *testing.B) {
	keys := benchKeyNames()
	b.Run("expiry", func(b *testing.B) {
		clock := otter.NewCoarseClock(10 * time.Millisecond)
		oc := otter.Must(&otter.Options[string, floorCell]{
			MaximumWeight: 64 << 20,
			Weigher:       func(_ string, c floorCell) uint32 { return uint32(c.meta) },
			ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, floorCell]) time.Duration {
				return time.Duration(e.Value.meta>>32) * time.Millisecond
			}),
			Clock:    clock,
			Executor: func(func()) {}, // upkeep never runs
		})
		defer func() {
			oc.StopAllGoroutines()
			clock.Stop()
		}()
		for _, k := range keys {
			oc.Set(k, floorCell{v: &User{ID: k}, meta: 100 | uint64(time.Hour/time.Millisecond)<<32})
		}
		pairedOtterHits(b, keys, oc, newBenchOtter(b, keys))
	})
	b.Run("half-full", func(b *testing.B) {
		oc := otter.Must(&otter.Options[string, *User]{MaximumSize: 2 * benchKeys})
		defer oc.StopAllGoroutines()
		for _, k := range keys {
			oc.Set(k, &User{ID: k, Name: "Ada"})
		}
		pairedOtterHits(b, keys, oc, newBenchOtter(b, keys))
	})
}

// floorCell has the shape of an L1 cell of a Cache[*User]: the item (a
// value, a flag, a stamp, a timing) and the word of weight and lifetime.
type floorCell struct {
	v      *User
	absent bool
	stored uint32
	t      *int64
	meta   uint64
}

func pairedOtterHits[V any](b *testing.B, keys []string, oc *otter.Cache[string, V], bare *otter.Cache[string, *User]) {
	b.ReportAllocs()
	pairedBlocks(b, 1000, nil, func(i int) {
		if _, ok := oc.GetIfPresent(keys[i&(benchKeys-1)]); !ok {
			b.Fatal("miss")
		}
	}, func(i int) {
		if _, ok := bare.GetIfPresent(keys[i&(benchKeys-1)]); !ok {
			b.Fatal("miss")
		}
	})
}
