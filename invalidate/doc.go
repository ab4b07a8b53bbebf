// Package invalidate is the message bus that tells every instance of a hybrid
// cache that an entry changed, so that each one drops or swaps its in-process
// (L1) copy. It carries bytes over Redis pub/sub and says when messages may
// have been lost; the cache owns the message format.
//
// A [Bus] implements hybrid.Bus. One Bus holds one pub/sub connection (on
// Redis Cluster, one per master), shared by every subscription and so by
// every cache built on it; Publish goes through the client's ordinary
// connection pool.
//
// # Delivery
//
// Redis pub/sub is at most once: PUBLISH hands a message to the subscribers
// connected at that moment and keeps nothing, so a message sent while a
// subscriber is away is gone for good. The Bus cannot make delivery reliable,
// but it makes loss visible: whenever messages may have been lost, each
// subscriber's onLoss is called. Until onLoss is called, every message
// published on the channel after Subscribe returned reaches onMessage.
// Nothing is dropped by the Bus itself: it has no message buffer of its own,
// so a slow subscriber slows the bus down (and, past Redis's
// client-output-buffer-limit for pub/sub, gets the connection closed by
// Redis, which is reported as a loss).
//
// # Ordering
//
// Messages on one channel are delivered to each subscriber in the order Redis
// published them (on Redis Cluster, per slot: see below). Callbacks of all
// subscriptions run one at a time, on the Bus's goroutine, in arrival
// order (on Redis Cluster, one at a time per subscriber). Messages published by one client
// arrive in the order that client published them; messages from different
// clients arrive in the order Redis executed the PUBLISH commands, which is
// the order of the writes only when each write and its PUBLISH are one
// atomic step (one script: tier.Remote's Write with a message).
//
// # Disconnects
//
// go-redis quietly reconnects and re-subscribes a pub/sub connection, and
// pub/sub has no replay, so the Bus owns the connection's life instead. On any
// receive error, or when the connection stops answering (see
// [Options.HealthInterval]), it calls every subscriber's onLoss(false)
// (delivery has stopped), closes the connection, waits (exponential backoff
// with jitter, from [Options.ReconnectMin] up to [Options.ReconnectMax],
// back to the start once a connection stays up twice the wait before it),
// opens a new connection and subscribes to every current channel. When Redis
// confirms a channel, the subscribers on it get onLoss(true): messages may
// have been published while the Bus was away, and from then on delivery
// resumes. A panic in onMessage is reported as onLoss(true) too: that
// subscriber missed a message, and delivery goes on.
// Each outage brings each subscriber exactly these two calls, however many
// attempts it takes to reconnect. The Bus retries forever, until Close; it
// logs the outage rate-limited. A Subscribe made while the connection is
// down waits for it to come back (or for its context to end), and its
// subscriber is not told of that outage.
//
// # Redis Cluster
//
// On a Redis Cluster client (*redis.ClusterClient, or a type that embeds
// one) the Bus uses sharded pub/sub, SPUBLISH and SSUBSCRIBE, unless
// [Options.Classic] is set. A subscription to a channel is then a
// subscription to its shard channel in every hash slot ([ShardChannel]:
// the channel followed by a short tag in braces that hashes to the slot),
// or to the channel alone when its name has a hash tag of its own. Each
// shard channel lives on the master that owns its slot, so a script that
// writes a key announces it with SPUBLISH on the shard channel in the
// key's slot, from the key's own node, in the same atomic step; each
// master carries only the messages of its own slots, instead of every
// node carrying every message as a classic PUBLISH makes it; and a
// message goes from the writer's master straight to its subscribers,
// without crossing the cluster bus. Publish sends on the shard channel in
// the slot of the channel's name.
//
// The Bus owns one pub/sub connection per master (go-redis's own sharded
// PubSub re-sends every channel in one SSUBSCRIBE after a reconnect, which
// Redis refuses across slots, and it ignores a slot that moves). A manager
// goroutine reads the slot map (CLUSTER SLOTS) and sends each slot's
// SSUBSCRIBE to the connection to the slot's master: at the first
// Subscribe, whenever a subscription is lost, and every HealthInterval,
// which finds a slot that moved without notice. A subscription is lost
// when its connection fails (a master killed or failed over, a network
// cut, CLIENT KILL), when its master ends it because the slot left it (a
// migration or a failover: the SUNSUBSCRIBE Redis sends; counted in
// [Stats.Moved]), or when an SSUBSCRIBE meets MOVED. Any lost slot is a
// loss for the whole subscription: onLoss(false) once, and onLoss(true)
// once every slot is subscribed again on its current master. A slot with
// no master keeps the subscription lost, and the manager retries with
// backoff. A master that refuses connections is retried with backoff too.
//
// Messages of one slot arrive in the order its master published them.
// Messages of different slots come over different connections, each read
// by a goroutine of its own: a subscriber's callbacks still run one at a
// time, but in no order across slots.
//
// Redis keeps a subscription per shard channel: about 16384 per
// subscribed channel per instance (see docs/operations.md for what that
// costs Redis), and the first Subscribe sends 16384 SSUBSCRIBE commands,
// a fraction of a second on a LAN. A channel with a hash tag costs one.
//
// With [Options.Classic], or on any other client, the Bus uses classic
// pub/sub: a PUBLISH sent to any node of a cluster is broadcast to every
// node over the cluster bus, so a subscriber connected to any node
// receives it, at the cost of every node carrying every message. A Bus
// and the stores that publish on its channels must agree on the mode
// (l2.Options.Classic is the Store's side).
//
// # Callbacks
//
// onMessage and onLoss run on the Bus's goroutine and must not block: while
// one runs, no other message is read. Each subscriber gets its own copy of
// a message. A panic in a callback is recovered, logged and counted; a panic
// in onMessage is then reported to that subscriber as a loss.
//
// NOTE: a callback must not call Subscribe, Close, or its own subscription's
// unsubscribe: each waits for the Bus's goroutine, which is running the
// callback, and so would deadlock.
package invalidate
