package hybrid

import (
	"context"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"time"

	"github.com/hybridcache/hybridcache/internal/message"
	"github.com/hybridcache/hybridcache/l1"
)

// This file holds the shared tier as New found it, the protocol every call
// to it follows (do, call, retry: breaker, span, counts), and the reads and
// writes of cached values through it. The cache's own records are read and
// written through the same protocol by the files that own them (leases,
// the replay log, tags, the hot set, the verifier, explain). The contract
// is in remote.go.

// shared is the Remote and what New learnt of it.
type shared struct {
	remote    tier.Remote   // nil: L1 only
	readBound time.Duration // 0: reads are not known to end in time
	// feed is where writes announce: the bus channel (none without a Bus)
	// and the log (none when the Remote keeps none, or ReplayLogLen < 0).
	feed tier.Feed
}

func resolveShared(o *Options, logKey string) shared {
	s := shared{remote: o.Remote, readBound: max(o.info.ReadBound, 0)}
	if o.Remote == nil || o.Bus == nil {
		return s
	}
	s.feed.Channel = o.Channel
	if o.info.Log && o.ReplayLogLen >= 0 {
		s.feed.Log, s.feed.LogLen = logKey, o.ReplayLogLen
	}
	return s
}

// logged reports whether announced writes are logged.
func (s *shared) logged() bool { return s.feed.Log != "" }

// errCallerDone marks a call cut short by its caller's ctx: no failure of
// the shared tier.
var errCallerDone = errors.New("hybrid: caller's ctx ended")

// do runs one shared-tier call f as every such call runs: not at all while
// the breaker is open (ErrUnavailable), inside a span,
// with its outcome recorded by the breaker. A failure after the caller's
// ctx ended also wraps errCallerDone.
func (c *Cache[V]) do(ctx context.Context, op Op, name string, f func(ctx context.Context) error) error {
	if !c.br.allow() {
		c.n.l2Skipped.Add(1)
		return ErrUnavailable
	}
	sctx, end := c.span(ctx, op, name)
	err := f(sctx)
	end(err)
	if errors.Is(err, errors.ErrUnsupported) {
		c.br.neutral() // the Remote cannot do it: nothing learnt of Redis
	} else {
		c.br.record(ctx, err)
	}
	if err != nil && callerDone(ctx) {
		return fmt.Errorf("%w: %w", errCallerDone, err)
	}
	return err
}

// call is do, with a failure of the shared tier counted and reported
// (Stats.L2.Errors, Events.L2Error).
func (c *Cache[V]) call(ctx context.Context, op Op, name string, f func(ctx context.Context) error) error {
	err := c.do(ctx, op, name, f)
	if failed(err) {
		c.l2Failed(op, err)
	}
	return err
}

// failed reports whether err is a failure of the shared tier, not a call
// skipped by the breaker, cut short by its caller, or one the Remote does
// not support.
func failed(err error) bool {
	return err != nil && !errors.Is(err, ErrUnavailable) && !errors.Is(err, errCallerDone) && !errors.Is(err, errors.ErrUnsupported)
}

// writeRetries are the pauses before the second and third attempt of a
// background write to the shared tier.
var writeRetries = [...]time.Duration{20 * time.Millisecond, 100 * time.Millisecond}

// retry runs a background write f with do, while keep reports that it is
// still wanted, trying again after each pause of writeRetries. A failure is
// counted once, however many attempts; a write given up is counted and
// logged (its value stays in L1 only).
func (c *Cache[V]) retry(ctx context.Context, op Op, name string, keep func() bool, f func(ctx context.Context) error) error {
	for attempt := 0; ; attempt++ {
		if !keep() {
			return nil
		}
		err := c.do(ctx, op, name, f)
		if !failed(err) {
			return err
		}
		if attempt == 0 {
			c.l2Failed(op, err)
		}
		if attempt < len(writeRetries) && pause(ctx, writeRetries[attempt]) {
			c.n.writeRetries.Add(1)
			continue
		}
		c.n.writesDropped.Add(1)
		c.log.log(logL2, "hybrid: shared tier write given up; value kept in L1 only", "namespace", c.o.Namespace, "attempts", attempt+1, "err", err)
		return err
	}
}

// pause waits d, or less if ctx ends (then it reports false).
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// always is retry's keep for a write that is always wanted.
func always() bool { return true }

// readState is what a shared-tier read found.
type readState uint8

const (
	readMiss    readState = iota // nothing there
	readHit                      // a live value (or remembered absence), now in L1
	readStale                    // a value past its logical expiry (fail-safe)
	readCorrupt                  // bytes that do not decode
	readDeleted                  // a tombstone left by a delete
	readCut                      // the caller's ctx ended first: nothing known, nothing failed
	readDown                     // the shared tier failed, or the breaker kept the call away
)

