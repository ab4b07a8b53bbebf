package hybrid_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
	"github.com/maypok86/otter/v2"
	"github.com/redis/go-redis/v9"
)

// Item is the value of the page benchmarks: a catalogue row whose msgpack
// form is about 200 bytes.
type Item struct {
	ID          int64
	SKU         string
	Name        string
	Description string
	Category    string
	Price       float64
	Stock       int
	Active      bool
	Updated     int64
}

func newItem(id int) Item {
	return Item{
		ID:          int64(id),
		SKU:         "SKU-" + strconv.Itoa(1_000_000+id),
		Name:        "Analytical Engine, model " + strconv.Itoa(id),
		Description: "A general-purpose mechanical computer with integrated memory.",
		Category:    "machines",
		Price:       1843.25,
		Stock:       12,
		Active:      true,
		Updated:     1_700_000_000 + int64(id),
	}
}

const (
	pageLen   = 50  // keys per page
	pageCount = 128 // pages stored in Redis, read in turn
)

// pageSet is what the page benchmarks read: pageCount pages of pageLen
// Items stored in the package's Redis under one namespace.
type pageSet struct {
	ns    string
	pages [][]string
}

var (
	pagesOnce sync.Once
	pages     pageSet
	pagesErr  error
)

// storedPages stores the pages once per package run.
func storedPages(b *testing.B) pageSet {
	b.Helper()
	pagesOnce.Do(func() {
		pages.ns = redistest.Prefix(b)
		pages.pages = make([][]string, pageCount)
		for p := range pages.pages {
			pages.pages[p] = make([]string, pageLen)
			for i := range pages.pages[p] {
				pages.pages[p][i] = "item:" + strconv.Itoa(p*pageLen+i)
			}
		}
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer rdb.Close()
		var c *hybrid.Cache[Item]
		if c, pagesErr = newPageCache(rdb, pages.ns); pagesErr != nil {
			return
		}
		defer c.Close()
		ctx := context.Background()
		for p, page := range pages.pages {
			for i, k := range page {
				if pagesErr = c.Set(ctx, k, newItem(p*pageLen+i)); pagesErr != nil {
					return
				}
			}
		}
	})
	if pagesErr != nil {
		b.Fatal(pagesErr)
	}
	return pages
}

// newPageCache returns a msgpack cache of Items on rdb, with an empty L1.
func newPageCache(rdb redis.UniversalClient, ns string) (*hybrid.Cache[Item], error) {
	return hybrid.New[Item](hybrid.Options{
		Namespace: ns,
		Remote:    l2.New(rdb, l2.Options{}),
		Codec:     codec.Msgpack{},
		TTL:       time.Hour,
		Logger:    quiet,
	})
}

// cpuTime returns the CPU time the process has used, all goroutines
// included (otter's maintenance, the garbage collector, go-redis).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per op since start as cpu-ns/op: on a
// shared machine it varies less than the wall time, which waits for
// whatever else runs. It counts untimed work too, such as replacing a
// cache between pages.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

var errUnexpectedLoad = errors.New("load called: the page should come from Redis")

func noLoadMany(context.Context, []string) (map[string]Item, error) {
	return nil, errUnexpectedLoad
}

// BenchmarkGetOrCreateMany_ColdPage reads a page of 50 keys that Redis
// holds and L1 does not: one MGET, 50 envelope and msgpack decodes, 50 L1
// stores, the single-flight and fence bookkeeping. Compare with
// BenchmarkRedis_MGetDecode. As in a freshly started instance, no key is
// read twice by one cache: after pageCount pages the cache is replaced by
// a new one, untimed.
func BenchmarkGetOrCreateMany_ColdPage(b *testing.B) {
	readColdPages(b, srv.Client(b), storedPages(b))
}

// readColdPages is the loop of the cold-page benchmarks: each page through
// GetOrCreateMany of a cache that has not read it, a new cache every
// pageCount pages (untimed). No page may load.
func readColdPages(b *testing.B, rdb redis.UniversalClient, ps pageSet) {
	ctx := context.Background()
	c, err := newPageCache(rdb, ps.ns)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { c.Close() }()
	var loads uint64
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	p := 0
	for b.Loop() {
		if p%pageCount == 0 && p > 0 {
			b.StopTimer()
			loads += c.Stats().Loads
			c.Close()
			if c, err = newPageCache(rdb, ps.ns); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		m, err := c.GetOrCreateMany(ctx, ps.pages[p%pageCount], noLoadMany)
		if err != nil || len(m) != pageLen {
			b.Fatalf("got %d values, err %v; want %d, nil", len(m), err, pageLen)
		}
		p++
	}
	reportCPU(b, cpu0)
	if loads += c.Stats().Loads; loads != 0 {
		b.Fatalf("%d loads: the benchmark measured misses, not L2 hits", loads)
	}
}

// BenchmarkRedis_MGetDecode is the baseline of
// BenchmarkGetOrCreateMany_ColdPage: a raw go-redis MGET of the same 50
// stored envelopes and the msgpack decode of each payload.
func BenchmarkRedis_MGetDecode(b *testing.B) {
	ps := storedPages(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	full := make([][]string, len(ps.pages))
	for p, page := range ps.pages {
		full[p] = make([]string, len(page))
		for i, k := range page {
			full[p][i] = ps.ns + ":" + k
		}
	}
	mp := codec.Msgpack{}
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	p := 0
	for b.Loop() {
		vals, err := rdb.MGet(ctx, full[p%pageCount]...).Result()
		if err != nil {
			b.Fatal(err)
		}
		items := make([]Item, len(vals))
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				b.Fatalf("key %d: got %T, want a string", i, v)
			}
			_, payload, err := envelope.Decode([]byte(s))
			if err != nil {
				b.Fatal(err)
			}
			if err := mp.Unmarshal(payload, &items[i]); err != nil {
				b.Fatal(err)
			}
		}
		p++
	}
	reportCPU(b, cpu0)
}

