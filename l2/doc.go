// Package l2 is the shared, Redis-backed second tier of a hybrid cache.
//
// A Store keeps byte values in Redis through a go-redis client that the
// caller creates, configures and closes: one server, a Sentinel-managed
// primary, or Redis Cluster. It knows nothing of codecs, envelopes or the
// first tier; package hybrid passes a Store in as its Remote, BatchRemote
// and Announcer.
//
// # Key layout
//
// A value is one plain Redis string under Options.Prefix + key, holding the
// bytes exactly as given. Its lifetime is the Redis expiry set with PX (in
// milliseconds); a ttl of zero or less stores it without expiry. Nothing
// else is written: no index keys, no metadata. A miss is a missing key, and
// Get reports it as ok == false with a nil error. SetIfAbsent and
// SetManyIfAbsent write with SET NX, so that a cache fill never overwrites
// another instance's write.
//
// # Batches
//
// GetMany, SetMany, SetManyIfAbsent and Delete with many keys cost one round
// trip (per node in a cluster): GetMany is one MGET, Delete one DEL, and
// SetMany and SetManyIfAbsent one pipeline of SETs. Empty input returns at
// once, without a round trip. Batches are not atomic.
//
// # Redis Cluster
//
// New recognises a *redis.ClusterClient (also one returned as a
// redis.UniversalClient by redis.NewUniversalClient, or embedded in another
// type). A multi-key command in a cluster must keep to one hash slot, so
// GetMany and Delete group the keys by slot (CRC16 of the key, or of its
// {hash tag}, modulo 16384) and send one MGET or DEL per slot (a GET for a
// slot with one key), all in one pipeline that go-redis splits by node and
// runs in parallel. Keys that
// share a hash tag share a slot, and so a command. Single-key commands and
// the scripts of SetAndPublish and DeleteAndPublish go to the master of the
// key's slot, following MOVED and ASK redirections as go-redis does.
//
// With a go-redis Ring, which shards by key on the client side, each key of
// a batch gets its own command in the pipeline.
//
// # Write and announce
//
// SetAndPublish and DeleteAndPublish each run one Lua script that writes the
// key and PUBLISHes a message in the same atomic step. Redis runs one script
// at a time, so for any one key the order of messages on a channel is the
// order of the writes, and once writes stop the last message a subscriber
// received describes what Redis holds. That is what lets peers swap in a
// value carried by a message instead of only dropping their copy. Separate
// SET and PUBLISH commands from concurrent writers could interleave, leaving
// a peer holding an older value than Redis.
//
// The key is passed as KEYS[1], so in Redis Cluster the script runs on the
// master that owns the key. A classic PUBLISH from a script is forwarded to
// every node over the cluster bus, in the order it was made, so a subscriber
// connected to any node receives the messages in write order.
//
// NOTE: ordering holds between writes that run on the same server: for one
// key, and for keys that share a master. Messages about keys on different
// masters may reach a subscriber in any order relative to each other. While
// a slot migrates to another master, or after a failover, two writes of one
// key may run on different masters and their messages may arrive out of
// order too.
//
// # Failures and timeouts
//
// Every failure is returned, wrapped with the operation and key
// ("l2: get \"user:1\": ..."), so errors.Is and errors.As see go-redis's and
// the network's errors. A call cut short by its context reports the
// context's error too (errors.Is(err, context.DeadlineExceeded) or
// context.Canceled). Errors name keys and never the client's address,
// password or URL beyond what go-redis itself puts in a network error.
// Options.Timeout bounds calls whose context has no earlier deadline; see its
// NOTE on go-redis's ContextTimeoutEnabled.
//
// A Store does no retries, caching or fallbacks of its own: go-redis retries
// per its MaxRetries, and the caller decides what a failure means (package
// hybrid serves from its first tier and the loader on a failed read, and
// returns a failed write). A failed batch or write may have been partly or
// wholly applied: Redis may have run a command whose reply was lost.
//
// # Concurrency
//
// A Store is safe for concurrent use. It does not own its client: it has no
// Close, and the caller closes the client once it is done with every Store
// built on it.
package l2
