package l1_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/l1"
	"github.com/maypok86/otter/v2"
	"github.com/ulikunitz/xz"
)

// readTrace returns the first n requests of a trace in bench/traces (see
// its README for the format and the credit), or skips the test where the
// traces are not at hand (bench/ is not part of the module's download).
func readTrace(t *testing.T, name string, n int) []int32 {
	t.Helper()
	f, err := os.Open("../bench/traces/" + name + ".trace.xz")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no trace %s: %v", name, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := xz.NewReader(bufio.NewReader(f))
	if err != nil {
		t.Fatalf("trace %s: %v", name, err)
	}
	br := bufio.NewReader(r)
	keys := make([]int32, 0, n)
	var b [4]byte
	for len(keys) < n {
		if _, err := io.ReadFull(br, b[:]); err != nil {
			if err == io.EOF {
				break
			}
			t.Fatalf("trace %s: %v", name, err)
		}
		keys = append(keys, int32(binary.BigEndian.Uint32(b[:])))
	}
	return keys
}

// traceSize is the value size of a key, as bench/trace.go derives it: 64 B
// to 16 KiB, about evenly spread over the powers of two.
func traceSize(key int32) uint32 {
	h := uint64(uint32(key)) + 0x9e3779b97f4a7c15
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	h ^= h >> 31
	s := uint32(64) << (h & 7)
	return s + uint32(h>>8)%s
}

// traceKeys holds the traces read so far, by name and length.
var traceKeys = map[string][]int32{}

func cachedTrace(t *testing.T, name string, n int) []int32 {
	t.Helper()
	id := name + "/" + strconv.Itoa(n)
	if keys, ok := traceKeys[id]; ok {
		return keys
	}
	keys := readTrace(t, name, n)
	traceKeys[id] = keys
	return keys
}

// traceBytes returns the sum of the value sizes of the distinct keys.
func traceBytes(keys []int32) uint64 {
	seen := make(map[int32]bool)
	var bytes uint64
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			bytes += uint64(traceSize(k))
		}
	}
	return bytes
}

// replayL1 replays keys through caches l1 caches in turn (request i to
// cache i%caches), a miss storing the key, and returns the hit ratio in
// percent.
func replayL1(t *testing.T, keys []int32, names []string, caches int, budget uint64) float64 {
	t.Helper()
	cs := make([]*l1.Cache[int32], caches)
	for i := range cs {
		c, err := l1.New[int32](l1.Options{MaxWeight: budget})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
	}
	hits := 0
	for i, k := range keys {
		c := cs[i%caches]
		if _, ok := c.Get(names[i]); ok {
			hits++
		} else {
			c.Set(names[i], k, traceSize(k), time.Hour)
		}
	}
	return 100 * float64(hits) / float64(len(keys))
}

// replayOtter is replayL1 on otter configured as l1 configures it (a
// weigher, a lifetime per entry), with its upkeep run by the caller.
func replayOtter(keys []int32, names []string, caches int, budget uint64) float64 {
	cs := make([]*otter.Cache[string, int32], caches)
	for i := range cs {
		cs[i] = otter.Must(&otter.Options[string, int32]{
			MaximumWeight:    budget,
			Weigher:          func(_ string, k int32) uint32 { return traceSize(k) },
			ExpiryCalculator: otter.ExpiryWriting[string, int32](time.Hour),
			Executor:         func(fn func()) { fn() },
		})
	}
	hits := 0
	for i, k := range keys {
		c := cs[i%caches]
		if _, ok := c.GetIfPresent(names[i]); ok {
			hits++
		} else {
			c.Set(names[i], k)
		}
	}
	return 100 * float64(hits) / float64(len(keys))
}

// TestTraceHitRatio replays prefixes of production traces through one and
// three caches, each bounded to 10% and 30% of the bytes of the keys
// replayed, and compares l1's hit ratio with otter's at the same bound.
// Otter runs its upkeep on the caller: with its default executor the
// upkeep runs on goroutines that, in a replay this tight, lag behind the
// requests, which makes its figure depend on the scheduler (see
// bench/RESULTS.md).
//
// Both vary from run to run (otter seeds its hashes at random): by up to
// 0.4 points at these budgets, 1 to 3 at 1% of the bytes, which the test
// leaves out. So each figure is the mean of three runs, and the test fails
// if l1 is more than 0.2 points below otter over all the replays together,
// or 0.75 below in any one. Before hits ran the upkeep that otter asks for
// (see hitUpkeep), l1 was 1 to 3.4 points below on orm-busy with one
// cache, 1 with three, 0.86 over all. Under the race detector, which slows
// a replay about 25 times, one replay, twice, and a bound of 1 point (it
// was 2.3 points below).
func TestTraceHitRatio(t *testing.T) {
	type replay struct {
		trace  string
		n      int
		caches int
		pct    uint64
	}
	replays := []replay{
		{"orm-busy", 200_000, 1, 10}, {"orm-busy", 200_000, 1, 30},
		{"orm-busy", 200_000, 3, 10}, {"orm-busy", 200_000, 3, 30},
		{"web07", 100_000, 1, 10}, {"web07", 100_000, 1, 30},
		{"web07", 100_000, 3, 10}, {"web07", 100_000, 3, 30},
	}
	runs, each, all := 3, 0.75, 0.2
	if raceEnabled {
		replays = []replay{{"orm-busy", 100_000, 1, 30}}
		runs, each, all = 2, 1, 1
	}
	var sum float64
	for _, r := range replays {
		keys := cachedTrace(t, r.trace, r.n)
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = strconv.Itoa(int(k))
		}
		bytes := traceBytes(keys)
		budget := bytes * r.pct / 100
		var ours, theirs float64
		for range runs {
			ours += replayL1(t, keys, names, r.caches, budget) / float64(runs)
			theirs += replayOtter(keys, names, r.caches, budget) / float64(runs)
		}
		t.Logf("%s, %d requests, %d caches, %d%% of %d bytes: l1 %.2f%%, otter %.2f%%", r.trace, len(keys), r.caches, r.pct, bytes, ours, theirs)
		if ours < theirs-each {
			t.Errorf("%s, %d caches, %d%%: l1 hit ratio %.2f%%, want at least otter's %.2f%% - %.2f", r.trace, r.caches, r.pct, ours, theirs, each)
		}
		sum += ours - theirs
	}
	if d := sum / float64(len(replays)); d < -all {
		t.Errorf("over all replays, l1's hit ratio is %.2f points below otter's, want at most %.2f", -d, all)
	}
}
