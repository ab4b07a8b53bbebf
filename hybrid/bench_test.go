package hybrid_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/maypok86/otter/v2"
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
