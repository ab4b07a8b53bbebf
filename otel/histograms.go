package hybridotel

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/hybridcache/hybridcache/hybrid"
)

// This file holds the histograms of RegisterMetrics: the cache keeps its
// own bucket counts (hybrid.DurationStats), and the OpenTelemetry API has
// no observable histogram, so each collection records into synchronous
// histograms what the buckets gained since the last one (see the package
// comment).

// histograms are the histogram instruments and the bucket counts already
// recorded, per cache and series.
type histograms struct {
	lag, age metric.Float64Histogram
	series   []histSeries
	mu       sync.Mutex // guards seen: collections of two readers may overlap
	seen     [][][]uint64
}

// histSeries is one attribute set of a histogram and its Stats field.
type histSeries struct {
	inst  func(h *histograms) metric.Float64Histogram
	attrs []attribute.KeyValue
	value func(*hybrid.Stats) hybrid.DurationStats
}

func newHistograms(meter metric.Meter, caches int) (*histograms, error) {
	bounds := hybrid.DurationBounds()
	secs := make([]float64, len(bounds))
	for i, b := range bounds {
		secs[i] = b.Seconds()
	}
	h := &histograms{}
	var err error
	h.lag, err = meter.Float64Histogram("hybridcache.invalidation.lag", metric.WithUnit("s"),
		metric.WithDescription("Delay from another instance sending an invalidation message to its being applied to L1 here."),
		metric.WithExplicitBucketBoundaries(secs...))
	if err != nil {
		return nil, fmt.Errorf("hybridotel: instrument hybridcache.invalidation.lag: %w", err)
	}
	h.age, err = meter.Float64Histogram("hybridcache.served.age", metric.WithUnit("s"),
		metric.WithDescription("Age of the values served (now minus their write time), by tier; L1 hits are sampled."),
		metric.WithExplicitBucketBoundaries(secs...))
	if err != nil {
		return nil, fmt.Errorf("hybridotel: instrument hybridcache.served.age: %w", err)
	}
	lag := func(h *histograms) metric.Float64Histogram { return h.lag }
	age := func(h *histograms) metric.Float64Histogram { return h.age }
	h.series = []histSeries{
		{inst: lag, value: func(s *hybrid.Stats) hybrid.DurationStats { return s.Invalidations.Lag }},
		{inst: age, attrs: []attribute.KeyValue{attribute.String(keyTier, "l1")}, value: func(s *hybrid.Stats) hybrid.DurationStats { return s.L1.ServedAge }},
		{inst: age, attrs: []attribute.KeyValue{attribute.String(keyTier, "l2")}, value: func(s *hybrid.Stats) hybrid.DurationStats { return s.L2.ServedAge }},
	}
	h.seen = make([][][]uint64, caches)
	for i := range h.seen {
		h.seen[i] = make([][]uint64, len(h.series))
	}
	return h, nil
}

// record records, for each cache (stats[i] is cache i's), what each
// bucket gained since the last collection: as many measurements as it
// gained, each of a value inside the bucket (its geometric middle), so
// that the exported histogram, with the same bounds, counts exactly what
// the cache counted. Only the sum is approximate.
func (h *histograms) record(ctx context.Context, stats []hybrid.Stats) {
	bounds := hybrid.DurationBounds()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range stats {
		ns := attribute.String(keyNamespace, stats[i].Namespace)
		for k, se := range h.series {
			d := se.value(&stats[i])
			seen := h.seen[i][k]
			if seen == nil {
				seen = make([]uint64, len(d.Buckets))
				h.seen[i][k] = seen
			}
			var opt metric.RecordOption
			for j := range min(len(d.Buckets), len(seen)) {
				n := d.Buckets[j] - seen[j]
				if d.Buckets[j] < seen[j] {
					n = 0 // cannot happen: counts only grow
				}
				if n == 0 {
					continue
				}
				seen[j] = d.Buckets[j]
				if opt == nil {
					opt = metric.WithAttributes(append([]attribute.KeyValue{ns}, se.attrs...)...)
				}
				v := middle(bounds, j, d.Max)
				inst := se.inst(h)
				for range n {
					inst.Record(ctx, v, opt)
				}
			}
		}
	}
}

// middle returns, in seconds, a value inside bucket j of bounds (see
// hybrid.DurationStats.Buckets): the geometric middle of its bounds, half
// the first bound for bucket 0, and for the bucket above the last bound,
// max if it is above it, else √2 times the last bound.
func middle(bounds []time.Duration, j int, max time.Duration) float64 {
	switch {
	case j == 0:
		return bounds[0].Seconds() / 2
	case j >= len(bounds):
		last := bounds[len(bounds)-1]
		if max > last {
			return max.Seconds()
		}
		return last.Seconds() * math.Sqrt2
	}
	return math.Sqrt(bounds[j-1].Seconds() * bounds[j].Seconds())
}
