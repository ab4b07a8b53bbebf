package hybrid

import (
	"bytes"
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"sync"
	"time"

	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds the queue of failed writes (Options.QueueWrites): a Set,
// Delete, DeleteByTag or Clear that fails because the shared tier cannot
// be reached is queued, newest per key, and replayed in order by a
// goroutine of the cache once the shared tier answers again. A replay
// writes only over an older value (Cond IfNewer), so that it never
// overwrites a write another instance made meanwhile, and is harmless when
// the original write landed after all (a timed-out write may have).

// pendingWrite is one write to the shared tier and its announcement, as
// writeAndPublish takes it, kept whole so that it can be queued.
type pendingWrite struct {
	op   Op     // names the call: OpSet, OpDelete, OpDeleteTag or OpClear
	name string // the key, or the tag ("" for a Clear)
	rkey string // the shared-tier key
	seq  string // the sequence counter the write bumps (see seqKey; "": none)
	b    []byte // the envelope, tombstone or tag record
	life time.Duration
	m    message.Message
	own  bool // a write of key name, whose message comes back (see echoes)
	// quiet: the write goes unannounced (SkipAnnounce), replayed too.
	quiet bool
	// stamp is the offset of the write time in b (8 bytes big-endian):
	// stampEnvelope or stampRecord.
	stamp int
	at    time.Time // when it was queued
	// dropped: the replay of this Set wrote a tombstone in its place (see
	// replaySet).
	dropped bool
}

// Where the write time sits in what the cache stores: an envelope's
// bytes [3:11] (see package envelope), a tag or clear record's [0:8].
const (
	stampEnvelope = 3
	stampRecord   = 0
)

// The replay's pauses after a failed attempt: queueRetryMin, doubling up
// to queueRetryMax. A bus restore cuts the pause short.
const (
	queueRetryMin = 100 * time.Millisecond
	queueRetryMax = 5 * time.Second
	// queueCallTimeout bounds one replayed write (the Remote's own bound,
	// such as l2's WriteTimeout, is usually shorter).
	queueCallTimeout = 10 * time.Second
)

// writeQueue holds the queued writes, oldest first, one per shared-tier
// key (a newer write of a key replaces the queued one and goes last).
type writeQueue struct {
	max  int
	wake chan struct{} // a nudge to the replay: the shared tier may be back

	mu      sync.Mutex
	order   list.List // of *pendingWrite
	byKey   map[string]*list.Element
	running bool // a replay goroutine is running
}

func newWriteQueue(max int) *writeQueue {
	return &writeQueue{max: max, wake: make(chan struct{}, 1), byKey: make(map[string]*list.Element)}
}

// put queues w, replacing a queued write of the same key. It reports
// false when the queue is full, and start when no replay is running (the
// caller starts one).
func (q *writeQueue) put(w *pendingWrite) (ok, start bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.byKey[w.rkey]; e != nil {
		q.order.Remove(e)
	} else if q.order.Len() >= q.max {
		return false, false
	}
	q.byKey[w.rkey] = q.order.PushBack(w)
	start = !q.running
	q.running = true
	return true, start
}

// front returns the oldest queued write; when there is none, it reports
// false and the replay ends.
func (q *writeQueue) front() (*pendingWrite, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.order.Front()
	if e == nil {
		q.running = false
		return nil, false
	}
	return e.Value.(*pendingWrite), true
}

// done removes w, unless a newer write of its key replaced it meanwhile.
func (q *writeQueue) done(w *pendingWrite) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.byKey[w.rkey]; e != nil && e.Value.(*pendingWrite) == w {
		q.order.Remove(e)
		delete(q.byKey, w.rkey)
	}
}

// dropAll empties the queue and returns how many writes it held.
func (q *writeQueue) dropAll() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.order.Len()
	q.order.Init()
	clear(q.byKey)
	return n
}

// len is the number of queued writes.
func (q *writeQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.order.Len()
}

// has reports whether a write of the shared-tier key rkey is queued.
func (q *writeQueue) has(rkey string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.byKey[rkey] != nil
}

// own returns the stored bytes (an envelope, or a delete's tombstone) of
// the Set or Delete of this instance queued for the shared-tier key rkey;
// nil when none is queued.
func (q *writeQueue) own(rkey string) []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.byKey[rkey]; e != nil {
		if w := e.Value.(*pendingWrite); w.own {
			return w.b
		}
	}
	return nil
}

