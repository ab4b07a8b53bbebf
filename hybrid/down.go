package hybrid

import (
	"sync"
	"sync/atomic"
	"time"
)

// This file holds what an instance knows of the shared tier being
// unreachable while its bus is lost, and of the checks of held entries
// under way (see checkHeld). A read that fails takes the part of the
// shared tier it went to as unreachable for heldRecheck (or until the
// probe finds it answering): held entries of keys there are then served
// as they are, without a look. On a single server that part is all of
// it. On Redis Cluster it is the key's hash slot: a master down takes
// only its own slots' keys past the check, and entries of keys on the
// masters that answer are still read again once LossGrace has passed.

// downState is the unreachable parts of the shared tier, by hash slot (slot
// 0 for every key but on Cluster).
type downState struct {
	// last is when (UnixNano) a read or a probe of the shared tier last
	// failed, 0 once a probe found it answering (see knowTags).
	last atomic.Int64
	// any is the latest until of slots; none is down once it has passed
	// (the hot path's one load).
	any atomic.Int64

	mu    sync.Mutex
	slots map[uint16]*downSlot
	// checks holds, by key, the checks of held entries under way (see
	// checkHeld), each closed once done.
	checks map[string]chan struct{}
}

// downSlot is one hash slot's state.
type downSlot struct {
	until int64  // UnixNano: taken as unreachable until then
	probe string // a key of the slot as the shared tier stores it, for the probe
}

// downSlotOf is the part of the shared tier key is in.
func (c *Cache[V]) downSlotOf(key string) uint16 {
	if !c.o.info.AtomicSlotBatch {
		return 0
	}
	return c.slotOf(key)
}

// markDown takes the slots of keys, whose read failed, as unreachable for
// heldRecheck.
func (c *Cache[V]) markDown(keys []string) {
	d := &c.down
	now := time.Now().UnixNano()
	until := now + int64(heldRecheck)
	d.last.Store(now)
	d.mu.Lock()
	if d.slots == nil {
		d.slots = map[uint16]*downSlot{}
	}
	for _, key := range keys {
		slot := c.downSlotOf(key)
		s := d.slots[slot]
		if s == nil {
			s = &downSlot{}
			d.slots[slot] = s
		}
		s.until = until
		if s.probe == "" {
			s.probe = c.tagKey(clearTag) // any key reaches a single server
			if c.o.info.AtomicSlotBatch {
				s.probe = c.prefix + key
			}
		}
	}
	d.any.Store(until)
	d.mu.Unlock()
}

// sharedDown reports whether the part of the shared tier key is in is
// taken as unreachable.
func (c *Cache[V]) sharedDown(key string) bool {
	d := &c.down
	now := time.Now().UnixNano()
	if now >= d.any.Load() {
		return false
	}
	d.mu.Lock()
	s := d.slots[c.downSlotOf(key)]
	down := s != nil && now < s.until
	d.mu.Unlock()
	return down
}

// downProbes returns, for each slot taken as unreachable, a key to probe
// it with.
func (c *Cache[V]) downProbes() map[uint16]string {
	d := &c.down
	now := time.Now().UnixNano()
	if now >= d.any.Load() {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out map[uint16]string
	for slot, s := range d.slots {
		if now < s.until {
			if out == nil {
				out = map[uint16]string{}
			}
			out[slot] = s.probe
		}
	}
	return out
}

// answered records that a probe of slot found the shared tier answering
// (up), or failing again.
func (c *Cache[V]) answered(slot uint16, up bool) {
	d := &c.down
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.slots[slot]
	if s == nil {
		return
	}
	if !up {
		now := time.Now()
		d.last.Store(now.UnixNano())
		s.until = now.Add(heldRecheck).UnixNano()
		d.any.Store(max(d.any.Load(), s.until))
		return
	}
	d.last.Store(0)
	delete(d.slots, slot)
}

// beginCheck makes the caller the one checking key's held entry (mine),
// until endCheck, unless a check of key runs: then it returns a channel
// closed once that check is done. One check of a key runs at a time.
func (c *Cache[V]) beginCheck(key string) (done <-chan struct{}, mine bool) {
	d := &c.down
	d.mu.Lock()
	defer d.mu.Unlock()
	if ch, ok := d.checks[key]; ok {
		return ch, false
	}
	if d.checks == nil {
		d.checks = map[string]chan struct{}{}
	}
	d.checks[key] = make(chan struct{})
	return nil, true
}

// endCheck ends the check beginCheck began, waking who waits for it.
func (c *Cache[V]) endCheck(key string) {
	d := &c.down
	d.mu.Lock()
	close(d.checks[key])
	delete(d.checks, key)
	d.mu.Unlock()
}
