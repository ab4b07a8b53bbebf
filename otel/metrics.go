package hybridotel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/hybridcache/hybridcache/hybrid"
)

// StatsSource is a cache whose counters RegisterMetrics reports, such as a
// *hybrid.Cache[V] of any V.
type StatsSource interface {
	Stats() hybrid.Stats
}

// The attribute keys of the metrics.
const (
	keyNamespace = "hybridcache.namespace"
	keyTier      = "tier"
	keyKind      = "kind"
	keyReason    = "reason"
	keyResult    = "result"
)

// RegisterMetrics creates on meter the instruments listed in the package
// comment and registers one callback that reads the Stats of every cache
// in caches at each collection. Unregister the returned Registration to
// stop reporting; a cache closed before that reports its last counts.
//
// NOTE: call it once per Meter with all the caches: two registrations of
// caches of one namespace would each report that namespace's series.
func RegisterMetrics(meter metric.Meter, caches ...StatsSource) (metric.Registration, error) {
	if meter == nil {
		return nil, errors.New("hybridotel: RegisterMetrics: nil meter")
	}
	if len(caches) == 0 {
		return nil, errors.New("hybridotel: RegisterMetrics: no cache")
	}
	if i := slices.Index(caches, nil); i >= 0 {
		return nil, fmt.Errorf("hybridotel: RegisterMetrics: cache %d is nil", i)
	}
	caches = slices.Clone(caches)

	type observed struct {
		inst   metric.Int64Observable
		series []series
	}
	var all []observed
	var insts []metric.Observable
	for _, in := range catalogue() {
		unit, desc := metric.WithUnit(in.unit), metric.WithDescription(in.desc)
		var inst metric.Int64Observable
		var err error
		if in.gauge {
			inst, err = meter.Int64ObservableGauge("hybridcache."+in.name, unit, desc)
		} else {
			inst, err = meter.Int64ObservableCounter("hybridcache."+in.name, unit, desc)
		}
		if err != nil {
			return nil, fmt.Errorf("hybridotel: instrument hybridcache.%s: %w", in.name, err)
		}
		all = append(all, observed{inst, in.series})
		insts = append(insts, inst)
	}

	hists, err := newHistograms(meter, len(caches))
	if err != nil {
		return nil, err
	}

	reg, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		stats := make([]hybrid.Stats, len(caches))
		for i, c := range caches {
			stats[i] = c.Stats()
		}
		hists.record(ctx, stats)
		for i := range stats {
			ns := stats[i].Namespace
			if slices.ContainsFunc(stats[:i], func(s hybrid.Stats) bool { return s.Namespace == ns }) {
				continue // added up with the first cache of ns
			}
			nsAttr := attribute.String(keyNamespace, ns)
			for _, ob := range all {
				for _, se := range ob.series {
					var v uint64
					for j := i; j < len(stats); j++ {
						if stats[j].Namespace == ns {
							v += se.value(&stats[j])
						}
					}
					o.ObserveInt64(ob.inst, int64(min(v, math.MaxInt64)), metric.WithAttributes(append(slices.Clip(se.attrs), nsAttr)...))
				}
			}
		}
		return nil
	}, insts...)
	if err != nil {
		return nil, fmt.Errorf("hybridotel: register callback: %w", err)
	}
	return reg, nil
}

// instrument describes one instrument and where its values come from.
type instrument struct {
	name, unit, desc string
	gauge            bool
	series           []series
}

// series is one attribute set of an instrument (besides the namespace) and
// the Stats field it reports.
type series struct {
	attrs []attribute.KeyValue
	value func(*hybrid.Stats) uint64
}

// only is the single series of an instrument without attributes.
func only(value func(*hybrid.Stats) uint64) []series {
	return []series{{value: value}}
}

// by is a series with the attribute key=val.
func by(key, val string, value func(*hybrid.Stats) uint64) series {
	return series{attrs: []attribute.KeyValue{attribute.String(key, val)}, value: value}
}

