package hybrid

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hybridcache/hybridcache/internal/flight"
)

// This file holds fills: what runs, detached from its callers, when keys
// miss L1 or come due for a background refresh. One engine serves
// GetOrCreate (a fill of one key), GetOrCreateMany (a fill of a batch's
// misses) and refreshes (a fill of keys whose current values go on being
// served meanwhile): one shared-tier read, one load of what it did not find
// (with leases when asked), one write back, made only where the key still
// holds what the read found, so that a write or delete made since the read
// wins over the load.

// fill is one fill of keys, each with the call its callers wait on. Its
// read fields are set by readFill, by the leader or by the fill itself.
type fill[V any] struct {
	keys  []string
	calls []*flight.Call[V]
	load  loader[V]
	e     policy
	// stale holds, by key, L1 entries past their lifetime that fail-safe
	// may serve.
	stale map[string]item[V]
	// held holds, by index, the L1 entries a refresh replaces (nil: f is
	// no refresh). They go on being served while it runs; the read finds
	// each either replaced already (written after it) or still to load.
	held []item[V]

	read    bool              // readFill ran
	cut     bool              // the reader's ctx ended before the shared tier answered
	toks    []token           // the keys' tokens from before the read
	vals    []found[V]        // what the read found, then what the load gave
	replace map[string][]byte // by key, the stored bytes a write back replaces
	seqWas  map[string][]byte // by key, its sequence counter as read (see seqKey)
	missIdx []int             // the keys still to load
	slot    entrySlot         // the settings of the load running (see SettingsFrom)

	// Room for a fill of one key, so that its slices cost no allocation
	// of their own.
	key1  [1]string
	full1 [1]string // key1 as the shared tier stores it (see prefixed)
	call1 [1]*flight.Call[V]
	tok1  [1]token
	val1  [1]found[V]
	idx1  [1]int
}

// newFill returns the fill of one key.
func newFill[V any](key string, call *flight.Call[V], load func(context.Context, string) (V, error), e policy, stale *item[V]) *fill[V] {
	f := &fill[V]{load: loader[V]{one: load}, e: e}
	f.key1[0], f.call1[0] = key, call
	f.keys, f.calls = f.key1[:], f.call1[:]
	if stale != nil {
		f.stale = map[string]item[V]{key: *stale}
	}
	return f
}

// what names what f loads, in errors.
func (f *fill[V]) what() string {
	if f.load.one != nil {
		return loaded(f.keys[0], 0)
	}
	return loaded("", len(f.keys))
}

// start runs f for the caller that leads it: the shared-tier read on the
// caller's goroutine when leaderReads allows it, and the rest on a worker
// if anything is left to load. It reports false if the cache closed first
// (f's calls are then finished with ErrClosed), and cut when the caller's
// ctx ended during its read (the fill reads again, for the callers still
// waiting).
func (c *Cache[V]) start(ctx context.Context, f *fill[V]) (ok, cut bool) {
	if c.leaderReads(ctx) {
		rctx := ctx
		if f.e.loadTimeout > 0 {
			var cancel context.CancelFunc
			rctx, cancel = c.leadContext(ctx, f.e.loadTimeout)
			defer cancel()
		}
		if c.readFill(rctx, f); f.cut {
			f.read, f.cut, cut = false, false, true
		} else if len(f.missIdx) == 0 {
			return true, false
		}
	}
	if c.run(func() { c.fill(ctx, f) }) {
		return true, cut
	}
	var zero V
	for i, key := range f.keys {
		if !f.read || f.vals[i].st != readHit {
			c.flights.Finish(key, f.calls[i], zero, ErrClosed)
		}
	}
	return false, cut
}

// leaderReads reports whether the leader of a fill makes its shared-tier
// read itself, saving the hand-off to a worker goroutine and back: when its
// ctx cannot end (it would wait for the whole fill anyway), or when the
// Remote bounds how long a read can block (tier.Info.ReadBound) and the
// ctx has no deadline before that bound, so that a caller whose ctx ends
// during the read waits no longer than the bound, and one with a deadline
// never past it. Otherwise the fill runs on a worker and the caller can
// leave at once.
func (c *Cache[V]) leaderReads(ctx context.Context) bool {
	if ctx.Done() == nil {
		return true
	}
	if c.readBound <= 0 {
		return false
	}
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) >= c.readBound
}

