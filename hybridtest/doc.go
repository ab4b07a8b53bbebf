// Package hybridtest provides in-memory doubles of a hybrid cache's shared
// tier and bus, so that code built on package hybrid can be tested without
// Redis.
//
// A Remote is a byte store with lifetimes, and invalidation logs, that
// implements hybrid.Remote, hybrid.BatchRemote, hybrid.CompareAndSetter,
// hybrid.Announcer, hybrid.Journal, hybrid.Replacer, hybrid.NewerSetter,
// hybrid.NewerJournal and hybrid.Leaser (its leases are entries like any
// other, holding the holder's token, marked once a taker found it held; a
// take reads the key its lease guards, and FillAndRelease writes, releases
// and, when someone may wait for the lease, announces, each as one step, as
// l2.Store does on one server); a Bus is a publish/subscribe pipe that
// implements hybrid.Bus. Several caches given the same Remote and Bus
// behave like several instances of a service sharing one Redis:
//
//	bus := new(hybridtest.Bus)
//	defer bus.Close()
//	remote := &hybridtest.Remote{Bus: bus}
//	a, _ := hybrid.New[string](hybrid.Options{Namespace: "users", Remote: remote, Bus: bus})
//	b, _ := hybrid.New[string](hybrid.Options{Namespace: "users", Remote: remote, Bus: bus})
//
// # Faults and observation
//
// Remote.FailWith makes every call fail, Remote.SetLatency delays every
// call (honouring its ctx), and Remote.SetBeforeGet and Remote.SetAfterGet
// run hooks, which may block, before and after each key is read. Remote.Calls counts the calls of each
// method and Remote.WaitCalls waits for a count to be reached, so a test
// can wait for a write that happens after the call it made has returned.
// Remote.DropLog loses an invalidation log, as a Redis restart does, and
// Remote.TrimLog its oldest entries; Remote.PeekLog shows one.
// Bus.SimulateLoss tells every subscriber that messages may have been lost,
// and Bus.Flush waits until every published message has been delivered:
// tests synchronise with it instead of sleeping.
//
// Both doubles work inside a testing/synctest bubble when created in it:
// their goroutines wait only on channels and sync.Cond, and latency uses
// timers, so synctest.Wait sees them idle and fake time applies.
//
// Both doubles copy byte slices on the way in and out, so neither a caller
// nor a subscriber can change what another one sees.
package hybridtest
