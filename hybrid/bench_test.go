package hybrid_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
)

// The L1-hit benchmarks read benchKeys keys holding *User values, through
// the cache and through a bare otter cache, so the overhead of the cache
// reads as a ratio.
const benchKeys = 1 << 10

func benchKeyNames() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

func loadBenchUser(_ context.Context, key string) (*User, error) {
	return &User{ID: key, Name: "Ada"}, nil
}

func newBenchCache(b *testing.B, keys []string) *hybrid.Cache[*User] {
	b.Helper()
	c, err := hybrid.New[*User](hybrid.Options{LocalTTL: time.Hour, TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	for _, k := range keys {
		if _, err := c.GetOrCreate(ctx, k, loadBenchUser); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

func newBenchOtter(b *testing.B, keys []string) *otter.Cache[string, *User] {
	b.Helper()
	c := otter.Must(&otter.Options[string, *User]{MaximumSize: 10 * benchKeys})
	b.Cleanup(func() { c.StopAllGoroutines() })
	for _, k := range keys {
		c.Set(k, &User{ID: k, Name: "Ada"})
	}
	return c
}

func BenchmarkGetOrCreate_L1Hit(b *testing.B) {
	keys := benchKeyNames()
	c := newBenchCache(b, keys)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := c.GetOrCreate(ctx, keys[i&(benchKeys-1)], loadBenchUser); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkGetOrCreate_L1HitWithOptions(b *testing.B) {
	keys := benchKeyNames()
	c := newBenchCache(b, keys)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := c.GetOrCreate(ctx, keys[i&(benchKeys-1)], loadBenchUser, hybrid.WithTTL(time.Hour), hybrid.WithLocalTTL(time.Minute)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkGet_L1Hit(b *testing.B) {
	keys := benchKeyNames()
	c := newBenchCache(b, keys)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok, _ := c.Get(ctx, keys[i&(benchKeys-1)]); !ok {
			b.Fatal("miss")
		}
		i++
	}
}

// BenchmarkOtter_GetIfPresent is the raw baseline: a bare otter cache.
func BenchmarkOtter_GetIfPresent(b *testing.B) {
	keys := benchKeyNames()
	otterHits(b, newBenchOtter(b, keys), keys)
}

// otterHits reads keys, all present, from c in turn: the loop of the otter
// baselines.
func otterHits(b *testing.B, c *otter.Cache[string, *User], keys []string) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := c.GetIfPresent(keys[i&(benchKeys-1)]); !ok {
			b.Fatal("miss")
		}
		i++
	}
}

func BenchmarkGetOrCreate_L1HitParallel(b *testing.B) {
	keys := benchKeyNames()
	c := newBenchCache(b, keys)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := c.GetOrCreate(ctx, keys[i&(benchKeys-1)], loadBenchUser); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

func BenchmarkOtter_GetIfPresentParallel(b *testing.B) {
	keys := benchKeyNames()
	otterHitsParallel(b, newBenchOtter(b, keys), keys)
}

// otterHitsParallel is otterHits from GOMAXPROCS goroutines.
func otterHitsParallel(b *testing.B, c *otter.Cache[string, *User], keys []string) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := c.GetIfPresent(keys[i&(benchKeys-1)]); !ok {
				b.Error("miss")
				return
			}
			i++
		}
	})
}

// newBenchOtterFair is the fair baseline: a bare otter cache with what L1
// asks of otter (a weight bound with a weigher, a lifetime per entry set on
// writes, a coarse clock) holding the *User values themselves. The bare
// baseline above has none of these: with a count bound and a cache less
// than half full, otter skips its read buffer altogether, which no L1 with
// expiry can.
func newBenchOtterFair(b *testing.B, keys []string) *otter.Cache[string, *User] {
	b.Helper()
	clock := otter.NewCoarseClock(10 * time.Millisecond)
	c := otter.Must(&otter.Options[string, *User]{
		MaximumWeight: 64 << 20,
		Weigher:       func(key string, _ *User) uint32 { return uint32(len(key) + 64) },
		ExpiryCalculator: otter.ExpiryWritingFunc(func(otter.Entry[string, *User]) time.Duration {
			return time.Hour
		}),
		Clock: clock,
	})
	b.Cleanup(func() {
		c.StopAllGoroutines()
		clock.Stop()
	})
	for _, k := range keys {
		c.Set(k, &User{ID: k, Name: "Ada"})
	}
	return c
}

// BenchmarkOtterFair_GetIfPresent is the fair baseline of the L1-hit
// benchmarks: raw otter with the features L1 uses.
func BenchmarkOtterFair_GetIfPresent(b *testing.B) {
	keys := benchKeyNames()
	otterHits(b, newBenchOtterFair(b, keys), keys)
}

func BenchmarkOtterFair_GetIfPresentParallel(b *testing.B) {
	keys := benchKeyNames()
	otterHitsParallel(b, newBenchOtterFair(b, keys), keys)
}

// BenchmarkOtter_GetIfPresentFull is the bare baseline with its cache full
// (a count bound of benchKeys): from half full on, otter records reads in
// its read buffer for the eviction policy, as it does at any fill with
// expiry.
func BenchmarkOtter_GetIfPresentFull(b *testing.B) {
	keys := benchKeyNames()
	c := otter.Must(&otter.Options[string, *User]{MaximumSize: benchKeys})
	b.Cleanup(func() { c.StopAllGoroutines() })
	for _, k := range keys {
		c.Set(k, &User{ID: k, Name: "Ada"})
	}
	c.CleanUp()
	otterHits(b, c, keys)
}

// Record is the small value of the Redis-backed benchmarks: {int, two
// strings, float}, as in the published per-read measurements.
type Record struct {
	ID    int
	Name  string
	Email string
	Score float64
}

func loadRecord(_ context.Context, key string) (Record, error) {
	id, _ := strconv.Atoi(key)
	return Record{ID: id, Name: "Ada Lovelace", Email: "ada@example.com", Score: 97.5}, nil
}

// benchClient returns a client of the package's Redis with the options the
// README recommends for a cache, closed when b ends.
func benchClient(b *testing.B) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, DialTimeout: 250 * time.Millisecond, DialerRetries: 1, MaxRetries: 1})
	b.Cleanup(func() { c.Close() })
	return c
}