// leadContext bounds a leader's read by the load timeout. A ctx that cannot
// end serves as a fill's context, which adds the end that Close brings; one
// that can keeps its own end.
func (c *Cache[V]) leadContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return c.fillContext(ctx, timeout, nil)
	}
	return context.WithTimeout(ctx, timeout)
}

// readFill reads f's keys from the shared tier in one call and finishes
// the calls of the keys it found live (or remembered absent); then, for
// the keys it found missing, their sequence counters (see readSeqs).
func (c *Cache[V]) readFill(ctx context.Context, f *fill[V]) {
	f.read = true
	var full []string // nil: readRemoteMany prefixes the keys
	if len(f.keys) == 1 {
		f.tok1[0], f.val1[0] = c.vers.token(f.keys[0]), found[V]{}
		f.toks, f.vals = f.tok1[:], f.val1[:]
		f.full1[0] = c.prefix + f.keys[0]
		full = f.full1[:]
	} else {
		f.toks, f.vals = c.tokens(f.keys), make([]found[V], len(f.keys))
	}
	f.replace, f.cut = c.readRemoteMany(ctx, f.keys, full, f.toks, f.vals, &f.e)
	if f.cut {
		return
	}
	f.missIdx = f.missIdx[:0]
	if len(f.keys) == 1 {
		f.missIdx = f.idx1[:0] // no allocation for a key that misses
	}
	hits := 0
	for i := range f.keys {
		if f.vals[i].st == readHit && (f.held == nil || refreshed(f.vals[i].it, f.held[i])) {
			hits++
		} else {
			f.missIdx = append(f.missIdx, i)
		}
	}
	if f.held != nil {
		c.toRefresh(f)
	}
	switch {
	case hits == 0:
	case hits == 1 && len(f.keys) == 1:
		c.flights.FinishMany(f.keys, f.calls, f.idx1[:], f.result)
	default:
		c.flights.FinishMany(f.keys, f.calls, without(all(len(f.keys)), f.missIdx), f.result)
	}
	if len(f.missIdx) > 0 {
		c.readSeqs(ctx, f) // after the hits are answered
	}
}

// result is key i's answer once f.vals[i].it holds it.
func (f *fill[V]) result(i int) (V, error) {
	if f.vals[i].it.absent {
		var zero V
		return zero, fmt.Errorf("hybrid: %q: %w", f.keys[i], ErrNotFound)
	}
	return f.vals[i].it.v, nil
}

// fill runs f past its leader: the read, unless the leader made it; then
// one load for what it did not find (with LoadLease: for the keys it got
// a lease on, while it waits for the others); then the write back. It
// runs detached from its callers (they may leave) and ends with Close or
// LoadTimeout.
func (c *Cache[V]) fill(caller context.Context, f *fill[V]) {
	defer c.abandoned(f)
	ctx, cancel := c.fillContext(caller, f.e.loadTimeout, &f.slot)
	defer cancel()
	if !f.read {
		c.readFill(ctx, f)
	}
	keys, calls, e := f.keys, f.calls, &f.e
	if len(f.missIdx) == 0 {
		return
	}
	if f.held != nil {
		c.refreshFill(ctx, f)
		return
	}
	var fbs []fallback[V]
	for _, i := range f.missIdx {
		var held, read *item[V]
		if it, ok := f.stale[keys[i]]; ok {
			held = &it
		}
		if f.vals[i].st == readStale {
			read = &f.vals[i].it
		}
		if s := c.staleFor(held, read, e.of(keys[i])); s != nil {
			fbs = append(fbs, fallback[V]{key: keys[i], call: calls[i], tok: f.toks[i], it: *s})
		}
	}
	if !c.leasing(e) {
		c.loadFill(ctx, f, f.missIdx, fbs, nil)
		return
	}
	// One lease per missing key, all asked for in one round trip; the
	// keys the shared tier could not be read for are loaded without one.
	missIdx := f.missIdx
	var alone []int
	for j, i := range missIdx {
		if f.vals[i].st == readDown {
			alone = append(alone, j)
		}
	}
	left := c.leased(ctx, pick(keys, missIdx), pick(f.toks, missIdx), alone, e,
		func(j int, it item[V], err error) {
			i := missIdx[j]
			switch {
			case err != nil:
				if fb := fallbackOf(fbs, keys[i]); fb != nil && failSafe(err) {
					c.serveStale([]fallback[V]{*fb}, err, e)
				}
				var zero V
				c.flights.Finish(keys[i], calls[i], zero, err)
			case it.absent:
				var zero V
				c.flights.Finish(keys[i], calls[i], zero, fmt.Errorf("hybrid: %q: %w", keys[i], ErrNotFound))
			default:
				c.flights.Finish(keys[i], calls[i], it.v, nil)
			}
		},
		func(js []int, h *heldLease) {
			defer c.abandon(ctx, h, f.what()) // the load may call Goexit
			idx := pick(missIdx, js)
			var sub []fallback[V]
			for _, i := range idx {
				if fb := fallbackOf(fbs, keys[i]); fb != nil {
					sub = append(sub, *fb)
				}
			}
			c.loadFill(ctx, f, idx, sub, h)
		})
	if len(left) > 0 {
		err := callerErr(ctx)
		c.flights.FinishMany(keys, calls, pick(missIdx, left), func(int) (V, error) {
			var zero V
			return zero, err
		})
	}
}

