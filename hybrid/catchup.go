package hybrid

import (
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridcache/hybridcache/internal/keyslot"
	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds the catch-up after a bus loss where the shared tier
// keeps no log (Redis Cluster, a Ring, Options.ReplayLogLen < 0): every
// Set and Delete bumps the sequence counter of its key's hash slot (see
// seq.go), and its message goes out sequenced at the counter's value. An
// instance tracks, per slot, the counter value up to which it saw every
// write (known): from a read of every counter after it subscribed, then
// from each set or delete message whose sequence is the next one. Once a
// lost bus is back, it reads every counter again and drops from L1 only
// the entries of slots whose counter moved past what it knew (or went
// back, or is unknown or missing); then it reads the tag records and the
// Clear record of what L1 still holds and drops what they now cover.
// Entries of unchanged slots stay, and the loss's held-entry rules
// (LossGrace, StrictLoss) apply until the catch-up is done.
//
// In the stream, a sequence lower than the newest one applied for its slot
// (a failover to a replica that was behind, a Redis restarted from an
// older snapshot) drops that slot's entries (Stats.Bus.SeqRegressions).
//
// A sequence is outside a message's signature: with a Secret, messages
// do not move what is known, and a catch-up drops every slot written since
// the last read of the counters; nor do they drop slots in the stream.

// seqState is what an instance knows of the shared tier's sequence
// counters, one per hash slot.
type seqState struct {
	// known[s] is the counter of slot s up to which every write of the
	// slot is reflected in L1 (0: unknown; seqMissing: the counter was
	// missing when read, and the bus lost nothing since).
	known [keyslot.Count]atomic.Uint64
	// applied[s] is the highest sequence of slot s seen in a message.
	applied [keyslot.Count]atomic.Uint64
	// trust reports whether messages' sequences are used (no Secret).
	trust bool
	// mu makes catch-ups run one at a time.
	mu sync.Mutex
}

// newSeqState returns the state of a cache that catches up by its
// sequence counters, or nil when it cannot: it keeps a log (and replays
// it), lacks a Remote or a Bus, or its counters cannot be named (see
// seqKey). It runs after the log was opened.
func (c *Cache[V]) newSeqState() *seqState {
	if c.logged() || c.remote == nil || c.bus == nil || c.feed.Channel == "" || c.seqKey("") == "" {
		return nil
	}
	return &seqState{trust: len(c.o.Secret) == 0}
}

// seqMissing marks a slot whose counter was missing when read, with no
// bus loss since: the first set or delete message of the slot is then the
// write that made the counter, and what it carries is the counter's first
// value. A loss unmarks every slot (see unmark).
const seqMissing = math.MaxUint64

// unmark makes every slot marked seqMissing unknown: messages of the slot
// may have been lost.
func (s *seqState) unmark() {
	for i := range s.known {
		s.known[i].CompareAndSwap(seqMissing, 0)
	}
}

// mark sets known from counters read (0: missing) where the state is
// from, unless the bus reported a loss since epoch (then marks are undone).
func (c *Cache[V]) mark(now []uint64, epoch uint64, from func(i int) bool) {
	s := c.seqs
	for i, n := range now {
		if !from(i) {
			continue
		}
		if n == 0 {
			n = seqMissing
		}
		for k := s.known[i].Load(); (k == 0 || k == seqMissing || (k < n && n != seqMissing)) && !s.known[i].CompareAndSwap(k, n); k = s.known[i].Load() {
		}
	}
	if c.loss.epoch.Load() != epoch {
		s.unmark()
	}
}

// slotOf returns the hash slot of key's sequence counter.
func (c *Cache[V]) slotOf(key string) uint16 { return keyslot.Of(c.o.info.Prefix + c.prefix + key) }

// slotSeqKey returns the shared-tier key of slot's sequence counter, ""
// when the Remote's prefix puts it in another slot.
func (c *Cache[V]) slotSeqKey(slot uint16) string {
	s := c.prefix + "\x00seq:{" + keyslot.Tag(slot) + "}"
	if keyslot.Of(c.o.info.Prefix+s) != slot {
		return ""
	}
	return s
}

// seqChunk is how many counters one read asks for: a read of all 16384 in
// one call may outlast the Remote's read bound on a busy node.
const seqChunk = 1024

// readCounters reads every slot's sequence counter, 0 for one missing or
// not a number, in a few calls (OpCatchUp).
func (c *Cache[V]) readCounters(ctx context.Context) ([]uint64, error) {
	out := make([]uint64, keyslot.Count)
	keys := make([]string, 0, seqChunk)
	slots := make([]uint16, 0, seqChunk)
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		vals, err := c.get(ctx, OpCatchUp, "", keys)
		if err != nil {
			return err
		}
		for j, b := range vals {
			if n, err := strconv.ParseUint(string(b), 10, 64); err == nil {
				out[slots[j]] = n
			}
		}
		keys, slots = keys[:0], slots[:0]
		return nil
	}
	for s := range keyslot.Count {
		if k := c.slotSeqKey(uint16(s)); k != "" {
			keys, slots = append(keys, k), append(slots, uint16(s))
		}
		if len(keys) == seqChunk {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// seqBaseline reads every counter once the bus is subscribed, before the
// cache serves: a write counted in it was made before any fill of L1
// could read, so its message, even if lost later, changed nothing L1
// holds. A read that fails leaves the slots unknown: the first catch-up
// then drops what L1 holds.
func (c *Cache[V]) seqBaseline() {
	ctx, cancel := context.WithTimeout(c.stop, 5*time.Second)
	defer cancel()
	epoch := c.loss.epoch.Load()
	now, err := c.readCounters(ctx)
	if err != nil {
		c.log.log(logBus, "hybrid: could not read the sequence counters; a bus loss will drop all of L1", "namespace", c.o.Namespace, "err", err)
		return
	}
	c.mark(now, epoch, func(i int) bool { return c.seqs.known[i].Load() == 0 })
}

// noteSeq follows m, applied (or ours), in its slot's sequence: a set or
// delete at the sequence after the known one moves it on; a sequence lower
// than the newest seen in the slot drops the slot's entries. It runs on
// the bus's goroutine.
func (c *Cache[V]) noteSeq(m *message.Message) {
	s := c.seqs
	if s == nil || !s.trust || m.Seq == 0 || len(m.Keys) == 0 {
		return
	}
	slot := c.slotOf(m.Keys[0])
	if m.Seq < s.applied[slot].Load() {
		c.seqRegressed(slot, m.Seq)
		return
	}
	s.applied[slot].Store(m.Seq)
	if m.Op == message.OpSet || m.Op == message.OpDelete {
		if !s.known[slot].CompareAndSwap(m.Seq-1, m.Seq) {
			s.known[slot].CompareAndSwap(seqMissing, m.Seq)
		}
	}
}

// seqRegressed drops the entries of slot, and every fill in flight (which
// may have read a write the shared tier lost): its counter went back to
// seq, below a write this instance saw.
func (c *Cache[V]) seqRegressed(slot uint16, seq uint64) {
	c.vers.bumpAll()
	c.flights.ForgetAll()
	n := c.local.DeleteIf(func(key string, _ item[V]) bool { return c.slotOf(key) == slot })
	c.pinQueued()
	c.seqs.applied[slot].Store(seq)
	c.seqs.known[slot].Store(seq)
	c.n.seqRegressions.Add(1)
	c.log.log(logBus, "hybrid: a message's sequence went back (Redis failed over or restarted older); its slot dropped from L1", "namespace", c.o.Namespace, "slot", slot, "entries", n)
}

// catchUp ends a bus loss where no log is kept: it reads every counter,
// drops the entries of the slots that changed (see keepSlot), then those
// that a tag delete or a Clear covers, and ends the loss unless the bus
// reported another meanwhile. It flushes L1 instead when the counters or
// the records cannot be read. It runs on a worker; the loss is counted
// once done.
func (c *Cache[V]) catchUp() {
	defer c.n.busLosses.Add(1)
	epoch := c.loss.epoch.Load()
	defer func() {
		if c.loss.epoch.Load() == epoch {
			c.loss.lost.Store(false)
		}
	}()
	s := c.seqs
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := c.fillContext(context.Background(), 30*time.Second, nil)
	defer cancel()
	var pre [keyslot.Count]uint64
	for i := range pre {
		pre[i] = s.known[i].Load()
	}
	tagEpoch := c.tags.currentEpoch()
	now, err := retryRead(ctx, func() ([]uint64, error) { return c.readCounters(ctx) })
	if err != nil {
		c.flushLoss("hybrid: the sequence counters could not be read after a bus loss; L1 flushed", err)
		return
	}
	var drop [keyslot.Count]bool
	for i := range drop {
		drop[i] = !keepSlot(pre[i], now[i], s.known[i].Load())
	}
	dropped := c.local.DeleteIf(func(key string, _ item[V]) bool { return drop[c.slotOf(key)] })
	// What L1 holds of a dropped slot is now read after its counter was.
	for i, n := range now {
		if drop[i] && n != 0 && n < pre[i] { // went back: what was known is gone
			s.known[i].Store(n)
			s.applied[i].Store(n)
		}
	}
	c.mark(now, epoch, func(i int) bool { return drop[i] })
	covered, ok := c.catchUpTags(ctx, tagEpoch)
	if !ok {
		c.flushLoss("hybrid: the tag records could not be read after a bus loss; L1 flushed", nil)
		return
	}
	c.pinQueued()
	c.n.caughtUp.Add(1)
	c.n.catchUpDropped.Add(uint64(dropped + covered))
}

// keepSlot reports whether a slot's L1 entries may stay after a loss: its
// counter, now, is what was known before it was read (pre), or messages
// seen since, each the next in the sequence, brought what is known (k) to
// it. A counter unknown, missing, or lower than known keeps nothing.
func keepSlot(pre, now, k uint64) bool {
	if pre == seqMissing || k == seqMissing {
		return false
	}
	return pre != 0 && now != 0 && (now == pre || (now > pre && k >= now))
}

// retryRead runs read until it succeeds or ctx ends, with pauses: Redis may
// still be coming back when the bus is.
func retryRead[T any](ctx context.Context, read func() (T, error)) (T, error) {
	wait := 50 * time.Millisecond
	for {
		v, err := read()
		if err == nil || !pause(ctx, wait) {
			return v, err
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// clearMargin is how long after the time of a Clear (by its writer's clock)
// an L1 entry whose write time is not known must have been stored to be
// kept by a catch-up: clock skew, and a fill that read just before the
// Clear and stored just after.
const clearMargin = time.Second

// catchUpTags reads the Clear record and the records of the tags that L1
// entries carry, learns them, and drops the entries they cover, as a read
// from the shared tier would judge them (see tagDeleted); an entry whose
// write time is not known is judged by when it was stored here. It
// returns how many it dropped, and false when the records could not be
// read.
func (c *Cache[V]) catchUpTags(ctx context.Context, epoch uint64) (int, bool) {
	seen := map[string]bool{clearTag: true}
	tags := []string{clearTag}
	for _, it := range c.local.All() {
		for _, tag := range it.tags() {
			if !seen[tag] && len(tags) < maxKnownTags {
				seen[tag] = true
				tags = append(tags, tag)
			}
		}
	}
	rkeys := make([]string, len(tags))
	for i, tag := range tags {
		rkeys[i] = c.tagKey(tag)
	}
	vals, err := retryRead(ctx, func() ([][]byte, error) { return c.get(ctx, OpCatchUp, "", rkeys) })
	if err != nil {
		return 0, false
	}
	// A tag whose record is missing or unreadable counts as deleted now,
	// as a read would take it (see recordDeleted).
	at := make(map[string]int64, len(tags))
	for i, tag := range tags {
		t, ok := decodeTagRecord(vals[i])
		if !ok {
			if tag == clearTag {
				return 0, false // every value's: only a flush undoes it
			}
			at[tag] = -1
			continue
		}
		at[tag] = t
		c.tags.learn(epoch, tag, t, recordUntil(&c.o, tag, t))
	}
	clear := at[clearTag]
	n := c.local.DeleteIf(func(_ string, it item[V]) bool {
		written := it.writtenAt()
		if written == 0 {
			written = time.Now().Add(-c.storedAge(it.stored) - clearMargin).UnixNano()
		}
		if deletedSince(clear, written) {
			return true
		}
		for _, tag := range it.tags() {
			t, ok := at[tag]
			if !ok || t < 0 || deletedSince(t, it.writtenAt()) {
				return true
			}
		}
		return false
	})
	return n, true
}

// flushLoss flushes L1 at the end of a loss that could not be caught up
// on, counts it (Stats.Bus.Flushed) and logs why.
func (c *Cache[V]) flushLoss(msg string, err error) {
	c.n.lossFlushes.Add(1)
	if err != nil {
		c.log.log(logBus, msg, "namespace", c.o.Namespace, "err", err)
	} else {
		c.log.log(logBus, msg, "namespace", c.o.Namespace)
	}
	c.flush()
}
