package hybrid

import (
	"time"

	"github.com/hybridcache/hybridcache/l1"
)

// This file holds the stores into L1: every value the cache puts there
// goes through storeLocal, weighed by weight.

// entryOverhead is what an L1 entry weighs beyond its key and value:
// otter's node and the entry's share of otter's table, 144 bytes as
// measured with a million entries (bench/RESULTS.md, "Memory of a large
// L1"). timingOverhead is what an entry's timing adds where it has one (a
// value kept for fail-safe, refreshed in the background, tagged or
// versioned): the allocation of a timing (see TestTimingOverhead).
const (
	entryOverhead  = 144
	timingOverhead = 128
)

// storeLocal puts it in L1 for ttl, scheduled as p says, unless key
// changed since tok was taken; as part of lb, or alone if lb is nil. size
// is what the value adds to L1 (see size); p.skip's SkipL1Write stores
// nothing. The check runs under the lock of
// key's L1 entry, and every change bumps the versions before it touches the
// entry, so no change can slip in between the check and the store. It
// reports whether it stored.
func (c *Cache[V]) storeLocal(lb *l1.Batch[item[V]], key string, it item[V], size int, ttl time.Duration, tok token, p *policy) bool {
	return c.storeLocalAt(lb, key, it, size, ttl, tok, p, c.storedNow())
}

// storeLocalAt is storeLocal with the store's stamp (see storedNow) read
// already: a page of values stored together reads the clock once.
func (c *Cache[V]) storeLocalAt(lb *l1.Batch[item[V]], key string, it item[V], size int, ttl time.Duration, tok token, p *policy, at uint32) bool {
	if p.skip&SkipL1Write != 0 {
		c.skipped(SkipL1Write, 1)
		return false
	}
	it, ttl = c.stampAt(it, size, ttl, p, at)
	w := weight(key, it, size)
	valid := func() bool { return c.vers.valid(tok) }
	var stored bool
	if lb != nil {
		stored = lb.SetIf(key, it, w, ttl, valid)
	} else {
		stored = c.local.SetIf(key, it, w, ttl, valid)
	}
	if !stored {
		c.n.fillsDiscarded.Add(1)
		return false
	}
	return true
}

// weight is the L1 weight of key holding it, whose value's size is size
// (see size): every L1 store weighs its entry here.
func weight[V any](key string, it item[V], size int) uint32 {
	w := len(key) + size + entryOverhead
	if it.t != nil {
		w += timingOverhead
	}
	return uint32(min(w, 1<<31))
}

// live reports whether an entry that L1 returned is within its lifetime,
// and counts it as a miss if not (an entry kept past it for fail-safe).
func (c *Cache[V]) live(it item[V]) bool {
	if it.t == nil || c.local.Now() < it.t.expires {
		return true
	}
	c.n.pastLife.Add(1)
	return false
}