// get reads the shared-tier keys rkeys in one call, as op about name.
func (c *Cache[V]) get(ctx context.Context, op Op, name string, rkeys []string) ([][]byte, error) {
	var vals [][]byte
	err := c.call(ctx, op, name, func(ctx context.Context) (err error) {
		vals, err = c.remote.Get(ctx, rkeys)
		if err == nil && len(vals) != len(rkeys) {
			err = fmt.Errorf("hybrid: Remote.Get returned %d values for %d keys", len(vals), len(rkeys))
		}
		return err
	})
	return vals, err
}

// write makes ws in one call, as op about name.
func (c *Cache[V]) write(ctx context.Context, op Op, name string, ws []tier.Write) ([]bool, error) {
	return c.writeFeed(ctx, op, name, ws, c.feed)
}

// writeFeed is write announcing on f.
func (c *Cache[V]) writeFeed(ctx context.Context, op Op, name string, ws []tier.Write, f tier.Feed) ([]bool, error) {
	var stored []bool
	err := c.call(ctx, op, name, func(ctx context.Context) (err error) {
		stored, err = c.remote.Write(ctx, ws, f)
		if err == nil && len(stored) != len(ws) {
			err = fmt.Errorf("hybrid: Remote.Write returned %d results for %d writes", len(stored), len(ws))
		}
		return err
	})
	return stored, err
}

// readRemote is readRemoteMany for one key.
func (c *Cache[V]) readRemote(ctx context.Context, key string, tok token, p *policy) (item[V], readState) {
	var res [1]found[V]
	if _, cut := c.readRemoteMany(ctx, []string{key}, nil, []token{tok}, res[:], p); cut {
		return item[V]{}, readCut
	}
	return res[0].it, res[0].st
}

// readFailed notes a failed read of keys, which the caller answers from L1
// and load: logged, and the shared tier taken as unreachable where keys
// are for entries held through a bus loss (see checkHeld, down.go).
func (c *Cache[V]) readFailed(keys []string, err error) {
	c.markDown(keys)
	c.watchShared()
	if failed(err) {
		c.log.log(logL2, "hybrid: shared tier read failed; serving from L1 and load", "namespace", c.o.Namespace, "err", err)
	}
}

// take decodes b, read from the shared tier for key (or, while a write of
// key by this instance is queued, that write's bytes: see queuedState),
// into *it, which must be the zero item, and stores a live value in L1 (as
// part of lb, if not nil) as p says if tok is still valid, measuring its
// lifetime and age from now. After readDeleted or readCorrupt, *it is the
// zero item again.
func (c *Cache[V]) take(ctx context.Context, lb *l1.Batch[item[V]], it *item[V], key string, b []byte, tok token, p *policy, now time.Time) readState {
	if q := c.queuedState(key); q != nil {
		b = q // our own write, newer than what the shared tier holds
	}
	p = p.of(key)
	ttl, written, err := c.decodeAt(it, b, p.timed() || p.meta, now)
	if err == nil && c.tagDeleted(ctx, it.tags(), written) {
		err = errTombstone // deleted by Clear or DeleteByTag
	}
	if errors.Is(err, errTombstone) {
		c.n.l2Misses.Add(1)
		*it = item[V]{}
		return readDeleted
	}
	if err != nil {
		c.n.decodeErrors.Add(1)
		c.n.l2Misses.Add(1)
		c.log.log(logDecode, "hybrid: stored value does not decode; treated as a miss", "namespace", c.o.Namespace, "key", key, "err", err)
		*it = item[V]{}
		return readCorrupt
	}
	if ttl <= 0 {
		c.n.l2Misses.Add(1)
		return readStale
	}
	c.n.l2Hits.Add(1)
	c.recordL2Age(written, now)
	c.storeLocalAt(lb, key, *it, c.size(b), min(ttl, p.localTTL), tok, p, c.storedAt(now))
	return readHit
}

// takeQueued answers the keys of a failed read that have a write of this
// instance queued for the shared tier with that write (see queuedState),
// as if the shared tier held it.
func (c *Cache[V]) takeQueued(ctx context.Context, keys []string, toks []token, res []found[V], p *policy) {
	for i, key := range keys {
		if q := c.queuedState(key); q != nil {
			res[i].st, res[i].err = c.take(ctx, nil, &res[i].it, key, q, toks[i], p, time.Now()), nil
		}
	}
}

// found is one key's result of a batch read: what it found (st) and the
// value, if it found one (live, or stale for fail-safe), and the read's
// error when it failed (readDown); or of a wait for another instance's
// lease: its value or its error.
type found[V any] struct {
	it  item[V]
	st  readState
	err error
	b   []byte // the stored bytes of a hit (readHit)
}