// fallbackOf returns key's fallback in fbs, nil if it has none.
func fallbackOf[V any](fbs []fallback[V], key string) *fallback[V] {
	for i := range fbs {
		if fbs[i].key == key {
			return &fbs[i]
		}
	}
	return nil
}

// loadFill loads f.keys[idx], found missing by f's read, with one call of
// the load, and stores what it returns in L1 and then the shared tier, each
// key under its policy (see policy.of) with what the load set through
// its LoadSettings (see adapt); fbs are their fail-safe fallbacks. A load
// that fails with ErrNotFound finds every key absent. h is this fill's lease on some
// of the keys (nil: none), released once they are stored.
func (c *Cache[V]) loadFill(ctx context.Context, f *fill[V], idx []int, fbs []fallback[V], h *heldLease) {
	keys, calls, toks, vals, e := f.keys, f.calls, f.toks, f.vals, &f.e
	finish := func(idx []int, result func(i int) (V, error)) { c.flights.FinishMany(keys, calls, idx, result) }
	var zero V
	var loaded map[string]V
	f.slot.begin()
	note := newLoadNote[V](pick(keys, idx))
	for _, fb := range fbs {
		note.replaces(fb.key, fb.it)
	}
	if f.held != nil {
		for _, i := range idx {
			note.replaces(keys[i], f.held[i])
		}
	}
	var took time.Duration
	loadErr := c.loadSoftly(fbs, e, func(queued func()) (err error) {
		start := time.Now()
		loaded, err = f.load.run(c, ctx, note.keys, queued, note)
		took = loadTime(e, time.Since(start))
		return err
	})
	var ad *adapted
	if l := f.slot.end(); l != nil {
		ad = &adapted{l: l, perKey: e.keys != nil}
	}
	if nm, rest, err := unmodified(keys, idx, note, loaded, loadErr); len(nm) > 0 {
		h = c.extendFilled(ctx, f, nm, note, h)
		if idx, loadErr, fbs = rest, err, nil; len(idx) == 0 {
			return
		}
	}
	var notFound error // the load's own error, for the keys it found absent
	if errors.Is(loadErr, ErrNotFound) {
		notFound, loadErr = loadErr, nil
	}
	if loadErr != nil {
		if failSafe(loadErr) {
			c.serveStale(fbs, loadErr, e)
		}
		if f.held != nil {
			c.backOff(keys, f.held, idx) // the current values stay until they expire
		}
		finish(idx, func(int) (V, error) { return zero, loadErr })
		c.releaseLeases(ctx, h, nil, loadErr)
		return
	}
	fws := make([]fillWrite, 0, len(idx))
	lb := c.local.Batch()
	for _, i := range idx {
		key := keys[i]
		p := e.of(key)
		v, ok := loaded[key]
		if ad != nil {
			var skip bool
			if p, skip = c.adapt(ad, key, p); skip {
				vals[i].it = item[V]{v: v, absent: !ok} // returned, stored nowhere
				continue
			}
		}
		ttl, localTTL := c.lifetimes(p)
		if e.skip&SkipRemoteWrite == 0 {
			c.knowTags(ctx, p.tags)
		}
		var b []byte
		switch {
		case !ok && p.negativeTTL > 0:
			vals[i].it = item[V]{absent: true}
			ttl, localTTL = p.negativeTTL, min(p.negativeTTL, localTTL)
			b = c.encodeAbsent(ttl, p.tags)
		case !ok:
			vals[i].it = item[V]{absent: true} // not found, and not remembered
			continue
		default:
			vals[i].it = item[V]{v: v}
			var err error
			if b, err = c.encodeLoaded(key, v, ttl, p.tags, note.version(key), took); err != nil {
				c.notStored(key, err)
				continue
			}
		}
		c.storeLocal(lb, key, loadedItem(described(vals[i].it, b, p.tags, note.version(key), p.timed()), took, ttl), c.size(b), localTTL, toks[i], p)
		fw := fillWrite{key: key, b: b, life: p.physical(ttl), old: f.replace[key], tok: toks[i], seq: c.seqKey(key), seqWas: f.seqWas[key]}
		if f.held != nil {
			fw.msg, fw.entry = c.refreshNews(key, b, p.skip)
		}
		fws = append(fws, fw)
	}
	lb.Done()
	// L1 first, so that no caller arriving after finish loads again; then
	// the waiters; then the shared tier; then the instances waiting for
	// our leases. A write left out is counted before the waiters wake.
	local := e.skip&SkipRemoteWrite != 0 && h == nil // no lease under it
	if local && c.remote != nil {
		c.skipped(SkipRemoteWrite, len(fws))
	}
	finish(idx, func(i int) (V, error) {
		if vals[i].it.absent && notFound != nil {
			return zero, notFound
		}
		return f.result(i)
	})
	if local {
		return
	}
	c.storeLoaded(ctx, fws, loaded, h, f.held != nil)
}

