// Package l1 is the in-process first tier of a hybrid cache: a bounded,
// weighted (by bytes) store on otter v2 with a lifetime per entry.
//
// Values are kept as they are, not copied: a Get returns the stored value
// itself. Entries are evicted by weight (W-TinyLFU decides which) and by
// their own expiry, measured on a clock read every Resolution rather than on
// every Get, which keeps a hit cheap.
package l1

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/maypok86/otter/v2"
)

// Options configures a Cache.
type Options struct {
	// MaxWeight is the bound on the sum of entry weights, in bytes.
	// It must be positive.
	MaxWeight uint64
	// Resolution is how often the cache reads the time: an entry may live
	// up to this much past its lifetime. It also bounds how long upkeep
	// that reads ask for waits for a write to run it. Default: 10
	// milliseconds.
	Resolution time.Duration
	// OnEvict, if set, is called after an entry leaves the cache because of
	// its size bound or its expiry (not when it is deleted or replaced).
	// It runs on the goroutine of a write (the upkeep that follows a Set,
	// Replace or Delete runs there, and so does the upkeep that reads asked
	// for since the last write), of a Get that hits while upkeep is queued,
	// or, if neither comes within Resolution, on one of the cache's own;
	// after Close, on the goroutine of any call. It must not call the cache.
	OnEvict func(key string, expired bool)
}

// Otter holds the cell itself, which it keeps inline in its entry node:
// a hit reads the node and nothing else. Otter returns the value it holds
// by copy, through several frames of generic code, and the compiler keeps
// a struct in registers only up to four words: so the weight and the
// lifetime share one word, and a cell of the hybrid cache (its entry takes
// three words) is four. (A cell of five words had made a hit cost about
// 1.7 times a hit of otter holding the value alone; a pointer to it cost an
// allocation per entry and, where the cell was not in the CPU's cache, one
// more cache miss per hit.)

// cell is a stored value with what the weigher and the expiry calculator
// need: meta holds the weight in its low 32 bits and the lifetime, in
// milliseconds, in its high 32 bits.
type cell[V any] struct {
	v    V
	meta uint64
}

// maxTTL is the longest lifetime a cell holds: about 49.7 days. A longer
// one is cut to it.
const maxTTL = time.Duration(math.MaxUint32) * time.Millisecond

func newCell[V any](v V, weight uint32, ttl time.Duration) cell[V] {
	ms := uint64(min(ttl, maxTTL) / time.Millisecond)
	return cell[V]{v: v, meta: uint64(weight) | max(ms, 1)<<32}
}

func (s cell[V]) weight() uint32 { return uint32(s.meta) }

func (s cell[V]) ttl() time.Duration { return time.Duration(s.meta>>32) * time.Millisecond }

// Cache is a bounded in-memory store of V by string key. It is safe for
// concurrent use.
type Cache[V any] struct {
	c     *otter.Cache[string, cell[V]]
	clock *otter.CoarseClock
	// Every Get reads the fields above and writes a stripe below: the pad
	// keeps the stripes off their cache line.
	_            [64 - 2*unsafe.Sizeof(uintptr(0))]byte
	hits, misses counter
	evictions    atomic.Uint64
	tasks        tasks
	hot          *hotSketch // sampled hits, for HotKeys (hot.go)
}

// New returns a Cache bounded by o.MaxWeight.
func New[V any](o Options) (*Cache[V], error) {
	if o.MaxWeight == 0 {
		return nil, errors.New("l1: Options.MaxWeight must be positive")
	}
	if o.Resolution < 0 {
		return nil, fmt.Errorf("l1: Options.Resolution is negative (%v)", o.Resolution)
	}
	if o.Resolution == 0 {
		o.Resolution = 10 * time.Millisecond
	}
	c := &Cache[V]{clock: otter.NewCoarseClock(o.Resolution), hot: newHotSketch()}
	c.tasks.init(o.Resolution)
	oo := &otter.Options[string, cell[V]]{
		MaximumWeight: o.MaxWeight,
		Weigher: func(_ string, s cell[V]) uint32 {
			return s.weight()
		},
		// A writing-only calculator lets otter skip expiry work on reads.
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, cell[V]]) time.Duration {
			return e.Value.ttl()
		}),
		Clock:    c.clock,
		Executor: c.tasks.submit,
		OnDeletion: func(e otter.DeletionEvent[string, cell[V]]) {
			if !e.Cause.IsEviction() {
				return
			}
			c.evictions.Add(1)
			if o.OnEvict != nil {
				o.OnEvict(e.Key, e.Cause == otter.CauseExpiration)
			}
		},
	}
	oc, err := otter.New(oo)
	if err != nil {
		c.clock.Stop()
		return nil, fmt.Errorf("l1: %w", err)
	}
	c.c = oc
	return c, nil
}