// readRemoteMany reads keys from the shared tier in one call, storing hits
// in L1 under their tokens, and puts what it found in res (zero, one per
// key). full is keys as the shared tier stores them (see prefixed), or nil
// to have them made here. replace holds, by key, the stored bytes a fill is to replace: a
// value that did not decode, is stale, or is a tombstone. cut reports that
// the caller's ctx ended before the shared tier answered; then nothing was
// found.
func (c *Cache[V]) readRemoteMany(ctx context.Context, keys, full []string, toks []token, res []found[V], p *policy) (replace map[string][]byte, cut bool) {
	if c.remote == nil {
		return nil, false
	}
	if p.skip&SkipRemoteRead != 0 {
		c.skipped(SkipRemoteRead, len(keys))
		return nil, false // each a miss
	}
	op, name := readOp(keys)
	if full == nil {
		full = c.prefixed(keys)
	}
	vals, err := c.get(ctx, op, name, full)
	if errors.Is(err, errCallerDone) {
		return nil, true
	}
	if err != nil {
		c.readFailed(keys, err)
		for i := range res {
			res[i].st, res[i].err = readDown, err
		}
		if c.queue != nil {
			c.takeQueued(ctx, keys, toks, res, p)
		}
		return nil, false
	}
	lb := c.local.Batch()
	defer lb.Done()
	now := time.Now() // one clock read for the page
	for i, b := range vals {
		if q := c.queuedState(keys[i]); q != nil {
			b = q // our own write, newer than what the shared tier holds
		}
		if b == nil {
			c.n.l2Misses.Add(1)
			continue
		}
		st := c.take(ctx, lb, &res[i].it, keys[i], b, toks[i], p, now)
		res[i].st = st
		if st == readHit {
			res[i].b = b
		}
		if st == readCorrupt || st == readStale || st == readDeleted {
			if replace == nil {
				replace = make(map[string][]byte)
			}
			replace[keys[i]] = b
		}
	}
	if c.loss.lost.Load() {
		// An entry held through the bus loss that the shared tier shows
		// deleted must not come back if the shared tier stops answering.
		for i := range res {
			if res[i].st != readHit {
				c.dropIfHeld(keys[i])
			}
		}
	}
	return replace, false
}

// fillWrite is a loaded value that a fill writes back to the shared tier
// for life (its lifetime there, fail-safe included): over old, the entry
// the fill read (stale, undecodable, deleted, or the live value a refresh
// replaces), if the key still holds it; where the key holds nothing when
// old is nil. So a write by another instance since the fill's read wins
// over its load. tok is the key's token from before that read. msg and
// entry, if not nil, announce the write (a refresh's) on the bus and in the
// log, if it is made.
type fillWrite struct {
	key        string
	b          []byte
	life       time.Duration
	old        []byte
	tok        token
	msg, entry []byte
	// seq is the key's sequence counter (see seqKey; "": none), and seqWas
	// what the fill's read found in it (nil: missing, or not read).
	seq    string
	seqWas []byte
}

// storeRemote writes a fill's values back in one call (retried). A fill
// of a missing key is not announced: it changes nothing other instances
// hold; a refresh's write is, by its own message, sent only if it is made.
// A value whose key changed here since its token (a Set or Delete here, or
// a message from another instance) is not written: it may predate the
// change. Where another value is found, ours leaves L1 too. wrote[i]
// reports whether ws[i] was written.
func (c *Cache[V]) storeRemote(ctx context.Context, ws []fillWrite) (wrote []bool) {
	wrote = make([]bool, len(ws))
	if c.remote == nil || len(ws) == 0 {
		return wrote
	}
	var feed tier.Feed
	for i := range ws {
		if ws[i].msg != nil {
			feed = c.feed
			c.echo.sent(ws[i].key) // counted back below if not sent
		}
	}
	defer func() {
		for i := range ws {
			switch {
			case ws[i].msg == nil:
			case wrote[i]:
				c.n.published.Add(1)
			default:
				c.echo.back(ws[i].key, "")
			}
		}
	}()
	var idx []int
	var stored []bool
	keep := func() bool {
		idx = idx[:0]
		for i := range ws {
			if c.vers.valid(ws[i].tok) {
				idx = append(idx, i)
			}
		}
		return len(idx) > 0
	}
	op, name := OpSetMany, ""
	if len(ws) == 1 {
		op, name = OpSet, ws[0].key
	}
	err := c.retry(ctx, op, name, keep, func(ctx context.Context) (err error) {
		reqs := make([]tier.Write, len(idx))
		for j, i := range idx {
			reqs[j] = c.fillCond(&ws[i])
			reqs[j].Msg, reqs[j].Log = ws[i].msg, ws[i].entry
		}
		stored, err = c.remote.Write(ctx, reqs, feed)
		if err == nil && len(stored) != len(reqs) {
			err = fmt.Errorf("hybrid: Remote.Write returned %d results for %d writes", len(stored), len(reqs))
		}
		return err
	})
	if err != nil {
		for _, i := range idx {
			c.unverified(ws[i].key, ws[i].tok)
		}
		return wrote
	}
	if stored == nil {
		return wrote
	}
	for j, i := range idx {
		wrote[i] = stored[j]
		if !stored[j] {
			c.vers.bump(ws[i].key)
			c.local.Delete(ws[i].key)
		}
	}
	return wrote
}

