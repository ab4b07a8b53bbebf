package hybrid

import (
	"sync/atomic"

	"github.com/hybridcache/hybridcache/internal/histogram"
)

// Stats is a snapshot of a Cache's counters since New, grouped by tier and
// concern. The otel module (package hybridotel) exports every field as a
// metric, listed in its documentation: L1.Hits is
// hybridcache.hits{tier=l1}, Load.Errors is hybridcache.load.errors,
// L2.DecodeErrors is hybridcache.errors{kind=decode}, Queue.Length is
// hybridcache.queue.length.
type Stats struct {
	Namespace string // the cache's Options.Namespace

	L1            L1Stats           // the in-process tier
	L2            L2Stats           // the shared tier and the calls to it
	Load          LoadStats         // load calls, eager refresh and fail-safe
	Invalidations InvalidationStats // messages to and from other instances
	Bus           BusStats          // bus losses and how they ended
	Queue         QueueStats        // the queue of failed writes (Options.QueueWrites)
	Leases        LeaseStats        // load leases (Options.LoadLease)
	Skipped       SkipStats         // steps calls left out (WithSkip)
	Verify        VerifyStats       // the background verifier (Options.VerifyRate)
}

// L1Stats counts the in-process tier.
type L1Stats struct {
	Hits           uint64 // answered from L1
	Misses         uint64 // not in L1
	Evictions      uint64 // entries evicted by the size bound
	Expirations    uint64 // entries that reached their lifetime
	FillsDiscarded uint64 // fills not stored in L1 because the key changed meanwhile
	Entries        int    // entries now (approximate)
	Size           uint64 // weight now, in bytes: values, keys and overhead (approximate)
	// ServedAge is the age of the values L1 hits served: now minus the
	// value's write time, or, for an entry whose write time L1 does not
	// know, minus when L1 stored it. It is sampled: one hit in 64 is
	// recorded (picked by L1's own hit count for Get and GetOrCreate, at
	// random for GetEntry and batches), so that a hit stays as cheap as
	// it was; Count is about L1.Hits / 64. A write time set by another instance is
	// read on its clock (see InvalidationStats.Lag for the caveat).
	ServedAge DurationStats
}

// L2Stats counts the shared tier and the calls to it.
type L2Stats struct {
	Hits          uint64 // answered from the shared tier
	Misses        uint64 // not in the shared tier either
	Errors        uint64 // shared-tier and bus calls that failed (see Events.L2Error)
	DecodeErrors  uint64 // stored values that did not decode (counted as misses)
	Skipped       uint64 // calls not made because the breaker was open
	BreakerOpens  uint64 // times the breaker opened
	WriteRetries  uint64 // background writes tried again
	WritesDropped uint64 // background writes given up (value kept in L1 until the shared tier answers again)
	// ServedAge is the age of the values read from the shared tier and
	// served (one per hit, whatever the number of callers it answered):
	// now minus the write time its envelope carries, by the writer's clock
	// (see InvalidationStats.Lag for the caveat).
	ServedAge DurationStats
}

// LoadStats counts the calls of load functions and what fail-safe and
// eager refresh made of them.
type LoadStats struct {
	Calls        uint64 // load function calls
	Errors       uint64 // load calls that failed or panicked
	EncodeErrors uint64 // loaded values the codec could not encode, not stored
	Oversized    uint64 // loaded values larger than MaxValueBytes, not stored
	Queued       uint64 // loads that waited for a slot (MaxConcurrentLoads)
	SoftTimeouts uint64 // loads that passed SoftTimeout while a stale value was served
	Refreshes    uint64 // background refreshes started (EagerRefresh, XFetchBeta; one per key)
	// RefreshesBackedOff counts failed refreshes after which the next
	// was put off (Options.RefreshBackoff).
	RefreshesBackedOff uint64
	// RefreshesCoalesced counts refreshes loaded in one batch with
	// others (RefreshBatch).
	RefreshesCoalesced uint64
	// RefreshesDeferred counts refreshes left to another instance that
	// held the key's load lease (Options.LoadLease).
	RefreshesDeferred uint64
	// StaleServed counts stale values served by fail-safe: the load
	// failed, passed SoftTimeout or waited for a slot.
	StaleServed uint64
	// NotCached counts loaded values (and absences) whose load said
	// DoNotCache (see SettingsFrom): returned, stored nowhere.
	NotCached uint64
	// BadOptions counts options refused where no call could be failed:
	// set by a load through SettingsFrom (its value returned, not stored), or
	// given by Options.PerKey for a value from a message or a re-read
	// (the cache's defaults used). Each is logged, rate-limited.
	BadOptions uint64
	// NotModified counts the keys whose refresh load found the value not
	// modified (ErrNotModified, see StaleFrom): extended, not re-sent.
	NotModified uint64
	// StaleReads counts stale values returned by Get or GetEntry with
	// WithAllowStale, for want of a live one.
	StaleReads uint64
}

