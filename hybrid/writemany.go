package hybrid

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hybridcache/hybridcache/internal/keyslot"
	"github.com/hybridcache/hybridcache/internal/message"
	"github.com/hybridcache/hybridcache/tier"
)

// This file holds the batch write path: SetMany and DeleteMany, which make
// the writes of many keys in one call to the shared tier, announced by one
// message, and then update L1 as Set and Delete do key by key.

// SetMany stores each value of items under its key in both tiers and tells
// other instances, as Set does key by key, in one call to the shared tier
// (one round trip per Redis node) announced by one message for the whole
// batch, logged as one entry. The options apply to every value (WithTTL's
// jitter is drawn per key). After SetMany returns nil, every Get on this
// instance sees the new values.
//
// Every key and value is checked before anything is written: a key that
// no call accepts (see ErrEmptyKey, ErrReservedKey, ErrKeyTooLong), one
// whose per-key options (Options.PerKey) are refused, a value the
// codec refuses or one larger than MaxValueBytes (ErrValueTooLarge) fails
// the whole call with an error naming each bad item (and wrapping each
// sentinel), and nothing is written. A batch may hold up to 65,536 keys.
//
// With a Secret, other instances swap in the values the message carries
// (up to InlineMaxBytes in all, the others dropped) where the Remote makes
// the batch atomic with its message (tier.Info.AtomicBatch: l2.Store on
// one Redis server); on Redis Cluster the message follows the writes of
// every node and carries no values: other instances drop the keys and read
// them again.
//
// When the shared tier fails, the keys it reports not written leave L1 and
// the error is returned; with Options.QueueWrites each of them is queued
// as a write of its own (newest per key, replayed key by key, each with
// its own message), keeps its new value in L1 meanwhile, and the error
// wraps ErrQueued if every one was queued. WithSkip leaves out L1 here,
// the shared tier or the announcement, as for Set.
func (c *Cache[V]) SetMany(ctx context.Context, items map[string]V, opts ...EntryOption) error {
	if err := c.checkBatch(ctx); err != nil {
		return err
	}
	e, err := c.policyFor(&skipSetMany, opts)
	if err != nil {
		return err
	}
	b := &writeBatch[V]{op: OpSetMany, keys: slices.Sorted(maps.Keys(items))}
	if len(b.keys) == 0 {
		return nil
	}
	if len(b.keys) > message.MaxKeys {
		return fmt.Errorf("hybrid: SetMany: %d keys, at most %d", len(b.keys), message.MaxKeys)
	}
	// Every key, its options and its value are checked, so that the error
	// names each bad item.
	valid, errs := c.keyErrors(b.keys)
	valid, err = c.perKey(&e, valid, opts)
	if err != nil {
		errs = append(errs, err)
	}
	n := len(b.keys)
	b.bs, b.lives, b.vs, b.localTTLs = make([][]byte, n), make([]time.Duration, n), make([]V, n), make([]time.Duration, n)
	j := 0 // valid[j] is the next key whose value is to be checked
	for i, key := range b.keys {
		if j == len(valid) || valid[j] != key {
			continue // refused above
		}
		j++
		p := e.of(key)
		v, err := c.out(items[key], nil)
		ttl, localTTL := c.lifetimes(p)
		if err == nil {
			if b.unknown == nil {
				b.unknown = c.knowTags(ctx, p.tags)
			}
			b.bs[i], err = c.encode(key, v, ttl, p.tags, "")
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.vs[i], b.lives[i], b.localTTLs[i] = v, p.physical(ttl), localTTL
	}
	if len(errs) > 0 {
		return fmt.Errorf("hybrid: SetMany: nothing written: %w", errors.Join(errs...))
	}
	return c.writeMany(ctx, b, &e)
}

// DeleteMany removes keys from both tiers and tells other instances to drop
// them, as Delete does key by key, in one call to the shared tier (one
// round trip per Redis node) announced by one message, logged as one
// entry. Duplicate keys are deleted once. A key that no call accepts fails
// the whole call, before anything is deleted, as in SetMany. L1 drops the
// keys even when the shared tier fails, whose error is returned; queueing
// (QueueWrites) is as in SetMany. It takes no option but WithSkip, as
// Delete does.
func (c *Cache[V]) DeleteMany(ctx context.Context, keys []string, opts ...EntryOption) error {
	if err := c.checkBatch(ctx); err != nil {
		return err
	}
	skip, err := c.onlySkip(&skipDeleteMany, opts)
	if err != nil {
		return err
	}
	b := &writeBatch[V]{op: OpDeleteMany, keys: slices.Compact(slices.Sorted(slices.Values(keys)))}
	if err := c.checkKeys("DeleteMany", b.keys); err != nil || len(b.keys) == 0 {
		return err
	}
	tomb, life := c.encodeTombstone(c.def.ttl), c.def.physical(c.def.ttl)
	b.bs, b.lives = make([][]byte, len(b.keys)), make([]time.Duration, len(b.keys))
	for i := range b.keys {
		b.bs[i], b.lives[i] = tomb, life
	}
	e := c.def
	e.skip = skip
	return c.writeMany(ctx, b, &e)
}

// writeBatch is the writes of a SetMany or DeleteMany, by key, sorted.
type writeBatch[V any] struct {
	op    Op // OpSetMany or OpDeleteMany
	keys  []string
	bs    [][]byte        // the envelopes, or the tombstones
	lives []time.Duration // their lifetimes in the shared tier
	// vs and localTTLs are, for a SetMany, the values L1 stores and for
	// how long.
	vs        []V
	localTTLs []time.Duration
	// unknown, for a SetMany, is why a record its values carry could not
	// be made sure of (see knowTags): then nothing is written.
	unknown error
}

func (b *writeBatch[V]) del() bool { return b.op == OpDeleteMany }

// checkKeys returns an error naming each of keys that no call accepts, or
// nil. A batch is refused whole: call names it.
func (c *Cache[V]) checkKeys(call string, keys []string) error {
	if _, errs := c.keyErrors(keys); len(errs) > 0 {
		return fmt.Errorf("hybrid: %s: nothing written: %w", call, errors.Join(errs...))
	}
	if len(keys) > message.MaxKeys {
		return fmt.Errorf("hybrid: %s: %d keys, at most %d", call, len(keys), message.MaxKeys)
	}
	return nil
}

// keyErrors returns keys without those no call accepts (see checkKey), and
// an error naming each of those.
func (c *Cache[V]) keyErrors(keys []string) (valid []string, errs []error) {
	valid = keys
	for i, key := range keys {
		if err := c.checkKey(key); err != nil {
			if len(errs) == 0 {
				valid = slices.Clone(keys[:i])
			}
			errs = append(errs, fmt.Errorf("key %q: %w", key, err))
		} else if len(errs) > 0 {
			valid = append(valid, key)
		}
	}
	return valid, errs
}

// writeMany makes b: the shared tier's writes in one call (unless e.skip
// has SkipRemoteWrite, or there is no Remote: then a message names the
// keys), then L1, key by key, as set and Delete do.
func (c *Cache[V]) writeMany(ctx context.Context, b *writeBatch[V], e *policy) error {
	lost := c.vers.losses.Load()
	toks := c.vers.bumpMany(b.keys)
	shared := c.remote != nil && e.skip&SkipRemoteWrite == 0
	kept := make([]bool, len(b.keys)) // written, or queued for replay
	var err error
	var stored []bool
	if shared {
		if b.unknown != nil {
			err = b.unknown // not written, as a write that failed (see knowTags)
		} else {
			stored, err = c.writeShared(ctx, b, e.skip)
		}
		kept, err = c.failedMany(b, stored, err, e.skip)
	} else {
		for i := range kept {
			kept[i] = true
		}
	}
	// Bump again, as set does: a fill that read an old value before our
	// writes must not store it after us.
	ok := c.vers.ownWriteMany(toks, lost)
	lb := c.local.Batch()
	for i, key := range b.keys {
		p := e.of(key)
		if shared && err != nil && kept[i] && (i >= len(stored) || !stored[i]) {
			p = queuedPolicy(p) // queued: L1 is the only place that holds it
		}
		if b.del() || !kept[i] || !ok[i] ||
			!c.storeLocal(lb, key, described(item[V]{v: b.vs[i]}, b.bs[i], p.tags, "", p.timed()), c.size(b.bs[i]), b.localTTLs[i], toks[i], p) {
			c.local.Delete(key)
		}
		c.flights.Forget(key)
	}
	lb.Done()
	if shared {
		return err
	}
	if c.remote != nil {
		c.skipped(SkipRemoteWrite, len(b.keys))
	}
	if err := c.announceKeys(ctx, b.op, b.keys, e.skip); err != nil {
		if c.remote == nil && !b.del() {
			// As Set without a Remote: a write not announced is dropped.
			for _, key := range b.keys {
				c.vers.bump(key)
				c.local.Delete(key)
			}
		}
		return err
	}
	return nil
}

// queuedPolicy is e for the L1 store of a write queued for replay
// (QueueWrites), which L1 keeps even under SkipL1Write: until its replay,
// no other tier holds it.
func queuedPolicy(e *policy) *policy {
	if e.skip&SkipL1Write == 0 {
		return e
	}
	p := *e
	p.skip &^= SkipL1Write
	return &p
}

// writeShared makes b's writes in one call to the shared tier, announced
// by one message for the batch (unless skip has SkipAnnounce): as the
// write's own for a batch of one key, as Feed.Msg for more, which then
// carries the values only where the Remote makes the batch atomic with it.
func (c *Cache[V]) writeShared(ctx context.Context, b *writeBatch[V], skip Skip) ([]bool, error) {
	ws := make([]tier.Write, len(b.keys))
	for i, key := range b.keys {
		ws[i] = tier.Write{Key: c.prefix + key, Value: b.bs[i], TTL: b.lives[i], Seq: c.seqKey(key)}
	}
	f := c.feed
	if c.bus != nil && skip&SkipAnnounce != 0 {
		c.skipped(SkipAnnounce, len(b.keys))
	}
	if f.Channel != "" && skip&SkipAnnounce == 0 {
		m := message.Message{Op: message.OpSet, Origin: c.origin, Namespace: c.scope, Keys: b.keys}
		if b.del() {
			m.Op = message.OpDelete
		} else if len(c.o.Secret) > 0 && (len(b.keys) == 1 || c.o.info.AtomicBatch || (c.o.info.AtomicSlotBatch && c.oneSlot(ws))) {
			m.Value = c.inlined(b.bs)
		}
		msg, entry := c.announced(m)
		if len(ws) == 1 {
			ws[0].Msg, ws[0].Log = msg, entry
		} else {
			f.Msg, f.Entry = msg, entry
		}
		c.echo.sentMany(b.keys)
	}
	name := ""
	if len(b.keys) == 1 {
		name = b.keys[0]
	}
	stored, err := c.writeFeed(ctx, b.op, name, ws, f)
	if err != nil {
		return stored, fmt.Errorf("hybrid: %s of %d keys: %w", b.op, len(b.keys), err)
	}
	if f.Msg != nil || ws[0].Msg != nil {
		c.n.published.Add(1)
	}
	return stored, nil
}

// inlined returns the values a batch's message carries: for one key its
// envelope, if within InlineMaxBytes; for more, bs packed by
// message.PackValues, each while their total stays within InlineMaxBytes
// (the others empty: receivers drop those keys); nil for none.
func (c *Cache[V]) inlined(bs [][]byte) []byte {
	if len(bs) == 1 {
		if len(bs[0]) <= c.o.InlineMaxBytes {
			return bs[0]
		}
		return nil
	}
	carried := make([][]byte, len(bs))
	total, some := 0, false
	for i, b := range bs {
		if total+len(b) <= c.o.InlineMaxBytes {
			carried[i], total, some = b, total+len(b), true
		}
	}
	if !some {
		return nil
	}
	return message.PackValues(carried)
}

// failedMany returns, for a batch whose shared-tier call returned stored
// and err, which keys are written or queued (kept), and the error to
// return: each key not reported stored is queued as a write of its own
// (see enqueue) when QueueWrites and err allow, and the error wraps
// ErrQueued when there were some and every one was (when every key was
// written, err is the announcement's, returned as it is).
func (c *Cache[V]) failedMany(b *writeBatch[V], stored []bool, err error, skip Skip) (kept []bool, _ error) {
	kept = make([]bool, len(b.keys))
	if err == nil {
		for i := range kept {
			kept[i] = true
		}
		return kept, nil
	}
	queued, unwritten := true, false
	for i, key := range b.keys {
		if i < len(stored) && stored[i] {
			kept[i] = true
			continue
		}
		unwritten = true
		var v []byte
		if !b.del() {
			v = b.bs[i]
		}
		w := c.pendingOf(key, v, b.lives[i], skip&^SkipAnnounce)
		w.quiet = skip&SkipAnnounce != 0 // counted once, by writeShared
		kept[i] = errors.Is(c.enqueue(w, err), ErrQueued)
		queued = queued && kept[i]
	}
	if queued && unwritten {
		return kept, fmt.Errorf("%w: %w", ErrQueued, err)
	}
	return kept, err
}

// oneSlot reports whether every key ws names (its writes' and their
// counters', with the Remote's prefix) is in one Redis Cluster hash slot.
func (c *Cache[V]) oneSlot(ws []tier.Write) bool {
	want := keyslot.Of(c.o.info.Prefix + ws[0].Key)
	for _, w := range ws {
		if keyslot.Of(c.o.info.Prefix+w.Key) != want || (w.Seq != "" && keyslot.Of(c.o.info.Prefix+w.Seq) != want) {
			return false
		}
	}
	return true
}