// Get returns the value stored under key, if any and not expired.
func (c *Cache[V]) Get(key string) (V, bool) {
	v, _, ok := c.GetCounted(key)
	return v, ok
}

// GetCounted is Get that also returns, on a hit, hit: the count of the
// hits of the stripe of the striped hit counter this one was counted on
// (see count). It lets a caller sample hits without a random draw of its
// own: each stripe's counts are consecutive. A hit runs the upkeep otter
// asks for (see hitUpkeep) and may be sampled for the hot keys (see
// sampled).
func (c *Cache[V]) GetCounted(key string) (v V, hit uint64, ok bool) {
	s, ok := c.c.GetIfPresent(key)
	if !ok {
		c.count(&c.misses)
		return v, 0, false
	}
	st, n := c.count(&c.hits)
	if c.tasks.queued.Load() > 0 {
		c.hitUpkeep(st, n)
	}
	if sampled(n) {
		c.hot.add(key)
	}
	return s.v, n, true
}

// GetExpiry is Get that also returns when the entry expires, in Unix
// nanoseconds on the cache's clock (see Now). It costs more than Get: use
// it where the expiry is wanted.
func (c *Cache[V]) GetExpiry(key string) (v V, expires int64, ok bool) {
	e, ok := c.c.GetEntry(key)
	if !ok {
		c.count(&c.misses)
		return v, 0, false
	}
	st, n := c.count(&c.hits)
	if c.tasks.queued.Load() > 0 {
		c.hitUpkeep(st, n)
	}
	if sampled(n) {
		c.hot.add(key)
	}
	return e.Value.v, e.ExpiresAtNano, true
}

// Peek is GetExpiry for inspection: it also returns the entry's weight,
// and it counts neither a hit nor a miss and tells the eviction policy
// nothing, so that looking at an entry does not change what the cache
// keeps.
func (c *Cache[V]) Peek(key string) (v V, expires int64, weight uint32, ok bool) {
	e, ok := c.c.GetEntryQuietly(key)
	if !ok {
		return v, 0, 0, false
	}
	return e.Value.v, e.ExpiresAtNano, e.Value.weight(), true
}

// hitWindow is how many hits of a stripe, from the first that finds upkeep
// queued after the cache's last write, run the upkeep that otter asks for
// (see hitUpkeep). The production traces in bench/traces have runs of hits
// up to about 4,000 long between two misses.
const hitWindow = 8192

// hitUpkeep is for a hit that finds otter's upkeep queued, most likely
// because this read filled otter's read buffer: until the upkeep runs,
// otter drops the reads that find the buffer full, and with them what
// W-TinyLFU learns. So the hit runs the upkeep, unless another hit is
// running it or its stripe has counted hitWindow hits (n is its count)
// since the cache last wrote: what the policy learns is used when a write
// adds an entry, and the upkeep costs about as much as the hit itself. A
// cache that has stopped writing leaves it, as before, to the next write
// or to Resolution, which feed the policy 16 reads of a run of hits in
// each (see tasks).
func (c *Cache[V]) hitUpkeep(st *stripe, n uint64) {
	if w := c.tasks.writes.Load(); st.writes.Load() != w {
		st.writes.Store(w)
		st.since.Store(n)
	} else if n-st.since.Load() >= hitWindow {
		return
	}
	c.tasks.tryRun()
}

// Now returns the cache's clock, in Unix nanoseconds: the time as of at
// most Resolution ago, read without a system call.
func (c *Cache[V]) Now() int64 { return c.clock.NowNano() }

// Set stores v under key with the given weight (in bytes) for ttl, which
// is kept to the millisecond (at least one) and at most about 49.7 days.
// A ttl <= 0 stores nothing and drops what was there.
func (c *Cache[V]) Set(key string, v V, weight uint32, ttl time.Duration) {
	c.tasks.begin()
	defer c.tasks.done()
	if ttl <= 0 {
		c.c.Invalidate(key)
		return
	}
	c.c.Set(key, newCell(v, weight, ttl))
}

