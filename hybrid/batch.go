package hybrid

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/hybridcache/hybridcache/internal/flight"
)

// This file holds the batch read path: GetOrCreateMany and GetMany, and
// the batch fill, which takes the same steps as fill for many keys at once.

// GetOrCreateMany returns the values for keys: from L1, then every L1 miss
// from the shared tier in one round trip (per cluster node), then every
// remaining miss from ONE call of load, whose results are written back in
// one round trip and to L1. Keys that load does not return are absent from
// the result. A key that a concurrent GetOrCreate or GetOrCreateMany is
// already filling is joined, not loaded twice.
//
// Duplicate keys are read once. An empty key does not fail the page: the
// others are returned, with an error wrapping ErrEmptyKey. When load fails,
// the map holds what was found before it and the error wraps load's. The
// returned map is the caller's; the values in it are shared as with
// GetOrCreate.
//
// The resilience options and EntryOptions work as in GetOrCreate, key by
// key: with fail-safe, a key whose load fails, or is slower than the soft
// timeout, or waits for a slot of MaxConcurrentLoads (a batch load takes
// one), gets its stale value if it has one, and only the other keys get
// load's error. Keys due for an eager refresh are returned at once and
// reloaded in the background, by one call of load.
func (c *Cache[V]) GetOrCreateMany(ctx context.Context, keys []string, load func(ctx context.Context, missing []string) (map[string]V, error), opts ...EntryOption) (map[string]V, error) {
	return c.outMany(c.getOrCreateMany(ctx, keys, load, opts))
}

func (c *Cache[V]) getOrCreateMany(ctx context.Context, keys []string, load func(ctx context.Context, missing []string) (map[string]V, error), opts []EntryOption) (map[string]V, error) {
	if err := c.checkBatch(ctx); err != nil {
		return nil, err
	}
	if load == nil {
		return nil, errors.New("hybrid: GetOrCreateMany: nil load function")
	}
	e, err := c.o.policy(&c.def, opts)
	if err != nil {
		return nil, err
	}
	var due pastDue[V]
	out, misses, badKey := c.localMany(keys, false, &due)
	if len(due.refresh) > 0 {
		c.refreshMany(ctx, due.refresh, due.held, load, e)
	}
	if len(misses) == 0 {
		return out, badKey
	}
	// One lock for the whole page. A key repeated in keys joins the call
	// its first appearance leads, so it is read and loaded once.
	calls := make([]*flight.Call[V], len(misses))
	lead := c.flights.JoinMany(misses, calls, make([]int, 0, len(misses)))
	if len(lead) > 0 {
		leadKeys, leadCalls := misses, calls
		if len(lead) < len(misses) {
			leadKeys, leadCalls = pick(misses, lead), pick(calls, lead)
		}
		var pre *manyRead[V]
		if c.leaderReads(ctx) {
			// As in GetOrCreate, the leader may read the shared tier itself.
			if pre = c.leadReadMany(ctx, leadKeys, leadCalls, &e); pre.cut {
				pre = nil // the fill reads again, for the callers still waiting
			}
		}
		stale := due.stale // not due itself, which would then move to the heap
		if (pre == nil || len(pre.missIdx) > 0) && !c.run(func() { c.fillMany(ctx, leadKeys, leadCalls, load, e, pre, stale) }) {
			var zero V
			for i, key := range leadKeys {
				if pre == nil || pre.vals[i].st != readHit {
					c.flights.Finish(key, leadCalls[i], zero, ErrClosed)
				}
			}
			if out == nil {
				out = make(map[string]V)
			}
			return out, ErrClosed
		}
	}
	if out == nil {
		// Made here rather than in localMany, so that for a cold page it
		// is made while the fill reads the shared tier.
		out = make(map[string]V, len(keys))
	}
	var errs []error
	if badKey != nil {
		errs = append(errs, badKey)
	}
	for i, call := range calls {
		v, err := call.Wait(ctx)
		switch {
		case err == nil:
			out[misses[i]] = v
		case errors.Is(err, ErrNotFound):
		case ctx.Err() != nil:
			return out, ctx.Err()
		default:
			errs = append(errs, err)
		}
	}
	return out, dedupe(errs)
}

// GetMany returns the values for keys found in L1 or, in one round trip, in
// the shared tier, without loading. Missing keys are absent from the map.
// Shared-tier failures count as misses, as with Get.
func (c *Cache[V]) GetMany(ctx context.Context, keys []string) (map[string]V, error) {
	return c.outMany(c.getMany(ctx, keys))
}

