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

// TestTraceHitRatio replays production traces through three caches in
// turn (request i to cache i%3), each bounded to a share of the bytes of
// the keys replayed, and compares l1's hit ratio with otter's at the same
// bound (10% and 30% of them; at 1% both vary from run to run by more
// than a point). Otter runs its upkeep on the caller here: with its default
// executor the upkeep runs on a goroutine that, in a replay this tight,
// lags behind the requests, which makes its figure depend on the
// scheduler (see bench/RESULTS.md). Before l1 ran the upkeep that hits ask
// for, it lost 1.5 to 2 points on orm-busy.
func TestTraceHitRatio(t *testing.T) {
	const caches = 3
	for _, tc := range []struct {
		trace string
		n     int
	}{
		{"orm-busy", 200_000},
		{"web07", 100_000},
	} {
		budgets := []uint64{10, 30}
		if raceEnabled {
			// keep the test under 20 s
			tc.n, budgets = min(tc.n, 100_000), budgets[:1]
		}
		keys := readTrace(t, tc.trace, tc.n)
		names := make([]string, len(keys))
		seen := make(map[int32]bool)
		var bytes uint64
		for i, k := range keys {
			names[i] = strconv.Itoa(int(k))
			if !seen[k] {
				seen[k] = true
				bytes += uint64(traceSize(k))
			}
		}
		for _, pct := range budgets {
			budget := bytes * pct / 100
			var ours, theirs int
			ls := make([]*l1.Cache[int32], caches)
			oc := make([]*otter.Cache[string, int32], caches)
			for i := range ls {
				c, err := l1.New[int32](l1.Options{MaxWeight: budget})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				ls[i] = c
				oc[i] = otter.Must(&otter.Options[string, int32]{
					MaximumWeight: budget,
					Weigher:       func(_ string, k int32) uint32 { return traceSize(k) },
					Executor:      func(fn func()) { fn() },
				})
			}
			for i, k := range keys {
				if _, ok := ls[i%caches].Get(names[i]); ok {
					ours++
				} else {
					ls[i%caches].Set(names[i], k, traceSize(k), time.Hour)
				}
				if _, ok := oc[i%caches].GetIfPresent(names[i]); ok {
					theirs++
				} else {
					oc[i%caches].Set(names[i], k)
				}
			}
			got := 100 * float64(ours) / float64(len(keys))
			want := 100 * float64(theirs) / float64(len(keys))
			t.Logf("%s, %d requests, %d%% of %d bytes: l1 %.2f%%, otter %.2f%%", tc.trace, len(keys), pct, bytes, got, want)
			if got < want-0.2 {
				t.Errorf("%s at %d%%: l1 hit ratio %.2f%%, want at least otter's %.2f%% - 0.2", tc.trace, pct, got, want)
			}
		}
	}
}
