// Package histogram is a small fixed-bucket histogram of durations that
// many goroutines record into without locks and without allocating.
//
// Its buckets grow by a factor of √2 from 10 µs to about 10.5 s: bucket 0
// counts durations up to 10 µs (negative ones included, see Record),
// bucket i (1 to Bounds) those in (Bound(i-1), Bound(i)], and the last
// bucket, Buckets-1, those above Bound(Bounds). A quantile read from the
// buckets is within one bucket of the true one (at most a factor √2, less
// with the interpolation Quantile does), and never above the largest
// duration recorded, which is kept exactly.
package histogram

import (
	"math"
	"sync/atomic"
	"time"
)

const (
	// Bounds is the number of bucket bounds; Bound(Bounds) is the largest.
	Bounds = 40
	// Buckets is the number of buckets: one per bound, one below the
	// first and one above the last.
	Buckets = Bounds + 2
	// first is the upper bound of bucket 0.
	first = 10 * time.Microsecond
)

// Bound returns the upper bound of bucket i, for i from 0 to Bounds:
// 10 µs times √2 to the power i, rounded to the nanosecond.
func Bound(i int) time.Duration {
	return time.Duration(math.Round(float64(first) * math.Exp2(float64(i)/2)))
}

// index returns the bucket of d.
func index(d time.Duration) int {
	// The smallest bound at or above d: a binary search of the table,
	// which costs a few compares where the logarithm and the bounds it
	// would check cost three calls of math's exponentials.
	lo, hi := 0, Bounds+1
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if d > bounds[m] {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// bounds holds Bound(i) for i in [0, Bounds].
var bounds = func() (b [Bounds + 1]time.Duration) {
	for i := range b {
		b[i] = Bound(i)
	}
	return b
}()

// Histogram counts durations by bucket. Its zero value is empty and ready
// to use; it must not be copied after first use.
type Histogram struct {
	counts   [Buckets]atomic.Uint64
	max      atomic.Int64
	negative atomic.Uint64
}

// Record counts d. A negative d is counted as 0 in bucket 0, and also
// counted apart (see Snapshot.Negative): for a delay between two clocks,
// it is the sign of a skew between them.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		h.negative.Add(1)
		d = 0
	}
	h.counts[index(d)].Add(1)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// Snapshot is a copy of a Histogram's counts at one moment.
type Snapshot struct {
	Counts   [Buckets]uint64 // per bucket (see the package comment)
	Count    uint64          // the sum of Counts
	Max      time.Duration   // the largest duration recorded, 0 if none
	Negative uint64          // negative durations, counted as 0 (see Record)
}

// Snapshot returns the histogram's counts. Records that run meanwhile
// may be seen in some of the fields and not yet in others.
func (h *Histogram) Snapshot() Snapshot {
	var s Snapshot
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	s.Max = time.Duration(h.max.Load())
	s.Negative = h.negative.Load()
	return s
}

// Quantile returns an estimate of the q-quantile (0 < q <= 1) of the
// durations recorded, 0 if none: it finds the bucket that holds it and
// interpolates within it, geometrically (linearly in bucket 0), never
// beyond Max. A q outside (0, 1] is taken as the nearest bound.
func (s *Snapshot) Quantile(q float64) time.Duration {
	if s.Count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(min(max(q, 0), 1) * float64(s.Count)))
	rank = max(rank, 1)
	var seen uint64
	for i, n := range s.Counts {
		if n == 0 || seen+n < rank {
			seen += n
			continue
		}
		frac := float64(rank-seen) / float64(n)
		var d time.Duration
		switch {
		case i == 0:
			d = time.Duration(frac * float64(first))
		case i > Bounds:
			d = s.Max
		default:
			lo, hi := float64(Bound(i-1)), float64(Bound(i))
			d = time.Duration(lo * math.Pow(hi/lo, frac))
		}
		return min(d, s.Max)
	}
	return s.Max
}