// catalogue lists the instruments of RegisterMetrics, as in the package
// comment.
func catalogue() []instrument {
	return []instrument{
		{name: "hits", unit: "{hit}", desc: "Lookups answered from a tier.", series: []series{
			by(keyTier, "l1", func(s *hybrid.Stats) uint64 { return s.L1.Hits }),
			by(keyTier, "l2", func(s *hybrid.Stats) uint64 { return s.L2.Hits }),
		}},
		{name: "misses", unit: "{miss}", desc: "Lookups a tier could not answer.", series: []series{
			by(keyTier, "l1", func(s *hybrid.Stats) uint64 { return s.L1.Misses }),
			by(keyTier, "l2", func(s *hybrid.Stats) uint64 { return s.L2.Misses }),
		}},
		{name: "loads", unit: "{load}", desc: "Calls of load functions.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Load.Calls })},
		{name: "load.errors", unit: "{error}", desc: "Load calls that failed or panicked.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Load.Errors })},
		{name: "load.soft_timeouts", unit: "{load}", desc: "Loads that passed SoftTimeout while a stale value was served.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Load.SoftTimeouts })},
		{name: "load.queued", unit: "{load}", desc: "Loads that waited for a slot (MaxConcurrentLoads).",
			series: only(func(s *hybrid.Stats) uint64 { return s.Load.Queued })},
		{name: "refreshes", unit: "{refresh}", desc: "Background refreshes started (EagerRefresh, XFetchBeta).",
			series: only(func(s *hybrid.Stats) uint64 { return s.Load.Refreshes })},
		{name: "load.not_cached", unit: "{value}", desc: "Loaded values whose load said DoNotCache: returned, stored nowhere.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Load.NotCached })},
		{name: "load.not_modified", unit: "{key}", desc: "Keys whose refresh load found the value not modified: extended, not re-sent.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Load.NotModified })},
		{name: "refreshes.backed_off", unit: "{refresh}", desc: "Failed background refreshes after which the next was put off (RefreshBackoff).",
			series: only(func(s *hybrid.Stats) uint64 { return s.Load.RefreshesBackedOff })},
		{name: "refreshes.coalesced", unit: "{refresh}", desc: "Background refreshes loaded in one batch with others (RefreshBatch).",
			series: only(func(s *hybrid.Stats) uint64 { return s.Load.RefreshesCoalesced })},
		{name: "refreshes.deferred", unit: "{refresh}", desc: "Background refreshes left to another instance that held the key's load lease.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Load.RefreshesDeferred })},
		{name: "errors", unit: "{error}", desc: "Errors the cache absorbed, by kind.", series: []series{
			by(keyKind, "l2", func(s *hybrid.Stats) uint64 { return s.L2.Errors }),
			by(keyKind, "decode", func(s *hybrid.Stats) uint64 { return s.L2.DecodeErrors }),
			by(keyKind, "encode", func(s *hybrid.Stats) uint64 { return s.Load.EncodeErrors }),
			by(keyKind, "oversized", func(s *hybrid.Stats) uint64 { return s.Load.Oversized }),
			by(keyKind, "publish", func(s *hybrid.Stats) uint64 { return s.Invalidations.PublishErrors }),
			by(keyKind, "options", func(s *hybrid.Stats) uint64 { return s.Load.BadOptions }),
		}},
		{name: "stale.served", unit: "{value}", desc: "Stale values served by fail-safe or after a soft timeout.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Load.StaleServed })},
		{name: "stale.reads", unit: "{value}", desc: "Stale values returned by reads without a load (WithAllowStale).",
			series: only(func(s *hybrid.Stats) uint64 { return s.Load.StaleReads })},
		{name: "fills.discarded", unit: "{fill}", desc: "Fills not stored in L1 because the key changed meanwhile.",
			series: only(func(s *hybrid.Stats) uint64 { return s.L1.FillsDiscarded })},
		{name: "l1.entries", unit: "{entry}", desc: "Entries in L1 (approximate).", gauge: true,
			series: only(func(s *hybrid.Stats) uint64 { return uint64(max(s.L1.Entries, 0)) })},
		{name: "l1.size", unit: "By", desc: "Weight of L1: encoded values, keys and overhead (approximate).", gauge: true,
			series: only(func(s *hybrid.Stats) uint64 { return s.L1.Size })},
		{name: "l1.evictions", unit: "{entry}", desc: "L1 entries evicted by the size bound or by their lifetime.", series: []series{
			by(keyReason, "size", func(s *hybrid.Stats) uint64 { return s.L1.Evictions }),
			by(keyReason, "expired", func(s *hybrid.Stats) uint64 { return s.L1.Expirations }),
		}},
		{name: "l2.skipped", unit: "{call}", desc: "Shared-tier calls not made because the breaker was open.",
			series: only(func(s *hybrid.Stats) uint64 { return s.L2.Skipped })},
		{name: "l2.write.retries", unit: "{retry}", desc: "Background shared-tier writes tried again.",
			series: only(func(s *hybrid.Stats) uint64 { return s.L2.WriteRetries })},
		{name: "l2.writes.dropped", unit: "{write}", desc: "Background shared-tier writes given up (value kept in L1).",
			series: only(func(s *hybrid.Stats) uint64 { return s.L2.WritesDropped })},
		{name: "breaker.opens", unit: "{open}", desc: "Times the circuit breaker opened.",
			series: only(func(s *hybrid.Stats) uint64 { return s.L2.BreakerOpens })},
		{name: "invalidations.sent", unit: "{message}", desc: "Invalidation messages sent.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Invalidations.Sent })},
		{name: "invalidations.received", unit: "{message}", desc: "Invalidation messages received, by what became of them.", series: []series{
			by(keyResult, "applied", func(s *hybrid.Stats) uint64 { return s.Invalidations.Applied }),
			by(keyResult, "own", func(s *hybrid.Stats) uint64 { return s.Invalidations.Own }),
			by(keyResult, "invalid", func(s *hybrid.Stats) uint64 { return s.Invalidations.Invalid }),
		}},
		{name: "invalidation.lag.skewed", unit: "{message}", desc: "Applied messages sent, by their sender's clock, after they were applied here (lag counted as 0).",
			series: only(func(s *hybrid.Stats) uint64 { return s.Invalidations.Lag.Skewed })},
		{name: "served.age.skewed", unit: "{value}", desc: "Values served whose write time was ahead of this instance's clock (age counted as 0).", series: []series{
			by(keyTier, "l1", func(s *hybrid.Stats) uint64 { return s.L1.ServedAge.Skewed }),
			by(keyTier, "l2", func(s *hybrid.Stats) uint64 { return s.L2.ServedAge.Skewed }),
		}},
		{name: "invalidations.unauthentic", unit: "{message}", desc: "Applied messages whose signature did not verify (keys only dropped).",
			series: only(func(s *hybrid.Stats) uint64 { return s.Invalidations.Unauthentic })},
		{name: "invalidations.swapped", unit: "{entry}", desc: "L1 entries replaced by a value carried in a message.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Invalidations.Swapped })},
		{name: "invalidations.extended", unit: "{entry}", desc: "L1 entries extended by another instance's not-modified refresh.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Invalidations.Extended })},
		{name: "bus.losses", unit: "{loss}", desc: "Times the bus reported possible message loss (a drop or a restore).",
			series: only(func(s *hybrid.Stats) uint64 { return s.Bus.Losses })},
		{name: "bus.replays", unit: "{replay}", desc: "Bus losses ended by replaying the missed messages from the shared tier's log, by catching up per hash slot where no log is kept, or by flushing L1 when neither could cover them.", series: []series{
			by(keyResult, "replayed", func(s *hybrid.Stats) uint64 { return s.Bus.Replays }),
			by(keyResult, "caught_up", func(s *hybrid.Stats) uint64 { return s.Bus.CaughtUp }),
			by(keyResult, "flushed", func(s *hybrid.Stats) uint64 { return s.Bus.Flushed }),
		}},
		{name: "bus.catchup.dropped", unit: "{entry}", desc: "L1 entries dropped by catch-ups after bus losses: of hash slots written meanwhile, or covered by a missed tag delete or Clear.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Bus.CatchUpDropped })},
		{name: "bus.seq_regressions", unit: "{message}", desc: "Messages whose sequence was lower than one already seen in their hash slot (Redis went back to an older state): the slot's L1 entries were dropped.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Bus.SeqRegressions })},
		{name: "bus.replayed", unit: "{message}", desc: "Messages applied from the shared tier's log after a bus loss.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Bus.Replayed })},
		{name: "held.served", unit: "{value}", desc: "L1 entries from before a bus loss served because the shared tier could not be reached.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Bus.HeldServed })},
		{name: "queue.writes", unit: "{write}", desc: "Failed writes queued for replay or refused by a full queue, and queued writes replayed, dropped at replay because the shared tier held a newer value, or dropped at Close.", series: []series{
			by(keyResult, "queued", func(s *hybrid.Stats) uint64 { return s.Queue.Queued }),
			by(keyResult, "refused", func(s *hybrid.Stats) uint64 { return s.Queue.Refused }),
			by(keyResult, "replayed", func(s *hybrid.Stats) uint64 { return s.Queue.Replayed }),
			by(keyResult, "stale", func(s *hybrid.Stats) uint64 { return s.Queue.Stale }),
			by(keyResult, "dropped_on_close", func(s *hybrid.Stats) uint64 { return s.Queue.DroppedOnClose }),
		}},
		{name: "queue.length", unit: "{write}", desc: "Writes in the queue of failed writes now.", gauge: true,
			series: only(func(s *hybrid.Stats) uint64 { return uint64(max(s.Queue.Length, 0)) })},
		{name: "leases", unit: "{key}", desc: "Keys of cold fills under Options.LoadLease: leases taken here, leases found held elsewhere and waited for, waited keys answered by the holder, taken over after the holder's lease ended, loaded here after LeaseWait, and loaded without a lease because the shared tier could not be asked.", series: []series{
			by(keyResult, "taken", func(s *hybrid.Stats) uint64 { return s.Leases.Taken }),
			by(keyResult, "waited", func(s *hybrid.Stats) uint64 { return s.Leases.Waited }),
			by(keyResult, "answered", func(s *hybrid.Stats) uint64 { return s.Leases.Answered }),
			by(keyResult, "taken_over", func(s *hybrid.Stats) uint64 { return s.Leases.TakenOver }),
			by(keyResult, "timed_out", func(s *hybrid.Stats) uint64 { return s.Leases.TimedOut }),
			by(keyResult, "skipped", func(s *hybrid.Stats) uint64 { return s.Leases.Skipped }),
		}},
		{name: "skipped", unit: "{key}", desc: "Keys whose step a call left out by a per-call flag (WithSkip): the L1 read, the L1 write, the shared-tier read, the shared-tier write, the announcement.", series: []series{
			by(keyKind, "l1_read", func(s *hybrid.Stats) uint64 { return s.Skipped.L1Reads }),
			by(keyKind, "l1_write", func(s *hybrid.Stats) uint64 { return s.Skipped.L1Writes }),
			by(keyKind, "l2_read", func(s *hybrid.Stats) uint64 { return s.Skipped.RemoteReads }),
			by(keyKind, "l2_write", func(s *hybrid.Stats) uint64 { return s.Skipped.RemoteWrites }),
			by(keyKind, "announce", func(s *hybrid.Stats) uint64 { return s.Skipped.Announces }),
		}},
		{name: "verify.sampled", unit: "{entry}", desc: "L1 entries the background verifier checked against the shared tier (Options.VerifyRate).",
			series: only(func(s *hybrid.Stats) uint64 { return s.Verify.Sampled })},
		{name: "verify.outcomes", unit: "{entry}", desc: "Verifier samples by outcome: consistent with the shared tier, divergent (older than its value beyond VerifyWindow: a missed invalidation), missing there, or not judged (error).", series: []series{
			by(keyResult, "consistent", func(s *hybrid.Stats) uint64 { return s.Verify.Consistent }),
			by(keyResult, "divergent", func(s *hybrid.Stats) uint64 { return s.Verify.Divergent }),
			by(keyResult, "missing", func(s *hybrid.Stats) uint64 { return s.Verify.Missing }),
			by(keyResult, "error", func(s *hybrid.Stats) uint64 { return s.Verify.Errors }),
		}},
		{name: "verify.dropped", unit: "{entry}", desc: "Divergent L1 entries the verifier dropped.",
			series: only(func(s *hybrid.Stats) uint64 { return s.Verify.Dropped })},
	}
}
