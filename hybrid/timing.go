package hybrid

import (
	"context"
	"math"
	mrand "math/rand/v2"
	"time"

	"github.com/hybridcache/hybridcache/internal/flight"
)

// This file holds the timed behaviours: lifetimes and jitter, fail-safe
// (serve a stale value when load fails), the soft load timeout, and eager
// refresh. All but lifetimes are off unless set in Options or by a call's
// EntryOptions; then the L1 items that call writes carry their timing and
// a hit checks it against L1's coarse clock.

// lifetimes returns the shared-tier and L1 lifetimes of one write: e's,
// shortened by a random part of up to its jitter so that entries written
// together do not expire together.
func (c *Cache[V]) lifetimes(e *policy) (ttl, localTTL time.Duration) {
	if e.jitter == 0 {
		return e.ttl, e.localTTL
	}
	f := 1 - mrand.Float64()*e.jitter
	return time.Duration(float64(e.ttl) * f), time.Duration(float64(e.localTTL) * f)
}

// stamp sets it's timing for a logical L1 lifetime of ttl from now, as e
// says, and returns the lifetime L1 itself should give it.
func (c *Cache[V]) stamp(it item[V], size int, ttl time.Duration, e *policy) (item[V], time.Duration) {
	it.gen = c.loss.gen.Load()
	if !e.timed() {
		var tags []string
		if it.t != nil {
			tags = it.t.tags
		}
		it.t = nil
		return tagged(it, tags), ttl
	}
	now := c.local.Now()
	var t timing // a new one: the old may be shared with another copy of it
	if it.t != nil {
		t = *it.t
	}
	if t.written == 0 {
		t.written = time.Now().UnixNano()
	}
	t.expires = now + int64(ttl)
	if t.staleAt <= 0 || t.staleAt > t.expires {
		t.staleAt = t.expires
	}
	t.size = size
	t.due = t.expires
	if e.eager > 0 && !it.absent {
		t.due = now + int64(float64(ttl)*e.eager)
	}
	it.t = &t
	return it, ttl + e.failSafe
}

// expireLocal makes key's L1 entry stale, as its expiry would: later
// reads load anew, and fail-safe may fall back on it. An entry without a
// schedule, a remembered absence, or any entry when this cache keeps
// nothing for fail-safe, is dropped; a stale one stays as it is. Fills
// under way that read key before the change store nothing, and later
// callers do not join them.
func (c *Cache[V]) expireLocal(key string) {
	c.vers.bump(key)
	c.flights.Forget(key)
	c.local.Update(key, func(it item[V]) (item[V], uint32, time.Duration, bool) {
		now := c.local.Now()
		switch {
		case it.absent || it.t == nil || it.t.expires == math.MaxInt64 || c.def.failSafe <= 0:
			return it, 0, 0, true // drop
		case it.t.expires <= now:
			return it, 0, 0, false // stale already
		}
		t := *it.t // a new one: the old may be shared with another copy of it
		t.expires, t.due = now, now
		t.staleAt = min(t.staleAt, time.Now().UnixNano())
		it.t = &t
		return it, weight(key, t.size), c.def.failSafe, true
	})
}

// getOrCreateDue handles an L1 hit whose timing asks for attention: a
// refresh is due (serve it, refresh in the background) or it is stale
// (a miss, with it as the fail-safe fallback).
func (c *Cache[V]) getOrCreateDue(ctx context.Context, key string, it item[V], load func(context.Context, string) (V, error), opts []EntryOption) (V, error) {
	if c.local.Now() < it.t.expires {
		c.refresh(ctx, key, load, opts)
		if it.absent {
			return it.v, ErrNotFound
		}
		return it.v, nil
	}
	c.n.pastLife.Add(1)
	return c.getOrCreateSlow(ctx, key, load, opts, &it)
}

// usable reports whether stale may still be served by fail-safe as e says.
func (c *Cache[V]) usable(stale *item[V], e *policy) bool {
	return stale != nil && !stale.absent && stale.t != nil && e.failSafe > 0 &&
		time.Now().UnixNano()-stale.t.staleAt <= int64(e.failSafe)
}

// serveStale puts stale back in L1 for the fail-safe throttle, so the
// loader that just failed is not called again on every request, and counts
// it.
func (c *Cache[V]) serveStale(key string, stale item[V], tok token, cause error, e *policy) {
	c.staleServed(key, cause)
	c.log.log(logStale, "hybrid: load failed; serving a stale value (fail-safe)", "namespace", c.o.Namespace, "key", key, "err", cause)
	c.storeLocal(nil, key, stale, stale.t.size, e.failSafeThrottle, tok, e)
}

// loadSoftly calls load. With a usable stale value and a soft timeout, a
// load slower than that lets the waiters have the stale value (ending call)
// while it goes on; its result is then stored as usual.
func (c *Cache[V]) loadSoftly(ctx context.Context, key string, load func(context.Context, string) (V, error), stale *item[V], call *flight.Call[V], e *policy) (V, error) {
	if stale == nil || e.softTimeout <= 0 {
		return c.runLoad(ctx, key, load)
	}
	type result struct {
		v   V
		err error
	}
	done := make(chan result, 1)
	if !c.run(func() {
		v, err := c.runLoad(ctx, key, load)
		done <- result{v, err}
	}) {
		var zero V
		return zero, ErrClosed
	}
	t := time.NewTimer(e.softTimeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-t.C:
		c.n.softTimeouts.Add(1)
		c.staleServed(key, nil)
		c.flights.Finish(key, call, stale.v, nil)
		r := <-done
		return r.v, r.err
	}
}

// refresh reloads key in the background, once per key at a time, while
// its current value goes on being served. The new value is written and
// announced like a Set, unless the shared tier already holds a newer one.
func (c *Cache[V]) refresh(ctx context.Context, key string, load func(context.Context, string) (V, error), opts []EntryOption) {
	e, err := c.o.policy(&c.def, opts)
	if err != nil || load == nil {
		return
	}
	call, leader := c.flights.Join(key)
	if !leader {
		return
	}
	c.n.refreshes.Add(1)
	if !c.run(func() { c.refreshFill(ctx, key, load, e, call) }) {
		var zero V
		c.flights.Finish(key, call, zero, ErrClosed)
	}
}

func (c *Cache[V]) refreshFill(caller context.Context, key string, load func(context.Context, string) (V, error), e policy, call *flight.Call[V]) {
	var zero V
	result, resultErr := zero, error(ErrClosed)
	defer func() { c.flights.Finish(key, call, result, resultErr) }()
	ctx, cancel := c.fillContext(caller, e.loadTimeout)
	defer cancel()

	// Another instance may have refreshed it already.
	if it, st, _ := c.readRemote(ctx, key, c.vers.token(key), &e); st == readHit && !it.absent {
		if held, ok := c.local.Get(key); !ok || it.writtenAt() > held.writtenAt() {
			result, resultErr = it.v, nil
			return
		}
	}
	v, err := c.runLoad(ctx, key, load)
	if err != nil {
		result, resultErr = zero, err
		return // the current value stays until it expires (and fail-safe)
	}
	result, resultErr = v, nil
	if err := c.set(ctx, key, v, &e); err != nil {
		c.log.log(logL2, "hybrid: eager refresh could not write", "namespace", c.o.Namespace, "key", key, "err", err)
	}
}
