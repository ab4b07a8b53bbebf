package hybrid

import (
	"context"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"iter"
	"math"
	"sync"
	"time"

	"github.com/hybridcache/hybridcache/internal/envelope"
)

// This file holds the background verifier (Options.VerifyRate): a
// goroutine that checks a sample of L1 entries against the write time of
// what the shared tier holds, and drops those that an invalidation should
// have changed and did not. It counts, drops and logs; it never fails a
// call and never panics.

// VerifyStats counts the background verifier's samples
// (Options.VerifyRate). Each sampled entry is counted in Sampled and in
// one of Consistent, Divergent, Missing and Errors, all at once when its
// round is judged, so that in every snapshot Sampled is their sum.
type VerifyStats struct {
	Sampled    uint64 // L1 entries checked
	Consistent uint64 // entries the shared tier holds no later write of (beyond VerifyWindow)
	Divergent  uint64 // entries older than the shared tier's value by more than VerifyWindow: a missed invalidation
	Dropped    uint64 // divergent entries dropped from L1 (not those changed meanwhile)
	Missing    uint64 // entries whose key the shared tier does not hold (expired or evicted there): kept
	Errors     uint64 // entries not judged: the read failed (or the breaker kept it away) or the header did not decode
}

// Coherence is the share of judged samples that were consistent:
// Consistent / (Consistent + Divergent), 1 when none was judged. Missing
// entries and errors are no evidence either way and are left out.
func (s VerifyStats) Coherence() float64 {
	if s.Consistent+s.Divergent == 0 {
		return 1
	}
	return float64(s.Consistent) / float64(s.Consistent+s.Divergent)
}

const (
	// maxVerifyRate bounds Options.VerifyRate; minVerifyRate is the
	// slowest that is not off (one sample an hour).
	maxVerifyRate = 10_000
	minVerifyRate = 1.0 / 3600
	// verifyBatch is the most keys one round reads.
	verifyBatch = 32
	// verifyTimeout bounds one round's read when the Remote does not.
	verifyTimeout = 5 * time.Second
)

// checkVerify validates and completes the verifier's options.
func (o *Options) checkVerify() error {
	r := o.VerifyRate
	if r != 0 && !(r >= minVerifyRate && r <= maxVerifyRate) {
		return fmt.Errorf("hybrid: Options.VerifyRate (%v) is outside [%v, %v] and not 0", r, minVerifyRate, maxVerifyRate)
	}
	if r > 0 && o.Remote == nil {
		return errors.New("hybrid: Options.VerifyRate needs a Remote")
	}
	if o.VerifyWindow > maxLease {
		return fmt.Errorf("hybrid: Options.VerifyWindow (%v) is longer than %v", o.VerifyWindow, maxLease)
	}
	if o.VerifyWindow == 0 {
		o.VerifyWindow = time.Second
	}
	return nil
}

// verifier is the state of the background verifier.
type verifier struct {
	heads tier.HeadReader // nil: whole values are read with Get
	batch int             // keys per round
	every time.Duration   // between rounds: batch / VerifyRate

	// mu guards n, the counts, to which each round adds its own at once
	// when judged, so that a snapshot never shows a round's samples
	// ahead of their outcomes.
	mu sync.Mutex
	n  VerifyStats
}

// add adds a round's counts to v's.
func (v *verifier) add(r *VerifyStats) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.n.Sampled += r.Sampled
	v.n.Consistent += r.Consistent
	v.n.Divergent += r.Divergent
	v.n.Dropped += r.Dropped
	v.n.Missing += r.Missing
	v.n.Errors += r.Errors
}

// verifyPace returns the keys per round and the pause between rounds for
// rate samples a second: as many keys as a second's worth, from 1 to
// verifyBatch, so that a slow rate makes one small read a second or less
// and a fast one reads in full batches.
func verifyPace(rate float64) (int, time.Duration) {
	batch := int(min(max(math.Ceil(rate), 1), verifyBatch))
	return batch, time.Duration(float64(batch) / rate * float64(time.Second))
}

// startVerifier starts the verifier when Options.VerifyRate asks for it;
// Close stops it. It is called in New, before the cache is shared.
func (c *Cache[V]) startVerifier() {
	if c.o.VerifyRate == 0 || c.remote == nil {
		return
	}
	c.ver.heads, _ = c.remote.(tier.HeadReader)
	c.ver.batch, c.ver.every = verifyPace(c.o.VerifyRate)
	c.wg.Add(1)
	go c.verifyLoop()
}

// verifyLoop runs a round every c.ver.every until Close. It walks L1 in
// its table order (see l1.Cache.All), a round's worth of keys at a time,
// resuming where the last round ended and starting again after the last
// entry: each entry is sampled about once per walk, a walk of n entries
// taking n / VerifyRate, at a constant cost per sample.
func (c *Cache[V]) verifyLoop() {
	defer c.wg.Done()
	w := c.newVerifyWalk()
	defer w.close()
	tick := time.NewTicker(c.ver.every)
	defer tick.Stop()
	r := newVerifyRound[V](c.ver.batch)
	for {
		select {
		case <-c.stop.Done():
			return
		case <-tick.C:
		}
		w.take(r, c.prefix, c.ver.batch)
		if len(r.keys) > 0 {
			c.verifyRound(c.stop, r)
		}
	}
}

