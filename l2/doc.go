// Package l2 is the shared, Redis-backed second tier of a hybrid cache.
//
// A Store keeps byte values in Redis through a go-redis client that the
// caller creates, configures and closes: one server, a Sentinel-managed
// primary, or Redis Cluster. It knows nothing of codecs, envelopes or the
// first tier; package hybrid takes a Store as its Remote, BatchRemote,
// CompareAndSetter, Announcer, Journal, Replacer, NewerSetter,
// NewerJournal and Leaser.
//
// # Key layout
//
// A value is one plain Redis string under Options.Prefix + key, holding the
// bytes exactly as given. Its lifetime is the Redis expiry set with PX (in
// milliseconds); a ttl of zero or less stores it without expiry. Nothing
// else is written (no index keys, no metadata) but the invalidation log
// and the leases described below, when package hybrid asks for them. A
// miss is a missing key, and
// Get reports it as ok == false with a nil error. SetIfAbsent and
// SetManyIfAbsent write with SET NX, so that a cache fill never overwrites
// another instance's write.
//
// # Batches
//
// GetMany and SetManyIfAbsent cost one round trip (per node in a cluster):
// GetMany is one MGET, SetManyIfAbsent one pipeline of SET NX commands.
// Empty input returns at once, without a round trip. Batches are not
// atomic.
//
// There is no Delete: package hybrid deletes by writing a short tombstone
// with SetAndPublish, so that a fill that read the old value before the
// delete cannot write it back. A bare DEL would reopen that window.
//
// # Redis Cluster
//
// New recognises a *redis.ClusterClient (also one returned as a
// redis.UniversalClient by redis.NewUniversalClient, or embedded in another
// type). A multi-key command in a cluster must keep to one hash slot, so
// GetMany groups the keys by slot (CRC16 of the key, or of its {hash tag},
// modulo 16384) and sends one MGET per slot (a GET for a slot with one
// key), all in one pipeline that go-redis splits by node and runs in
// parallel. Keys that share a hash tag share a slot, and so a command.
// Single-key commands and the scripts of SetAndPublish, CompareAndSet,
// ReplaceAndPublish and the leases go to the master of the key's slot,
// following MOVED and ASK redirections as go-redis does.
//
// With a go-redis Ring, which shards by key on the client side, each key of
// a batch gets its own command in the pipeline.
//
// # Write and announce
//
// SetAndPublish runs one Lua script that writes the key and PUBLISHes a
// message in the same atomic step. Redis runs one script at a time, so for
// any one key the order of messages on a channel is the order of the
// writes, and once writes stop the last message a subscriber received
// describes what Redis holds. That is what lets peers swap in a
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
// # Invalidation log
//
// SetPublishAndLog is SetAndPublish that also appends the message's log
// entry (package hybrid's: the operation and keys or tag, never a value)
// to a capped invalidation log, a Redis stream, in the same script:
//
//	XADD <Prefix><log> MAXLEN ~ <maxLen> * m <entry>    -> id
//	SET <Prefix><key> <value> [PX <ttl>]
//	PUBLISH <channel> <2><len(id)><id><msg>
//
// So the log's order is the order of the writes and of their messages, and
// each message carries its entry's id, its position. An instance whose bus
// connection dropped reads the entries after the last position it applied
// with ReadLog, instead of flushing its first tier; OpenLog gives a new
// instance its starting position (creating the stream, with a marker entry
// that ReadLog skips, if it is missing). ReadLog reports whether the log
// still holds everything after a position: not if entries after it were
// trimmed, or the stream is missing, was created anew or ends before it
// (Redis restarted without it, or failed over to a replica that had not
// received it all); then the cache flushes as before.
//
// The log's name comes complete from package hybrid (its namespace's key
// prefix and "\x00log"); like every key it gets Options.Prefix, while the
// channel does not. It never expires: an unused namespace's log stays, at
// its capped size, until deleted.
//
// Its cost is one XADD per announced write, in the same round trip, and
// about maxLen entries of memory per log. Trimming is approximate (MAXLEN
// ~): Redis drops whole nodes of the stream, so a full log holds at least
// maxLen entries and up to about maxLen plus stream-node-max-entries (100
// by default). ReadLog is one script: EXISTS, XINFO STREAM and XRANGE.
//
// The log needs Redis 6.2 or later (exclusive XRANGE), and 7.0 to tell
// that a log read from its start is whole. It is kept on one server or a
// Sentinel-managed primary only: a script runs on one node, so on Redis
// Cluster (and with a go-redis Ring) SetPublishAndLog,
// SetIfNewerPublishAndLog, OpenLog and ReadLog
// return an error wrapping errors.ErrUnsupported without a round trip, by
// which package hybrid knows to keep to SetAndPublish and to flush its
// first tier when messages may have been lost.
//
// # Leases
//
// TakeLeases, ExtendLeases, ReleaseLeases and FillAndRelease keep load
// leases, by which package hybrid has one instance of a fleet load a key
// while the others wait for its value (hybrid.Options.LoadLease). A lease
// is a plain string under Options.Prefix + key (package hybrid names it:
// its namespace's prefix, "\x00lease:" and the cache key) that holds its
// holder's token, followed by '*' once a taker found it held (it is then
// asked for), and it always has an expiry, so that a holder that dies
// holds it no longer than its ttl:
//
//	take:    SET <lease> <token> NX PX <ttl>, then GET <key>;
//	         else mark it: SET <lease> <held>* PX <its PTTL>
//	         -> value, or time left and holder (<held>, without the '*')
//	extend:  if GET <lease> is <token> or <token>*: PEXPIRE <lease> <ttl> -> held
//	release: if GET <lease> is <token> or <token>*: DEL <lease>; then, unless
//	         it was <token> (no one asked for it), PUBLISH <channel> <msg>
//	fill:    SET <key> <value> NX PX <ttl> (or, given old, if GET <key> == <old>:
//	         SET <key> <value> PX <ttl>); then release, publishing (unless no
//	         one asked for the lease) one of two messages: stored or not -> stored
//
// A lease no longer held under the token (expired, or another holder's) may
// have been waited for, so its release publishes too; a release of leases
// no one asked for publishes nothing. Each is a small Lua script, so that
// its check and its write are one atomic step. The scripts of one call go
// in one pipeline by EVALSHA (those that meet NOSCRIPT are sent again by
// EVAL), so a call costs one round trip per node. The GET of a take reads
// the key the lease guards after the lease is set, so that a taker sees a
// value that a holder stored before it released its lease; the fill writes
// before it releases and publishes, so that whoever takes the lease or
// hears the message after it finds the value. A taker that finds a lease
// held learns its holder's token, so that it takes news of the lease only
// from that holder (hybrid puts the token in its signed messages), and can
// tell from the lease whether news that names the holder came after its
// release.
//
// On one server (or a Sentinel-managed primary) the take's script reads the
// guarded key itself, and the fill is one script over both keys: one round
// trip each, atomic. In Redis Cluster a lease key is generally in another
// hash slot than the key it guards, and a script may not span slots: each
// script goes to the master of its own key's slot, a take reads the guarded
// keys of the leases it took in a second round trip (as GetMany does; none
// if it took none), and a fill writes the key, then runs the release
// script, which publishes: two round trips, in that order. On one server
// ReleaseLeases is one script over every lease, which publishes in the same
// atomic step; in Redis Cluster each lease's script reports whether someone
// may wait for it, and the PUBLISH, if one may, is sent once the scripts on
// every node are done. A go-redis Ring is treated as Redis Cluster, except
// that the messages of ReleaseLeases and FillAndRelease are PUBLISH
// commands of their own, which the Ring sends to the channel's shard.
//
// # Failures and timeouts
//
// Every failure is returned, wrapped with the operation and key
// ("l2: get \"user:1\": ..."), so errors.Is and errors.As see go-redis's and
// the network's errors. A call cut short by its context reports the
// context's error too (errors.Is(err, context.DeadlineExceeded) or
// context.Canceled). Errors name keys and never the client's address,
// password or URL beyond what go-redis itself puts in a network error.
//
// Options.ReadTimeout (default 250 ms) bounds each read and
// Options.WriteTimeout (default 1 s) each write, as a deadline on ctx
// unless ctx ends sooner. Calls that start within 5 ms share one deadline,
// so a call costs no timer of its own (its deadline may come up to 5 ms
// early); a ctx cancelled during a call is seen by go-redis when the call
// starts and, after that, at the deadline at the latest. go-redis honours a ctx deadline, whatever its
// MaxRetries, in all that a call waits for before it has a connection: a
// free pooled connection, a new connection being dialled, and the back-off
// between retries. So a call to a dead address ends by its bound; with
// go-redis's defaults (3 retries, 5 dial attempts 100 ms apart) and no
// deadline it takes about 1.7 s. A ctx deadline does not reach two things:
//
//   - The socket, unless the client is built with ContextTimeoutEnabled:
//     true. Without it, a call on a connection to a stalled server (and the
//     handshake of a new one) waits for the client's ReadTimeout and
//     WriteTimeout, 5 s by default. Store.ReadBound reports which case
//     holds.
//   - The dial: go-redis dials on a goroutine of its own, which the call
//     stops waiting for at its deadline, and which goes on for up to
//     DialerRetries attempts of DialTimeout each while it holds one of the
//     pool's PoolSize turns. Against an address that drops packets, a burst
//     of calls can take every turn, and the calls after it fail at their
//     deadlines until those dials end.
//
// So for a cache, build the client along these lines:
//
//	rdb := redis.NewClient(&redis.Options{
//		Addr:                  addr,
//		ContextTimeoutEnabled: true,                   // the Store's bounds reach the socket
//		DialTimeout:           250 * time.Millisecond, // a dial outlives the call that started it
//		DialerRetries:         1,                      // one attempt per dial, not 5
//		ReadTimeout:           time.Second,            // backstop for calls with no deadline
//		WriteTimeout:          time.Second,
//		MaxRetries:            1,                      // one retry, for a connection the server closed
//	})
//
// redis.ClusterOptions, FailoverOptions, RingOptions and UniversalOptions
// have the same fields (a ClusterClient retries up to MaxRedirects times).
// Retries matter little to a cache: a failed read falls back to the loader
// and a failed write is returned; one retry covers an idle connection the
// server or a load balancer closed.
//
// A Store does no retries, caching or fallbacks of its own, and the caller
// decides what a failure means (package hybrid serves from its first tier
// and the loader on a failed read, and returns a failed write). A failed
// batch or write may have been partly or wholly applied: Redis may have run
// a command whose reply was lost.
//
// # Concurrency
//
// A Store is safe for concurrent use. It does not own its client: it has no
// Close, and the caller closes the client once it is done with every Store
// built on it.
package l2
