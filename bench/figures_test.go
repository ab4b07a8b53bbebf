package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// The figures of hot-key precision and warm start (bench/RESULTS.md, "Hot keys and
// warm start"), measured as tests and recorded with
// go test -count=1 -v -run 'TestFigure' . in this module.

const figKeys = 10_000

func figNames() []string {
	names := make([]string, figKeys)
	for i := range names {
		names[i] = fmt.Sprintf("k%05d", i)
	}
	return names
}

// TestFigureHotKeyPrecision reads a Zipf (s=1.1) pattern of 1,000,000 reads
// over 10,000 keys, for 10 seeds, and reports HotKeys' top-10 and top-100
// precision against the true counts.
func TestFigureHotKeyPrecision(t *testing.T) {
	names := figNames()
	var p10s, p100s []float64
	for seed := range uint64(10) {
		c, err := hybrid.New[string](hybrid.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range names {
			c.Set(t.Context(), k, "v")
		}
		z := rand.NewZipf(rand.New(rand.NewPCG(seed, 7)), 1.1, 1, figKeys-1)
		perm := rand.New(rand.NewPCG(seed, 9)).Perm(figKeys)
		counts := make(map[string]int)
		for range 1_000_000 {
			k := names[perm[z.Uint64()]]
			c.Get(t.Context(), k)
			counts[k]++
		}
		byCount := slices.Clone(names)
		slices.SortFunc(byCount, func(a, b string) int { return counts[b] - counts[a] })
		prec := func(k int) float64 {
			top := map[string]bool{}
			for _, key := range byCount[:k] {
				top[key] = true
			}
			n := 0
			for _, h := range c.HotKeys(k) {
				if top[h.Key] {
					n++
				}
			}
			return float64(n) / float64(k)
		}
		start := time.Now()
		p10 := prec(10)
		took := time.Since(start)
		p100s = append(p100s, prec(100))
		p10s = append(p10s, p10)
		t.Logf("seed %d: top-10 precision %.2f, top-100 %.2f; HotKeys(10) over %d entries took %v", seed, p10, p100s[len(p100s)-1], c.Stats().L1.Entries, took)
		c.Close()
	}
	slices.Sort(p10s)
	slices.Sort(p100s)
	t.Logf("top-10 precision: min %.2f median %.2f; top-100: min %.2f median %.2f", p10s[0], p10s[len(p10s)/2], p100s[0], p100s[len(p100s)/2])
	if p10s[len(p10s)/2] < 0.9 {
		t.Errorf("median top-10 precision %.2f, want at least 0.9", p10s[len(p10s)/2])
	}
}

// TestFigureWarmStart stores 10,000 keys in Redis, then starts a cold and
// a warmed instance and sends each one second of Zipf-distributed reads
// (GetOrCreate, one goroutine): the warm-up's time, and the share of reads
// that missed L1 in that second.
func TestFigureWarmStart(t *testing.T) {
	s, err := startRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer s.kill()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer rdb.Close()
	names := figNames()
	newInst := func() (*hybrid.Cache[string], func()) {
		bus := invalidate.New(rdb, invalidate.Options{})
		c, err := hybrid.New[string](hybrid.Options{Namespace: "warm", Remote: l2.New(rdb, l2.Options{}), Bus: bus})
		if err != nil {
			t.Fatal(err)
		}
		return c, func() { c.Close(); bus.Close() }
	}
	w, done := newInst()
	items := make(map[string]string, figKeys)
	for _, k := range names {
		items[k] = "value of " + k
	}
	if err := w.SetMany(t.Context(), items); err != nil {
		t.Fatal(err)
	}
	done()
	load := func(context.Context, string) (string, error) { return "", fmt.Errorf("load called") }
	traffic := func(c *hybrid.Cache[string]) (reads uint64, missRate float64) {
		z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, figKeys-1)
		for end := time.Now().Add(time.Second); time.Now().Before(end); {
			if _, err := c.GetOrCreate(t.Context(), names[z.Uint64()], load); err != nil {
				t.Fatal(err)
			}
		}
		st := c.Stats()
		reads = st.L1.Hits + st.L1.Misses
		return reads, float64(st.L1.Misses) / float64(reads)
	}
	cold, done := newInst()
	reads, rate := traffic(cold)
	t.Logf("cold start: first second %d reads, %.2f%% missed L1", reads, 100*rate)
	done()
	warm, done := newInst()
	defer done()
	start := time.Now()
	n, err := warm.Warm(t.Context(), names)
	took := time.Since(start)
	if err != nil || n != figKeys {
		t.Fatalf("Warm = %d, %v", n, err)
	}
	wreads, wrate := traffic(warm)
	t.Logf("warm start: Warm of %d keys took %v (%d pages); first second %d reads, %.2f%% missed L1", n, took.Round(time.Millisecond), (figKeys+499)/500, wreads, 100*wrate)
	if wrate >= rate {
		t.Errorf("warm start missed %.4f of reads, cold %.4f", wrate, rate)
	}
}
