package hybrid_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
	"github.com/redis/go-redis/v9"
)

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

// newRedisBenchCache returns a cache on the package's Redis whose shared
// tier holds n records, keys "0" .. n-1. localTTL is Options.LocalTTL (0:
// the default).
func newRedisBenchCache(b *testing.B, n int, localTTL time.Duration) *hybrid.Cache[Record] {
	b.Helper()
	rdb := srv.Client(b)
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
	c := newRedisBenchCache(b, n, 0)
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
	if s := c.Stats(); s.Loads != 0 {
		b.Fatalf("%d loads: the benchmark measured misses, not L2 hits", s.Loads)
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
	c := newRedisBenchCache(b, 0, 0)
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
			c := newRedisBenchCache(b, n, 0)
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
