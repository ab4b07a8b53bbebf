// Package invalidate is the message bus that tells every instance of a hybrid
// cache that an entry changed, so that each one drops or swaps its in-process
// (L1) copy. It carries bytes over Redis pub/sub and says when messages may
// have been lost; the cache owns the message format.
//
// A [Bus] implements hybrid.Bus. One Bus holds one pub/sub connection, shared
// by every subscription and so by every cache built on it; Publish goes
// through the client's ordinary connection pool.
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
// published them. Callbacks of all subscriptions run one at a time, on the
// Bus's goroutine, in arrival order. Messages published by one client
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
// The Bus uses classic PUBLISH and SUBSCRIBE in Redis Cluster too, not the
// sharded SPUBLISH and SSUBSCRIBE. A classic PUBLISH sent to any node is
// broadcast to every node over the cluster bus, so a subscriber connected to
// any node receives it. The cost: every node carries every message. The
// benefit: a script that writes a key and publishes in one atomic step works
// whatever node owns the key, which sharded pub/sub cannot promise, as a
// sharded channel lives on the node that owns the channel's slot, not the
// key's. Invalidation traffic is small, so the cost is usually small too.
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
