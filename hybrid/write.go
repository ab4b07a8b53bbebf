package hybrid

import (
	"context"
	"fmt"
	"time"

	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds the write path: Set, Delete and Clear, which change the
// shared tier, announce the change and then update L1.

// Set stores v under key in both tiers and tells other instances. After
// Set returns nil, every Get on this instance sees v until it is changed
// again or expires. Errors from the shared tier or the bus are returned.
func (c *Cache[V]) Set(ctx context.Context, key string, v V, opts ...EntryOption) error {
	if err := c.check(ctx, key); err != nil {
		return err
	}
	e, err := c.o.policy(&c.def, opts)
	if err != nil {
		return err
	}
	if v, err = c.out(v, nil); err != nil {
		return err
	}
	return c.set(ctx, key, v, &e)
}

// set is Set after its checks.
func (c *Cache[V]) set(ctx context.Context, key string, v V, e *policy) error {
	ttl, localTTL := c.lifetimes(e)
	b, err := c.encode(key, v, ttl, e.tags)
	if err != nil {
		return err
	}
	tok := c.vers.bumpToken(key)
	if err := c.writeAndAnnounce(ctx, key, b, e.physical(ttl)); err != nil {
		c.vers.bump(key)
		c.local.Delete(key)
		return err
	}
	// Bump again: a fill that read the old value before our write must not
	// store it after us. Anyone else's bump since tok means a newer change
	// may exist, so we drop instead of store.
	tok, ok := c.vers.advance(tok)
	if !ok {
		c.local.Delete(key)
	} else if !c.storeLocal(nil, key, tagged(item[V]{v: v}, e.tags), c.size(b), localTTL, tok, e) {
		c.local.Delete(key)
	}
	// A fill in progress read the old value: later callers must not join
	// it. Forgotten after L1 holds the new value, so that no caller in
	// between, finding the old entry due for a refresh, starts another.
	c.flights.Forget(key)
	return nil
}

// writeAndAnnounce writes b (nil: delete) to the shared tier for life and
// announces it.
func (c *Cache[V]) writeAndAnnounce(ctx context.Context, key string, b []byte, life time.Duration) error {
	op := "set"
	m := message.Message{Op: message.OpSet, Origin: c.origin, Namespace: c.o.Namespace, Keys: []string{key}}
	if b == nil {
		// A delete leaves a tombstone for TTL rather than nothing, so that a
		// fill that read the key before the delete cannot write its outdated
		// value back (its write-if-absent finds the tombstone).
		op, m.Op = "delete", message.OpDelete
		b, life = c.encodeTombstone(c.def.ttl), c.def.physical(c.def.ttl)
	} else if c.ann != nil && len(c.o.Secret) > 0 && len(b) <= c.o.InlineMaxBytes {
		m.Value = b
	}
	return c.writeAndPublish(ctx, op, key, c.prefix+key, b, life, m, true)
}

// Delete removes key from both tiers and tells other instances to drop it.
// L1 drops it even when the shared tier fails, whose error is returned.
func (c *Cache[V]) Delete(ctx context.Context, key string) error {
	if err := c.check(ctx, key); err != nil {
		return err
	}
	err := c.writeAndAnnounce(ctx, key, nil, 0)
	// After the shared tier: a fill that read the old value meanwhile must
	// not store it, and later callers must not join it.
	c.vers.bump(key)
	c.flights.Forget(key)
	c.local.Delete(key)
	return err
}

// Clear drops every L1 entry of this namespace, on this instance and, via
// the bus, on every other. The shared tier is left as it is.
func (c *Cache[V]) Clear(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	c.vers.bumpAll()
	c.flights.ForgetAll()
	c.local.Clear()
	if c.bus == nil {
		return nil
	}
	if err := c.publish(ctx, message.Message{Op: message.OpClear, Origin: c.origin, Namespace: c.o.Namespace}); err != nil {
		return fmt.Errorf("hybrid: clear: announce: %w", err)
	}
	return nil
}
