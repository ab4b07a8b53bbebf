package histogram

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestBucketsOfBounds(t *testing.T) {
	for i := 0; i <= Bounds; i++ {
		b := Bound(i)
		if got := index(b); got != i {
			t.Errorf("index(Bound(%d) = %v) = %d, want %d", i, b, got, i)
		}
		if got := index(b + 1); got != i+1 {
			t.Errorf("index(Bound(%d)+1ns) = %d, want %d", i, got, i+1)
		}
	}
	if got := index(0); got != 0 {
		t.Errorf("index(0) = %d, want 0", got)
	}
	if got := index(time.Hour); got != Buckets-1 {
		t.Errorf("index(1h) = %d, want %d", got, Buckets-1)
	}
	if Bound(0) != 10*time.Microsecond || Bound(Bounds) < 10*time.Second {
		t.Errorf("bounds run from %v to %v, want 10µs to at least 10s", Bound(0), Bound(Bounds))
	}
}

// TestQuantileWithinABucket compares the quantiles of random durations,
// spread over the whole range, with the exact ones.
func TestQuantileWithinABucket(t *testing.T) {
	var h Histogram
	r := rand.New(rand.NewPCG(1, 2))
	ds := make([]time.Duration, 20000)
	for i := range ds {
		// log-uniform from 1 µs to 20 s
		ds[i] = time.Duration(1e3 * math.Pow(2e7, r.Float64()))
		h.Record(ds[i])
	}
	slices.Sort(ds)
	s := h.Snapshot()
	if s.Count != uint64(len(ds)) || s.Max != ds[len(ds)-1] || s.Negative != 0 {
		t.Fatalf("count %d, max %v, negative %d; want %d, %v, 0", s.Count, s.Max, s.Negative, len(ds), ds[len(ds)-1])
	}
	for _, q := range []float64{0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 1} {
		want := ds[int(q*float64(len(ds)))-1]
		got := s.Quantile(q)
		lo, hi := float64(want)/1.4143, float64(want)*1.4143
		if want < 10*time.Microsecond {
			lo, hi = 0, float64(10*time.Microsecond)
		}
		if float64(got) < lo || float64(got) > hi {
			t.Errorf("Quantile(%v) = %v, want within a bucket of %v", q, got, want)
		}
	}
	if got := s.Quantile(1); got != s.Max {
		t.Errorf("Quantile(1) = %v, want Max %v", got, s.Max)
	}
}

func TestNegativeAndEmpty(t *testing.T) {
	var h Histogram
	s := h.Snapshot()
	if s.Quantile(0.5) != 0 || s.Count != 0 || s.Max != 0 {
		t.Fatalf("empty: p50 %v, count %d, max %v; want zeros", s.Quantile(0.5), s.Count, s.Max)
	}
	h.Record(-time.Second)
	h.Record(3 * time.Millisecond)
	s = h.Snapshot()
	if s.Negative != 1 || s.Counts[0] != 1 || s.Count != 2 || s.Max != 3*time.Millisecond {
		t.Fatalf("got negative %d, bucket 0 %d, count %d, max %v; want 1, 1, 2, 3ms", s.Negative, s.Counts[0], s.Count, s.Max)
	}
	if got := s.Quantile(0.5); got < 0 || got > 10*time.Microsecond {
		t.Errorf("p50 = %v, want the negative one, counted as 0 to 10µs", got)
	}
}

func TestRecordConcurrentNoAlloc(t *testing.T) {
	var h Histogram
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				h.Record(time.Duration(g*1000+i) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	s := h.Snapshot()
	if s.Count != 4000 || s.Max != 3999*time.Microsecond {
		t.Fatalf("count %d, max %v; want 4000, 3.999ms", s.Count, s.Max)
	}
	if a := testing.AllocsPerRun(100, func() { h.Record(time.Millisecond) }); a != 0 {
		t.Errorf("Record allocates %v times, want 0", a)
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	b.ReportAllocs()
	d := 300 * time.Microsecond
	for b.Loop() {
		h.Record(d)
	}
}
