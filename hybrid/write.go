package hybrid

import (
	"context"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"time"

	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds the write path: Set, Delete, Expire and Clear, which
// change the shared tier, announce the change and then update L1, and
// ClearL1, which leaves the shared tier as it is.

// Set stores v under key in both tiers and tells other instances. After
// Set returns nil, every Get on this instance sees v until it is changed
// again or expires. Errors from the shared tier or the bus are returned;
// with Options.QueueWrites, one wrapping ErrQueued says the write was
// queued for replay, and this instance sees v meanwhile. WithSkip leaves
// out L1 here, the shared tier or the announcement (see Skip).
func (c *Cache[V]) Set(ctx context.Context, key string, v V, opts ...EntryOption) error {
	if err := c.check(ctx, key); err != nil {
		return err
	}
	e, err := c.keyPolicyFor(&skipSet, key, opts)
	if err != nil {
		return err
	}
	if v, err = c.out(v, nil); err != nil {
		return err
	}
	return c.set(ctx, key, v, &e, "")
}

// set is Set after its checks, writing v with version ("" for none).
func (c *Cache[V]) set(ctx context.Context, key string, v V, e *policy, version string) error {
	return c.setLoaded(ctx, key, v, e, version, 0)
}

// setLoaded is set for a value whose load took took (see loadTime; 0: not
// loaded, or not wanted).
func (c *Cache[V]) setLoaded(ctx context.Context, key string, v V, e *policy, version string, took time.Duration) error {
	ttl, localTTL := c.lifetimes(e)
	var unknown error // a record knowTags could not make sure of
	if e.skip&SkipRemoteWrite == 0 {
		unknown = c.knowTags(ctx, e.tags)
	}
	b, err := c.encodeLoaded(key, v, ttl, e.tags, version, took)
	if err != nil {
		return err
	}
	lost := c.vers.losses.Load()
	tok := c.vers.bumpToken(key)
	here := e.skip&SkipRemoteWrite != 0 && c.remote != nil // L1 only
	if !here {
		if unknown != nil {
			// Not written, as a write that failed (the read that failed
			// is counted): returned, or queued.
			err = c.enqueue(c.pendingOf(key, b, e.physical(ttl), e.skip), fmt.Errorf("hybrid: set %q: %w", key, unknown))
		} else {
			err = c.writeAndAnnounce(ctx, key, b, e.physical(ttl), e.skip)
		}
		if err != nil && !errors.Is(err, ErrQueued) {
			c.vers.bump(key)
			c.local.Delete(key)
			return err
		}
	}
	// Written, or queued for replay: either way L1 here holds the value.
	// Bump again: a fill that read the old value before our write must not
	// store it after us. Anyone else's change of key or of every key since
	// tok means a newer change may exist, so we drop instead of store; a
	// bus loss meanwhile does not (see ownWrite).
	tok, ok := c.vers.ownWrite(tok, lost)
	if err != nil {
		e = queuedPolicy(e) // queued: L1 is the only place that holds v
	}
	if !ok {
		c.local.Delete(key)
	} else if !c.storeLocal(nil, key, loadedItem(described(item[V]{v: v}, b, e.tags, version, e.timed()), took, ttl), c.size(b), localTTL, tok, e) {
		c.local.Delete(key)
	}
	// A fill in progress read the old value: later callers must not join
	// it. Forgotten after L1 holds the new value, so that no caller in
	// between, finding the old entry due for a refresh, starts another.
	c.flights.Forget(key)
	if here {
		c.skipped(SkipRemoteWrite, 1)
		return c.announceKeys(ctx, OpSet, []string{key}, e.skip)
	}
	return err
}

// writeAndAnnounce writes b (nil: delete) to the shared tier for life and
// announces it, unless skip has SkipAnnounce. A write that fails is queued
// when Options.QueueWrites says so (see enqueue).
func (c *Cache[V]) writeAndAnnounce(ctx context.Context, key string, b []byte, life time.Duration, skip Skip) error {
	w := c.pendingOf(key, b, life, skip)
	if w.quiet {
		return c.enqueue(w, c.writeQuiet(ctx, w))
	}
	return c.enqueue(w, c.writeAndPublish(ctx, w))
}

// pendingOf returns the write of b (nil: delete) under key for life, and
// its announcement (none with SkipAnnounce in skip), as a Set or Delete
// of this instance makes it.
func (c *Cache[V]) pendingOf(key string, b []byte, life time.Duration, skip Skip) *pendingWrite {
	w := &pendingWrite{op: OpSet, name: key, rkey: c.prefix + key, seq: c.seqKey(key), b: b, life: life, own: true, stamp: stampEnvelope,
		m: message.Message{Op: message.OpSet, Origin: c.origin, Namespace: c.scope, Keys: []string{key}}}
	if b == nil {
		// A delete leaves a tombstone for TTL rather than nothing, so that a
		// fill that read the key before the delete cannot write its outdated
		// value back (its write-if-absent finds the tombstone).
		w.op, w.m.Op = OpDelete, message.OpDelete
		w.b, w.life = c.encodeTombstone(c.def.ttl), c.def.physical(c.def.ttl)
	} else if c.remote != nil && len(c.o.Secret) > 0 && len(b) <= c.o.InlineMaxBytes {
		w.m.Value = b
	}
	if skip&SkipAnnounce != 0 {
		w.quiet = true
		if c.bus != nil {
			c.skipped(SkipAnnounce, 1)
		}
	}
	return w
}

// writeQuiet makes w's write to the shared tier unannounced (SkipAnnounce).
func (c *Cache[V]) writeQuiet(ctx context.Context, w *pendingWrite) error {
	if c.remote == nil {
		return nil
	}
	if _, err := c.write(ctx, w.op, w.name, []tier.Write{{Key: w.rkey, Value: w.b, TTL: w.life, Seq: w.seq}}); err != nil {
		return fmt.Errorf("hybrid: %s: %w", about(w.op, w.name), err)
	}
	return nil
}

// Delete removes key from both tiers and tells other instances to drop it.
// L1 drops it even when the shared tier fails, whose error is returned
// (wrapping ErrQueued when Options.QueueWrites queued the delete). It takes
// no option but WithSkip, which may leave out the shared tier (the key is
// dropped from L1 only, here and, when announced, everywhere) or the
// announcement (see Skip).
func (c *Cache[V]) Delete(ctx context.Context, key string, opts ...EntryOption) error {
	if err := c.check(ctx, key); err != nil {
		return err
	}
	skip, err := c.onlySkip(&skipDelete, opts)
	if err != nil {
		return err
	}
	here := skip&SkipRemoteWrite != 0 && c.remote != nil // L1 only
	if !here {
		err = c.writeAndAnnounce(ctx, key, nil, 0, skip)
	}
	// After the shared tier: a fill that read the old value meanwhile must
	// not store it, and later callers must not join it.
	c.vers.bump(key)
	c.flights.Forget(key)
	c.local.Delete(key)
	if here {
		c.skipped(SkipRemoteWrite, 1)
		return c.announceKeys(ctx, OpDelete, []string{key}, skip)
	}
	return err
}

// Expire ends key's logical lifetime now, on every instance and in the
// shared tier, without removing the value: the next read of key on any
// instance misses (GetOrCreate loads anew), and if that load fails,
// fail-safe (FailSafeMaxAge) can still serve the old value, as after its
// natural expiry. Without fail-safe, reads just load anew.
//
// In the shared tier the value's logical expiry is rewritten and its
// physical lifetime (how long it stays for fail-safe) kept, in one atomic
// step with the announcement (a conditional Write that keeps the key's
// lifetime, KeepTTL);
// a write that lands between Expire's read and that step is kept as it is,
// as if it came after the Expire. L1, here and on every other instance,
// keeps the entry as a stale fallback for FailSafeMaxAge, or drops it when
// it has no fail-safe schedule. When the shared tier or the bus fails, L1
// here is expired anyway and the error is returned.
func (c *Cache[V]) Expire(ctx context.Context, key string) error {
	if err := c.check(ctx, key); err != nil {
		return err
	}
	err := c.expireShared(ctx, key)
	// After the shared tier: a fill that read the old value meanwhile must
	// not store it, and later callers must not join it.
	c.expireLocal(key)
	return err
}

// Clear removes every value of this namespace, on every instance and in
// the shared tier: from then on, a value written to the shared tier before
// the Clear is a miss on every instance, a new one included, and loads
// anew; values written after it are not affected. It costs one write and
// one message, whatever the number of keys (no SCAN, no DEL): like
// DeleteByTag, it records the time of the Clear, under the reserved key
// Namespace:\x00clear (kept without expiry), and a value read from the
// shared tier is compared with it. Every instance drops its L1 when the
// message arrives. Clocks should be in sync, as for DeleteByTag.
//
// The old values stay in the shared tier until their lifetimes end. When
// the shared tier or the bus fails, L1 here is cleared anyway and the
// error is returned. To drop L1 everywhere and keep the shared tier, use
// ClearL1.
func (c *Cache[V]) Clear(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.deleteTag(ctx, OpClear, clearTag)
}

// ClearL1 drops every L1 entry of this namespace on every instance: on
// this one, and, through the bus, on the others. The shared tier is left as
// it is, so instances read its values again (Clear empties both tiers).
func (c *Cache[V]) ClearL1(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	c.vers.bumpAll()
	c.flights.ForgetAll()
	c.local.Clear()
	if c.bus == nil {
		return nil
	}
	if err := c.publish(ctx, message.Message{Op: message.OpClear, Origin: c.origin, Namespace: c.scope}); err != nil {
		return fmt.Errorf("hybrid: ClearL1: announce: %w", err)
	}
	return nil
}
