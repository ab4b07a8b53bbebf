// Package hybrid is a typed two-tier cache: a bounded in-process L1 in
// front of a shared tier (Redis, through package l2), kept coherent across
// instances by invalidation messages (package invalidate).
//
// An L1 hit returns the decoded value itself, with no round trip and no
// allocation; the shared tier lets instances reuse each other's loads; the
// messages make every instance drop or swap its copy when one writes.
//
// # What you must set
//
// A Namespace, the same on every instance of one cache (New refuses a
// Remote or a Bus without one). For a fleet, a Remote (l2.New) so that
// instances share loads, and a Bus (invalidate.New over the same Redis) so
// that a write reaches every instance's L1; with a Bus, the same Secret on
// every instance, or messages are unsigned, carry no values, and anyone who
// can publish on the channel can make instances drop keys. Build the
// go-redis client given to l2.New with ContextTimeoutEnabled: true, so that
// l2's read bound (250 ms by default) reaches the socket. New logs once, as
// warnings, a Bus without a Secret, a client whose reads l2 cannot bound
// that way, and settings that contradict each other; the README's
// production configuration sets all of the above.
//
// # Usage
//
// Give New a Namespace and a Remote, then read through GetOrCreate with a
// load function that is called on a miss in both tiers:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	products, err := hybrid.New[Product](hybrid.Options{
//		Namespace: "products",               // Redis keys "products:<key>"
//		Remote:    l2.New(rdb, l2.Options{}), // the shared tier
//	})
//	if err != nil { ... }
//	defer products.Close()
//
//	p, err := products.GetOrCreate(ctx, "42", loadProduct)
//
// Without a Bus, other instances keep their copy until its LocalTTL ends.
// Add one (invalidate.New over the same client) so that they hear of Set,
// Delete, Expire, DeleteByTag and Clear, and a Secret so that the messages
// are signed and carry new values.
//
// # Reads and writes
//
// On a miss, one fill per key runs however many callers wait: one
// shared-tier read and, on a miss there, one load. The fill is detached from
// any one caller, who leaves with ctx.Err() when its ctx ends. A fill stores
// nothing in L1 if its key was invalidated meanwhile, and never writes back
// over a newer write. Set and Delete write the shared tier, announce the
// change and then update L1, so the same instance reads its own writes;
// SetMany and DeleteMany do the same for many keys with one call to the
// shared tier and one message. WithSkip leaves a tier or the announcement
// out of one call (see Skip).
//
// When Redis is slow or down, reads fall back to L1 and load within the
// store's time bound, and writes return the error. When the bus is lost, L1
// is served for Options.LossGrace and then read again (Options.StrictLoss
// reads through at once); missed writes are replayed from a log in Redis,
// or, where none is kept (Redis Cluster), caught up per hash slot by
// sequence counters (only the entries of slots written meanwhile leave
// L1), or L1 is flushed. Fail-safe, soft and hard timeouts, eager and
// probabilistic early refresh (XFetchBeta), refreshes batched into one load
// (RefreshBatch), negative caching, tags, a circuit breaker, queued writes
// and one load per key across a fleet (LoadLease) are options, off by
// default.
//
// # Plug points
//
// Options.Remote is the shared tier, one interface (tier.Remote, in the
// public package tier) that *l2.Store and hybridtest.Remote implement;
// hybridtest.TestRemote checks another implementation against it. Bus carries the messages
// (*invalidate.Bus). Codec encodes values (package codec: JSON, msgpack,
// raw bytes). Stats returns the counters, grouped by tier and concern.
//
// # Values are shared
//
// NOTE: every L1 hit returns the same value. Do not modify a value (or what
// its pointers, slices or maps reach) after Set or after receiving it from
// the cache; for mutable types set Options.CopyOnRead, and each caller gets
// its own copy.
//
// # More
//
// The module's README.md has the production configuration, the promises in
// short and the measured figures. Its docs folder has the rest:
// docs/promises.md (every promise in full, what each bad input gets),
// docs/usage.md (per-call options, batches, resilience, tags, Expire and
// Clear, values, telemetry), docs/operations.md (client settings, keys in
// Redis, the bus, Secret, TLS, Cluster, outages, queued writes) and
// docs/leases.md (one load per key across the fleet).
package hybrid