// InvalidationStats counts the messages this instance sent and received.
type InvalidationStats struct {
	Sent          uint64 // messages sent
	PublishErrors uint64 // messages that could not be sent
	Applied       uint64 // messages from other instances applied
	Own           uint64 // own messages received and ignored
	Invalid       uint64 // messages that did not decode
	Unauthentic   uint64 // messages whose signature did not verify (keys only dropped)
	Swapped       uint64 // L1 entries replaced by a value carried in a message
	Extended      uint64 // L1 entries extended by another instance's not-modified refresh
	// Lag is the propagation lag of the messages applied: from when the
	// sending instance built the message (just before the write that
	// publishes it, so its round trip to Redis is included) to when this
	// one had applied it to L1. Messages from instances that predate send
	// times, and unsigned ones when a Secret is set, are not recorded, nor
	// those replayed from the log after a bus loss (Bus.Replayed).
	//
	// NOTE: the two times are read on two clocks, which must be in sync
	// (as tags already assume); the figure is off by their skew. A
	// negative lag (the sender's clock ahead) is counted as 0, and also
	// in Lag.Skewed.
	Lag DurationStats
}

// BusStats counts the losses of the bus and how each ended.
type BusStats struct {
	Losses  uint64 // times the bus reported possible message loss
	Replays uint64 // losses caught up on by reading the log of missed messages
	// Flushed counts losses that ended with all of L1 flushed: the log
	// could not cover them; where no log is kept, the sequence counters or
	// tag records could not be read, there is no Remote, or no counters
	// can be named (a Remote prefix whose hash tag puts them in other
	// slots than the keys); and, with Options.StrictLoss, every restore.
	Flushed  uint64
	Replayed uint64 // messages applied from the log
	// CaughtUp counts losses caught up on by the slots' sequence counters
	// where no log is kept (Redis Cluster, a Ring, ReplayLogLen < 0): only
	// the entries of slots written meanwhile, and those a missed
	// DeleteByTag or Clear covers, were dropped, CatchUpDropped of them in
	// all.
	CaughtUp       uint64
	CatchUpDropped uint64
	// SeqRegressions counts messages whose sequence was lower than one
	// already seen in their slot (Redis failed over to a replica that was
	// behind, or restarted from an older snapshot): the slot's entries were
	// dropped from L1.
	SeqRegressions uint64
	// HeldServed counts entries from before a loss served because the
	// shared tier could not be reached.
	HeldServed uint64
}

// QueueStats counts the queue of failed writes (Options.QueueWrites).
type QueueStats struct {
	Queued   uint64 // failed writes queued for replay
	Refused  uint64 // failed writes not queued because the queue was full (their error returned)
	Replayed uint64 // queued writes replayed (or found already applied: the original landed)
	Stale    uint64 // queued writes dropped at replay because the shared tier held a newer value
	// DroppedOnClose counts queued writes dropped unreplayed because
	// Close came first (logged once, at Close).
	DroppedOnClose uint64
	Length         int // writes in the queue now
}

// LeaseStats counts the keys of cold fills under Options.LoadLease.
type LeaseStats struct {
	Taken     uint64 // keys whose lease this instance took, take-overs included
	Waited    uint64 // keys whose lease another instance held when asked: waited for
	Answered  uint64 // waited keys answered by the holder's value or error, without a load here
	TakenOver uint64 // waited keys whose lease ended without a value and was taken here
	TimedOut  uint64 // waited keys loaded here after LeaseWait
	Skipped   uint64 // keys loaded without a lease because the shared tier could not be asked
}

// SkipStats counts, key by key, the steps that calls left out by their
// flags (WithSkip).
type SkipStats struct {
	L1Reads      uint64 // keys not looked up in L1 (SkipL1Read)
	L1Writes     uint64 // values not stored in L1 (SkipL1Write)
	RemoteReads  uint64 // keys not read from the shared tier (SkipRemoteRead)
	RemoteWrites uint64 // values and deletes not written to the shared tier (SkipRemoteWrite)
	Announces    uint64 // changed keys not announced to other instances (SkipAnnounce)
}

type counters struct {
	l2Hits, l2Misses, loads, loadErrors, l2Errors, decodeErrors, oversized, encodeErrors atomic.Uint64
	evictions, expirations                                                               atomic.Uint64
	published, publishErrors, received, ownIgnored, swapped                              atomic.Uint64
	invalid, unauthentic, busLosses, fillsDiscarded                                      atomic.Uint64
	l2Skipped, writeRetries, writesDropped                                               atomic.Uint64
	staleServed, softTimeouts, refreshes, loadsQueued                                    atomic.Uint64
	// pastLife counts L1 lookups that found an entry past its lifetime,
	// kept only for fail-safe: L1 counted them as hits, Stats as misses.
	pastLife                                                  atomic.Uint64
	replays, replayed, lossFlushes, heldServed                atomic.Uint64
	caughtUp, catchUpDropped, seqRegressions                  atomic.Uint64
	writesQueued, queueFull, queueReplayed, queueDroppedStale atomic.Uint64
	queueDroppedOnClose                                       atomic.Uint64
	leasesTaken, leasesWaited, leasesAnswered                 atomic.Uint64
	leasesTakenOver, leasesTimedOut, leasesSkipped            atomic.Uint64
	skipL1Reads, skipL1Writes, skipRemoteReads                atomic.Uint64
	skipRemoteWrites, skipAnnounces                           atomic.Uint64
	notCached, badOptions                                     atomic.Uint64
	notModified, staleReads, extended                         atomic.Uint64
	refreshBackoffs, refreshesCoalesced, refreshesDeferred    atomic.Uint64
	// lag, servedL1 and servedL2 are the histograms of histograms.go.
	lag, servedL1, servedL2 histogram.Histogram
}

