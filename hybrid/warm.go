package hybrid

import (
	"context"
	"errors"
	"fmt"
)

// This file holds the warm start: reading keys from the shared tier into
// L1 before traffic comes, through the read path of a fill.

// warmPage is how many keys Warm reads in one shared-tier call.
const warmPage = 500

// Warm reads keys from the shared tier, warmPage (500) keys per call, and
// stores in L1 what it finds, as a read of GetMany would: with the
// per-key defaults (Options.EntryOptions), judged by tags and Clear, and
// under the same token as any read, so a Set, Delete or message about a
// key that comes while its page is read wins over the page's value. It
// calls no load function. It returns how many keys it found with a live
// value (stored in L1, or there superseded by such a newer write); keys
// missing in the shared tier, stale or undecodable are not stored, and a
// remembered absence (NegativeTTL) is stored but not counted.
//
// Keys the cache refuses (empty, reserved, too long) are skipped and their
// errors returned joined. When a read fails, Warm stops and returns the
// count so far and the error; when ctx ends, the count so far and
// ctx.Err(). Either way what it stored is what the shared tier held.
func (c *Cache[V]) Warm(ctx context.Context, keys []string) (int, error) {
	if err := c.checkBatch(ctx); err != nil {
		return 0, err
	}
	if c.remote == nil {
		return 0, errors.New("hybrid: Warm: no Remote")
	}
	var bad []error
	valid := make([]string, 0, len(keys))
	for _, key := range keys {
		if err := c.checkKey(key); err != nil {
			bad = append(bad, fmt.Errorf("hybrid: Warm: %w", err))
			continue
		}
		valid = append(valid, key)
	}
	n := 0
	for len(valid) > 0 {
		page := valid[:min(warmPage, len(valid))]
		valid = valid[len(page):]
		got, err := c.warmPage(ctx, page)
		n += got
		if err != nil {
			return n, err
		}
	}
	return n, dedupe(bad)
}

// warmPage reads and stores one page of valid keys.
func (c *Cache[V]) warmPage(ctx context.Context, keys []string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if c.closed.Load() {
		return 0, ErrClosed
	}
	p := &c.def
	var badKey error
	if c.o.EntryOptions != nil {
		kp := *p
		badKey = c.keyedMany(&kp, &keys, nil, nil, nil)
		p = &kp
	}
	res := make([]found[V], len(keys))
	if _, cut := c.readRemoteMany(ctx, keys, c.tokens(keys), res, p); cut {
		return 0, ctx.Err()
	}
	n := 0
	for i := range res {
		switch {
		case res[i].st == readDown:
			return 0, fmt.Errorf("hybrid: Warm: %w", res[i].err)
		case res[i].st == readHit && !res[i].it.absent:
			n++
		}
	}
	if badKey != nil {
		return n, fmt.Errorf("hybrid: Warm: %w", badKey)
	}
	return n, nil
}
