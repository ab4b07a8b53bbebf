package hybrid

import (
	"math/rand/v2"
	"time"

	"github.com/hybridcache/hybridcache/internal/histogram"
	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds the histograms of how current what the cache serves is:
// the propagation lag of other instances' messages, and the age of the
// values served from each tier.

// ageSample is how many L1 hits there are for one whose age is recorded:
// a power of two, 1<<ageSampleBits.
const (
	ageSampleBits = 6
	ageSample     = 1 << ageSampleBits
)

// DurationStats summarises a histogram of durations: how many were
// recorded, percentiles estimated from its buckets, and the largest. The
// buckets grow by a factor of √2 from 10 µs to about 10.5 s (see
// DurationBounds), so a percentile is within one bucket of the true one;
// Max is exact.
type DurationStats struct {
	Count         uint64        // durations recorded
	P50, P90, P99 time.Duration // percentiles, estimated from the buckets (0 if Count is 0)
	Max           time.Duration // the largest recorded
	// Skewed counts durations that were negative, counted as 0: a time
	// taken on another instance's clock was ahead of this one's.
	Skewed uint64
	// Buckets holds the counts by bucket: Buckets[i] counts the durations
	// in (DurationBounds()[i-1], DurationBounds()[i]], Buckets[0] those up
	// to the first bound (and the negative ones), and the last those above
	// the last bound. It has len(DurationBounds())+1 elements.
	Buckets []uint64
}

// DurationBounds returns the upper bounds of the buckets of DurationStats,
// in increasing order, from 10 µs to about 10.5 s by factors of √2.
func DurationBounds() []time.Duration {
	b := make([]time.Duration, histogram.Bounds+1)
	for i := range b {
		b[i] = histogram.Bound(i)
	}
	return b
}

// Quantile returns an estimate of the q-quantile (0 < q <= 1) of the
// durations whose counts d.Buckets holds, interpolated within its bucket
// and no larger than d.Max; 0 if there are none. It serves a d whose
// buckets were subtracted from those of a later snapshot, to see the
// percentiles of a span of time; Max is then the later one's.
func (d DurationStats) Quantile(q float64) time.Duration {
	s := snapshotOf(d)
	return s.Quantile(q)
}

// snapshotOf returns d's buckets as the histogram package holds them.
func snapshotOf(d DurationStats) histogram.Snapshot {
	s := histogram.Snapshot{Max: d.Max, Negative: d.Skewed}
	for i := range min(len(d.Buckets), len(s.Counts)) {
		s.Counts[i] = d.Buckets[i]
		s.Count += d.Buckets[i]
	}
	return s
}

// durationStats returns the summary of h.
func durationStats(h *histogram.Histogram) DurationStats {
	s := h.Snapshot()
	return DurationStats{
		Count:   s.Count,
		P50:     s.Quantile(0.5),
		P90:     s.Quantile(0.9),
		P99:     s.Quantile(0.99),
		Max:     s.Max,
		Skewed:  s.Negative,
		Buckets: s.Counts[:],
	}
}

// recordLag records the delay from when m was sent to now, once it is
// applied to L1: for a message that says when it was sent (not one from a
// sender that predates it) and, with a Secret, is signed, so that a forged
// time cannot skew the figure.
func (c *Cache[V]) recordLag(m *message.Message) {
	if m.Sent == 0 || (len(c.o.Secret) > 0 && !m.Authentic) {
		return
	}
	c.n.lag.Record(time.Duration(time.Now().UnixNano() - m.Sent))
}

// sampleL1Age records the age of the value an L1 hit served for one hit in
// ageSample: the hits whose count hit (see l1.Cache.GetCounted), mixed by
// a multiplication so that a pattern of reads that repeats every
// ageSample hits is not sampled at the same place each time, has its top
// bits zero. It is the one cost the histograms add to an L1 hit: a
// multiplication and a branch. The age is from the value's write time if
// L1 knows it (t), else from when L1 stored it.
func (c *Cache[V]) sampleL1Age(hit uint64, t *timing, stored uint32) {
	if (hit*0x9e3779b97f4a7c15)>>(64-ageSampleBits) == 0 {
		c.recordL1Age(t, stored)
	}
}

// drawL1Age is sampleL1Age for a hit that was not counted by stripe: one
// in ageSample, drawn at random.
func (c *Cache[V]) drawL1Age(t *timing, stored uint32) {
	if rand.Uint64()&(ageSample-1) == 0 {
		c.recordL1Age(t, stored)
	}
}

func (c *Cache[V]) recordL1Age(t *timing, stored uint32) {
	if t != nil && t.written != 0 {
		c.n.servedL1.Record(time.Duration(time.Now().UnixNano() - t.written))
		return
	}
	c.n.servedL1.Record(c.storedAge(stored))
}

// recordL2Age records the age of a value served from the shared tier,
// written at written (Unix nanoseconds by its writer's clock, 0: unknown).
func (c *Cache[V]) recordL2Age(written int64, now time.Time) {
	if written != 0 {
		c.n.servedL2.Record(time.Duration(now.UnixNano() - written))
	}
}