// SetIf stores v under key, as Set does, only if ok reports true; ok runs
// under the lock of key's entry, so no other write of key (Set, Replace,
// Delete) falls between its answer and the store. ok must be quick and
// must not call the cache. SetIf reports whether it stored.
func (c *Cache[V]) SetIf(key string, v V, weight uint32, ttl time.Duration, ok func() bool) bool {
	c.tasks.begin()
	defer c.tasks.done()
	return c.setIf(key, v, weight, ttl, ok)
}

// Batch is a group of writes whose upkeep runs once, when Done is called,
// instead of after each write: for a page of 50 keys stored together, that
// cuts the cost of storing them by about a quarter. A Batch is for one
// goroutine; Done must be called.
type Batch[V any] struct{ c *Cache[V] }

// Batch starts a group of writes.
func (c *Cache[V]) Batch() *Batch[V] {
	c.tasks.begin()
	return &Batch[V]{c}
}

// SetIf is Cache.SetIf within the batch.
func (b *Batch[V]) SetIf(key string, v V, weight uint32, ttl time.Duration, ok func() bool) bool {
	return b.c.setIf(key, v, weight, ttl, ok)
}

// Done ends the batch and runs the upkeep of its writes.
func (b *Batch[V]) Done() { b.c.tasks.done() }

func (c *Cache[V]) setIf(key string, v V, weight uint32, ttl time.Duration, ok func() bool) bool {
	if ttl <= 0 {
		return false
	}
	stored := false
	c.c.Compute(key, func(old cell[V], found bool) (cell[V], otter.ComputeOp) {
		if !ok() {
			return old, otter.CancelOp
		}
		stored = true
		return newCell(v, weight, ttl), otter.WriteOp
	})
	return stored
}

// Replace stores v under key only if key is present, atomically with
// respect to Delete, and reports whether it did.
func (c *Cache[V]) Replace(key string, v V, weight uint32, ttl time.Duration) bool {
	c.tasks.begin()
	defer c.tasks.done()
	if ttl <= 0 {
		c.c.Invalidate(key)
		return false
	}
	replaced := false
	c.c.ComputeIfPresent(key, func(cell[V]) (cell[V], otter.ComputeOp) {
		replaced = true
		return newCell(v, weight, ttl), otter.WriteOp
	})
	return replaced
}

// Update changes the entry of key, if there is one: f gets its value and
// returns the value to store instead, its weight and its lifetime from now
// (<= 0: drop the entry), or ok false to leave the entry as it is. f runs
// under the lock of key's entry, so no other write of key falls between
// its reading and the store; it must be quick and must not call the cache.
// Update counts neither a hit nor a miss, and reports whether key was
// present.
func (c *Cache[V]) Update(key string, f func(v V) (nv V, weight uint32, ttl time.Duration, ok bool)) bool {
	c.tasks.begin()
	defer c.tasks.done()
	present := false
	c.c.ComputeIfPresent(key, func(old cell[V]) (cell[V], otter.ComputeOp) {
		present = true
		v, weight, ttl, ok := f(old.v)
		switch {
		case !ok:
			return old, otter.CancelOp
		case ttl <= 0:
			return old, otter.InvalidateOp
		}
		return newCell(v, weight, ttl), otter.WriteOp
	})
	return present
}

// Delete drops key.
func (c *Cache[V]) Delete(key string) {
	c.tasks.begin()
	defer c.tasks.done()
	c.c.Invalidate(key)
}

// Clear drops every entry.
func (c *Cache[V]) Clear() {
	c.tasks.begin()
	defer c.tasks.done()
	c.c.InvalidateAll()
}

// Len returns the approximate number of entries.
func (c *Cache[V]) Len() int { return c.c.EstimatedSize() }

// Weight returns the approximate sum of entry weights.
func (c *Cache[V]) Weight() uint64 { return c.c.WeightedSize() }

// Stats is a snapshot of a Cache's counters.
type Stats struct {
	Hits, Misses, Evictions uint64
}

// Stats returns the hit, miss and eviction (by size or expiry) counts so far.
func (c *Cache[V]) Stats() Stats {
	return Stats{Hits: c.hits.load(), Misses: c.misses.load(), Evictions: c.evictions.Load()}
}

// Close stops the cache's background goroutines and runs the upkeep still
// queued. The cache still answers afterwards, reading the precise time on
// every call and running its upkeep on the goroutine of the call.
func (c *Cache[V]) Close() {
	c.c.StopAllGoroutines()
	c.tasks.close()
	c.clock.Stop()
}
