package l1

import (
	"sync/atomic"
	"unsafe"
)

// counter is a striped counter: concurrent adds land on different cache
// lines, so counting hits does not make cores fight over one word.
type counter struct {
	stripes [counterStripes]stripe
}

type stripe struct {
	n atomic.Uint64
	// For the hits counter, Cache.Get's note of the last write it saw:
	// the cache's write count then, and n then (see Cache.hitUpkeep). They
	// share the line a hit writes anyway.
	writes, since atomic.Uint64
	_             [40]byte // pad to a 64-byte cache line
}

const (
	counterStripes = 8
	stripeBits     = 3 // log2(counterStripes)
)

// count adds one to n, on the stripe of the calling goroutine, and returns
// the stripe and its new count.
//
// The stripe comes from the address of a local variable: goroutines have
// separate stacks, so concurrent callers tend to pick different stripes, at
// the cost of a multiplication instead of a random number. The bits below
// 2 KiB, the smallest stack, depend on the call depth rather than on the
// goroutine and are dropped; neighbouring small stacks differ only in the
// bits just above, so these are mixed into the top bits, which pick the
// stripe. (Taking bits 13-15 as they are put up to four 2 KiB stacks, such
// as those of goroutines started together, on one stripe.)
//
// count is a method of the generic Cache, not of counter, so that it is
// inlined into Get wherever Get is instantiated: the compiler does not
// inline this package's plain functions into a Get instantiated from
// generic code in another package, such as the hybrid cache.
func (c *Cache[V]) count(n *counter) (*stripe, uint64) {
	var local byte
	h := uint64(uintptr(unsafe.Pointer(&local))>>11) * 0x9e3779b97f4a7c15
	s := &n.stripes[h>>(64-stripeBits)]
	return s, s.n.Add(1)
}

func (c *counter) load() uint64 {
	var sum uint64
	for i := range c.stripes {
		sum += c.stripes[i].n.Load()
	}
	return sum
}
