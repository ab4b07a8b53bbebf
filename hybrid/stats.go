package hybrid

import (
	"sync/atomic"
)

// Stats is a snapshot of a Cache's counters since New.
type Stats struct {
	Namespace string // the cache's Options.Namespace

	L1Hits        uint64 // answered from L1
	L1Misses      uint64 // not in L1
	L2Hits        uint64 // answered from the shared tier
	L2Misses      uint64 // not in the shared tier either
	Loads         uint64 // load function calls
	LoadErrors    uint64 // load calls that failed or panicked
	L2Errors      uint64 // shared-tier calls that failed
	DecodeErrors  uint64 // stored values that did not decode (counted as misses)
	Oversized     uint64 // values larger than MaxValueBytes, not stored
	EncodeErrors  uint64 // loaded values the codec could not encode, not stored
	L1Evictions   uint64 // L1 entries evicted by the size bound
	L1Expirations uint64 // L1 entries that reached their lifetime
	L1Entries     int    // entries in L1 now (approximate)
	L1Bytes       uint64 // weight of L1 now (approximate)

	Published      uint64 // invalidation messages sent
	PublishErrors  uint64 // invalidation messages that could not be sent
	Received       uint64 // messages from other instances applied
	OwnIgnored     uint64 // own messages received and ignored
	Swapped        uint64 // L1 entries replaced by a value carried in a message
	Invalid        uint64 // messages that did not decode
	Unauthentic    uint64 // messages whose signature did not verify (keys only dropped)
	BusLosses      uint64 // times the bus reported possible message loss (L1 flushed)
	FillsDiscarded uint64 // fills not stored in L1 because the key changed meanwhile

	L2Skipped     uint64 // shared-tier calls not made because the breaker was open
	BreakerOpens  uint64 // times the breaker opened
	WriteRetries  uint64 // background shared-tier writes tried again
	WritesDropped uint64 // background shared-tier writes given up (value kept in L1)

	StaleServed  uint64 // stale values served by fail-safe: load failed, passed SoftTimeout or waited for a slot
	SoftTimeouts uint64 // loads that passed SoftTimeout while a stale value was served
	Refreshes    uint64 // eager refreshes started (one per key)
	LoadsQueued  uint64 // loads that waited for a slot (MaxConcurrentLoads)

	Replays       uint64 // bus losses caught up on by reading the log of missed messages
	Replayed      uint64 // messages applied from that log
	ReplayFlushes uint64 // losses the log could not cover: L1 flushed instead
	HeldServed    uint64 // entries from before a bus loss served because the shared tier could not be reached

	WritesQueued      uint64 // failed writes queued for replay (Options.QueueWrites)
	QueueFull         uint64 // failed writes not queued because the queue was full (their error returned)
	QueueReplayed     uint64 // queued writes replayed (or found already applied: the original landed)
	QueueDroppedStale uint64 // queued writes dropped at replay because the shared tier held a newer value
	// QueueDroppedOnClose counts queued writes dropped unreplayed because
	// Close came first (logged once, at Close).
	QueueDroppedOnClose uint64
	Queued              int // writes in the queue now

	LeasesTaken     uint64 // keys whose load lease this instance took (Options.LoadLease), take-overs included
	LeasesWaited    uint64 // keys whose lease another instance held when this one asked: waited for
	LeasesAnswered  uint64 // waited keys answered by the holder's value or error, without a load here
	LeasesTakenOver uint64 // waited keys whose lease ended without a value and was taken here
	LeasesTimedOut  uint64 // waited keys loaded here after LeaseWait
	LeasesSkipped   uint64 // keys loaded without a lease because the shared tier could not be asked
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
	replays, replayed, replayFlushes, heldServed              atomic.Uint64
	writesQueued, queueFull, queueReplayed, queueDroppedStale atomic.Uint64
	queueDroppedOnClose                                       atomic.Uint64
	leasesTaken, leasesWaited, leasesAnswered                 atomic.Uint64
	leasesTakenOver, leasesTimedOut, leasesSkipped            atomic.Uint64
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
		L1Hits:              ls.Hits - past,
		L1Misses:            ls.Misses + past,
		L2Hits:              c.n.l2Hits.Load(),
		L2Misses:            c.n.l2Misses.Load(),
		Loads:               c.n.loads.Load(),
		LoadErrors:          c.n.loadErrors.Load(),
		L2Errors:            c.n.l2Errors.Load(),
		DecodeErrors:        c.n.decodeErrors.Load(),
		Oversized:           c.n.oversized.Load(),
		EncodeErrors:        c.n.encodeErrors.Load(),
		L1Evictions:         c.n.evictions.Load(),
		L1Expirations:       c.n.expirations.Load(),
		L1Entries:           c.local.Len(),
		L1Bytes:             c.local.Weight(),
		Published:           c.n.published.Load(),
		PublishErrors:       c.n.publishErrors.Load(),
		Received:            c.n.received.Load(),
		OwnIgnored:          c.n.ownIgnored.Load(),
		Swapped:             c.n.swapped.Load(),
		Invalid:             c.n.invalid.Load(),
		Unauthentic:         c.n.unauthentic.Load(),
		BusLosses:           c.n.busLosses.Load(),
		FillsDiscarded:      c.n.fillsDiscarded.Load(),
		L2Skipped:           c.n.l2Skipped.Load(),
		BreakerOpens:        c.br.opens.Load(),
		WriteRetries:        c.n.writeRetries.Load(),
		WritesDropped:       c.n.writesDropped.Load(),
		StaleServed:         c.n.staleServed.Load(),
		SoftTimeouts:        c.n.softTimeouts.Load(),
		Refreshes:           c.n.refreshes.Load(),
		Replays:             c.n.replays.Load(),
		Replayed:            c.n.replayed.Load(),
		ReplayFlushes:       c.n.replayFlushes.Load(),
		HeldServed:          c.n.heldServed.Load(),
		LoadsQueued:         c.n.loadsQueued.Load(),
		WritesQueued:        c.n.writesQueued.Load(),
		QueueFull:           c.n.queueFull.Load(),
		QueueReplayed:       c.n.queueReplayed.Load(),
		QueueDroppedStale:   c.n.queueDroppedStale.Load(),
		QueueDroppedOnClose: c.n.queueDroppedOnClose.Load(),
		Queued:              queued,
		LeasesTaken:         c.n.leasesTaken.Load(),
		LeasesWaited:        c.n.leasesWaited.Load(),
		LeasesAnswered:      c.n.leasesAnswered.Load(),
		LeasesTakenOver:     c.n.leasesTakenOver.Load(),
		LeasesTimedOut:      c.n.leasesTimedOut.Load(),
		LeasesSkipped:       c.n.leasesSkipped.Load(),
		Namespace:           c.o.Namespace,
	}
}
