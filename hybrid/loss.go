package hybrid

import (
	"context"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds what the cache does when its bus loses messages: it
// keeps L1 (an entry served for LossGrace during the loss is re-read from
// the shared tier, and served as it is only when that cannot be reached),
// and once the bus is back it replays the messages it missed from the
// shared tier's log (Remote.ReadLog), flushing L1 only when the log cannot cover
// the gap. Where no log is kept, it catches up by the sequence counters
// of the hash slots instead (see catchup.go), and flushes L1 only when
// they cannot be read. Options.StrictLoss flushes L1 on every loss
// instead, and reads through to the shared tier while the bus is down.

// lossState is what an instance knows of lost messages.
type lossState struct {
	// lost is set from a loss until the replay that follows it is done.
	lost atomic.Bool
	// since is when the current loss began (L1's clock).
	since atomic.Int64
	// epoch counts the bus's loss reports: a replay ends the loss only if
	// none came while it ran.
	epoch atomic.Uint64
	// probing is set while the probe of an unreachable shared tier runs
	// (see watchShared).
	probing atomic.Bool

	mu sync.Mutex
	// seen holds the newest positioned messages applied, in arrival order
	// (next is where the next goes): where a replay may start.
	seen [seenLen]seenMsg
	next int
	// from is seen as it was when the current loss began.
	from []seenMsg
}

// seenLen is how many positions a replay may choose from: a forged
// position is one of them until that many real messages followed it.
const seenLen = 8

// seenMsg is a position a replay may start after. A position is trusted
// when it came from the shared tier itself (the log's newest position when
// the cache started, or an entry a replay read); one that came with a
// message is checked first: the log's entry there must be that message
// (same origin, op and first key), so that a message published again under
// another position cannot make a replay skip the writes it missed.
type seenMsg struct {
	pos     string
	trusted bool
	origin  message.Origin
	op      message.Op
	keys    []string // the keys the message names
}

// note records that the message m, at m.Position, has been applied.
func (s *lossState) note(m message.Message) {
	if m.Position == "" {
		return
	}
	s.add(seenMsg{pos: m.Position, origin: m.Origin, op: m.Op, keys: m.Keys})
}

// noteTrusted records a position read from the shared tier.
func (s *lossState) noteTrusted(pos string) {
	if pos != "" {
		s.add(seenMsg{pos: pos, trusted: true})
	}
}

func (s *lossState) add(sm seenMsg) {
	s.mu.Lock()
	s.seen[s.next] = sm
	s.next = (s.next + 1) % seenLen
	s.mu.Unlock()
}

// begin starts a loss unless one is under way, and returns whether it did.
// It runs on the bus's goroutine, in order with the messages: the
// positions seen so far are those of every message delivered before the
// loss, which its replay starts after.
func (s *lossState) begin(now int64) bool {
	s.epoch.Add(1)
	if s.lost.Load() {
		return false
	}
	s.mu.Lock()
	s.from = s.from[:0]
	for _, sm := range s.seen {
		if sm.pos != "" {
			s.from = append(s.from, sm)
		}
	}
	s.mu.Unlock()
	s.since.Store(now)
	s.lost.Store(true)
	return true
}

// candidates returns the positions the current loss's replay may start
// after, newest first.
func (s *lossState) candidates() []seenMsg {
	s.mu.Lock()
	out := slices.Clone(s.from)
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b seenMsg) int { return message.ComparePositions(b.pos, a.pos) })
	return out
}

// logKey is the shared-tier key of the namespace's log of announced writes.
func (c *Cache[V]) logKey() string { return c.prefix + "\x00log" }

// openLog opens the log of announced writes and returns its newest
// position, or an error wrapping errors.ErrUnsupported when the Remote
// keeps no log (the cache then goes without: a loss flushes L1).
func (c *Cache[V]) openLog() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var page tier.LogPage
	err := c.call(ctx, OpOpenLog, "", func(ctx context.Context) (err error) {
		page, err = c.remote.ReadLog(ctx, c.logKey(), "", 0)
		return err
	})
	pos := page.Last
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		// The position stays unknown: a loss before the first message
		// flushes L1.
		c.log.log(logBus, "hybrid: could not open the invalidation log; a bus loss will flush L1", "namespace", c.o.Namespace, "err", err)
	}
	return pos, err
}

// held reports whether an L1 entry must be checked against the shared tier
// before it is served: during a bus loss, once it has been served for
// LossGrace (counted from the loss for entries stored before it, from
// their store for the others), and with StrictLoss, always.
func (c *Cache[V]) held(it item[V]) bool {
	if !c.loss.lost.Load() {
		return false
	}
	if c.o.StrictLoss {
		return true
	}
	return min(c.storedAge(it.stored), time.Duration(c.local.Now()-c.loss.since.Load())) > c.o.LossGrace
}