// ownSets returns the queued Sets of this instance, oldest first.
func (q *writeQueue) ownSets() []*pendingWrite {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*pendingWrite
	for e := q.order.Front(); e != nil; e = e.Next() {
		if w := e.Value.(*pendingWrite); w.own && w.m.Op == message.OpSet {
			out = append(out, w)
		}
	}
	return out
}

// queued reports whether a write of key by this instance waits in the
// queue: L1 holds its value, which the shared tier does not have yet.
func (c *Cache[V]) queued(key string) bool {
	return c.queue != nil && c.queue.has(c.prefix+key)
}

// queuedState returns what this instance's write of key, queued for the
// shared tier, stores there (nil when none is queued): a read answers
// with it instead of the older value the shared tier may still hold, so
// that read-your-writes holds until the replay.
func (c *Cache[V]) queuedState(key string) []byte {
	if c.queue == nil {
		return nil
	}
	return c.queue.own(c.prefix + key)
}

// pinQueued puts the values of this instance's queued Sets back in L1
// after a flush: they are newer than what the shared tier holds, and
// read-your-writes holds for them until their replay (which drops a value
// the shared tier turns out to hold a newer one of).
func (c *Cache[V]) pinQueued() {
	if c.queue == nil {
		return
	}
	for _, w := range c.queue.ownSets() {
		var it item[V]
		p := c.keyDefaults(w.name)
		ttl, _, err := c.decodeInto(&it, w.b, p.timed())
		if err != nil || ttl <= 0 {
			continue
		}
		c.storeLocal(nil, w.name, it, c.size(w.b), min(ttl, p.localTTL), c.vers.token(w.name), p)
	}
}

// nudge wakes a replay waiting to try again, without blocking.
func (q *writeQueue) nudge() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// queueable reports whether a write that failed with err is queued: a
// failure of the shared tier or the bus (network errors, timeouts,
// ErrUnavailable from the breaker), not a call its caller's ctx cut short
// (the caller gave up on it).
func queueable(err error) bool {
	return err != nil && !errors.Is(err, errCallerDone) && !errors.Is(err, ErrClosed) &&
		(errors.Is(err, ErrUnavailable) || failed(err))
}

// enqueue queues w after its write failed with err, when queueing is on
// and err is a failure worth a replay, and returns what the call returns:
// err wrapped with ErrQueued when queued; err itself otherwise, also when
// the queue is full (counted), or the cache closed meanwhile. A nil err is
// returned as it is.
func (c *Cache[V]) enqueue(w *pendingWrite, err error) error {
	if c.queue == nil || !queueable(err) {
		return err
	}
	w.at = time.Now()
	// Under c.mu, so that Close, which empties the queue after the replay
	// has ended, counts every write queued before it and none comes after.
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return err
	}
	ok, start := c.queue.put(w)
	if !ok {
		c.n.queueFull.Add(1)
		c.log.log(logQueue, "hybrid: write queue full; failed write not queued", "namespace", c.o.Namespace, "max", c.o.QueueWrites, "err", err)
		return err
	}
	c.n.writesQueued.Add(1)
	if start {
		c.wg.Add(1)
		go c.replayQueue()
	}
	return fmt.Errorf("%w: %w", ErrQueued, err)
}

// replayQueue replays the queue in order until it is empty or the cache
// closes, pausing after a failure (queueRetryMin doubling to
// queueRetryMax, cut short by a nudge).
func (c *Cache[V]) replayQueue() {
	defer c.wg.Done()
	wait := queueRetryMin
	for {
		w, ok := c.queue.front()
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(c.stop, queueCallTimeout)
		stored, err := c.replayWrite(ctx, w)
		cancel()
		if c.stop.Err() != nil {
			return // closed: Close counts and drops what is queued
		}
		if err != nil {
			c.log.log(logQueue, "hybrid: replay of a queued write failed; will retry", "namespace", c.o.Namespace, "queued", c.queue.len(), "retry_in", wait, "err", err)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-c.queue.wake:
			case <-c.stop.Done():
				t.Stop()
				return
			}
			t.Stop()
			wait = min(2*wait, queueRetryMax)
			continue
		}
		wait = queueRetryMin
		if w.own {
			// A read that found the older value before the replay wrote
			// must not store it once the queue no longer answers for the
			// key (see queuedState).
			c.vers.bump(w.name)
		}
		c.queue.done(w)
		if stored {
			if w.own && (w.m.Op == message.OpDelete || w.dropped) {
				// A read since Redis came back may have stored the value
				// the delete removed (or, for a Set replayed as a delete,
				// the queued value, which a newer Delete may have
				// outdated), and our own message does not reach our L1.
				c.vers.bump(w.name)
				c.flights.Forget(w.name)
				c.local.Delete(w.name)
			}
			c.n.queueReplayed.Add(1)
			continue
		}
		if w.own {
			// Our value is outdated: L1 must not keep serving it.
			c.vers.bump(w.name)
			c.flights.Forget(w.name)
			c.local.Delete(w.name)
		}
		c.n.queueDroppedStale.Add(1) // after L1: a count seen means L1 reflects it
	}
}