// Stats returns a snapshot of the cache's counters.
func (c *Cache[V]) Stats() Stats {
	ls := c.local.Stats()
	queued := 0
	if c.queue != nil {
		queued = c.queue.len()
	}
	past := min(c.n.pastLife.Load(), ls.Hits)
	return Stats{
		Namespace: c.o.Namespace,
		L1: L1Stats{
			Hits:           ls.Hits - past,
			Misses:         ls.Misses + past,
			Evictions:      c.n.evictions.Load(),
			Expirations:    c.n.expirations.Load(),
			FillsDiscarded: c.n.fillsDiscarded.Load(),
			Entries:        c.local.Len(),
			Size:           c.local.Weight(),
			ServedAge:      durationStats(&c.n.servedL1),
		},
		L2: L2Stats{
			Hits:          c.n.l2Hits.Load(),
			Misses:        c.n.l2Misses.Load(),
			Errors:        c.n.l2Errors.Load(),
			DecodeErrors:  c.n.decodeErrors.Load(),
			Skipped:       c.n.l2Skipped.Load(),
			BreakerOpens:  c.br.opens.Load(),
			WriteRetries:  c.n.writeRetries.Load(),
			WritesDropped: c.n.writesDropped.Load(),
			ServedAge:     durationStats(&c.n.servedL2),
		},
		Load: LoadStats{
			Calls:        c.n.loads.Load(),
			Errors:       c.n.loadErrors.Load(),
			EncodeErrors: c.n.encodeErrors.Load(),
			Oversized:    c.n.oversized.Load(),
			Queued:       c.n.loadsQueued.Load(),
			SoftTimeouts: c.n.softTimeouts.Load(),
			Refreshes:    c.n.refreshes.Load(),
			StaleServed:  c.n.staleServed.Load(),
			NotCached:    c.n.notCached.Load(),
			BadOptions:   c.n.badOptions.Load(),
			NotModified:  c.n.notModified.Load(),
			StaleReads:   c.n.staleReads.Load(),

			RefreshesBackedOff: c.n.refreshBackoffs.Load(),
			RefreshesCoalesced: c.n.refreshesCoalesced.Load(),
			RefreshesDeferred:  c.n.refreshesDeferred.Load(),
		},
		Invalidations: InvalidationStats{
			Sent:          c.n.published.Load(),
			PublishErrors: c.n.publishErrors.Load(),
			Applied:       c.n.received.Load(),
			Own:           c.n.ownIgnored.Load(),
			Invalid:       c.n.invalid.Load(),
			Unauthentic:   c.n.unauthentic.Load(),
			Swapped:       c.n.swapped.Load(),
			Extended:      c.n.extended.Load(),
			Lag:           durationStats(&c.n.lag),
		},
		Bus: BusStats{
			Losses:     c.n.busLosses.Load(),
			Replays:    c.n.replays.Load(),
			Flushed:    c.n.lossFlushes.Load(),
			Replayed:   c.n.replayed.Load(),
			HeldServed: c.n.heldServed.Load(),

			CaughtUp:       c.n.caughtUp.Load(),
			CatchUpDropped: c.n.catchUpDropped.Load(),
			SeqRegressions: c.n.seqRegressions.Load(),
		},
		Queue: QueueStats{
			Queued:         c.n.writesQueued.Load(),
			Refused:        c.n.queueFull.Load(),
			Replayed:       c.n.queueReplayed.Load(),
			Stale:          c.n.queueDroppedStale.Load(),
			DroppedOnClose: c.n.queueDroppedOnClose.Load(),
			Length:         queued,
		},
		Leases: LeaseStats{
			Taken:     c.n.leasesTaken.Load(),
			Waited:    c.n.leasesWaited.Load(),
			Answered:  c.n.leasesAnswered.Load(),
			TakenOver: c.n.leasesTakenOver.Load(),
			TimedOut:  c.n.leasesTimedOut.Load(),
			Skipped:   c.n.leasesSkipped.Load(),
		},
		Skipped: SkipStats{
			L1Reads:      c.n.skipL1Reads.Load(),
			L1Writes:     c.n.skipL1Writes.Load(),
			RemoteReads:  c.n.skipRemoteReads.Load(),
			RemoteWrites: c.n.skipRemoteWrites.Load(),
			Announces:    c.n.skipAnnounces.Load(),
		},
		Verify: c.verifyStats(),
	}
}
