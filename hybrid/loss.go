package hybrid

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds what the cache does when its bus loses messages: it
// keeps L1 (after a grace period, entries from before the loss are
// re-read from the shared tier, and served as they are only when that
// cannot be reached), and once the bus is back it replays the messages it
// missed from the shared tier's log (a Journal), flushing L1 only when the
// log cannot cover the gap. Options.StrictLoss flushes L1 on every loss
// instead.

// lossState is what an instance knows of lost messages.
type lossState struct {
	// lost is set from a loss until the replay that follows it is done.
	lost atomic.Bool
	// since is when the current loss began (UnixNano).
	since atomic.Int64
	// gen counts losses; an L1 item carries the gen it was stored in, so
	// that entries from before a loss can be told from those after it.
	gen atomic.Uint32
	// downUntil is until when (UnixNano) the shared tier is taken as
	// unreachable, after a read of a held entry failed: held entries are
	// served without trying it again meanwhile.
	downUntil atomic.Int64
	// checking is set while a held entry is being checked (see checkHeld).
	checking atomic.Bool

	mu sync.Mutex
	// pos is the log position of the newest message applied ("": unknown).
	pos string
}

// advance records that the message at pos has been applied.
func (s *lossState) advance(pos string) {
	if pos == "" {
		return
	}
	s.mu.Lock()
	if message.ComparePositions(pos, s.pos) > 0 {
		s.pos = pos
	}
	s.mu.Unlock()
}

func (s *lossState) position() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pos
}

// logKey is the shared-tier key of the namespace's log of announced writes.
func (c *Cache[V]) logKey() string { return c.prefix + "\x00log" }

// openLog opens the log of announced writes and returns its newest
// position, or an error wrapping errors.ErrUnsupported when the Remote
// keeps no log (the cache then goes without: a loss flushes L1).
func (c *Cache[V]) openLog() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var pos string
	err := c.call(ctx, "open_log", "", func(ctx context.Context) (err error) {
		pos, err = c.journal.OpenLog(ctx, c.logKey())
		return err
	})
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		// The position stays unknown: a loss before the first message
		// flushes L1.
		c.log.log(logBus, "hybrid: could not open the invalidation log; a bus loss will flush L1", "namespace", c.o.Namespace, "err", err)
	}
	return pos, err
}

// held reports whether an L1 entry is one from before a loss, past the
// grace period, that must be checked against the shared tier before it is
// served.
func (c *Cache[V]) held(it item[V]) bool {
	return c.loss.lost.Load() && it.gen != c.loss.gen.Load() &&
		time.Now().UnixNano()-c.loss.since.Load() > int64(c.o.LossGrace)
}

// sharedDown reports whether a read of the shared tier failed within the
// last heldRecheck.
func (c *Cache[V]) sharedDown() bool {
	return time.Now().UnixNano() < c.loss.downUntil.Load()
}

// heldServable reports whether an entry that held reports may be served
// without a look at the shared tier, which was just found unreachable (a
// batch serves such entries, and reads the others).
func (c *Cache[V]) heldServable() bool {
	if !c.sharedDown() {
		return false
	}
	c.n.heldServed.Add(1)
	return true
}

// checkHeld answers for an entry that held reports: as it is when the
// shared tier cannot be reached (then the database is not asked either),
// else by the shared tier's value. ok is false when the shared tier does not
// hold a live value: the caller then fills as for a miss. One check runs at
// a time: while it does, held entries are served as they are, so that a
// shared tier that stopped answering keeps one read waiting, not all.
func (c *Cache[V]) checkHeld(ctx context.Context, key string, it item[V]) (got item[V], ok bool) {
	if c.heldServable() {
		return it, true
	}
	if !c.loss.checking.CompareAndSwap(false, true) {
		c.n.heldServed.Add(1)
		return it, true
	}
	defer c.loss.checking.Store(false)
	got, st, _ := c.readRemote(ctx, key, c.vers.token(key), &c.def)
	switch st {
	case readHit:
		return got, true
	case readDown: // readFailed took the shared tier as unreachable
		c.n.heldServed.Add(1)
		return it, true
	}
	return got, false
}

// heldRecheck is how long held entries are served without trying the
// shared tier again after it failed.
const heldRecheck = time.Second

// onLoss runs when the bus may have lost messages: restored false when its
// connection dropped, true when it is back (or a message was lost on the
// way). It runs on the bus's goroutine, so a replay runs on a worker. Each
// call is counted (Stats.BusLosses) once L1 reflects it.
func (c *Cache[V]) onLoss(restored bool) {
	if restored && c.queue != nil {
		c.queue.nudge() // Redis may be back: replay queued writes now
	}
	if restored {
		c.leases.postAll() // a lease holder's news may have been missed
	}
	if c.o.StrictLoss {
		c.flush()
		c.n.busLosses.Add(1)
		return
	}
	if !c.loss.lost.Load() {
		c.loss.since.Store(time.Now().UnixNano())
		c.loss.gen.Add(1)
		c.loss.lost.Store(true)
	}
	// A fill in flight may have read a value whose change we missed.
	c.tags.clear()
	c.vers.bumpAll()
	c.flights.ForgetAll()
	if !restored {
		c.n.busLosses.Add(1)
		return
	}
	if c.journal == nil || !c.run(c.replay) {
		c.flush()
		c.loss.lost.Store(false)
		c.n.busLosses.Add(1)
	}
}

// flush drops all of L1, and what is known of tag records.
func (c *Cache[V]) flush() {
	c.tags.clear()
	c.vers.bumpAll()
	c.flights.ForgetAll()
	c.local.Clear()
}

// readLog reads the log after the position after. A failed read (Redis
// may still be coming back) is tried again, with pauses, until ctx ends:
// only a log that cannot cover the gap, or one that stays unreadable, is
// worth a flush.
func (c *Cache[V]) readLog(ctx context.Context, after string) (entries [][]byte, positions []string, complete bool, err error) {
	wait := 50 * time.Millisecond
	for {
		err = c.call(ctx, "read_log", "", func(ctx context.Context) (err error) {
			entries, positions, complete, err = c.journal.ReadLog(ctx, c.logKey(), after, replayBatch)
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

// replay applies the log's entries after the newest position applied, in
// order, then ends the loss; it flushes L1 instead when the log cannot
// cover the gap (trimmed, lost with a restart or a failover, unreadable).
//
// The loss and the replay are counted once done, as messages are: a count
// seen in Stats means L1 reflects it.
func (c *Cache[V]) replay() {
	defer c.n.busLosses.Add(1)
	defer c.loss.lost.Store(false)
	ctx, cancel := c.fillContext(context.Background(), 30*time.Second)
	defer cancel()
	after := c.loss.position()
	for read := 0; after != ""; read += replayBatch {
		if read > c.o.ReplayLogLen {
			break // more than the log holds: entries went by meanwhile
		}
		entries, positions, complete, err := c.readLog(ctx, after)
		if err != nil || !complete {
			break
		}
		for i, b := range entries {
			if m, err := message.Decode(b, c.o.Secret); err == nil && m.Namespace == c.scope && c.admit(m) {
				c.apply(m)
				c.n.replayed.Add(1)
			}
			after = positions[i]
		}
		c.loss.advance(after)
		if len(entries) < replayBatch {
			c.n.replays.Add(1)
			return
		}
	}
	c.n.replayFlushes.Add(1)
	c.log.log(logBus, "hybrid: missed invalidations could not be replayed; L1 flushed", "namespace", c.o.Namespace)
	c.flush()
}