// replayWrite makes the queued write w unless the shared tier holds a
// newer value (Cond IfNewer), and announces and logs it if it wrote, in
// one atomic step. stored reports whether the shared tier holds w
// afterwards (written now, or found: the original landed). A queued Set is
// replayed as replaySet says.
func (c *Cache[V]) replayWrite(ctx context.Context, w *pendingWrite) (stored bool, err error) {
	life := w.life
	if w.m.Op == message.OpSet {
		// The value's lifetime runs from its write; past it, a replay
		// still replaces the older value, for a moment.
		life = max(life-time.Since(w.at), time.Millisecond)
	}
	wr := tier.Write{Key: w.rkey, Value: w.b, TTL: life, If: tier.IfNewer, StampAt: w.stamp, Seq: w.seq}
	m := w.m
	if w.op == OpSet {
		var done bool
		if done, stored, err = c.replaySet(ctx, w, &wr, &m); done || err != nil {
			return stored, err
		}
	}
	if !w.quiet {
		wr.Msg, wr.Log = c.announced(m)
	}
	if w.own && wr.Msg != nil {
		c.echo.sent(w.name)
	}
	res, err := c.write(ctx, replayOf(w.op), w.name, []tier.Write{wr})
	if err != nil {
		return false, fmt.Errorf("hybrid: replay %s: %w", about(w.op, w.name), err)
	}
	return res[0], nil
}

// replaySet sets *wr, the replay of the queued Set w, and *m, its message,
// from what the key holds now, read first: where it holds w's value, the
// original write landed (done and stored); a newer value, it wins (done,
// not stored); an older one, w replaces exactly it (IfEqual, so that
// nothing written in between is lost). Where it holds nothing, a newer
// Delete of another instance may have left a tombstone that Redis evicted
// (maxmemory), so w's value is not written: a tombstone is, announced
// without the value, and every instance, this one too, reads the key from
// its load. So a lost tombstone costs a miss, never a deleted value written
// back.
func (c *Cache[V]) replaySet(ctx context.Context, w *pendingWrite, wr *tier.Write, m *message.Message) (done, stored bool, err error) {
	w.dropped = false // as an attempt before this one may have found it
	cur, err := c.get(ctx, OpReplaySet, w.name, []string{w.rkey})
	if err != nil {
		return true, false, fmt.Errorf("hybrid: replay %s: %w", about(w.op, w.name), err)
	}
	old := cur[0]
	switch {
	case bytes.Equal(old, w.b):
		return true, true, nil
	case old == nil:
		wr.Value, wr.TTL, wr.If = c.encodeTombstone(c.def.ttl), c.def.physical(c.def.ttl), tier.IfAbsent
		m.Value = nil
		w.dropped = true
	case newerStored(old, w.b, w.stamp):
		return true, false, nil
	default:
		wr.If, wr.Old = tier.IfEqual, old
	}
	return false, false, nil
}

// newerStored reports whether stored, what the shared tier holds, was
// written after b (write times at offset off of each), as IfNewer judges:
// a stored value too short to hold a time counts as older.
func newerStored(stored, b []byte, off int) bool {
	st, ok := stampAt(stored, off)
	if !ok {
		return false
	}
	bt, _ := stampAt(b, off)
	return st > bt
}

// stampAt reads the write time at offset off of b, Unix milliseconds;
// false when b is too short to hold one.
func stampAt(b []byte, off int) (uint64, bool) {
	if len(b) < off+8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[off:]), true
}
