package l1

import (
	"sync/atomic"
	"unsafe"
)

// counter is a striped counter: concurrent adds land on different cache
// lines, so counting hits does not make cores fight over one word.
type counter struct {
	stripes [counterStripes]struct {
		n atomic.Uint64
		_ [56]byte // pad to a 64-byte cache line
	}
}

const counterStripes = 8

// add picks a stripe from the address of a local variable: goroutines have
// separate stacks, so concurrent callers tend to pick different stripes,
// at the cost of a shift instead of a random number.
func (c *counter) add() {
	var local byte
	i := (uintptr(unsafe.Pointer(&local)) >> 13) % counterStripes
	c.stripes[i].n.Add(1)
}

func (c *counter) load() uint64 {
	var sum uint64
	for i := range c.stripes {
		sum += c.stripes[i].n.Load()
	}
	return sum
}