func (c *Cache[V]) getMany(ctx context.Context, keys []string) (map[string]V, error) {
	if err := c.checkBatch(ctx); err != nil {
		return nil, err
	}
	out, misses, badKey := c.localMany(keys, true, nil)
	if len(misses) > 0 {
		if out == nil {
			out = make(map[string]V, len(keys))
		}
		vals, _, _ := c.readRemoteMany(ctx, misses, c.tokens(misses), &c.def)
		for i, key := range misses {
			if vals[i].st == readHit && !vals[i].it.absent {
				out[key] = vals[i].it.v
			}
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
	}
	return out, badKey
}

// pastDue is what localMany found in L1 past a due time, for
// GetOrCreateMany: entries due for an eager refresh (served; refresh and
// held, by index) and values past their lifetime (misses; stale, by key),
// which fail-safe may serve. Its fields stay nil when there are none.
type pastDue[V any] struct {
	refresh []string
	held    []item[V]
	stale   map[string]item[V]
}

// localMany answers what it can from L1 and returns the valid keys it
// could not, and an error for the keys checkKey refuses. With distinct, a key
// repeated in keys is returned once. out is nil when L1 held none of keys
// and some are to be read. due, if not nil, gets what was due (see
// pastDue); else entries due for a refresh are served as they are.
func (c *Cache[V]) localMany(keys []string, distinct bool, due *pastDue[V]) (out map[string]V, misses []string, badKey error) {
	var badKeys []error
	var seen map[string]struct{}
	for i, key := range keys {
		if err := c.checkKey(key); err != nil {
			badKeys = append(badKeys, fmt.Errorf("hybrid: batch: %w", err))
			continue
		}
		if it, ok := c.local.Get(key); ok {
			if c.live(it) && (!c.held(it) || c.heldServable() || c.queued(key)) {
				if due != nil && it.t != nil && !it.absent && c.local.Now() >= it.t.due {
					due.refresh, due.held = append(due.refresh, key), append(due.held, it)
				}
				if !it.absent {
					if out == nil {
						out = make(map[string]V, len(keys))
					}
					out[key] = it.v
				}
				continue
			}
			// Kept past its lifetime for fail-safe: a miss, and a fallback.
			if due != nil && !it.absent {
				if due.stale == nil {
					due.stale = make(map[string]item[V])
				}
				due.stale[key] = it
			}
		}
		if misses == nil {
			misses = make([]string, 0, len(keys)-i)
		}
		if distinct {
			if seen == nil {
				seen = make(map[string]struct{}, len(keys)-i)
			}
			if _, dup := seen[key]; dup {
				continue
			}
			seen[key] = struct{}{}
		}
		misses = append(misses, key)
	}
	if out == nil && len(misses) == 0 {
		out = make(map[string]V)
	}
	return out, misses, dedupe(badKeys)
}

func (c *Cache[V]) checkBatch(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

func (c *Cache[V]) tokens(keys []string) []token {
	toks := make([]token, len(keys))
	for i, key := range keys {
		toks[i] = c.vers.token(key)
	}
	return toks
}

// prefixed returns keys with the namespace prefix, in one allocation.
func (c *Cache[V]) prefixed(keys []string) []string {
	n := len(c.prefix) * len(keys)
	for _, key := range keys {
		n += len(key)
	}
	var sb strings.Builder
	sb.Grow(n)
	for _, key := range keys {
		sb.WriteString(c.prefix)
		sb.WriteString(key)
	}
	all := sb.String()
	full := make([]string, len(keys))
	for i, key := range keys {
		n = len(c.prefix) + len(key)
		full[i], all = all[:n], all[n:]
	}
	return full
}

// manyRead is what a batch fill's shared-tier read found: by key, the
// tokens taken before it, the values, the stored bytes to replace (see
// readRemoteMany), and the indexes of the keys still to load; cut if the
// reader's ctx ended before the shared tier answered.
type manyRead[V any] struct {
	toks    []token
	vals    []found[V]
	replace map[string][]byte
	missIdx []int
	cut     bool
}

// readMany reads keys from the shared tier and finishes the calls of the
// keys it found.
func (c *Cache[V]) readMany(ctx context.Context, keys []string, calls []*flight.Call[V], e *policy) *manyRead[V] {
	r := &manyRead[V]{toks: c.tokens(keys)}
	r.vals, r.replace, r.cut = c.readRemoteMany(ctx, keys, r.toks, e)
	hits := make([]int, 0, len(keys))
	for i := range keys {
		if r.vals[i].st == readHit {
			hits = append(hits, i)
		} else {
			r.missIdx = append(r.missIdx, i)
		}
	}
	c.flights.FinishMany(keys, calls, hits, r.result)
	return r
}

// result is key i's answer once r.vals[i].it holds it.
func (r *manyRead[V]) result(i int) (V, error) {
	if r.vals[i].it.absent {
		var zero V
		return zero, ErrNotFound
	}
	return r.vals[i].it.v, nil
}

// leadReadMany is readMany made by the leader on its own goroutine (see
// leadRead).
func (c *Cache[V]) leadReadMany(ctx context.Context, keys []string, calls []*flight.Call[V], e *policy) *manyRead[V] {
	if e.loadTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = c.leadContext(ctx, e.loadTimeout)
		defer cancel()
	}
	return c.readMany(ctx, keys, calls, e)
}

// fillMany is the batch form of fill: one shared-tier read for all keys
// (unless pre holds what the leader read itself), one load for what it did
// not hold (with LoadLease: for the keys it got a lease on, while it waits
// for the others), one write back. stale holds, by key, the L1 entries
// past their lifetime that fail-safe may serve (see fill).
func (c *Cache[V]) fillMany(caller context.Context, keys []string, calls []*flight.Call[V], load func(context.Context, []string) (map[string]V, error), e policy, pre *manyRead[V], stale map[string]item[V]) {
	defer c.abandonedMany(keys, calls)
	ctx, cancel := c.fillContext(caller, e.loadTimeout)
	defer cancel()

	r := pre
	if r == nil {
		r = c.readMany(ctx, keys, calls, &e)
	}
	toks, vals, missIdx := r.toks, r.vals, r.missIdx
	if len(missIdx) == 0 {
		return
	}
	var fbs []fallback[V]
	for _, i := range missIdx {
		var held, read *item[V]
		if it, ok := stale[keys[i]]; ok {
			held = &it
		}
		if vals[i].st == readStale {
			read = &vals[i].it
		}
		if s := c.staleFor(held, read, &e); s != nil {
			fbs = append(fbs, fallback[V]{key: keys[i], call: calls[i], tok: toks[i], it: *s})
		}
	}
	if !c.leasing(&e) {
		c.loadMany(ctx, keys, calls, missIdx, r, fbs, load, &e, nil)
		return
	}
	// One lease per missing key, all asked for in one round trip; the
	// keys the shared tier could not be read for are loaded without one.
	sub, subToks := pick(keys, missIdx), pick(toks, missIdx)
	var alone []int
	for j, i := range missIdx {
		if vals[i].st == readDown {
			alone = append(alone, j)
		}
	}
	left := c.leased(ctx, sub, subToks, alone, &e,
		func(j int, it item[V], err error) {
			i := missIdx[j]
			switch {
			case err != nil:
				if fb := fallbackOf(fbs, keys[i]); fb != nil && failSafe(err) {
					c.serveStale([]fallback[V]{*fb}, err, &e)
				}
				var zero V
				c.flights.Finish(keys[i], calls[i], zero, err)
			case it.absent:
				c.flights.Finish(keys[i], calls[i], it.v, ErrNotFound)
			default:
				c.flights.Finish(keys[i], calls[i], it.v, nil)
			}
		},
		func(js []int, h *heldLease) {
			defer c.abandon(ctx, h, "", len(js)) // the load may call Goexit
			idx := pick(missIdx, js)
			var sub []fallback[V]
			for _, i := range idx {
				if fb := fallbackOf(fbs, keys[i]); fb != nil {
					sub = append(sub, *fb)
				}
			}
			c.loadMany(ctx, keys, calls, idx, r, sub, load, &e, h)
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

// loadMany loads keys[idx], found missing by r, with one call of load and
// stores what it returns in L1 and then the shared tier; fbs are their
// fail-safe fallbacks. h is this fill's lease on some of them (nil: none),
// released once they are stored.
func (c *Cache[V]) loadMany(ctx context.Context, keys []string, calls []*flight.Call[V], idx []int, r *manyRead[V], fbs []fallback[V], load func(context.Context, []string) (map[string]V, error), e *policy, h *heldLease) {
	toks, vals, replace, result := r.toks, r.vals, r.replace, r.result
	finish := func(idx []int, result func(i int) (V, error)) { c.flights.FinishMany(keys, calls, idx, result) }
	var zero V
	var loaded map[string]V
	loadErr := c.loadSoftly(fbs, e, func(queued func()) (err error) {
		loaded, err = c.runLoadMany(ctx, pick(keys, idx), load, queued)
		return err
	})
	if loadErr != nil {
		if failSafe(loadErr) {
			c.serveStale(fbs, loadErr, e)
		}
		finish(idx, func(int) (V, error) { return zero, loadErr })
		c.releaseLeases(ctx, h, nil, loadErr)
		return
	}
	type write struct {
		i    int
		b    []byte
		life time.Duration
	}
	writes := make([]write, 0, len(idx))
	lb := c.local.Batch()
	for _, i := range idx {
		key := keys[i]
		ttl, localTTL := c.lifetimes(e)
		v, ok := loaded[key]
		var b []byte
		switch {
		case !ok && e.negativeTTL > 0:
			vals[i].it = item[V]{absent: true}
			ttl, localTTL = e.negativeTTL, min(e.negativeTTL, localTTL)
			b = c.encodeAbsent(ttl, e.tags)
		case !ok:
			vals[i].it = item[V]{absent: true} // not found, and not remembered
			continue
		default:
			vals[i].it = item[V]{v: v}
			var err error
			if b, err = c.encode(key, v, ttl, e.tags); err != nil {
				c.notStored(key, err)
				continue
			}
		}
		c.storeLocal(lb, key, tagged(vals[i].it, e.tags), c.size(b), localTTL, toks[i], e)
		writes = append(writes, write{i, b, e.physical(ttl)})
	}
	lb.Done()
	// L1 first, so that no caller arriving after finish loads again; then
	// the waiters; then the shared tier; then the instances waiting for
	// our leases.
	finish(idx, result)
	var w batchWrite
	wrote := make(map[string]bool, len(writes))
	stored := make(map[string][]byte, len(writes))
	for _, wr := range writes {
		key := keys[wr.i]
		stored[key] = wr.b
		if old, ok := replace[key]; ok {
			wrote[key] = c.storeRemote(ctx, key, wr.b, wr.life, old, toks[wr.i])
			continue
		}
		w.add(key, wr.b, wr.life, toks[wr.i])
	}
	maps.Copy(wrote, c.storeRemoteMany(ctx, w))
	if h != nil && len(h.keys) > 0 {
		// What we wrote travels to the waiting instances; what load did
		// not return, they learn is not found; what we could not store,
		// they load by themselves.
		var held, absent, unstored []string
		for _, key := range h.keys {
			_, ok := loaded[key]
			switch {
			case stored[key] != nil:
				held = append(held, key)
			case ok:
				unstored = append(unstored, key)
			default:
				absent = append(absent, key)
			}
		}
		filled := make([][]byte, len(held))
		for j, key := range held {
			if wrote[key] {
				filled[j] = stored[key]
			}
		}
		if len(absent) > 0 {
			c.releaseLeases(ctx, h.part(absent), nil, fmt.Errorf("hybrid: batch load: %w", ErrNotFound))
		}
		if len(unstored) > 0 {
			c.releaseLeases(ctx, h.part(unstored), nil, errNotStored)
		}
		h.keys = held
		c.releaseLeases(ctx, h, filled, nil)
	}
}

// abandonedMany is abandoned for a batch fill's calls.
func (c *Cache[V]) abandonedMany(keys []string, calls []*flight.Call[V]) {
	var zero V
	for i, call := range calls {
		if call.Done() {
			c.flights.Finish(keys[i], call, zero, nil) // keeps its result
			continue
		}
		c.flights.Finish(keys[i], call, zero, fmt.Errorf("%w: batch: %w", ErrPanic, errGoexit))
	}
}

// pick returns the elements of s at the indexes idx.
func pick[T any](s []T, idx []int) []T {
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = s[i]
	}
	return out
}

// all returns the indexes of a slice of n elements.
func all(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// dedupe joins errors, keeping one of each identical message (a failed
// batch load is one error for many keys).
func dedupe(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(errs))
	var out []error
	for _, err := range errs {
		if msg := err.Error(); !seen[msg] {
			seen[msg] = true
			out = append(out, err)
		}
	}
	return errors.Join(out...)
}