// newRedisBenchCache returns a cache on rdb (nil: benchClient) whose shared
// tier holds n records, keys "0" .. n-1. localTTL is Options.LocalTTL (0:
// the default).
func newRedisBenchCache(b *testing.B, rdb *redis.Client, n int, localTTL time.Duration) *hybrid.Cache[Record] {
	b.Helper()
	if rdb == nil {
		rdb = benchClient(b)
	}
	c, err := hybrid.New[Record](hybrid.Options{
		Namespace: redistest.Prefix(b),
		Remote:    l2.New(rdb, l2.Options{}),
		Codec:     codec.Msgpack{},
		TTL:       time.Hour,
		LocalTTL:  localTTL,
		Logger:    quiet,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	for i := range n {
		k := strconv.Itoa(i)
		r, _ := loadRecord(ctx, k)
		if err := c.Set(ctx, k, r); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

// BenchmarkGetOrCreate_L2Hit is an L1 miss served by Redis: GET, envelope
// and msgpack decode, fill bookkeeping. Compare with
// BenchmarkRedis_GetDecode, the same GET and decode done by hand.
func BenchmarkGetOrCreate_L2Hit(b *testing.B) {
	const n = 1000
	c := newRedisBenchCache(b, nil, n, 0)
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
		c.DropLocal(keys[i])
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keys[i%n]
		if _, err := c.GetOrCreate(ctx, k, loadRecord); err != nil {
			b.Fatal(err)
		}
		c.DropLocal(k)
		i++
	}
	if s := c.Stats(); s.Load.Calls != 0 {
		b.Fatalf("%d loads: the benchmark measured misses, not L2 hits", s.Load.Calls)
	}
}

// BenchmarkRedis_GetDecode is the baseline of BenchmarkGetOrCreate_L2Hit:
// raw go-redis GET of a msgpack record and its decode.
func BenchmarkRedis_GetDecode(b *testing.B) {
	const n = 1000
	rdb := srv.Client(b)
	keys := storeRawRecords(b, n)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := getRawRecord(rdb, keys[i%n]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// getRawRecord is the raw read the L2-hit benchmarks compare with: a GET of
// a record stored by storeRawRecords and its msgpack decode.
func getRawRecord(rdb *redis.Client, key string) error {
	p, err := rdb.Get(context.Background(), key).Bytes()
	if err != nil {
		return err
	}
	var r Record
	return codec.Msgpack{}.Unmarshal(p, &r)
}

// storeRawRecords stores n msgpack records in the package's Redis, as a
// raw GET baseline reads them (no envelope), and returns their keys.
func storeRawRecords(b *testing.B, n int) []string {
	b.Helper()
	rdb := srv.Client(b)
	ctx := context.Background()
	prefix := redistest.Prefix(b) + ":"
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
		r, _ := loadRecord(ctx, strconv.Itoa(i))
		p, err := codec.Msgpack{}.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		if err := rdb.Set(ctx, keys[i], p, time.Hour).Err(); err != nil {
			b.Fatal(err)
		}
	}
	return keys
}

// BenchmarkGetOrCreate_FullMiss is a key in neither tier: GET (miss), load,
// SET NX, L1 store.
func BenchmarkGetOrCreate_FullMiss(b *testing.B) {
	c := newRedisBenchCache(b, nil, 0, 0)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := c.GetOrCreate(ctx, strconv.Itoa(i), loadRecord); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkGetOrCreate_L2HitParallel is BenchmarkGetOrCreate_L2Hit from 8
// goroutines, with a ctx that cannot end and with one that can (whose read
// is handed to a worker goroutine): what the hand-off costs when the cores
// are busy. The time per op includes dropping the key from L1 before each
// read. Compare with BenchmarkRedis_GetDecodeParallel.
func BenchmarkGetOrCreate_L2HitParallel(b *testing.B) {
	for _, cancelable := range []bool{false, true} {
		name := "ctx=background"
		if cancelable {
			name = "ctx=cancelable"
		}
		b.Run(name, func(b *testing.B) {
			const n = 1000
			c := newRedisBenchCache(b, nil, n, 0)
			ctx := context.Background()
			if cancelable {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
			}
			keys := make([]string, n)
			for i := range keys {
				keys[i] = strconv.Itoa(i)
			}
			var next atomic.Int64
			b.SetParallelism(4) // 8 goroutines on 2 cores
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := keys[next.Add(1)%n]
					c.DropLocal(k)
					if _, err := c.GetOrCreate(ctx, k, loadRecord); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkRedis_GetDecodeParallel is BenchmarkRedis_GetDecode from 8
// goroutines.
func BenchmarkRedis_GetDecodeParallel(b *testing.B) {
	const n = 1000
	rdb := srv.Client(b)
	keys := storeRawRecords(b, n)
	var next atomic.Int64
	b.SetParallelism(4)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := getRawRecord(rdb, keys[next.Add(1)%n]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

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

// BenchmarkGetOrCreateMany_WarmPage reads a page of 50 keys that L1
// holds through GetOrCreateMany: 50 L1 hits and the result map.
func BenchmarkGetOrCreateMany_WarmPage(b *testing.B) {
	ps := storedPages(b)
	c, err := newPageCache(srv.Client(b), ps.ns)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, page := range ps.pages {
		if m, err := c.GetOrCreateMany(ctx, page, noLoadMany); err != nil || len(m) != pageLen {
			b.Fatalf("warming: got %d values, err %v", len(m), err)
		}
	}
	b.ReportAllocs()
	p := 0
	for b.Loop() {
		if m, err := c.GetOrCreateMany(ctx, ps.pages[p%pageCount], noLoadMany); err != nil || len(m) != pageLen {
			b.Fatalf("got %d values, err %v", len(m), err)
		}
		p++
	}
}

// readColdPages is the loop of the cold-page benchmarks: each page through
// GetOrCreateMany of a cache that has not read it (see coldCache). No page
// may load.
func readColdPages(b *testing.B, rdb redis.UniversalClient, ps pageSet) {
	cc := newColdCache(b, rdb, ps.ns)
	defer cc.close()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	p := 0
	for b.Loop() {
		if cc.due(p) {
			b.StopTimer()
			cc.renew()
			b.StartTimer()
		}
		cc.read(ps.pages[p%pageCount])
		p++
	}
	reportCPU(b, cpu0)
}

// coldCache is the cache of the cold-page benchmarks, replaced by a new
// one every pageCount pages so that none reads a key twice. It fails the
// benchmark if any of its caches loads.
type coldCache struct {
	b   *testing.B
	rdb redis.UniversalClient
	ns  string
	c   *hybrid.Cache[Item]
}

func newColdCache(b *testing.B, rdb redis.UniversalClient, ns string) *coldCache {
	cc := &coldCache{b: b, rdb: rdb, ns: ns}
	cc.renew()
	return cc
}

// due reports whether the cache must be renewed before page p.
func (cc *coldCache) due(p int) bool { return p%pageCount == 0 && p > 0 }

func (cc *coldCache) renew() {
	cc.close()
	c, err := newPageCache(cc.rdb, cc.ns)
	if err != nil {
		cc.b.Fatal(err)
	}
	cc.c = c
}

func (cc *coldCache) close() {
	if cc.c == nil {
		return
	}
	if n := cc.c.Stats().Load.Calls; n != 0 {
		cc.b.Fatalf("%d loads: the benchmark measured misses, not L2 hits", n)
	}
	cc.c.Close()
	cc.c = nil
}

// read reads one page through GetOrCreateMany.
func (cc *coldCache) read(page []string) {
	m, err := cc.c.GetOrCreateMany(context.Background(), page, noLoadMany)
	if err != nil || len(m) != len(page) {
		cc.b.Fatalf("got %d values, err %v; want %d, nil", len(m), err, len(page))
	}
}

// stored returns the pages' keys as Redis holds them: with the namespace.
func (ps pageSet) stored() [][]string {
	full := make([][]string, len(ps.pages))
	for p, page := range ps.pages {
		full[p] = make([]string, len(page))
		for i, k := range page {
			full[p][i] = ps.ns + ":" + k
		}
	}
	return full
}

// mgetPage is the raw read of a page: one MGET of keys (as stored) and the
// msgpack decode of each envelope's payload into items.
func mgetPage(b *testing.B, rdb redis.UniversalClient, keys []string, items []Item) {
	vals, err := rdb.MGet(context.Background(), keys...).Result()
	if err != nil {
		b.Fatal(err)
	}
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			b.Fatalf("key %d: got %T, want a string", i, v)
		}
		decodeStored(b, []byte(s), &items[i])
	}
}

// pipelinedPage is the raw read of a page on a cluster, where MGET cannot
// span slots: a go-redis pipeline of GETs (one round trip per node, in
// parallel) and the decode of each.
func pipelinedPage(b *testing.B, rdb redis.UniversalClient, keys []string, items []Item) {
	ctx := context.Background()
	cmds := make([]*redis.StringCmd, len(keys))
	pipe := rdb.Pipeline()
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	for i, cmd := range cmds {
		raw, err := cmd.Bytes()
		if err != nil {
			b.Fatal(err)
		}
		decodeStored(b, raw, &items[i])
	}
}

// decodeStored decodes a stored envelope's msgpack payload into it.
func decodeStored(b *testing.B, stored []byte, it *Item) {
	_, payload, err := envelope.Decode(stored)
	if err != nil {
		b.Fatal(err)
	}
	if err := (codec.Msgpack{}).Unmarshal(payload, it); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRedis_MGetDecode is the baseline of
// BenchmarkGetOrCreateMany_ColdPage: a raw go-redis MGET of the same 50
// stored envelopes and the msgpack decode of each payload.
func BenchmarkRedis_MGetDecode(b *testing.B) {
	rdb := srv.Client(b)
	readRawPages(b, storedPages(b).stored(), func(keys []string, items []Item) {
		mgetPage(b, rdb, keys, items)
	})
}

// readRawPages is the loop of the raw page baselines: read each page of
// full (keys as stored) into a new slice of Items.
func readRawPages(b *testing.B, full [][]string, read func(keys []string, items []Item)) {
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	p := 0
	for b.Loop() {
		read(full[p%pageCount], make([]Item, pageLen))
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

// newRecordOtter is newPageOtter for Records, with otter's upkeep run on
// the goroutine of the write that asks for it, as L1 runs it (otter's
// default starts a goroutine for each).
func newRecordOtter() (*otter.Cache[string, Record], func()) {
	clock := otter.NewCoarseClock(10 * time.Millisecond)
	c := otter.Must(&otter.Options[string, Record]{
		MaximumWeight: 64 << 20,
		Weigher:       func(key string, _ Record) uint32 { return uint32(len(key) + 256) },
		ExpiryCalculator: otter.ExpiryWritingFunc(func(otter.Entry[string, Record]) time.Duration {
			return time.Hour
		}),
		Clock:    clock,
		Executor: func(fn func()) { fn() },
	})
	return c, func() {
		c.StopAllGoroutines()
		clock.Stop()
	}
}

// pageFloor is the least a page read that fills an otter L1 can cost:
// mgetPage, then an otter Set of each value, into a fresh otter cache
// every pageCount pages, as coldCache does.
type pageFloor struct {
	oc   *otter.Cache[string, Item]
	stop func()
}

func newPageFloor() *pageFloor {
	f := &pageFloor{}
	f.oc, f.stop = newPageOtter()
	return f
}

func (f *pageFloor) renew() {
	f.stop()
	f.oc, f.stop = newPageOtter()
}

func (f *pageFloor) read(b *testing.B, rdb redis.UniversalClient, keys, stored []string) {
	items := make([]Item, len(keys))
	mgetPage(b, rdb, stored, items)
	for i, k := range keys {
		f.oc.Set(k, items[i])
	}
}

// BenchmarkRedis_MGetDecodeOtterSet is BenchmarkRedis_MGetDecode followed
// by an otter Set of each value (see pageFloor).
func BenchmarkRedis_MGetDecodeOtterSet(b *testing.B) {
	ps := storedPages(b)
	full := ps.stored()
	rdb := srv.Client(b)
	f := newPageFloor()
	defer func() { f.stop() }()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	p := 0
	for b.Loop() {
		if p%pageCount == 0 && p > 0 {
			b.StopTimer()
			f.renew()
			b.StartTimer()
		}
		f.read(b, rdb, ps.pages[p%pageCount], full[p%pageCount])
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
// pipeline (see pipelinedPage).
func BenchmarkCluster_PipelinedGetDecode(b *testing.B) {
	ps, rdb := clusterPages(b)
	readRawPages(b, ps.stored(), func(keys []string, items []Item) {
		pipelinedPage(b, rdb, keys, items)
	})
}