// verifyWalk is the verifier's walk over L1.
type verifyWalk[V any] struct {
	all  iter.Seq2[string, item[V]]
	next func() (string, item[V], bool)
	stop func()
}

func (c *Cache[V]) newVerifyWalk() *verifyWalk[V] {
	w := &verifyWalk[V]{all: c.local.All()}
	w.next, w.stop = iter.Pull2(w.all)
	return w
}

// take resets r to the walk's next batch keys (fewer where the walk ends:
// the next walk starts with the next round, so that no key is sampled
// twice in one).
func (w *verifyWalk[V]) take(r *verifyRound[V], prefix string, batch int) {
	r.reset()
	for len(r.keys) < batch {
		key, it, ok := w.next()
		if !ok {
			w.stop()
			w.next, w.stop = iter.Pull2(w.all)
			return
		}
		r.add(prefix, key, it)
	}
}

func (w *verifyWalk[V]) close() { w.stop() }

// verifyRound is one round's keys and the L1 items sampled for them.
type verifyRound[V any] struct {
	keys, rkeys []string
	its         []item[V]
}

func newVerifyRound[V any](batch int) *verifyRound[V] {
	return &verifyRound[V]{keys: make([]string, 0, batch), rkeys: make([]string, 0, batch), its: make([]item[V], 0, batch)}
}

func (r *verifyRound[V]) reset() {
	clear(r.its) // let go of the values until the next round
	r.keys, r.rkeys, r.its = r.keys[:0], r.rkeys[:0], r.its[:0]
}

func (r *verifyRound[V]) add(prefix, key string, it item[V]) {
	r.keys, r.rkeys, r.its = append(r.keys, key), append(r.rkeys, prefix+key), append(r.its, it)
}

// verifyRound reads the headers of r's keys in one call, judges each
// sampled entry, and then counts the round.
func (c *Cache[V]) verifyRound(ctx context.Context, r *verifyRound[V]) {
	n := VerifyStats{Sampled: uint64(len(r.keys))}
	defer c.ver.add(&n)
	if c.readBound == 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, verifyTimeout)
		defer cancel()
	}
	var vals [][]byte
	var err error
	if c.ver.heads != nil {
		err = c.call(ctx, OpVerify, "", func(ctx context.Context) (err error) {
			vals, err = c.ver.heads.Heads(ctx, r.rkeys, envelope.HeaderLen)
			if err == nil && len(vals) != len(r.rkeys) {
				err = fmt.Errorf("hybrid: HeadReader.Heads returned %d values for %d keys", len(vals), len(r.rkeys))
			}
			return err
		})
	} else {
		vals, err = c.get(ctx, OpVerify, "", r.rkeys)
	}
	if err != nil {
		n.Errors = n.Sampled
		if failed(err) {
			c.log.log(logVerify, "hybrid: verifier could not read the shared tier; nothing dropped", "namespace", c.o.Namespace, "err", err)
		}
		return
	}
	now := time.Now().UnixNano()
	for i, b := range vals {
		c.verifyEntry(r.keys[i], r.its[i], b, now, &n)
	}
}

// verifyEntry judges one sampled entry, it under key, by b, the head of
// what the shared tier holds, read at now (Unix nanoseconds). The entry is
// divergent when the shared tier's value (or tombstone) was written after
// it, and longer than VerifyWindow ago, so that its invalidation should
// have arrived. Its own time is its write time when L1 keeps it (exact:
// both come from envelopes); else the time it was stored here, with
// VerifyWindow of slack for the writer's clock against ours. Its outcome
// is counted in n.
func (c *Cache[V]) verifyEntry(key string, it item[V], b []byte, now int64, n *VerifyStats) {
	if b == nil {
		n.Missing++
		return
	}
	h, err := envelope.ReadHeader(b)
	if err != nil {
		n.Errors++
		c.log.log(logVerify, "hybrid: verifier read a stored header that does not decode; entry kept", "namespace", c.o.Namespace, "key", key, "err", err)
		return
	}
	window := int64(c.o.VerifyWindow)
	remote := h.Written.UnixNano()
	own := it.writtenAt()
	if own == 0 {
		own = c.born.Add(time.Duration(it.stored)*time.Millisecond).UnixNano() + window
	}
	if remote <= own || now-remote <= window {
		n.Consistent++
		return
	}
	n.Divergent++
	dropped := false
	c.local.Update(key, func(old item[V]) (item[V], uint32, time.Duration, bool) {
		if old.stored != it.stored || old.writtenAt() != it.writtenAt() {
			return old, 0, 0, false // changed since sampled: judged anew next walk
		}
		dropped = true
		return old, 0, 0, true
	})
	if dropped {
		n.Dropped++
	}
	c.log.log(logVerify, "hybrid: verifier found an L1 entry older than the shared tier's value beyond VerifyWindow (an invalidation was missed); dropped",
		"namespace", c.o.Namespace, "key", key, "remote_written", h.Written, "window", c.o.VerifyWindow, "dropped", dropped)
}

// verifyStats returns the verifier's counters: those of the rounds judged
// so far, so that Sampled is the sum of the outcomes.
func (c *Cache[V]) verifyStats() VerifyStats {
	c.ver.mu.Lock()
	defer c.ver.mu.Unlock()
	return c.ver.n
}
