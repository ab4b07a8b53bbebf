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
// "hybridcache.", and the hybrid.Stats field of each series (by attribute
// value where there are several) are:
//
//	hits                      counter  {hit}      tier l1: L1.Hits, l2: L2.Hits
//	misses                    counter  {miss}     tier l1: L1.Misses, l2: L2.Misses
//	loads                     counter  {load}     Load.Calls
//	load.errors               counter  {error}    Load.Errors
//	load.soft_timeouts        counter  {load}     Load.SoftTimeouts
//	load.queued               counter  {load}     Load.Queued
//	refreshes                 counter  {refresh}  Load.Refreshes
//	load.not_cached           counter  {value}    Load.NotCached
//	load.not_modified         counter  {key}      Load.NotModified
//	refreshes.backed_off      counter  {refresh}  Load.RefreshesBackedOff
//	refreshes.coalesced       counter  {refresh}  Load.RefreshesCoalesced
//	refreshes.deferred        counter  {refresh}  Load.RefreshesDeferred
//	errors                    counter  {error}    kind l2: L2.Errors, decode: L2.DecodeErrors,
//	                                              encode: Load.EncodeErrors, oversized: Load.Oversized,
//	                                              publish: Invalidations.PublishErrors,
//	                                              options: Load.BadOptions
//	stale.served              counter  {value}    Load.StaleServed
//	stale.reads               counter  {value}    Load.StaleReads
//	fills.discarded           counter  {fill}     L1.FillsDiscarded
//	l1.entries                gauge    {entry}    L1.Entries
//	l1.size                   gauge    By         L1.Size
//	l1.evictions              counter  {entry}    reason size: L1.Evictions, expired: L1.Expirations
//	l2.skipped                counter  {call}     L2.Skipped
//	l2.write.retries          counter  {retry}    L2.WriteRetries
//	l2.writes.dropped         counter  {write}    L2.WritesDropped
//	breaker.opens             counter  {open}     L2.BreakerOpens
//	invalidations.sent        counter  {message}  Invalidations.Sent
//	invalidations.received    counter  {message}  result applied: Invalidations.Applied, own: .Own,
//	                                              invalid: .Invalid
//	invalidations.unauthentic counter  {message}  Invalidations.Unauthentic
//	invalidation.lag.skewed   counter  {message}  Invalidations.Lag.Skewed
//	served.age.skewed         counter  {value}    tier l1: L1.ServedAge.Skewed, l2: L2.ServedAge.Skewed
//	invalidations.swapped     counter  {entry}    Invalidations.Swapped
//	invalidations.extended    counter  {entry}    Invalidations.Extended
//	bus.losses                counter  {loss}     Bus.Losses
//	bus.replays               counter  {replay}   result replayed: Bus.Replays, caught_up: .CaughtUp,
//	                                              flushed: .Flushed
//	bus.catchup.dropped       counter  {entry}    Bus.CatchUpDropped
//	bus.seq_regressions       counter  {message}  Bus.SeqRegressions
//	bus.replayed              counter  {message}  Bus.Replayed
//	held.served               counter  {value}    Bus.HeldServed
//	queue.writes              counter  {write}    result queued: Queue.Queued, refused: .Refused,
//	                                              replayed: .Replayed, stale: .Stale,
//	                                              dropped_on_close: .DroppedOnClose
//	queue.length              gauge    {write}    Queue.Length
//	leases                    counter  {key}      result taken: Leases.Taken, waited: .Waited,
//	                                              answered: .Answered, taken_over: .TakenOver,
//	                                              timed_out: .TimedOut, skipped: .Skipped
//	skipped                   counter  {key}      kind l1_read: Skipped.L1Reads, l1_write: .L1Writes,
//	                                              l2_read: .RemoteReads, l2_write: .RemoteWrites,
//	                                              announce: .Announces
//	verify.sampled            counter  {entry}    Verify.Sampled
//	verify.outcomes           counter  {entry}    result consistent: Verify.Consistent, divergent: .Divergent,
//	                                              missing: .Missing, error: .Errors
//	verify.dropped            counter  {entry}    Verify.Dropped
//
// and two histograms, in seconds, with the buckets of the cache's own
// (hybrid.DurationBounds: 10 µs to about 10.5 s by factors of √2):
//
//	invalidation.lag          histogram  s        Invalidations.Lag: from another instance
//	                                              sending a message to its being applied here
//	served.age                histogram  s        tier l1: L1.ServedAge (one hit in 64), l2: L2.ServedAge
//
// The lag and the ages compare times read on different instances' clocks,
// which must be in sync (as tags already assume); a negative one is
// counted as 0 and in the matching .skewed counter.
//
// The cache keeps these histograms itself (lock-free buckets, nothing
// allocated on a hit), and the OpenTelemetry API has no observable
// histogram. So at each collection the callback records into two
// synchronous histograms what each bucket gained since the last
// collection: one measurement per observation, of a value inside its
// bucket (the geometric middle of its bounds). With the bounds it
// advises (the cache's), the exported histogram counts exactly what the
// cache counted, bucket by bucket, with every reader seeing each
// observation once; its sum and min are approximate, and a view that
// changes the bounds gets values placed to within a bucket. The cost is
// one Record per observation at collection time, not on the cache's
// calls (L1 ages are sampled one hit in 64, which bounds it). Stats gives
// the same histograms as percentiles, and their buckets.
//
// The names are hybridcache.*: there is no semantic convention for caches
// yet (open-telemetry/semantic-conventions#1747).
//
// A miss in L1 that a fill answers from L2 counts as an l1 miss and an l2
// hit, so the share of requests answered without load is
// (hits{l1} + hits{l2}) / (hits{l1} + misses{l1}).
//
// The verifier's coherence (hybrid.VerifyStats.Coherence) over a window is
// rate(verify.outcomes{result=consistent}) / (rate(verify.outcomes{result=consistent})
// + rate(verify.outcomes{result=divergent})); it has no gauge of its own, so
// that it reads over the window asked for rather than since the start.
//
// # Traces and durations
//
// NewTracer returns a hybrid.Tracer to set as Options.Tracer. Each load and
// each shared-tier call then gets a span named "hybridcache." + op
// ("hybridcache.load", "hybridcache.get", "hybridcache.set", ...; the ops
// are the hybrid.Op constants) with the attribute hybridcache.op, and a measurement of the histogram
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
