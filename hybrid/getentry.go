package hybrid

import (
	"context"
	"math"
	"time"
)

// This file holds the reads without a load that go past L1's live
// entries: Get's and GetEntry's shared-tier read and their stale fallback
// (WithAllowStale), and GetEntry, which tells where a value came from and what
// the cache knows of it.

// Tier names where a read found its value.
type Tier uint8

// The tiers.
const (
	TierL1 Tier = iota + 1 // the in-process tier
	TierL2                 // the shared tier (the Remote)
)

// String returns "l1" or "l2", as the otel module names tiers.
func (t Tier) String() string {
	switch t {
	case TierL1:
		return "l1"
	case TierL2:
		return "l2"
	}
	return "unknown"
}

// Entry is a value and what the cache knows of it, as GetEntry returns it.
// What is unknown is zero: an L1 entry without a schedule (FailSafeMaxAge,
// EagerRefresh), tags or a version keeps its value alone, so that an L1
// hit stays small; its Written and RemoteTTL are then zero.
type Entry[V any] struct {
	Value V
	// Tier is where the value was found.
	Tier Tier
	// Written is when the value was written to the shared tier (by Set, a
	// fill or a refresh), by its writer's clock, to the millisecond.
	Written time.Time
	// LocalTTL is how long L1 serves the value as live from now: its
	// logical lifetime there, which fail-safe may follow with a stale
	// one. For a value found in the shared tier, the lifetime L1 was
	// given as the read stored it; negative for a stale value L1 holds, 0
	// for one it does not.
	LocalTTL time.Duration
	// RemoteTTL is the value's logical lifetime left in the shared tier,
	// by its envelope's expiry as this instance last read, wrote or was
	// told of it (another instance's refresh that found it not modified
	// moves it). Negative: stale by that much. The physical lifetime
	// (how long the shared tier keeps a stale value for fail-safe) is not
	// reported: it would cost a round trip.
	RemoteTTL time.Duration
	// Stale reports a value past its logical lifetime, which fail-safe
	// keeps: only returned with WithAllowStale.
	Stale bool
	// Tags are the value's tags (WithTags).
	//
	// NOTE: the slice is the cache's own: do not modify it.
	Tags []string
	// Version is the version its load gave the value (SetVersion).
	Version string
}

// GetEntry is Get that also returns what the cache knows of the value:
// which tier answered, when it was written, its lifetimes left in L1 and
// in the shared tier, whether it is stale (with WithAllowStale), its tags and
// version (see Entry). ok is false when no tier holds a value (a
// remembered absence included). An L1 hit allocates nothing; opts are as
// Get's.
func (c *Cache[V]) GetEntry(ctx context.Context, key string, opts ...EntryOption) (e Entry[V], ok bool, err error) {
	var skip Skip
	if len(opts) > 0 {
		if skip, err = c.skipOf(&skipGetEntry, opts); err != nil {
			return e, false, err
		}
	}
	var it item[V]
	var exp int64
	var found bool
	if skip&SkipL1Read == 0 {
		it, exp, found = c.local.GetExpiry(key)
	}
	if found && !c.closed.Load() && c.live(it) {
		if c.held(it) {
			if it, ok = c.checkHeld(ctx, key, it); !ok {
				return e, false, ctx.Err()
			}
		}
		if it.absent {
			return e, false, nil
		}
		c.drawL1Age(it.t, it.stored)
		e = c.entryOf(it, TierL1, exp)
		if e.Value, err = c.out(it.v, nil); err != nil {
			return Entry[V]{}, false, err
		}
		return e, true, nil
	}
	r, err := c.read(ctx, key, &skipGetEntry, opts, it, found, true)
	if err != nil || !r.ok {
		return e, false, err
	}
	e = c.entryOf(r.it, r.tier, 0)
	if r.tier == TierL2 {
		e.LocalTTL = 0
		if !r.stale {
			e.LocalTTL = max(min(e.RemoteTTL, r.localTTL), 0)
		}
	}
	e.Stale = r.stale
	if e.Value, err = c.out(r.it.v, nil); err != nil {
		return Entry[V]{}, false, err
	}
	return e, true, nil
}

// entryOf returns the Entry of it, found in tier; exp is when L1 lets
// an entry without a logical lifetime of its own expire (0: not in L1).
func (c *Cache[V]) entryOf(it item[V], tier Tier, exp int64) Entry[V] {
	e := Entry[V]{Value: it.v, Tier: tier}
	now := c.local.Now()
	if exp > 0 {
		e.LocalTTL = time.Duration(exp - now)
	}
	t := it.t
	if t == nil {
		return e
	}
	if t.written != 0 {
		e.Written = time.Unix(0, t.written)
	}
	if t.remote != 0 {
		e.RemoteTTL = time.Until(time.Unix(0, t.remote))
	}
	if tier == TierL1 && t.expires != math.MaxInt64 {
		e.LocalTTL = time.Duration(t.expires - now)
		e.Stale = e.LocalTTL <= 0
	}
	e.Tags, e.Version = t.tags, t.version
	return e
}

// readResult is what a read past L1's live entries found.
type readResult[V any] struct {
	it       item[V]
	ok       bool
	tier     Tier
	stale    bool
	localTTL time.Duration // the L1 lifetime a live value from the shared tier was given (0: none)
}

// read is Get's and GetEntry's read past L1's live entries: the shared
// tier, and, with WithAllowStale, the newer of a stale value held in L1 (held,
// if inL1) and one kept in the shared tier. meta keeps what the shared
// tier's envelope says of a value (GetEntry).
func (c *Cache[V]) read(ctx context.Context, key string, k *skipCall, opts []EntryOption, held item[V], inL1, meta bool) (r readResult[V], err error) {
	if err := c.check(ctx, key); err != nil {
		return r, err
	}
	p, err := c.keyPolicyFor(k, key, opts)
	if err != nil {
		return r, err
	}
	if p.skip&SkipL1Read != 0 {
		c.skipped(SkipL1Read, 1)
	}
	p.meta = meta
	it, st := c.readRemote(ctx, key, c.vers.token(key), &p)
	if st == readHit && !it.absent {
		r = readResult[V]{it: it, ok: true, tier: TierL2, localTTL: p.localTTL}
		if p.skip&SkipL1Write != 0 {
			r.localTTL = 0 // L1 was not given the value
		}
		return r, nil
	}
	if p.allowStale {
		var l1, l2 *item[V]
		if inL1 && !held.absent && held.t != nil {
			l1 = &held
		}
		if st == readStale && !it.absent {
			l2 = &it
		}
		if s := newer(l1, l2); s != nil {
			c.n.staleReads.Add(1)
			r = readResult[V]{it: *s, ok: true, tier: TierL1, stale: true}
			if s == l2 {
				r.tier = TierL2
			}
			return r, nil
		}
	}
	return r, ctx.Err()
}

// newer returns the one of a and b (either nil) written last, a if as
// recent.
func newer[V any](a, b *item[V]) *item[V] {
	if b != nil && (a == nil || b.writtenAt() > a.writtenAt()) {
		return b
	}
	return a
}
