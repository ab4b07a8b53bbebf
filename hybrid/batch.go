package hybrid

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
// The resilience options and entry options work as in GetOrCreate, key by
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
	e, err := c.policyFor(&skipGetOrCreateMany, opts)
	if err != nil {
		return nil, err
	}
	if e.skip&SkipL1Read != 0 {
		c.skipped(SkipL1Read, len(keys))
	}
	var due pastDue[V]
	out, misses, badKey := c.localMany(keys, false, e.skip&SkipL1Read != 0, &due)
	if c.o.PerKey != nil {
		badKey = c.keyedMany(&e, &misses, &due, opts, badKey)
		if out == nil && len(misses) == 0 {
			out = make(map[string]V)
		}
	}
	if len(due.refresh) > 0 {
		c.startRefresh(ctx, due.refresh, due.held, loader[V]{many: load}, e)
	}
	if len(misses) == 0 {
		return out, badKey
	}
	// One lock for the whole page. A key repeated in keys joins the call
	// its first appearance leads, so it is read and loaded once.
	calls := make([]*flight.Call[V], len(misses))
	lead := c.flights.JoinMany(misses, calls, make([]int, 0, len(misses)))
	if len(lead) > 0 {
		f := &fill[V]{keys: misses, calls: calls, load: loader[V]{many: load}, e: e, stale: due.stale}
		if len(lead) < len(misses) {
			f.keys, f.calls = pick(misses, lead), pick(calls, lead)
		}
		if ok, _ := c.start(ctx, f); !ok {
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
// Shared-tier failures count as misses, as with Get. It takes no option
// but WithSkip, as Get does.
func (c *Cache[V]) GetMany(ctx context.Context, keys []string, opts ...EntryOption) (map[string]V, error) {
	return c.outMany(c.getMany(ctx, keys, opts))
}

func (c *Cache[V]) getMany(ctx context.Context, keys []string, opts []EntryOption) (map[string]V, error) {
	if err := c.checkBatch(ctx); err != nil {
		return nil, err
	}
	skip, err := c.onlySkip(&skipGetMany, opts)
	if err != nil {
		return nil, err
	}
	p := &c.def
	if skip != 0 {
		p = c.skipping(skip, len(keys))
	}
	out, misses, badKey := c.localMany(keys, true, skip&SkipL1Read != 0, nil)
	if c.o.PerKey != nil && len(misses) > 0 {
		kp := *p
		badKey = c.keyedMany(&kp, &misses, nil, nil, badKey)
		p = &kp
		if out == nil && len(misses) == 0 {
			out = make(map[string]V)
		}
	}
	if len(misses) > 0 {
		if out == nil {
			out = make(map[string]V, len(keys))
		}
		vals := make([]found[V], len(misses))
		c.readRemoteMany(ctx, misses, nil, c.tokens(misses), vals, p)
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
// repeated in keys is returned once. With noL1 (SkipL1Read), it looks up
// nothing. out is nil when L1 held none of keys and some are to be read.
// due, if not nil, gets what was due (see pastDue); else entries due for a
// refresh are served as they are.
func (c *Cache[V]) localMany(keys []string, distinct, noL1 bool, due *pastDue[V]) (out map[string]V, misses []string, badKey error) {
	var badKeys []error
	var seen map[string]struct{}
	for i, key := range keys {
		if err := c.checkKey(key); err != nil {
			badKeys = append(badKeys, fmt.Errorf("hybrid: batch: %w", err))
			continue
		}
		if it, ok := c.lookup(key, noL1); ok {
			if c.live(it) && (!c.held(it) || c.heldServable(key) || c.queued(key)) {
				if now := c.local.Now(); due != nil && it.t != nil && !it.absent && now >= it.t.due && refreshNow(it.t, now) {
					due.refresh, due.held = append(due.refresh, key), append(due.held, it)
				}
				if !it.absent {
					c.drawL1Age(it.t, it.stored)
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

// lookup is L1's Get of key, or a miss without a look with noL1.
func (c *Cache[V]) lookup(key string, noL1 bool) (item[V], bool) {
	if noL1 {
		return item[V]{}, false
	}
	return c.local.Get(key)
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
