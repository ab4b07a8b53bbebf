// Package hybridotel reports a hybrid cache to OpenTelemetry: its counters
// as metrics, and its loads and shared-tier calls as spans and durations.
// It is a module of its own, so that the cache itself does not depend on
// OpenTelemetry.
//
// # Metrics
//
// RegisterMetrics reads Cache.Stats once per collection, in one callback,
// for every cache given to it; it adds no work to the cache's own calls.
// Every data point carries the attribute hybridcache.namespace, the cache's
// Options.Namespace; caches that share a namespace (several instances in one
// process) are added up into one series. The instruments, all named under
// "hybridcache.", are:
//
//	hits                      counter  {hit}      tier: l1, l2
//	misses                    counter  {miss}     tier: l1, l2
//	loads                     counter  {load}
//	load.errors               counter  {error}
//	load.soft_timeouts        counter  {load}
//	load.queued               counter  {load}
//	refreshes                 counter  {refresh}
//	errors                    counter  {error}    kind: l2, decode, encode, oversized, publish
//	stale.served              counter  {value}
//	fills.discarded           counter  {fill}
//	l1.entries                gauge    {entry}
//	l1.size                   gauge    By
//	l1.evictions              counter  {entry}    reason: size, expired
//	l2.skipped                counter  {call}
//	l2.write.retries          counter  {retry}
//	l2.writes.dropped         counter  {write}
//	breaker.opens             counter  {open}
//	invalidations.sent        counter  {message}
//	invalidations.received    counter  {message}  result: applied, own, invalid
//	invalidations.unauthentic counter  {message}
//	invalidations.swapped     counter  {entry}
//	bus.losses                counter  {loss}
//	bus.replays               counter  {replay}   result: replayed, flushed
//	bus.replayed              counter  {message}
//	held.served               counter  {value}
//	queue.writes              counter  {write}    result: queued, refused, replayed, stale, dropped_on_close
//	queue.length              gauge    {write}
//	leases                    counter  {key}      result: taken, waited, answered, taken_over, timed_out, skipped
//
// Each is the Stats field of the same meaning; see hybrid.Stats
// (queue.writes: WritesQueued, QueueFull, QueueReplayed, QueueDroppedStale
// and QueueDroppedOnClose; queue.length: Queued; leases: LeasesTaken,
// LeasesWaited, LeasesAnswered, LeasesTakenOver, LeasesTimedOut and
// LeasesSkipped). A miss in
// L1 that a fill answers from L2 counts as an l1 miss and an l2 hit, so
// the share of requests answered without load is
// (hits{l1} + hits{l2}) / (hits{l1} + misses{l1}).
//
// # Traces and durations
//
// NewTracer returns a hybrid.Tracer to set as Options.Tracer. Each load and
// each shared-tier call then gets a span named "hybridcache." + op
// ("hybridcache.load", "hybridcache.get", "hybridcache.set", ...) with the
// attribute hybridcache.op, and a measurement of the histogram
// hybridcache.operation.duration (seconds) with the attributes op and
// outcome (ok, not_found or error); both carry hybridcache.namespace when
// TracerOptions.Namespace is set. A failed call's span records the error
// and has status Error; a load that reports hybrid.ErrNotFound has not
// failed. L1 hits are never traced, so a tracer costs nothing on the hit
// path.
//
// NOTE: keys may be personal data (user ids, e-mail addresses). Spans carry
// the key (hybridcache.key) only with TracerOptions.RecordKeys; durations
// never do, so that their number of series stays bounded.
package hybridotel
