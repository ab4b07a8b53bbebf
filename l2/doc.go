// Package l2 is the shared, Redis-backed second tier of a hybrid cache: a
// Store implements the shared tier's contract (tier.Remote) over a
// go-redis client that the caller creates, configures and closes (one
// server, a Sentinel-managed primary, Redis Cluster, or a Ring). It knows
// nothing of codecs, envelopes or the first tier.
//
// # Key layout
//
// A value is one plain Redis string under Options.Prefix + key, holding the
// bytes as given, with its lifetime as the key's expiry (PX, whole
// milliseconds; none for a ttl of zero or less). A lease is a string too,
// under the prefix and the lease's name, holding its holder's token; the
// invalidation log is a stream under the prefix and Feed.Log; a sequence
// counter (Write.Seq) is a decimal string under the prefix and its name,
// without expiry. Nothing else is written. Feed.Channel is used as given.
//
// # Writes
//
// Write takes a batch. A write that asks for nothing but its value (Always
// or IfAbsent, without messages, log, lease, sequence counter or KeepTTL)
// is a plain SET or SET NX. Any other runs one Lua script, atomically, in this order:
//
//  1. read, writing nothing: the condition (EXISTS, GET == Old, or the
//     write times of IfNewer) and the lease (GET <lease>);
//  2. XADD <log> MAXLEN ~ <LogLen> * m <Log>, if a message goes out;
//  3. SET <key> <value> [PX <ttl> | KEEPTTL], if the condition held;
//  4. DEL <lease>, if it is held under the token (marked or not);
//  5. PUBLISH <channel> <msg>, positioned at the log entry if one was
//     added, else sequenced at the key's sequence counter if it names one
//     (SPUBLISH on Redis Cluster: see below).
//
// So a failing XADD (the log key holds another type) writes nothing, and
// for any key (and any keys that share a master) the order of messages on
// a channel and of log entries is the order of the writes. That lets peers
// swap in a value carried by a message: separate SET and PUBLISH commands
// from concurrent writers could interleave and leave a peer holding an
// older value than Redis. There is no delete: package hybrid writes a
// short tombstone instead, so that a fill that read the old value cannot
// write it back.
//
// # Batches
//
// A Get of one key is a GET, of more one MGET; the writes of a batch, and
// the scripts of TakeLeases and ExtendLeases, go in one pipeline: one
// round trip (per node). Scripts go by EVALSHA, and those that meet
// NOSCRIPT (a server restarted, or its scripts flushed) again by EVAL, in
// order. Empty input returns at once, without a round trip. A batch is not
// atomic, but for one announced as a whole (Feed.Msg): on one server its
// writes, its log entry (Feed.Entry) and its message go as one MULTI/EXEC
// transaction, scripts by EVAL (Info().AtomicBatch); on Redis Cluster or a
// Ring the message is published once every write of the batch, on every
// node, is done, in a round trip of its own.
//
// # Redis Cluster and Ring
//
// New recognises a *redis.ClusterClient or *redis.Ring, also behind a
// redis.UniversalClient or embedded in another type. A multi-key command
// must keep to one hash slot, so Get groups keys by slot (CRC16 of the key
// or its {hash tag}, modulo 16384): one MGET per slot, in one pipeline that
// go-redis splits by node. A script's keys must share a slot too: a lease
// in its key's slot (package hybrid names leases with their key's hash
// tag) is taken with the read of its key, and released by the write's own
// script, as on one server; a lease in another slot costs a second round
// trip: a write with it is made first, then the lease is released by a
// script on its own master, which publishes, and a take reads the guarded
// keys after it.
//
// On Redis Cluster messages go over sharded pub/sub (Info().Sharded),
// unless Options.Classic: a script SPUBLISHes on the channel's shard
// channel in the slot of its first key (invalidate.ShardChannel), from
// that key's master, and a message sent on its own (a batch's, a
// ReleaseLeases') goes on the shard channel in the slot of the channel's
// name. A subscriber must subscribe every slot's shard channel, as
// invalidate.Bus does on the same client. While a slot migrates, a write
// of a key that has moved is asked (ASK) to the importing master, whose
// SPUBLISH reaches no subscriber until the move ends: the Store then
// publishes the write's messages again on the slot's owner. To see such a
// write, it adds a hook (redis.Hook) to the client's node clients, those
// it makes later (OnNewNode) and those it has (ForEachShard, at the first
// announced write). With Options.Classic, a PUBLISH from a script reaches
// every node over the cluster bus. With a
// Ring, which shards by key on the client side, each key of a batch gets
// its own command, a lease's message is a PUBLISH of its own (to the
// channel's shard), and a write's other messages reach its key's shard only.
//
// NOTE: message order holds between writes on one server: for one key, and
// for keys that share a master (over sharded pub/sub, a slot). While a
// slot migrates, or after a failover, two writes of one key may run on
// different masters; over sharded pub/sub the slot's subscriptions end
// then (Redis ends them when the slot leaves a master), which a Bus
// reports as a loss.
//
// # Invalidation log
//
// A write with Log set appends it, when its message goes out, to a capped
// stream in the same script, and publishes the message positioned at the
// new entry's id: byte 2, the id's length, the id, the message. An instance
// whose bus connection dropped reads the entries after the last position
// it applied with ReadLog; ReadLog with no position opens the log (creating
// it, with a marker entry that reads skip, if missing) and returns its
// last position. ReadLog reports whether the log holds everything after a
// position: not if entries after it were trimmed, or the stream is missing,
// was created anew or ends before it (Redis restarted, or failed over to a
// replica that had not received it all). Trimming is approximate (MAXLEN
// ~): the log holds LogLen entries at least, up to about LogLen plus
// stream-node-max-entries (100 by default). It needs Redis 6.2 (7.0 to
// tell that a log read from its start is whole) and one server: on Redis
// Cluster or a Ring a script runs on one node, so Info().Log is false and
// ReadLog and a write with Log fail with errors.ErrUnsupported.
//
// # Leases
//
// A lease lets one instance of a fleet load a key while the others wait.
// TakeLeases writes the token with SET NX PX, then reads the key the lease
// guards; a taker that finds it held marks it (its token and '*', same
// expiry) and learns its holder and time left. ExtendLeases resets the
// expiry of leases still held under the token. ReleaseLeases, and a write
// with Lease, delete the leases still held under the token, and announce
// only if someone may wait: the lease was marked, or is no longer held
// under the token (expired, or another's). A lease always has an expiry,
// so a holder that dies holds it no longer than its ttl.
//
// # Time bounds and failures
//
// Options.ReadTimeout (default 250 ms) bounds each read, Options.WriteTimeout
// (default 1 s) each other call, as a deadline on ctx unless ctx ends
// sooner; calls that start within 5 ms share one deadline and timer. A
// deadline ends waits for a dial, a pooled connection or a retry, but it
// reaches the socket only if the client is built with ContextTimeoutEnabled:
// true; without it a call to a stalled server waits for the client's own
// ReadTimeout (5 s by default). Info().ReadBound is the bound that holds:
// ReadTimeout, else the client's own ReadTimeout (with a line of
// Info().Advice when that is longer), else 0. The Store does not read
// through a (*redis.Client).WithTimeout clone, which would bound the socket
// whatever the options: in go-redis v9.23 such a clone runs none of the
// hooks added to the client (tracing, metrics), and would miss those added
// later. A call that fails is returned as "l2: <op> <key>: <cause>", with
// the context's error when ctx ended; it may have been applied all the
// same. The Store does no retries or fallbacks of its own.
package l2