// newPageOtter returns a bare otter cache configured as L1 configures it:
// bounded by weight, a lifetime per entry set on writes, a coarse clock.
func newPageOtter() (*otter.Cache[string, Item], func()) {
	clock := otter.NewCoarseClock(10 * time.Millisecond)
	c := otter.Must(&otter.Options[string, Item]{
		MaximumWeight: 64 << 20,
		Weigher:       func(key string, _ Item) uint32 { return uint32(len(key) + 256) },
		ExpiryCalculator: otter.ExpiryWritingFunc(func(otter.Entry[string, Item]) time.Duration {
			return time.Hour
		}),
		Clock: clock,
	})
	return c, func() {
		c.StopAllGoroutines()
		clock.Stop()
	}
}

// BenchmarkRedis_MGetDecodeOtterSet is BenchmarkRedis_MGetDecode followed
// by an otter Set of each value, into a fresh cache every pageCount pages
// as in BenchmarkGetOrCreateMany_ColdPage: the least a page read that
// fills a local tier can cost.
func BenchmarkRedis_MGetDecodeOtterSet(b *testing.B) {
	ps := storedPages(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	full := make([][]string, len(ps.pages))
	for p, page := range ps.pages {
		full[p] = make([]string, len(page))
		for i, k := range page {
			full[p][i] = ps.ns + ":" + k
		}
	}
	mp := codec.Msgpack{}
	oc, stop := newPageOtter()
	defer func() { stop() }()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	p := 0
	for b.Loop() {
		if p%pageCount == 0 && p > 0 {
			b.StopTimer()
			stop()
			oc, stop = newPageOtter()
			b.StartTimer()
		}
		vals, err := rdb.MGet(ctx, full[p%pageCount]...).Result()
		if err != nil {
			b.Fatal(err)
		}
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				b.Fatalf("key %d: got %T, want a string", i, v)
			}
			_, payload, err := envelope.Decode([]byte(s))
			if err != nil {
				b.Fatal(err)
			}
			var it Item
			if err := mp.Unmarshal(payload, &it); err != nil {
				b.Fatal(err)
			}
			oc.Set(ps.pages[p%pageCount][i], it)
		}
		p++
	}
	reportCPU(b, cpu0)
}

// clusterPages stores pageCount pages of Items on the Redis Cluster of
// HYBRID_REDIS_CLUSTER (the benchmark skips without one) and returns them
// with a client of the cluster.
func clusterPages(b *testing.B) (pageSet, *redis.ClusterClient) {
	b.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.ClusterAddrs(b)})
	b.Cleanup(func() { rdb.Close() })
	ps := pageSet{ns: redistest.Prefix(b), pages: make([][]string, pageCount)}
	c, err := newPageCache(rdb, ps.ns)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for p := range ps.pages {
		ps.pages[p] = make([]string, pageLen)
		for i := range ps.pages[p] {
			k := "item:" + strconv.Itoa(p*pageLen+i)
			ps.pages[p][i] = k
			if err := c.Set(ctx, k, newItem(p*pageLen+i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	return ps, rdb
}

// BenchmarkCluster_GetOrCreateManyColdPage is
// BenchmarkGetOrCreateMany_ColdPage on a 3-master Redis Cluster, where the
// page's keys live on every node: one MGET per hash slot, sent to the
// nodes in parallel. Compare with BenchmarkCluster_PipelinedGetDecode.
func BenchmarkCluster_GetOrCreateManyColdPage(b *testing.B) {
	ps, rdb := clusterPages(b)
	readColdPages(b, rdb, ps)
}

// BenchmarkCluster_PipelinedGetDecode is the raw baseline on the cluster:
// MGET cannot span slots there, so the page is 50 GETs in one go-redis
// pipeline (one round trip per node, in parallel) and a decode of each.
func BenchmarkCluster_PipelinedGetDecode(b *testing.B) {
	ps, rdb := clusterPages(b)
	ctx := context.Background()
	mp := codec.Msgpack{}
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	p := 0
	for b.Loop() {
		page := ps.pages[p%pageCount]
		cmds := make([]*redis.StringCmd, len(page))
		pipe := rdb.Pipeline()
		for i, k := range page {
			cmds[i] = pipe.Get(ctx, ps.ns+":"+k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		items := make([]Item, len(page))
		for i, cmd := range cmds {
			raw, err := cmd.Bytes()
			if err != nil {
				b.Fatal(err)
			}
			_, payload, err := envelope.Decode(raw)
			if err != nil {
				b.Fatal(err)
			}
			if err := mp.Unmarshal(payload, &items[i]); err != nil {
				b.Fatal(err)
			}
		}
		p++
	}
	reportCPU(b, cpu0)
}