// storedNow is the time an L1 store is stamped with: milliseconds since the
// cache was created, in 32 bits (an item stays small, which an L1 hit
// measures), wrapping every 49.7 days, which no L1 entry outlives.
func (c *Cache[V]) storedNow() uint32 { return c.storedAt(time.Now()) }

// storedAt is storedNow for a time read already.
func (c *Cache[V]) storedAt(now time.Time) uint32 { return uint32(now.Sub(c.born) / time.Millisecond) }

// storedAge is how long ago an item stamped s was stored.
func (c *Cache[V]) storedAge(s uint32) time.Duration {
	return time.Duration(c.storedNow()-s) * time.Millisecond
}

// heldServable reports whether an entry of key that held reports may be
// served without a look at the shared tier, whose part holding key was
// just found unreachable (a batch serves such entries, and reads the
// others).
func (c *Cache[V]) heldServable(key string) bool {
	if !c.sharedDown(key) {
		return false
	}
	c.n.heldServed.Add(1)
	return true
}

// checkHeld answers for an entry that held reports: as it is when the
// shared tier cannot be reached (then the database is not asked either) or
// when it is an own write still queued for the shared tier, else by the
// shared tier's value. ok is false when the shared tier does not hold a
// live value: the caller then fills as for a miss. Without StrictLoss, one
// check of a key runs at a time, and the other reads of the key wait for
// it (until their ctx ends, or heldRecheck passes: then they are served
// the held entry) and take what it stored; a check that fails marks its
// part of the shared tier down (see down.go), so that a shared tier that
// stopped answering keeps the reads of a key waiting once, for one read's
// timeout, not each. With StrictLoss, every read looks.
func (c *Cache[V]) checkHeld(ctx context.Context, key string, it item[V]) (got item[V], ok bool) {
	if c.queued(key) {
		return it, true // our own write, not yet in the shared tier
	}
	for !c.o.StrictLoss {
		if c.heldServable(key) {
			return it, true
		}
		done, mine := c.beginCheck(key)
		if mine {
			defer c.endCheck(key)
			break
		}
		if !c.awaitCheck(ctx, done) {
			c.n.heldServed.Add(1)
			return it, true
		}
		// The check stored what the shared tier holds, if it could read
		// it; else the slot is down, or the entry is still held: again.
		if cur, ok := c.local.Get(key); ok && c.live(cur) {
			if !c.held(cur) {
				return cur, true
			}
			it = cur
		}
	}
	if c.o.StrictLoss && c.heldServable(key) {
		return it, true
	}
	got, st := c.readRemote(ctx, key, c.vers.token(key), c.keyDefaults(key))
	switch st {
	case readHit:
		// Stored in L1 unless a change of key came first: either way the
		// held entry, which the shared tier showed changed, must go.
		c.dropHeld(key, it)
		return got, true
	case readDown: // readFailed took the shared tier as unreachable
		c.n.heldServed.Add(1)
		return it, true
	}
	// Deleted, stale or undecodable in the shared tier: readRemoteMany
	// dropped the held entry (see dropIfHeld).
	return got, false
}

