// Package hybridtest provides in-memory doubles of a hybrid cache's shared
// tier and bus, so that code built on package hybrid can be tested without
// Redis, and the conformance suite of the shared tier's contract.
//
// A Remote is a byte store with lifetimes, load leases and invalidation
// logs that implements the shared tier's contract (tier.Remote: Info, Get,
// Write, TakeLeases, ExtendLeases, ReleaseLeases, ReadLog) with the
// semantics of l2.Store over one Redis server: each write is one step with
// its message, log entry and lease release; its leases are entries like
// any other, holding the holder's token, marked once a taker found one
// held. A Bus is a publish/subscribe pipe that implements hybrid.Bus.
// Several caches given the same Remote and Bus behave like several
// instances of a service sharing one Redis.
//
// # Faults and observation
//
// Remote.FailWith makes every call fail, Remote.SetLatency delays every
// call (honouring its ctx), and Remote.SetBeforeGet and Remote.SetAfterGet
// run hooks, which may block, before and after each key is read.
// Remote.NoLog makes a Remote keep no log, as on Redis Cluster.
// Remote.Calls counts the calls of each method (for Get and Write, round
// trips), the keys read, and the writes of each Cond and those stored;
// Remote.WaitCalls waits for a count to be reached, so a test can wait for
// a write that happens after the call it made has returned. Remote.Peek,
// Remote.Put, Remote.Keys and Remote.Len look at the store or plant a
// value without counting a call. Remote.DropLog loses an invalidation log,
// as a Redis restart does, and Remote.TrimLog its oldest entries;
// Remote.PeekLog shows one. Bus.SimulateLoss tells every subscriber that
// messages may have been lost, and Bus.Flush waits until every published
// message has been delivered: tests synchronise with it instead of
// sleeping.
//
// Both doubles work inside a testing/synctest bubble when created in it:
// their goroutines wait only on channels and sync.Cond, and latency uses
// timers, so synctest.Wait sees them idle and fake time applies.
//
// Both doubles copy byte slices on the way in and out, so neither a caller
// nor a subscriber can change what another one sees.
//
// # Conformance
//
// TestRemote checks that a shared tier keeps the contract, one subtest per
// promise; a store's tests run it against a fresh store per subtest (see
// TestRemote). hybridtest's own tests run it against Remote, with and
// without a log.
package hybridtest