// announced returns m encoded for the bus, and for the log when the cache
// keeps one (the log keeps no values); nil for what is not wanted.
func (c *Cache[V]) announced(m message.Message) (msg, entry []byte) {
	if c.feed.Channel == "" {
		return nil, nil
	}
	msg = c.encodeMsg(m)
	if c.logged() {
		m.Value = nil
		entry = c.encodeMsg(m)
	}
	return msg, entry
}

// writeAndPublish makes w's write (its bytes under its shared-tier key for
// its life, bumping its sequence counter) and announces its message, in
// one atomic step. w.op names the call in spans, events and errors, w.name
// the key or tag it is about. With w.own, a write of key w.name is
// recorded in echoes as ours until its message comes back.
func (c *Cache[V]) writeAndPublish(ctx context.Context, w *pendingWrite) error {
	op, name := w.op, w.name
	if c.remote == nil {
		if c.bus == nil {
			return nil
		}
		if err := c.publish(ctx, w.m); err != nil {
			return fmt.Errorf("hybrid: %s: announce: %w", about(op, name), err)
		}
		return nil
	}
	msg, entry := c.announced(w.m)
	if w.own && msg != nil {
		c.echo.sent(name)
	}
	if _, err := c.write(ctx, op, name, []tier.Write{{Key: w.rkey, Value: w.b, TTL: w.life, Seq: w.seq, Msg: msg, Log: entry}}); err != nil {
		return fmt.Errorf("hybrid: %s: %w", about(op, name), err)
	}
	if msg != nil {
		c.n.published.Add(1)
	}
	return nil
}

// readRecord reads the shared-tier key rkey as it is stored: one of the
// cache's own records (see tags.go), or a value that Expire rewrites. It
// returns the bytes, or ok false when there are none; an error when the
// shared tier cannot say.
func (c *Cache[V]) readRecord(ctx context.Context, op Op, name, rkey string) (b []byte, ok bool, err error) {
	vals, err := c.get(ctx, op, name, []string{rkey})
	if err != nil {
		return nil, false, err
	}
	return vals[0], vals[0] != nil, nil
}

// expireShared moves the logical expiry of key's value in the shared tier
// to now, keeping the value for fail-safe and its physical lifetime, and
// announces the expiry, in one atomic step that writes nothing if the key
// changed since it was read (the change, a write after this Expire, wins).
// A key that holds nothing live (missing, a tombstone, bytes that do not
// decode, a value already stale) is only announced.
func (c *Cache[V]) expireShared(ctx context.Context, key string) error {
	m := message.Message{Op: message.OpExpire, Origin: c.origin, Namespace: c.scope, Keys: []string{key}}
	var old, expired []byte
	if c.remote != nil {
		b, found, err := c.readRecord(ctx, OpGet, key, c.prefix+key)
		if err != nil {
			return fmt.Errorf("hybrid: expire %q: %w", key, err)
		}
		if found {
			old = b
			expired, _ = expiredNow(b, c.def.ttl)
		}
	}
	if expired != nil {
		msg, entry := c.announced(m)
		if msg != nil {
			c.echo.sent(key)
		}
		w := tier.Write{Key: c.prefix + key, Value: expired, If: tier.IfEqual, Old: old, KeepTTL: true, Msg: msg, Else: msg, Log: entry}
		if _, err := c.write(ctx, OpExpire, key, []tier.Write{w}); err != nil {
			return fmt.Errorf("hybrid: expire %q: %w", key, err)
		}
		if msg != nil {
			c.n.published.Add(1)
		}
		return nil
	}
	if c.bus == nil {
		return nil
	}
	c.sentOwn(key)
	if err := c.publish(ctx, m); err != nil {
		return fmt.Errorf("hybrid: expire %q: announce: %w", key, err)
	}
	return nil
}

// sentOwn records an announcement of ours about key, about to go out, for
// echoes (see onMessage, which counts it back).
func (c *Cache[V]) sentOwn(key string) {
	if c.feed.Channel != "" {
		c.echo.sent(key)
	}
}
