package l1

import (
	"iter"

	"github.com/maypok86/otter/v2"
)

// DeleteIf deletes every entry for which match reports true and returns how
// many it deleted. It visits every entry, so it costs a pass over the
// cache; each entry is checked and deleted under its own lock, so an entry
// written meanwhile is judged on its new value. match must be quick and
// must not call the cache.
func (c *Cache[V]) DeleteIf(match func(key string, v V) bool) int {
	n := 0
	c.tasks.begin()
	defer c.tasks.done()
	for key := range c.c.Keys() {
		c.c.ComputeIfPresent(key, func(old cell[V]) (cell[V], otter.ComputeOp) {
			if match(key, old.v) {
				n++
				return old, otter.InvalidateOp
			}
			return old, otter.CancelOp
		})
	}
	return n
}

// All returns an iterator over the live entries, in no set order (otter's
// table order), that neither counts hits or misses nor tells the eviction
// policy of a read. It is weakly consistent: safe while the cache changes,
// which it may or may not reflect. A walk costs a pass over the cache in
// all; each step is about constant.
func (c *Cache[V]) All() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		for key, s := range c.c.All() {
			if !yield(key, s.v) {
				return
			}
		}
	}
}
