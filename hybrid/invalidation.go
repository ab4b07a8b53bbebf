package hybrid

import (
	"context"
	"fmt"
	"time"

	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds the bus: publishing this instance's changes and applying
// other instances' messages and losses to L1.

// Bus carries invalidation messages between instances, such as
// *invalidate.Bus over Redis pub/sub. It is a byte pipe: the cache owns the
// message format.
//
// Subscribe returns once the subscription is active, so that a message
// published after it returns is delivered. onMessage and onLoss run one at a
// time, in arrival order, on the bus's goroutine, and must not block. onLoss
// says that messages may have been lost: onLoss(false) that delivery has
// stopped (the connection dropped), onLoss(true) that messages were lost
// and delivery goes on (the connection was restored, or a message could not
// be handed over). After unsubscribe returns, neither is called again.
type Bus interface {
	Publish(ctx context.Context, channel string, msg []byte) error
	Subscribe(ctx context.Context, channel string, onMessage func(msg []byte), onLoss func(restored bool)) (unsubscribe func(), err error)
}

// encodeMsg returns m in the format of the bus, stamped with its send time
// (now, unless Options.NoSendTime), by which receivers measure its lag
// (see InvalidationStats.Lag).
// Every message the cache sends is encoded here.
func (c *Cache[V]) encodeMsg(m message.Message) []byte {
	if !c.o.NoSendTime {
		m.Sent = time.Now().UnixNano()
	}
	return message.Encode(m, c.o.Secret)
}

// publish sends m on the bus, as a call to the shared tier (see call).
func (c *Cache[V]) publish(ctx context.Context, m message.Message) error {
	msg := c.encodeMsg(m)
	if err := c.call(ctx, OpPublish, "", func(ctx context.Context) error { return c.bus.Publish(ctx, c.o.Channel, msg) }); err != nil {
		c.n.publishErrors.Add(1)
		return err
	}
	c.n.published.Add(1)
	return nil
}

// announceKeys tells other instances that keys changed (op: a set or a
// delete) here only, not in the shared tier (SkipRemoteWrite): a plain
// publish of a message that names them without values, not logged, so
// that they drop their copies. With SkipAnnounce in skip, or without a
// Bus, it tells no one.
func (c *Cache[V]) announceKeys(ctx context.Context, op Op, keys []string, skip Skip) error {
	if c.bus == nil {
		return nil
	}
	if skip&SkipAnnounce != 0 {
		c.skipped(SkipAnnounce, len(keys))
		return nil
	}
	m := message.Message{Op: message.OpSet, Origin: c.origin, Namespace: c.scope, Keys: keys}
	if op == OpDelete || op == OpDeleteMany {
		m.Op = message.OpDelete
	}
	if c.feed.Channel != "" {
		c.echo.sentMany(keys)
	}
	if err := c.publish(ctx, m); err != nil {
		name := ""
		if len(keys) == 1 {
			name = keys[0]
		}
		return fmt.Errorf("hybrid: %s: announce: %w", about(op, name), err)
	}
	return nil
}

// onMessage applies another instance's invalidation to L1. It runs on the
// bus's goroutine.
func (c *Cache[V]) onMessage(b []byte) {
	if leaseNewsOp(message.OpOf(b)) && c.leases.waiting.Load() == 0 {
		return // a lease holder's news, and no fill here waits for any
	}
	m, err := message.Decode(b, c.o.Secret)
	if err != nil || m.Namespace != c.scope {
		c.n.invalid.Add(1)
		c.log.log(logBus, "hybrid: invalidation message ignored", "namespace", c.o.Namespace, "err", err)
		return
	}
	if !c.admit(m) {
		if m.Origin == c.origin {
			c.noteSeq(&m) // our own write: L1 reflects it
		}
		return
	}
	if leaseNewsOp(m.Op) {
		// A lease holder's news changes nothing held here: it is for the
		// fills waiting for its keys.
		c.onLeaseMessage(m)
		return
	}
	// Counted once applied, so a count seen means L1 reflects the message.
	op, keys := changeOf(&m), m.Keys
	if op == OpClear {
		keys = nil // a Clear's message names its tag
	}
	defer c.invalidated(op, keys)
	c.apply(m)
	c.noteApplied(m)
	c.noteSeq(&m)
	c.recordLag(&m)
}

// noteApplied records m's position as one a replay may start after, unless
// a Secret is set and m is not signed: a position is outside the signature
// (see message.Positioned), and is then checked against the log before a
// replay starts after it (see seenMsg).
func (c *Cache[V]) noteApplied(m message.Message) {
	if len(c.o.Secret) == 0 || m.Authentic {
		c.loss.note(m)
	}
}

// leaseNewsOp reports whether op is a lease holder's news: filled,
// load_failed, not_found or not_stored.
func leaseNewsOp(op message.Op) bool {
	return op == message.OpFilled || op == message.OpLoadFailed || op == message.OpNotFound || op == message.OpNotStored
}

// admit reports whether m, decoded, is to be applied: not one of our own
// messages (only noted), and with a Secret set, an unsigned message only if
// it does no more than drop the keys it names. A position is noted only
// from a message that is applied or our own (see noteApplied).
func (c *Cache[V]) admit(m message.Message) bool {
	// An expire names keys and does less than dropping them; a filled
	// message without its values only makes waiting fills read them.
	keysOnly := m.Op == message.OpSet || m.Op == message.OpDelete || m.Op == message.OpExpire || m.Op == message.OpFilled ||
		m.Op == message.OpExtend
	if len(c.o.Secret) > 0 && !m.Authentic {
		// Unsigned, a message may at most drop the keys it names: a clear or
		// a tag delete (a Clear's too) is ignored, and so is one that claims
		// to be ours.
		c.n.unauthentic.Add(1)
		if !keysOnly || m.Origin == c.origin {
			return false
		}
	}
	if m.Origin == c.origin {
		c.n.ownIgnored.Add(1)
		if keysOnly && m.Op != message.OpFilled && m.Op != message.OpExtend && c.remote != nil {
			c.echo.backMany(m.Keys, m.Position) // a tag's message names no key we wrote
		}
		c.noteApplied(m)
		return false
	}
	return true
}

// apply applies another instance's change to L1.
func (c *Cache[V]) apply(m message.Message) {
	switch m.Op {
	case message.OpTag:
		c.onTagMessage(m)
		c.leases.postAll()
	case message.OpExpire:
		for _, key := range m.Keys {
			c.expireLocal(key)
			c.leases.post(key, leaseNews{})
		}
	case message.OpExtend:
		c.onExtend(m)
	case message.OpClear:
		c.vers.bumpAll()
		c.flights.ForgetAll()
		c.local.Clear()
		c.leases.postAll()
	case message.OpSet, message.OpDelete:
		var one [1][]byte
		vals := c.carried(m, one[:0])
		for i, key := range m.Keys {
			tok := c.vers.bumpToken(key)
			c.flights.Forget(key)
			c.leases.post(key, leaseNews{}) // a fill waiting for a lease reads it
			if vals != nil && vals[i] != nil && c.echo.settled(key) && c.swap(key, vals[i], tok) {
				continue
			}
			c.local.Delete(key)
		}
	}
}

// carried returns the values a set message m carries, one per key (nil for
// a key whose value it does not carry), or nil when it carries none: the
// envelope itself for one key, packed by message.PackValues for more (a
// SetMany's). Values that do not unpack are dropped with their keys. one
// is room for the value of one key.
func (c *Cache[V]) carried(m message.Message, one [][]byte) [][]byte {
	switch {
	case m.Op != message.OpSet || m.Value == nil:
		return nil
	case len(m.Keys) == 1:
		return append(one, m.Value)
	}
	vals, err := message.UnpackValues(m.Value, len(m.Keys))
	if err != nil {
		c.n.decodeErrors.Add(1)
		return nil
	}
	return vals
}

// onTagMessage applies another instance's DeleteByTag or Clear (which
// names clearTag). A signed message carries the delete's time; otherwise
// the record is read again when needed.
func (c *Cache[V]) onTagMessage(m message.Message) {
	for _, tag := range m.Keys {
		if t, ok := decodeTagRecord(m.Value); ok && m.Authentic {
			t = min(t, time.Now().Add(time.Minute).UnixMilli())
			c.tags.learn(c.tags.currentEpoch(), tag, t, recordUntil(&c.o, tag, t))
		} else {
			c.tags.forget(tag)
		}
		c.dropTagged(tag)
	}
}

// swap replaces key's L1 entry, if there is one, with the value carried by
// a message, if that value was written in a later millisecond than the
// entry was stored here or written (by the writer's clock against ours).
// An entry not known to be older is dropped instead (the next read goes to
// the shared tier), so that a message recorded and published again cannot
// bring an old value back, however close in time the write it announced
// and the next one were: the copy of the next was stored (or written)
// after that next write, so no later than the recorded one's millisecond
// it is not. A write in the same millisecond as the copy costs a read of
// the shared tier instead of a swap.
// It reports false when the value does not decode or is already stale. If
// the key changed here while we swapped (our own Set, say), the entry is
// dropped: the swapped value may be the older one.
func (c *Cache[V]) swap(key string, b []byte, tok token) bool {
	var it item[V]
	p := c.keyDefaults(key)
	ttl, written, err := c.decodeInto(&it, b, p.timed())
	if err != nil {
		c.n.decodeErrors.Add(1)
		return false
	}
	if ttl <= 0 || c.tagKnownDeleted(it.tags(), written) {
		return false
	}
	size := c.size(b)
	it, life := c.stamp(it, size, min(ttl, p.localTTL), p)
	swapped := false
	c.local.Update(key, func(old item[V]) (item[V], uint32, time.Duration, bool) {
		// Write times and store stamps are whole milliseconds.
		stored := time.Now().Add(-c.storedAge(old.stored)).UnixNano()
		if written/1e6 <= max(stored, old.writtenAt())/1e6 {
			return old, 0, 0, true // drop
		}
		swapped = true
		return it, weight(key, it, size), life, true
	})
	if swapped {
		c.n.swapped.Add(1)
	}
	if !c.vers.valid(tok) {
		c.local.Delete(key)
	}
	return true
}
