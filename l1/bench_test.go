package l1_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/l1"
	"github.com/maypok86/otter/v2"
)

// benchItem has the shape of the hybrid cache's entries: a pointer, a flag
// and a pointer.
type benchItem struct {
	v      *string
	absent bool
	t      *int64
}

const benchKeys = 1 << 10

func benchKeyNames() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

func newBenchL1(b *testing.B, keys []string) *l1.Cache[benchItem] {
	b.Helper()
	c, err := l1.New[benchItem](l1.Options{MaxWeight: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	for _, k := range keys {
		c.Set(k, benchItem{v: &k}, 100, time.Hour)
	}
	return c
}

// newBenchOtter is the fair baseline: a bare otter cache with what l1 asks
// of it (a weigher, an expiry per entry, a coarse clock), holding the values
// themselves.
func newBenchOtter(b *testing.B, keys []string) *otter.Cache[string, benchItem] {
	b.Helper()
	clock := otter.NewCoarseClock(10 * time.Millisecond)
	c := otter.Must(&otter.Options[string, benchItem]{
		MaximumWeight:    64 << 20,
		Weigher:          func(string, benchItem) uint32 { return 100 },
		ExpiryCalculator: otter.ExpiryWriting[string, benchItem](time.Hour),
		Clock:            clock,
	})
	b.Cleanup(func() { c.StopAllGoroutines(); clock.Stop() })
	for _, k := range keys {
		c.Set(k, benchItem{v: &k})
	}
	return c
}

func BenchmarkGet(b *testing.B) {
	keys := benchKeyNames()
	c := newBenchL1(b, keys)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := c.Get(keys[i&(benchKeys-1)]); !ok {
			b.Fatal("miss")
		}
		i++
	}
}

func BenchmarkOtterFair_GetIfPresent(b *testing.B) {
	keys := benchKeyNames()
	c := newBenchOtter(b, keys)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := c.GetIfPresent(keys[i&(benchKeys-1)]); !ok {
			b.Fatal("miss")
		}
		i++
	}
}

func BenchmarkGetParallel(b *testing.B) {
	keys := benchKeyNames()
	c := newBenchL1(b, keys)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := c.Get(keys[i&(benchKeys-1)]); !ok {
				b.Error("miss")
				return
			}
			i++
		}
	})
}

func BenchmarkOtterFair_GetIfPresentParallel(b *testing.B) {
	keys := benchKeyNames()
	c := newBenchOtter(b, keys)
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

// BenchmarkSet overwrites present keys.
func BenchmarkSet(b *testing.B) {
	keys := benchKeyNames()
	c := newBenchL1(b, keys)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keys[i&(benchKeys-1)]
		c.Set(k, benchItem{v: &keys[0]}, 100, time.Hour)
		i++
	}
}

func BenchmarkSetIf(b *testing.B) {
	keys := benchKeyNames()
	c := newBenchL1(b, keys)
	yes := func() bool { return true }
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keys[i&(benchKeys-1)]
		c.SetIf(k, benchItem{v: &keys[0]}, 100, time.Hour, yes)
		i++
	}
}

// BenchmarkSetDelete creates an entry and deletes it.
func BenchmarkSetDelete(b *testing.B) {
	keys := benchKeyNames()
	c := newBenchL1(b, nil)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keys[i&(benchKeys-1)]
		c.Set(k, benchItem{v: &keys[0]}, 100, time.Hour)
		c.Delete(k)
		i++
	}
}

// BenchmarkGetWriting is BenchmarkGet with one read in 64 followed by a
// write of its key (as a fill or an invalidation would): the hits of a
// cache that writes run the upkeep otter asks for (see hitUpkeep), those of
// BenchmarkGet, whose cache has stopped writing, leave it to the timer.
// ns/op is per read.
func BenchmarkGetWriting(b *testing.B) {
	keys := benchKeyNames()
	c := newBenchL1(b, keys)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keys[i&(benchKeys-1)]
		if _, ok := c.Get(k); !ok {
			b.Fatal("miss")
		}
		if i&63 == 0 {
			c.Set(k, benchItem{v: &keys[0]}, 100, time.Hour)
		}
		i++
	}
}

// BenchmarkOtterFair_GetIfPresentWriting is BenchmarkGetWriting on the fair
// baseline, whose upkeep runs on goroutines of its own.
func BenchmarkOtterFair_GetIfPresentWriting(b *testing.B) {
	keys := benchKeyNames()
	c := newBenchOtter(b, keys)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keys[i&(benchKeys-1)]
		if _, ok := c.GetIfPresent(k); !ok {
			b.Fatal("miss")
		}
		if i&63 == 0 {
			c.Set(k, benchItem{v: &keys[0]})
		}
		i++
	}
}