// awaitCheck waits until done is closed, and reports whether it was, unless
// ctx ends or heldRecheck passes first: a check that a Remote without a
// bound of its own keeps waiting holds the other reads that long at most.
func (c *Cache[V]) awaitCheck(ctx context.Context, done <-chan struct{}) bool {
	t := time.NewTimer(heldRecheck)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// dropHeld drops key's L1 entry if it is still it, the held entry that a
// read of the shared tier showed outdated (an entry stored since is kept).
func (c *Cache[V]) dropHeld(key string, it item[V]) {
	c.local.Update(key, func(cur item[V]) (item[V], uint32, time.Duration, bool) {
		return cur, 0, 0, cur.stored == it.stored && cur.t == it.t
	})
}

// dropIfHeld drops key's L1 entry if it is held (see held): a read of the
// shared tier found no live value for key.
func (c *Cache[V]) dropIfHeld(key string) {
	c.local.Update(key, func(cur item[V]) (item[V], uint32, time.Duration, bool) {
		return cur, 0, 0, c.held(cur)
	})
}

// heldRecheck is how long held entries are served without trying the
// part of the shared tier that failed again (see down.go), unless the
// probe (see watchShared) finds it answering sooner.
const heldRecheck = time.Second

// heldProbe is how often the probe tries the shared tier while it is taken
// as unreachable during a bus loss.
const heldProbe = 20 * time.Millisecond

// watchShared starts the probe of the shared tier, unless one runs, when a
// read failed during a bus loss: held entries are then served as they are
// (see sharedDown), and the probe makes them checked again as soon as the
// shared tier answers, rather than heldRecheck after the failure.
func (c *Cache[V]) watchShared() {
	if !c.loss.lost.Load() || !c.loss.probing.CompareAndSwap(false, true) {
		return
	}
	if !c.run(c.probeShared) {
		c.loss.probing.Store(false)
	}
}

// probeShared reads, every heldProbe while parts of the shared tier are
// taken as unreachable during a bus loss, a key of each (the Clear record
// on a single server, a key whose read failed on Cluster): a failure keeps
// the part so for heldRecheck more, and the first answer ends it.
func (c *Cache[V]) probeShared() {
	defer c.loss.probing.Store(false)
	for c.loss.lost.Load() {
		down := c.downProbes()
		if len(down) == 0 || !pause(c.stop, heldProbe) {
			return
		}
		for slot, key := range down {
			switch err := c.probe(key); {
			case err == nil:
				c.answered(slot, true)
			case failed(err):
				c.answered(slot, false)
			}
		}
	}
}

// probe reads key, as the shared tier stores it, once, bounded by
// heldRecheck, to learn whether the shared tier answers there (OpProbe).
func (c *Cache[V]) probe(key string) error {
	ctx, cancel := context.WithTimeout(c.stop, heldRecheck)
	defer cancel()
	return c.do(ctx, OpProbe, "", func(ctx context.Context) error {
		_, err := c.remote.Get(ctx, []string{key})
		return err
	})
}

// onLoss runs when the bus may have lost messages: restored false when its
// connection dropped, true when it is back (or a message was lost on the
// way). It runs on the bus's goroutine, so a replay or a catch-up runs on
// a worker. Each call is counted (Stats.Bus.Losses) once L1 reflects it,
// and each flush that ends a loss in Stats.Bus.Flushed.
func (c *Cache[V]) onLoss(restored bool) {
	if restored && c.queue != nil {
		c.queue.nudge() // Redis may be back: replay queued writes now
	}
	if restored {
		c.leases.postAll() // a lease holder's news may have been missed
	}
	if c.o.StrictLoss {
		// While the bus is down, reads go to the shared tier (see held);
		// once it is back, nothing read meanwhile stays.
		if !restored {
			c.loss.begin(c.local.Now())
		}
		c.flush()
		if restored {
			c.n.lossFlushes.Add(1)
			c.loss.lost.Store(false)
		}
		c.n.busLosses.Add(1)
		return
	}
	c.loss.begin(c.local.Now())
	if c.seqs != nil {
		c.seqs.unmark() // a slot's first message may be lost
	}
	// A fill in flight may have read a value whose change we missed.
	c.tags.clear()
	c.vers.bumpAllLoss()
	c.flights.ForgetAll()
	if !restored {
		c.n.busLosses.Add(1)
		return
	}
	switch {
	case c.logged():
		if c.run(c.replay) {
			return
		}
	case c.seqs != nil:
		if c.run(c.catchUp) {
			return
		}
	}
	// No log and no counters to catch up by (or the cache is closing).
	c.n.lossFlushes.Add(1)
	c.flush()
	c.loss.lost.Store(false)
	c.n.busLosses.Add(1)
}

// flush drops all of L1, and what is known of tag records, but for this
// instance's own writes still queued for the shared tier (see pinQueued).
func (c *Cache[V]) flush() {
	c.tags.clear()
	c.vers.bumpAllLoss()
	c.flights.ForgetAll()
	c.local.Clear()
	c.pinQueued()
}

// readLog reads the log after the position after. A failed read (Redis
// may still be coming back) is tried again, with pauses, until ctx ends:
// only a log that cannot cover the gap, or one that stays unreadable, is
// worth a flush.
func (c *Cache[V]) readLog(ctx context.Context, after string) (entries [][]byte, positions []string, complete bool, err error) {
	wait := 50 * time.Millisecond
	for {
		err = c.call(ctx, OpReadLog, "", func(ctx context.Context) (err error) {
			var page tier.LogPage
			page, err = c.remote.ReadLog(ctx, c.logKey(), after, replayBatch)
			entries, positions, complete = page.Entries, page.Positions, page.Complete
			if err == nil && len(positions) != len(entries) {
				err = fmt.Errorf("hybrid: Remote.ReadLog returned %d positions for %d entries", len(positions), len(entries))
			}
			return err
		})
		if err == nil || !pause(ctx, wait) {
			return entries, positions, complete, err
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// replayBatch is how many log entries one read of the log returns.
const replayBatch = 1000

// replay applies the log's entries after the newest position applied
// before the loss began, in order, then ends the loss unless the bus
// reported another meanwhile; it flushes L1 instead when the log cannot
// cover the gap (trimmed, lost with a restart or a failover, unreadable).
// Entries that also arrived on the bus since it is back are applied twice:
// drops are the same twice, a swap takes only a newer value, and an own
// message is counted once (see echoes.back).
//
// The loss and the replay are counted once done, as messages are: a count
// seen in Stats means L1 reflects it.
func (c *Cache[V]) replay() {
	defer c.n.busLosses.Add(1)
	epoch := c.loss.epoch.Load()
	defer func() {
		if c.loss.epoch.Load() == epoch {
			c.loss.lost.Store(false)
		}
	}()
	ctx, cancel := c.fillContext(context.Background(), 30*time.Second, nil)
	defer cancel()
	after, entries, positions, lost, more, ok := c.replayStart(ctx)
	ok = ok && c.forget(lost)
	for read := 0; ok; read += len(entries) {
		for i, b := range entries {
			if m, err := message.Decode(b, c.o.Secret); err == nil && m.Namespace == c.scope {
				m.Position = positions[i]
				if c.admit(m) {
					c.apply(m)
					c.n.replayed.Add(1)
				}
			}
			after = positions[i]
		}
		c.loss.noteTrusted(after)
		if !more {
			c.n.replays.Add(1)
			return
		}
		if read+len(entries) > c.o.ReplayLogLen {
			break // more than the log holds: entries went by meanwhile
		}
		var complete bool
		var err error
		entries, positions, complete, err = c.readLog(ctx, after)
		ok = err == nil && complete
		more = len(entries) == replayBatch
	}
	c.n.lossFlushes.Add(1)
	c.log.log(logBus, "hybrid: missed invalidations could not be replayed; L1 flushed", "namespace", c.o.Namespace)
	c.flush()
}

// replayStart finds where the replay starts: the newest position seen
// before the loss that the log confirms (see seenMsg), and reads the log's
// first entries after it. more reports that the read returned a full
// batch; ok false, that no position could be confirmed or the log cannot
// cover the gap from it.
//
// lost holds the messages seen at newer positions that the log does not
// hold: forged, or lost by the log when Redis went back to an older state
// (a failover to a replica that missed them, a restart from an older
// snapshot), when the log's newest position is older than theirs or the
// log gave their positions to other entries since. Either way, at most the
// keys they name are outdated here (see forget). A position the log itself
// gave (trusted) that it no longer covers means that it went back, or was
// trimmed past it: ok false.
func (c *Cache[V]) replayStart(ctx context.Context) (after string, entries [][]byte, positions []string, lost []seenMsg, more, ok bool) {
	for _, sm := range c.loss.candidates() {
		from := sm.pos
		if !sm.trusted {
			var valid bool
			if from, valid = message.PositionBefore(sm.pos); !valid {
				lost = append(lost, sm)
				continue
			}
		}
		entries, positions, complete, err := c.readLog(ctx, from)
		switch {
		case err != nil:
			return "", nil, nil, nil, false, false
		case sm.trusted && !complete:
			return "", nil, nil, nil, false, false
		case sm.trusted:
			return sm.pos, entries, positions, lost, len(entries) == replayBatch, true
		case complete && len(entries) > 0 && positions[0] == sm.pos && sm.is(entries[0], c.o.Secret):
			return sm.pos, entries[1:], positions[1:], lost, len(entries) == replayBatch, true
		}
		lost = append(lost, sm) // an older position may still be in the log
	}
	return "", nil, nil, nil, false, false
}

// is reports whether the log entry b is the message sm was noted from.
func (sm seenMsg) is(b, secret []byte) bool {
	m, err := message.Decode(b, secret)
	if err != nil || (len(secret) > 0 && !m.Authentic) || m.Origin != sm.origin || m.Op != sm.op {
		return false
	}
	return len(m.Keys) == len(sm.keys) && (len(m.Keys) == 0 || m.Keys[0] == sm.keys[0])
}

// forget drops from L1 the keys that lost names, messages applied here
// that the log no longer holds (Redis failed over to a replica that missed
// them, or restarted from an older snapshot): what they changed may be
// gone from the shared tier too. It reports false, dropping nothing, when
// one of them is not about keys (a Clear or a tag delete): only a flush
// undoes that.
func (c *Cache[V]) forget(lost []seenMsg) bool {
	n := 0
	for _, sm := range lost {
		switch sm.op {
		case message.OpSet, message.OpDelete, message.OpExpire, message.OpExtend, message.OpFilled:
			n += len(sm.keys)
		default:
			return false
		}
	}
	if n == 0 {
		return true
	}
	for _, sm := range lost {
		for _, key := range sm.keys {
			c.vers.bump(key)
			c.flights.Forget(key)
			c.local.Delete(key)
		}
	}
	c.log.log(logBus, "hybrid: the invalidation log lost messages applied here (Redis went back to an older state); their keys dropped from L1", "namespace", c.o.Namespace, "messages", len(lost), "keys", n)
	return true
}
