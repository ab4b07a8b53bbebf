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
// per-key defaults (Options.PerKey), judged by tags and Clear, and
// under the same token as any read, so a Set, Delete or message about a
// key that comes while its page is read wins over the page's value. It
// calls no load function. It returns how many keys it found with a live
// value (stored in L1, or there superseded by such a newer write); keys
// missing in the shared tier, stale or undecodable are not stored, and a
// remembered absence (NegativeTTL) is stored but not counted.
//
// Keys the cache refuses (empty, reserved, too long, or given options by
// Options.PerKey that a call would refuse) are skipped, the rest
// warmed, and their errors, which name them, returned joined. When a read
// fails, Warm stops and returns the count so far and the error (joined
// with those of keys skipped so far); when ctx ends, the count so far and
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
		got, refused, err := c.warmPage(ctx, page)
		n += got
		if refused != nil {
			bad = append(bad, fmt.Errorf("hybrid: Warm: %w", refused))
		}
		if err != nil {
			if len(bad) > 0 {
				err = errors.Join(err, dedupe(bad))
			}
			return n, err
		}
	}
	return n, dedupe(bad)
}

// warmPage reads and stores one page of valid keys. refused joins the
// errors of the keys whose per-key options are refused, which it skips;
// err is a failed read, ctx's end or Close, which stop Warm.
func (c *Cache[V]) warmPage(ctx context.Context, keys []string) (n int, refused, err error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	if c.closed.Load() {
		return 0, nil, ErrClosed
	}
	p := &c.def
	if c.o.PerKey != nil {
		kp := *p
		refused = c.keyedMany(&kp, &keys, nil, nil, nil)
		p = &kp
		if len(keys) == 0 {
			return 0, refused, nil
		}
	}
	res := make([]found[V], len(keys))
	if _, cut := c.readRemoteMany(ctx, keys, nil, c.tokens(keys), res, p); cut {
		return 0, refused, ctx.Err()
	}
	for i := range res {
		switch {
		case res[i].st == readDown:
			return 0, refused, fmt.Errorf("hybrid: Warm: %w", res[i].err)
		case res[i].st == readHit && !res[i].it.absent:
			n++
		}
	}
	return n, refused, nil
}
