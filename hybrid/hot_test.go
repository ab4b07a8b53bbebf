package hybrid_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hybridcache/hybridcache/hybrid"
)

// zipfReads stores keys k00000..k09999 in c, reads n of them drawn from a
// Zipf distribution (s=1.1) with seed, and returns how often each key was
// read.
func zipfReads(t testing.TB, c *hybrid.Cache[string], seed uint64, n int) map[string]int {
	t.Helper()
	const keys = 10_000
	for i := range keys {
		set(t, c, fmt.Sprintf("k%05d", i), "v")
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(seed, seed^0x5eed)), 1.1, 1, keys-1)
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("k%05d", i)
	}
	// The rank of a key is shuffled, so that key order says nothing.
	perm := rand.New(rand.NewPCG(seed+1, seed)).Perm(keys)
	counts := make(map[string]int)
	for range n {
		key := names[perm[z.Uint64()]]
		if _, ok := getString(t, c, key); !ok {
			t.Fatalf("Get(%q): miss", key)
		}
		counts[key]++
	}
	return counts
}

// precision is the share of the true top k of counts that hot holds.
func precision(counts map[string]int, hot []hybrid.HotKey, k int) float64 {
	all := make([]string, 0, len(counts))
	for key := range counts {
		all = append(all, key)
	}
	slices.SortFunc(all, func(a, b string) int { return counts[b] - counts[a] })
	top := make(map[string]bool, k)
	for _, key := range all[:min(k, len(all))] {
		top[key] = true
	}
	n := 0
	for _, h := range hot[:min(k, len(hot))] {
		if top[h.Key] {
			n++
		}
	}
	return float64(n) / float64(k)
}

// TestHotKeysZipf reads a Zipf-skewed pattern and checks that HotKeys(10)
// returns the true 10 most-read keys, for two seeds, allowing one miss:
// the sketch samples one hit in 16, and with a million reads the 10th and
// 11th keys differ by about 75 samples against a spread of about 40 for
// their difference, so one swap in some dozens of runs is expected
// (bench/RESULTS.md has the precision over 20 seeds).
func TestHotKeysZipf(t *testing.T) {
	for seed := range uint64(2) {
		c := newTestCache[string](t, hybrid.Options{LocalMaxBytes: 64 << 20})
		counts := zipfReads(t, c, seed, 1_000_000)
		hot := c.HotKeys(10)
		if len(hot) != 10 {
			t.Fatalf("seed %d: HotKeys(10) returned %d keys", seed, len(hot))
		}
		p10 := precision(counts, hot, 10)
		p100 := precision(counts, c.HotKeys(100), 100)
		t.Logf("seed %d: top-10 precision %.2f, top-100 precision %.2f; first %q reads %d (true %d)", seed, p10, p100, hot[0].Key, hot[0].Reads, counts[hot[0].Key])
		if p10 < 0.9 {
			t.Errorf("seed %d: top-10 precision %.2f, want at least 0.9 (got %v)", seed, p10, hot)
		}
		for i := 1; i < len(hot); i++ {
			if hot[i].Reads > hot[i-1].Reads {
				t.Errorf("seed %d: HotKeys not in order: %v", seed, hot)
			}
		}
	}
}

func TestHotKeysBadInput(t *testing.T) {
	c := newTestCache[string](t, hybrid.Options{})
	if got := c.HotKeys(5); got != nil {
		t.Errorf("HotKeys(5) of an empty cache = %v, want nil", got)
	}
	set(t, c, "a", "v")
	for range 1000 {
		getString(t, c, "a")
	}
	for _, n := range []int{0, -1} {
		if got := c.HotKeys(n); got != nil {
			t.Errorf("HotKeys(%d) = %v, want nil", n, got)
		}
	}
	if got := c.HotKeys(5); len(got) != 1 || got[0].Key != "a" || got[0].Reads == 0 {
		t.Errorf("HotKeys(5) after 1000 reads of a = %v, want [a]", got)
	}
}
