package hybrid

import (
	"context"
	"errors"
	"fmt"
)

// This file holds the single-key read path: L1, then the one place that
// decides who reads the shared tier, then the fill.

// GetOrCreate returns the value for key: from L1, else from the shared
// tier, else from load, whose result is stored in both tiers. Concurrent
// callers that miss on one key share one shared-tier read and one load;
// each waits only as long as its own ctx allows.
//
// A load error is returned wrapped (errors.Is sees it) and is not cached.
// Shared-tier failures are not returned: they are counted and logged, and
// the call goes on to load. The value returned is shared with L1 and other
// callers: do not modify it, or set Options.CopyOnRead.
//
// The first caller to miss makes the shared-tier read on its own goroutine
// when the Remote bounds its reads (tier.Info.ReadBound) and its ctx has no
// deadline before that bound: if its ctx ends during that read, it returns
// within the read bound. Otherwise, and for every load,
// the fill runs on a worker goroutine, and a caller returns as soon as its
// ctx ends. Callers that join a fill always return as soon as their ctx ends.
//
// When load returns an error wrapping ErrNotFound and Options.NegativeTTL is
// set, the absence is remembered in both tiers for that long: later calls
// return ErrNotFound without calling load.
//
// WithSkip leaves out L1 here or the shared tier, for reads and writes
// (see Skip); GetOrCreate refuses SkipAnnounce (it announces nothing).
func (c *Cache[V]) GetOrCreate(ctx context.Context, key string, load func(ctx context.Context, key string) (V, error), opts ...EntryOption) (V, error) {
	var skip Skip
	if len(opts) > 0 {
		var err error
		if skip, err = c.skipOf(&skipGetOrCreate, opts); err != nil {
			var zero V
			return zero, err
		}
	}
	if skip&SkipL1Read == 0 {
		if it, hit, ok := c.local.GetCounted(key); ok {
			if it.t == nil && !it.absent && c.plainHits() {
				c.sampleL1Age(hit, nil, it.stored)
				return it.v, nil
			}
			return c.getOrCreateFound(ctx, key, load, opts, it, hit)
		}
	}
	return c.out(c.getOrCreateSlow(ctx, key, load, opts, nil))
}

// plainHits reports whether a hit on an entry without a timing that holds
// a value may return it as it is: the cache is open, the bus has lost
// nothing (see held) and values are not copied. It reads three words, so
// that GetOrCreate's hit stays small and calls nothing else.
func (c *Cache[V]) plainHits() bool {
	return !c.closed.Load() && !c.loss.lost.Load() && c.copy == nil
}

// getOrCreateFound is GetOrCreate for an entry L1 returned (it, counted as
// hit hit) when plainHits or the entry asks for a closer look: the cache
// is closed, the entry is held through a bus loss, due, or an absence, or
// the value is copied.
func (c *Cache[V]) getOrCreateFound(ctx context.Context, key string, load func(ctx context.Context, key string) (V, error), opts []EntryOption, it item[V], hit uint64) (V, error) {
	if c.closed.Load() {
		return c.out(c.getOrCreateSlow(ctx, key, load, opts, nil))
	}
	if c.held(it) {
		var ok bool
		if it, ok = c.checkHeld(ctx, key, it); !ok {
			return c.out(c.getOrCreateSlow(ctx, key, load, opts, nil))
		}
	}
	if it.t != nil && c.local.Now() >= it.t.due {
		return c.out(c.getOrCreateDue(ctx, key, it, load, opts))
	}
	if it.absent {
		return it.v, ErrNotFound
	}
	c.sampleL1Age(hit, it.t, it.stored)
	if c.copy != nil {
		return c.copy(it.v)
	}
	return it.v, nil
}

func (c *Cache[V]) getOrCreateSlow(ctx context.Context, key string, load func(ctx context.Context, key string) (V, error), opts []EntryOption, stale *item[V]) (V, error) {
	var zero V
	if err := c.check(ctx, key); err != nil {
		return zero, err
	}
	if load == nil {
		return zero, errors.New("hybrid: GetOrCreate: nil load function")
	}
	e, err := c.keyPolicyFor(&skipGetOrCreate, key, opts)
	if err != nil {
		return zero, err
	}
	if e.skip&SkipL1Read != 0 {
		c.skipped(SkipL1Read, 1)
	}
	call, leader := c.flights.Join(key)
	if leader {
		ok, cut := c.start(ctx, newFill(key, call, load, e, stale))
		if !ok {
			return zero, ErrClosed
		}
		if cut { // whether or not the fill is already done
			return zero, callerErr(ctx)
		}
	}
	return call.Wait(ctx)
}

// Get returns the value for key from L1 or the shared tier, without
// loading. ok is false when neither holds it; shared-tier failures count as
// misses (see Stats) and are not returned. Of opts, WithSkip may leave out
// L1 here or the shared tier (see Skip), WithAllowStale lets it return a stale
// value, and WithLocalTTL, WithFailSafeMaxAge and WithEagerRefresh shape the L1
// entry of a value it reads from the shared tier; the others are checked
// and have no effect.
func (c *Cache[V]) Get(ctx context.Context, key string, opts ...EntryOption) (v V, ok bool, err error) {
	var skip Skip
	if len(opts) > 0 {
		if skip, err = c.skipOf(&skipGet, opts); err != nil {
			return v, false, err
		}
	}
	var it item[V]
	var found bool
	var hit uint64
	if skip&SkipL1Read == 0 {
		it, hit, found = c.local.GetCounted(key)
		if found && !c.closed.Load() && c.live(it) {
			if c.held(it) {
				if it, ok = c.checkHeld(ctx, key, it); !ok {
					return v, false, ctx.Err()
				}
			}
			if it.absent {
				return v, false, nil
			}
			c.sampleL1Age(hit, it.t, it.stored)
			if c.copy != nil {
				v, err = c.copy(it.v)
				return v, err == nil, err
			}
			return it.v, true, nil
		}
	}
	r, err := c.read(ctx, key, &skipGet, opts, it, found, false)
	if err != nil || !r.ok {
		return v, false, err
	}
	v, err = c.out(r.it.v, nil)
	return v, err == nil, err
}

// check returns the error for a call that cannot proceed.
func (c *Cache[V]) check(ctx context.Context, key string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := c.checkKey(key); err != nil {
		return err
	}
	return ctx.Err()
}

// checkKey returns the error for a key no call accepts: empty, reserved
// for the cache's own records, or longer than MaxKeyBytes. Every entry
// point checks its keys here, single and batch.
func (c *Cache[V]) checkKey(key string) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case key[0] == 0:
		return ErrReservedKey
	case len(key) > c.o.MaxKeyBytes:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLong, len(key), c.o.MaxKeyBytes)
	}
	return nil
}
