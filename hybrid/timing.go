package hybrid

import (
	"context"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/hybridcache/hybridcache/internal/flight"
	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds the timed behaviours: lifetimes and jitter, fail-safe
// (serve a stale value when load fails), the soft load timeout, and eager
// refresh. All but lifetimes are off unless set in Options or by a call's
// entry options; then the L1 items that call writes carry their timing and
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
// says, and returns the lifetime L1 itself should give it. Untimed, an item
// keeps a timing only for its tags or version, which it never is due by.
func (c *Cache[V]) stamp(it item[V], size int, ttl time.Duration, e *policy) (item[V], time.Duration) {
	return c.stampAt(it, size, ttl, e, c.storedNow())
}

// stampAt is stamp with the store's stamp (see storedNow) read already.
func (c *Cache[V]) stampAt(it item[V], size int, ttl time.Duration, e *policy, stored uint32) (item[V], time.Duration) {
	it.stored = stored
	if !e.timed() {
		if it.t == nil || (len(it.t.tags) == 0 && it.t.version == "") {
			it.t = nil
			return it, ttl
		}
		t := c.own(it.t)
		t.due, t.expires, t.staleAt, t.size = math.MaxInt64, math.MaxInt64, 0, size
		it.t = t
		return it, ttl
	}
	now := c.local.Now()
	var t *timing
	if it.t != nil {
		t = c.own(it.t)
	} else {
		t = new(timing)
	}
	if t.written == 0 {
		t.written = time.Now().UnixNano()
	}
	lexp := t.staleAt // the value's logical expiry, if known (see loadedItem)
	t.expires = now + int64(ttl)
	if t.staleAt <= 0 || t.staleAt > t.expires {
		t.staleAt = t.expires
	}
	t.size = size
	t.due = t.expires
	t.fails, t.again, t.scale = 0, false, 0
	if e.eager > 0 && !it.absent {
		t.due = now + int64(float64(ttl)*e.eager)
	}
	if e.xfetch > 0 && !it.absent {
		scheduleXFetch(t, e.xfetch, lexp)
	}
	it.t = t
	ttl += e.failSafe
	t.ends = now + int64(ttl)
	return it, ttl
}

// own returns t to change for an item about to be stored: t itself when
// it is fresh (no other copy of the item shares it), else a copy.
func (c *Cache[V]) own(t *timing) *timing {
	if t.fresh {
		t.fresh = false
		return t
	}
	cp := *t
	return &cp
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
	failSafe := c.keyDefaults(key).failSafe
	c.local.Update(key, func(it item[V]) (item[V], uint32, time.Duration, bool) {
		now := c.local.Now()
		switch {
		case it.absent || it.t == nil || it.t.expires == math.MaxInt64 || failSafe <= 0:
			return it, 0, 0, true // drop
		case it.t.expires <= now:
			return it, 0, 0, false // stale already
		}
		t := *it.t // a new one: the old may be shared with another copy of it
		t.expires, t.due = now, now
		t.staleAt = min(t.staleAt, time.Now().UnixNano())
		it.t = &t
		return it, weight(key, it, t.size), failSafe, true
	})
}

// getOrCreateDue handles an L1 hit whose timing asks for attention: a
// refresh is due (serve it, refresh in the background) or it is stale
// (a miss, with it as the fail-safe fallback).
func (c *Cache[V]) getOrCreateDue(ctx context.Context, key string, it item[V], load func(context.Context, string) (V, error), opts []EntryOption) (V, error) {
	if now := c.local.Now(); now < it.t.expires {
		if refreshNow(it.t, now) {
			c.refresh(ctx, key, it, load, opts)
		}
		if it.absent {
			return it.v, ErrNotFound
		}
		return it.v, nil
	}
	c.n.pastLife.Add(1)
	return c.getOrCreateSlow(ctx, key, load, opts, &it)
}

// fallback is a stale value that fail-safe may serve to the callers of a
// fill, single or batch, for key: tok is the token the fill took before its
// shared-tier read, call what its callers wait on.
type fallback[V any] struct {
	key  string
	call *flight.Call[V]
	tok  token
	it   item[V]
}

// staleFor returns the value fail-safe may serve for a key whose fill
// found held (an L1 entry past its lifetime) and read (a stale value in
// the shared tier), either nil: the newer of the two, if usable as e says.
func (c *Cache[V]) staleFor(held, read *item[V], e *policy) *item[V] {
	if read != nil && (held == nil || read.writtenAt() > held.writtenAt()) {
		held = read
	}
	if !c.usable(held, e) {
		return nil
	}
	return held
}

// usable reports whether stale may still be served by fail-safe as e says.
func (c *Cache[V]) usable(stale *item[V], e *policy) bool {
	return stale != nil && !stale.absent && stale.t != nil && e.failSafe > 0 &&
		time.Now().UnixNano()-stale.t.staleAt <= int64(e.failSafe)
}

// failSafe reports whether a load that failed with err may be answered
// with a stale value: not when it found that the key has no value.
func failSafe(err error) bool { return err != nil && !errors.Is(err, ErrNotFound) }

// serveStale gives the callers of each of fbs its stale value, counted
// (Stats.Load.StaleServed) once per call, before its callers wake.
//
// With a cause, the load failed: the value is put back in L1 for the
// fail-safe throttle, so that the loader that just failed is not called
// again on every request, and the call ends. Without one, the load goes on
// (it is slower than the soft timeout, or waits for a load slot): the call
// answers its waiters with the stale value, and callers that join it until
// the load ends, whose result is then stored as usual.
//
// The fill owns the calls of fbs and ends them one step at a time (see
// loadBeside), so a call not done here is not ended by anyone else meanwhile.
func (c *Cache[V]) serveStale(fbs []fallback[V], cause error, e *policy) {
	if cause != nil && len(fbs) > 0 {
		c.log.log(logStale, "hybrid: load failed; serving a stale value (fail-safe)", "namespace", c.o.Namespace, "key", fbs[0].key, "err", cause)
	}
	for _, fb := range fbs {
		if !fb.call.Done() {
			c.staleServed(fb.key, cause)
		}
		if cause == nil {
			c.flights.Answer(fb.call, fb.it.v, nil)
			continue
		}
		p := e.of(fb.key)
		c.storeLocal(nil, fb.key, fb.it, fb.it.t.size, p.failSafeThrottle, fb.tok, p)
		c.flights.Finish(fb.key, fb.call, fb.it.v, nil)
	}
}

// loadSoftly runs load, which calls runLoad or runLoadMany with the queued
// it is given. With stale values at hand (fbs), their callers get them at
// once if the load has to wait for a slot (MaxConcurrentLoads), or once it
// is slower than the soft timeout; the load goes on either way, and the
// fill stores its result as usual.
func (c *Cache[V]) loadSoftly(fbs []fallback[V], e *policy, load func(queued func()) error) error {
	if len(fbs) == 0 {
		return load(nil)
	}
	return c.loadBeside(fbs, *e, load)
}

// loadBeside is loadSoftly with stale values at hand. It takes a copy of
// the policy, so that a fill's own does not move to the heap.
func (c *Cache[V]) loadBeside(fbs []fallback[V], p policy, load func(queued func()) error) error {
	// The stale values are served early once: on a wait for a slot (on the
	// load's goroutine) or at the soft timeout (on the fill's), not both.
	var early atomic.Bool
	queued := func() {
		if early.CompareAndSwap(false, true) {
			c.serveStale(fbs, nil, &p)
		}
	}
	if p.softTimeout <= 0 {
		return load(queued)
	}
	done := make(chan error, 1)
	if !c.run(func() {
		err := fmt.Errorf("%w: %w", ErrPanic, errGoexit) // unless load returns
		defer func() { done <- err }()
		err = load(queued)
	}) {
		return ErrClosed
	}
	t := time.NewTimer(p.softTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		if early.CompareAndSwap(false, true) {
			c.n.softTimeouts.Add(1)
			c.serveStale(fbs, nil, &p)
		}
		return <-done
	}
}

// refresh reloads key, whose L1 entry held is due, in the background, once
// per key at a time, while held goes on being served. The new value is
// written and announced like a Set, unless the shared tier already holds a
// newer one.
func (c *Cache[V]) refresh(ctx context.Context, key string, held item[V], load func(context.Context, string) (V, error), opts []EntryOption) {
	e, err := c.keyPolicyFor(&skipGetOrCreate, key, opts)
	if err != nil || load == nil {
		return
	}
	c.startRefresh(ctx, []string{key}, []item[V]{held}, loader[V]{one: load}, e)
}

// refreshMany is refresh for keys whose L1 entries (held, by index) are
// due: one fill of those that no other fill or refresh has in hand.
func (c *Cache[V]) refreshMany(ctx context.Context, keys []string, held []item[V], load loader[V], e policy) {
	calls := make([]*flight.Call[V], len(keys))
	lead := c.flights.JoinMany(keys, calls, make([]int, 0, len(keys)))
	if len(lead) == 0 {
		return
	}
	if len(lead) < len(keys) {
		keys, held, calls = pick(keys, lead), pick(held, lead), pick(calls, lead)
	}
	c.n.refreshes.Add(uint64(len(keys)))
	f := &fill[V]{keys: keys, calls: calls, load: load, e: e, held: held}
	if !c.run(func() { c.fill(ctx, f) }) {
		var zero V
		c.flights.FinishMany(keys, calls, all(len(keys)), func(int) (V, error) { return zero, ErrClosed })
	}
}

// toRefresh prepares the keys a refresh's read left to load (f.missIdx):
// a key read as the value it refreshes is written back only over those
// bytes, and each is claimed again, due at its expiry, since the read
// stored the value anew with a new schedule. A refresh that stores nothing
// (its load leaves the key out, or says not to cache it) so leaves the
// current value to expire, refreshed no more; one that fails backs off.
func (c *Cache[V]) toRefresh(f *fill[V]) {
	for _, i := range f.missIdx {
		if f.vals[i].st != readHit {
			continue
		}
		if f.replace == nil {
			f.replace = make(map[string][]byte, len(f.missIdx))
		}
		f.replace[f.keys[i]] = f.vals[i].b
	}
	c.claim(f.keys, f.held, f.missIdx)
}

// refreshFill is the part of f's fill that a refresh makes its own way:
// with LoadLease, a key whose lease another instance holds is left to it
// (see refreshLeases) rather than waited for; the rest are loaded and
// written back as any fill's.
func (c *Cache[V]) refreshFill(ctx context.Context, f *fill[V]) {
	idx := f.missIdx
	var h *heldLease
	if c.leasing(&f.e) {
		if idx, h = c.refreshLeases(ctx, f.keys, f.held, f.calls, idx, &f.e); len(idx) == 0 {
			return
		}
		defer c.abandon(ctx, h, f.what()) // the load may call Goexit
	}
	c.loadFill(ctx, f, idx, nil, h)
}

// refreshed reports whether a refresh's read of the shared tier found a
// value (it, a hit) written after held, the L1 entry that was due, or the
// same value with a later expiry: another instance refreshed it, or found
// it not modified, and the read stored it in L1.
func refreshed[V any](it item[V], held item[V]) bool {
	if it.absent {
		return false
	}
	w, hw := it.writtenAt(), held.writtenAt()
	return w > hw || (w == hw && it.t != nil && held.t != nil && it.t.remote > held.t.remote && it.t.version == held.t.version)
}

// refreshNews returns the announcement of a refresh's write of b under key
// (nil: none, under SkipAnnounce), as a Set's: it carries b where a Set's
// message would.
func (c *Cache[V]) refreshNews(key string, b []byte, skip Skip) (msg, entry []byte) {
	if skip&SkipAnnounce != 0 {
		if c.bus != nil {
			c.skipped(SkipAnnounce, 1)
		}
		return nil, nil
	}
	m := message.Message{Op: message.OpSet, Origin: c.origin, Namespace: c.scope, Keys: []string{key}}
	if len(c.o.Secret) > 0 && len(b) <= c.o.InlineMaxBytes {
		m.Value = b
	}
	return c.announced(m)
}
