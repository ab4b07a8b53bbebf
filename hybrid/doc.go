// Package hybrid is a typed two-tier cache: a bounded in-process L1 in
// front of a shared tier (Redis, through package l2), kept coherent across
// instances by invalidation messages (package invalidate).
//
// # Read path
//
// GetOrCreate looks in L1 first; a hit returns the stored value itself,
// with no allocation. On a miss, one fill per key runs however many callers
// wait: it reads the shared tier once and, on a miss there, calls load once.
// The loaded value is stored in L1 and written to the shared tier only if
// the key is still absent there (SET NX), so a fill never overwrites another
// instance's write. Each caller waits with its own ctx; a caller that leaves
// gets ctx.Err() at once and the fill goes on for the others, detached from
// any one caller and bounded by Options.LoadTimeout and Close.
//
// The fill's leader (the first caller to miss) makes the shared-tier read
// on its own goroutine when the Remote bounds how long a read can block
// (BoundedReader: an l2.Store whose client has ContextTimeoutEnabled), or
// when its ctx cannot end; if its ctx ends during that read, it returns
// within the bound (l2.Options.ReadTimeout). Otherwise the read runs on a
// worker goroutine and the leader, too, returns as soon as its ctx ends. A
// load always runs on a worker. Callers that join a fill return as soon as
// their ctx ends.
//
// # Write path
//
// Set and Delete write the shared tier, announce the change on the bus and
// then update L1. After Set returns nil, Get on the same instance returns the
// new value (read-your-writes). With an l2.Store (an Announcer), the write
// and its announcement are one Redis script, so messages arrive in write
// order; with Options.Secret set, a Set's message carries the new value (up
// to InlineMaxBytes) and peers that hold the key swap it in without a round
// trip. Otherwise peers drop the key and read it again when asked.
//
// Expire ends a value's lifetime now without removing it: its logical
// expiry is rewritten in the shared tier (one script with its message, for
// l2.Store, which keeps the value's physical lifetime) and every instance
// marks its L1 copy stale, so the next read loads anew and fail-safe can
// still fall back on the old value. Clear removes the whole namespace,
// from every instance and from the shared tier's point of view, with one
// write and one message (see Tags: it is a tag delete that every value is
// subject to); ClearLocal only drops L1 everywhere and leaves the shared
// tier as it is.
//
// # Invalidation and its window
//
// Another instance stops serving the old value once the message arrives:
// on loopback well under a millisecond, see the README for measured
// figures. A fill that was reading the shared tier or loading when an
// invalidation for its key arrived returns its value to its callers but does
// not store it in L1 (no stale fill). No entry outlives its L1 lifetime in
// any case.
//
// When the bus loses its connection, L1 is kept: an entry is served as it
// is for Options.LossGrace from the loss (or from its store, if stored
// during the loss); past it, it is read again from the shared tier, and
// served as it is only while that cannot be reached (the database is not
// called either). Once the bus is
// back, the messages missed meanwhile are replayed from a capped log that
// the shared tier keeps of every announced write (a Journal, such as
// l2.Store on one Redis server; on Redis Cluster there is none), and L1 is
// flushed only when the log cannot cover the gap (trimmed, lost with a
// restart or a failover). Options.StrictLoss flushes L1 on the drop and on
// the restore instead, and while the bus is down reads every value from
// the shared tier while that answers.
//
// Only the cache's own messages invalidate: a write that bypasses the cache
// (FLUSHALL, a SET from redis-cli, a restore) is seen by an instance when
// its L1 copy's lifetime ends. With Options.Secret, a message without a
// valid signature may at most drop (or expire) the keys it names; without
// one, anyone who can publish on the channel can drop or expire keys or
// clear L1 (never plant a value, nor make the shared tier's values
// misses).
//
// # When Redis is slow or down
//
// Reads degrade: a shared-tier error is counted (Stats.L2Errors), logged at
// most once per Options.LogEvery, and the call goes on to L1 and load.
// Writes report: Set, Delete, Expire and Clear return the error (and drop,
// expire or clear in L1 all the same). With an l2.Store, no call waits on
// Redis longer than the store's ReadTimeout or WriteTimeout, whatever the
// client's retries, or the ctx. A fill's write-back that fails is retried
// twice, then counted (Stats.WritesDropped) and logged. With
// Options.BreakerThreshold, a run of failures opens a circuit breaker: for
// BreakerOpenFor the shared tier is not called at all (reads go to L1 and
// load, writes return ErrUnavailable), then one call probes it.
//
// With Options.QueueWrites, a Set, Delete, DeleteByTag or Clear whose
// shared-tier write fails (unreachable, timed out, breaker open; not bad
// input nor a call its own ctx cut short) is applied to L1 here (Set
// stores the value, so read-your-writes holds on this instance), queued
// (newest per key, at most QueueWrites; a full queue refuses and the call
// returns its error as before) and replayed in order by a goroutine of the
// cache, retrying from 100 ms up to every 5 s and at once when the bus
// comes back; the call returns an error wrapping ErrQueued. A replay
// writes only over an older value (clocks in sync, as for tags): with
// l2.Store (a NewerSetter, and a NewerJournal where it keeps the log) the
// write times are compared inside the script that writes, logs and
// announces, so a write another instance made meanwhile wins
// (Stats.QueueDroppedStale, and the outdated value leaves L1 here) and a
// write that timed out but landed (a stalled Redis runs it when it
// resumes) is found as it is and not written again. A Remote without those
// capabilities is read, compared and then written as Set writes: a write
// landing between that read and that write is overwritten. Close drops
// what is still queued, with a warning saying how many
// (Stats.QueueDroppedOnClose).
//
// # Resilience options
//
// All off by default. FailSafeMaxAge keeps values that long past their
// lifetime, in both tiers, and serves such a stale value when load fails
// (then not again before FailSafeThrottle). SoftTimeout, with a stale value
// at hand, answers with it when load is slower than that, and stores the
// load's result when it arrives; LoadTimeout is the hard limit that cancels
// the load. EagerRefresh reloads an entry in the background once it has
// lived that fraction of its L1 lifetime, so hot keys never go cold.
// NegativeTTL remembers "not found" (a load error wrapping ErrNotFound).
// TTLJitter spreads the expiry of entries written together. Every one of
// them can also be set, or turned off, for one call with an EntryOption
// (WithFailSafe, WithFailSafeThrottle, WithSoftTimeout, WithLoadTimeout,
// WithEagerRefresh, WithNegativeTTL, WithTTLJitter); those that shape a
// stored value apply to the values that call writes.
//
// MaxConcurrentLoads bounds the loads running at once in a cache (a batch
// load takes one slot). A fill beyond it waits for a slot within its
// LoadTimeout, its callers each with their own ctx; with a stale value at
// hand, its callers get that at once, as after a soft timeout, and the fill
// loads when a slot frees (Stats.LoadsQueued counts the waits).
//
// GetOrCreateMany takes the same steps for each of its keys, with the same
// EntryOptions: keys whose batch load fails, is slow or waits for a slot
// get their stale values (from L1, or stale in the shared tier), absences
// are remembered, and entries due for eager refresh are reloaded by one
// batch load in the background. A batch returns once every key has its
// answer: a key without a stale value waits for the load.
//
// # One load per key across the fleet
//
// LoadLease (WithLoadLease for one call) makes a key that is cold in both
// tiers load once across all instances, not once per instance: a fill
// takes a lease on the key in the shared tier first (a batch, on all its
// missing keys in one round trip). The holder loads, writes, and releases
// the lease together with a "filled" message that carries the value when
// a Secret is set, sent only if another instance asked for the lease; the
// other instances wait for that message (no call to the shared tier while
// they wait), and read the shared tier once if it carries no value. The holder renews its lease while it loads; a waiter
// takes over a lease that ends without a value; a holder that closes frees
// its lease at once, and so does one whose load panics or calls
// runtime.Goexit. A holder's load error reaches the waiters' callers
// (ErrLeaseHolderFailed, with Secret the first line of its text, at most
// 256 bytes: no stack) instead of a load of their own. A holder's messages
// carry its lease token (signed, with a Secret), and a waiter takes news
// only from the holder it found holding the lease: a recorded message of
// an earlier fill only makes it read the key. A fill waiting for a lease
// held by its own instance hears of the release directly. An instance that
// cannot reach the shared tier for the lease, or has waited LeaseWait,
// loads by itself: the lease never turns an outage into a failure.
//
// # Tags
//
// WithTags tags the values a call writes; DeleteByTag(tag) removes them
// from every instance and from the shared tier's point of view. It writes
// one tag record (the time of the delete) and sends one message, instead
// of finding the tagged keys: a value read from the shared tier whose tag
// was deleted after it was written is a miss. Each instance drops tagged
// L1 entries when the message arrives, and keeps what it knows of tag
// records current through the bus (reading a record the first time it
// meets the tag, and again after the bus reports a loss). A hit in L1
// checks nothing: tagged entries are removed from L1, not filtered on read.
//
// Clear is the same mechanism for a built-in tag that every value carries:
// it writes the time of the Clear under Namespace:\x00clear (kept without
// expiry), and a value read from the shared tier that was written no later
// than that is a miss. So an instance reads that record once, at its first
// shared-tier hit, and again after a bus loss; a signed Clear's message
// carries it.
//
// # Compression
//
// With Options.CompressAbove, values whose encoding is at least that long
// are stored S2-compressed when that makes them shorter, flagged in their
// envelope; compressed and plain values coexist, and a decompression is
// bounded by MaxValueBytes before it allocates.
//
// # Telemetry
//
// Stats returns every counter. Options.Events has hooks for evictions,
// invalidations received, shared-tier errors and stale serves;
// Options.Tracer gets a span around every load and shared-tier call. The
// module github.com/hybridcache/hybridcache/otel exports both to
// OpenTelemetry.
//
// # Fills never write back an outdated value
//
// A fill writes its loaded value to the shared tier only where the key still
// holds what the fill read: nothing (SET NX), or the stale, undecodable or
// deleted entry it saw (compare-and-set, with a Remote that implements
// CompareAndSetter, as l2.Store does). A Delete leaves a tombstone for TTL
// instead of removing the key, so a fill that began before the Delete finds
// the key changed and writes nothing. Tombstones read as misses.
//
// # Bad input
//
// Empty keys, keys starting with a NUL byte (the cache's own records) and
// keys longer than Options.MaxKeyBytes get ErrEmptyKey, ErrReservedKey and
// ErrKeyTooLong from every call; in a batch, that key gets the error and
// the rest of the page is served. A stored value that does not decode is a
// miss (Stats.DecodeErrors) that the load replaces. A load that panics
// gives every waiter an error wrapping ErrPanic. L1 never holds more than
// Options.LocalMaxBytes, each entry weighed by its encoded size.
//
// # Values are shared
//
// NOTE: L1 holds values as they are, and every hit returns the same value.
// Do not modify a value (or what its pointers, slices or maps reach) after
// Set or after receiving it from the cache. For mutable types, set
// Options.CopyOnRead: every caller then gets its own copy (by V's Clone
// method if it has one, else through the Codec) and Set stores a copy; a
// hit then costs that copy.
package hybrid
