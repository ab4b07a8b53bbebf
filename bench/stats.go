package main

import (
	"math"
	"math/bits"
	"slices"
	"time"
)

// percentile returns the q-quantile (0 <= q <= 1) of xs by the
// nearest-rank method: the smallest value such that at least q of the
// values are at or below it. xs need not be sorted; it is not modified.
// An empty xs gives NaN.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return percentileSorted(s, q)
}

// percentileSorted is percentile for an already sorted slice.
func percentileSorted(s []float64, q float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	q = min(max(q, 0), 1)
	rank := int(math.Ceil(q * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	return s[rank-1]
}

// durPercentiles returns the given quantiles of ds, in nanoseconds.
func durPercentiles(ds []time.Duration, qs ...float64) []float64 {
	s := make([]float64, len(ds))
	for i, d := range ds {
		s[i] = float64(d)
	}
	slices.Sort(s)
	out := make([]float64, len(qs))
	for i, q := range qs {
		out[i] = percentileSorted(s, q)
	}
	return out
}

// spread summarises repeated measurements of one figure: its median and
// how far the runs were apart.
type spread struct {
	Median, Min, Max, Q1, Q3 float64
	N                        int
}

// summarize returns the spread of xs, ignoring NaNs. With no values every
// field is NaN and N is 0.
func summarize(xs []float64) spread {
	s := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		n := math.NaN()
		return spread{n, n, n, n, n, 0}
	}
	slices.Sort(s)
	return spread{
		Median: median(s),
		Min:    s[0],
		Max:    s[len(s)-1],
		Q1:     percentileSorted(s, 0.25),
		Q3:     percentileSorted(s, 0.75),
		N:      len(s),
	}
}

// median of a sorted, non-empty slice: the middle value, or the mean of the
// two middle values.
func median(s []float64) float64 {
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ratios returns xs[i]/base[i] for each run i: ratios are taken within a
// run, never across runs.
func ratios(xs, base []float64) []float64 {
	out := make([]float64, min(len(xs), len(base)))
	for i := range out {
		out[i] = xs[i] / base[i]
	}
	return out
}

// hist is a latency histogram with log-linear buckets: exact below 64 ns,
// then 32 buckets per power of two (relative error under 3.2%). The zero
// value is ready to use; it is not safe for concurrent use (give each
// goroutine its own and merge them).
type hist struct {
	counts [histBuckets]uint64
	n      uint64
	max    int64
}

const (
	histSubBits = 5
	histSub     = 1 << histSubBits       // buckets per power of two
	histExact   = 2 * histSub            // values below this have their own bucket
	histBuckets = histExact + 57*histSub // up to 2^63
)

func histIndex(v int64) int {
	if v < histExact {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	e := bits.Len64(uint64(v)) - (histSubBits + 1) // >= 1
	idx := histExact + (e-1)*histSub + int(v>>e) - histSub
	return min(idx, histBuckets-1)
}

// histBounds returns the smallest and largest value that fall in bucket i.
func histBounds(i int) (lo, hi int64) {
	if i < histExact {
		return int64(i), int64(i)
	}
	e := (i-histExact)/histSub + 1
	sub := int64((i-histExact)%histSub + histSub)
	return sub << e, (sub+1)<<e - 1
}

// record adds one observation, in nanoseconds.
func (h *hist) record(ns int64) {
	h.counts[histIndex(ns)]++
	h.n++
	if ns > h.max {
		h.max = ns
	}
}

// merge adds o's observations to h.
func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the q-quantile of the recorded values (nearest rank),
// as the middle of its bucket, capped at the largest value seen. An empty
// histogram gives NaN.
func (h *hist) quantile(q float64) float64 {
	if h.n == 0 {
		return math.NaN()
	}
	q = min(max(q, 0), 1)
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	if rank >= h.n {
		return float64(h.max)
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := histBounds(i)
			return float64(min((lo+hi)/2, h.max))
		}
	}
	return float64(h.max)
}