// storeLoaded writes a fill's loaded values back (see storeRemote) and
// releases its lease h on some of them, telling the instances that wait
// for them what they need: what was written travels to them, what the
// load did not return they learn is not found, and what could not be
// stored they load by themselves. A lease on one key is released by the
// key's own write, in the same atomic step, unless the write is a
// refresh's, whose message tells every instance of the new value.
func (c *Cache[V]) storeLoaded(ctx context.Context, fws []fillWrite, loaded map[string]V, h *heldLease, refresh bool) {
	if h == nil || len(h.keys) == 0 {
		c.storeRemote(ctx, fws)
		return
	}
	if len(h.keys) == 1 && !refresh {
		for j := range fws {
			if fws[j].key == h.keys[0] {
				w := fws[j]
				c.storeRemote(ctx, append(fws[:j:j], fws[j+1:]...))
				c.storeFilled(ctx, w, h)
				return
			}
		}
	}
	wrote := c.storeRemote(ctx, fws)
	written := make(map[string][]byte, len(fws))
	for j, w := range fws {
		written[w.key] = w.b
		if !wrote[j] {
			written[w.key] = nil // stored in L1 only: the waiters read it
		}
	}
	var held, absent, unstored []string
	for _, key := range h.keys {
		_, inL1 := written[key]
		_, ok := loaded[key]
		switch {
		case inL1:
			held = append(held, key)
		case ok:
			unstored = append(unstored, key)
		default:
			absent = append(absent, key)
		}
	}
	if len(absent) > 0 {
		c.releaseLeases(ctx, h.part(absent), nil, fmt.Errorf("hybrid: load: %w", ErrNotFound))
	}
	if len(unstored) > 0 {
		c.releaseLeases(ctx, h.part(unstored), nil, errNotStored)
	}
	filled := make([][]byte, len(held))
	for j, key := range held {
		filled[j] = written[key]
	}
	h.keys = held
	c.releaseLeases(ctx, h, filled, nil)
}

// abandoned ends each of f's calls with an error wrapping ErrPanic if its
// fill returns without having ended it: a load that calls runtime.Goexit
// skips all but deferred calls, and its waiters must still get an answer.
// A call that only answered with a stale value (see serveStale) ends here
// too.
func (c *Cache[V]) abandoned(f *fill[V]) {
	var zero V
	for i, call := range f.calls {
		if call.Done() {
			c.flights.Finish(f.keys[i], call, zero, nil) // keeps its result
			continue
		}
		c.flights.Finish(f.keys[i], call, zero, fmt.Errorf("%w: %s: %w", ErrPanic, f.what(), errGoexit))
	}
}

// errGoexit is the cause of the error a load that calls runtime.Goexit
// leaves its waiters.
var errGoexit = errors.New("load called runtime.Goexit")
