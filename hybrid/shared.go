package hybrid

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hybridcache/hybridcache/internal/message"
	"github.com/hybridcache/hybridcache/l1"
)

// This file holds every call to the shared tier: the Remote interfaces, the
// capabilities resolved once in New, the protocol each call follows (call,
// retry), and the reads and writes the cache makes through it.

// Remote is the shared second tier: a byte store that every instance reads
// and writes, such as *l2.Store over Redis. Keys arrive already namespaced.
// A ttl of 0 stores without expiry (the cache writes its clear record so,
// see Cache.Clear).
//
// Get reports a missing key as ok == false with a nil error: a miss is not an
// error. SetIfAbsent stores only when the key holds nothing (SET NX): the
// cache fills with it, so a fill never overwrites another instance's write.
// Implementations must be safe for concurrent use.
//
// A Remote that prepends a prefix of its own to every key (as l2.Store's
// Options.Prefix does) should say so with a method Prefix() string: the
// cache then makes the prefix part of its bus channel and of every message,
// so that caches kept apart by the prefix take none of each other's news.
type Remote interface {
	Get(ctx context.Context, key string) (value []byte, ok bool, err error)
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
	SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (stored bool, err error)
}

// BatchRemote is a Remote that reads and writes many keys in one round trip
// (per cluster node). GetMany returns one slot per key, in order, nil for a
// missing key. SetManyIfAbsent writes keys[i] = values[i] with lifetime
// ttls[i] where keys[i] holds nothing, and reports which it wrote.
//
// A Remote that does not implement it is called once per key.
type BatchRemote interface {
	Remote
	GetMany(ctx context.Context, keys []string) ([][]byte, error)
	SetManyIfAbsent(ctx context.Context, keys []string, values [][]byte, ttls []time.Duration) (stored []bool, err error)
}

// CompareAndSetter is a Remote that can replace a value only if it is still
// the one read (for Redis: a Lua script). A fill uses it to replace a stale,
// undecodable or deleted entry without overwriting a write that landed
// since its read; without it, such a fill overwrites unconditionally.
type CompareAndSetter interface {
	CompareAndSet(ctx context.Context, key string, old, value []byte, ttl time.Duration) (stored bool, err error)
}

// Announcer is a Remote that can make a write and its announcement one
// atomic step (for Redis: SET and PUBLISH in one script), so that the order
// of messages on channel is the order of the writes. With it, peers may swap
// in a value carried by a message; without it they only drop their copy.
// (A delete is a write too: it stores a short tombstone.)
type Announcer interface {
	SetAndPublish(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte) error
}

// Replacer is a Remote that can replace a value in place, keeping its
// lifetime (for Redis: a Lua script with SET KEEPTTL): ReplaceAndPublish
// stores value under key only if key holds exactly old, for the lifetime
// key has left, and, whether or not it replaced, publishes msg on channel
// (nothing when channel is empty), in one atomic step. It reports whether
// it replaced. Expire uses it to move a stored value's logical expiry to
// now without changing how long the shared tier keeps it (which a Remote
// cannot tell) and without overwriting a write that landed since its read.
// Without it, Expire rewrites the value with CompareAndSet (or Set) for a
// lifetime it estimates, then publishes.
type Replacer interface {
	ReplaceAndPublish(ctx context.Context, key string, old, value []byte, channel string, msg []byte) (replaced bool, err error)
}

// JournalReplacer is a Journal and a Replacer that can also log the
// replacements it announces: ReplacePublishAndLog is ReplaceAndPublish that,
// in the same atomic step, appends entry to log and publishes
// message.Positioned(pos, msg), as SetPublishAndLog does. Expire uses it,
// so that an expiry missed during a bus loss is replayed; with a Journal
// that is not one, an expiry is not logged.
type JournalReplacer interface {
	ReplacePublishAndLog(ctx context.Context, key string, old, value []byte, channel string, msg []byte, log string, entry []byte, maxLen int) (replaced bool, err error)
}

// Journal is an Announcer that also keeps a capped log of the writes it
// announces (for Redis: a stream appended to by the same script), so that an
// instance whose bus connection dropped can read the messages it missed
// instead of flushing L1. Positions are opaque strings that compare as Redis
// stream ids do ("<ms>-<seq>").
type Journal interface {
	Announcer
	// SetPublishAndLog is SetAndPublish that, in the same atomic step, also
	// appends entry to the log named log (trimmed to about maxLen entries)
	// and publishes, instead of msg, message.Positioned(pos, msg): the new
	// entry's position, then msg.
	SetPublishAndLog(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte, log string, entry []byte, maxLen int) error
	// OpenLog returns the position of log's newest entry, creating the log
	// if it is missing. An error wrapping errors.ErrUnsupported says this
	// Remote keeps no log (such as l2.Store on Redis Cluster).
	OpenLog(ctx context.Context, log string) (pos string, err error)
	// ReadLog returns up to max entries of log after the position after,
	// oldest first, and their positions. complete is false when the log
	// cannot show every entry after after: it is missing, entries after
	// after were trimmed, or after is newer than its newest entry.
	ReadLog(ctx context.Context, log, after string, max int) (entries [][]byte, positions []string, complete bool, err error)
}

// NewerSetter is a Remote that can write a value only over an older one:
// SetIfNewerAndPublish stores value under key for ttl only if key holds
// nothing or a value whose write time is not after value's, and, when it
// stored, publishes msg on channel (nothing when channel is empty), in one
// atomic step (for Redis: a Lua script). Write times are 8 bytes,
// big-endian, at byte offset stampOffset of the stored bytes and of value
// (the cache passes 3 for its envelopes and tombstones, 0 for its tag and
// clear records); a stored value too short to hold one counts as older.
// stored is true when key holds value afterwards: written now, or found
// exactly (a write that landed although its call failed; then nothing is
// written or published). It is false when key holds a newer value. Of two
// values with the same write time, value wins (an instance's queued write
// may follow its previous one within the same millisecond).
//
// Options.QueueWrites replays queued writes with it, so that a replay never
// overwrites a write another instance made meanwhile. Without it, a replay
// reads the key, compares write times, and writes and announces as Set
// does: a write that lands between that read and that write is lost.
type NewerSetter interface {
	SetIfNewerAndPublish(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte, stampOffset int) (stored bool, err error)
}

// NewerJournal is a Journal that can replay a queued write as NewerSetter
// does and log it: SetIfNewerPublishAndLog is SetIfNewerAndPublish that,
// when it stores, also appends entry to the log named log (trimmed to
// about maxLen entries) and publishes message.Positioned(pos, msg) instead
// of msg, in the same atomic step, as Journal.SetPublishAndLog does. When
// the cache keeps a log, replays go through it (without it, as without a
// NewerSetter), so that an instance whose bus dropped meanwhile finds them
// in the log.
type NewerJournal interface {
	SetIfNewerPublishAndLog(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte, stampOffset int, log string, entry []byte, maxLen int) (stored bool, err error)
}

// BoundedReader is a Remote that bounds how long a read (Get, GetMany) can
// block, whatever the ctx it is given: ReadBound returns that bound, or 0
// when there is none (for *l2.Store: its ReadTimeout when the client applies
// ctx deadlines to its socket). With a bound, the caller that leads a fill
// makes its shared-tier read itself, which saves a hand-off to another
// goroutine; if its ctx ends during the read, it waits at most the bound.
// Without one, the read runs on a worker so that the caller can leave at once.
type BoundedReader interface {
	ReadBound() time.Duration
}

// Leaser is a Remote that can hold leases: short-lived keys that say which
// instance is loading a key, so that one instance of a fleet loads it while
// the others wait for its value (Options.LoadLease). A lease is held under
// a token, a string unique to one holder, and always has a lifetime.
//
// Each call covers many leases in one round trip (per cluster node) where
// it can. A taker that finds a lease held learns how long it has left, so
// that it can wait for that long at most before it tries again (the holder
// died), and need not ask in between.
type Leaser interface {
	// TakeLeases takes a lease under token for ttl (SET NX PX) on each of
	// keys that no one holds. taken[i] reports whether keys[i] was taken;
	// when it was, values[i] is what guards[i] (the key the lease is for)
	// held right after the lease was taken, nil for nothing, so that a
	// taker sees a value stored by a holder that released its lease
	// between the taker's first read and its lease; when it was not,
	// left[i] is how long its holder's lease has left, holders[i] is the
	// token it is held under (as given to the holder's TakeLeases), and
	// the lease is marked as asked for, so that its release announces (see
	// ReleaseLeases). A waiter takes a holder's news only from the holder
	// it found.
	TakeLeases(ctx context.Context, keys, guards []string, token string, ttl time.Duration) (taken []bool, left []time.Duration, values [][]byte, holders []string, err error)
	// ExtendLeases sets to ttl the lifetime of each lease of keys that is
	// still held under token, and reports which were.
	ExtendLeases(ctx context.Context, keys []string, token string, ttl time.Duration) (held []bool, err error)
	// ReleaseLeases deletes each lease of keys that is still held under
	// token (one taken over by another holder stays), then, when channel is
	// not empty and someone may wait for one of them (it was asked for
	// while held, or is no longer held under token), publishes msg on
	// channel: no message for leases no one else asked for.
	ReleaseLeases(ctx context.Context, keys []string, token string, channel string, msg []byte) error
	// FillAndRelease is a lease holder's write: it stores value under key
	// for ttl if key holds nothing or, when old is not nil, only if key
	// holds exactly old (as SetIfAbsent and CompareAndSet do); then it
	// releases lease if it is still held under token; then, when channel is
	// not empty and someone may wait for the lease (as for ReleaseLeases),
	// it publishes stored on channel if it stored value, else unstored. One atomic step on one Redis server; in that order where a
	// step cannot span the keys (Redis Cluster). It reports whether it
	// stored value.
	FillAndRelease(ctx context.Context, key string, old, value []byte, ttl time.Duration, lease, token, channel string, stored, unstored []byte) (wrote bool, err error)
}

// shared is the Remote and what it can do beyond Remote, resolved once.
type shared struct {
	remote    Remote           // nil: L1 only
	batch     BatchRemote      // nil: one call per key
	cas       CompareAndSetter // nil: replacing writes are plain Sets
	ann       Announcer        // nil: write, then publish on the Bus (also nil without a Bus)
	journal   Journal          // nil: no log to replay missed messages from
	repl      Replacer         // nil: Expire rewrites with cas or a Set, then publishes
	replLog   JournalReplacer  // nil: an Expire is not logged
	newer     NewerSetter      // nil: a queued write is replayed by read, compare, write
	newerLog  NewerJournal     // nil: likewise when there is a journal
	leaser    Leaser           // nil: no load leases (also nil without a Bus)
	readBound time.Duration    // 0: reads are not known to end in time
}

func resolveShared(r Remote, withBus bool) shared {
	s := shared{remote: r}
	s.batch, _ = r.(BatchRemote)
	s.cas, _ = r.(CompareAndSetter)
	s.repl, _ = r.(Replacer)
	s.newer, _ = r.(NewerSetter)
	if withBus {
		s.ann, _ = r.(Announcer)
		s.journal, _ = r.(Journal)
		s.replLog, _ = r.(JournalReplacer)
		s.newerLog, _ = r.(NewerJournal)
		s.leaser, _ = r.(Leaser)
	}
	if b, ok := r.(BoundedReader); ok {
		s.readBound = max(b.ReadBound(), 0)
	}
	return s
}

// errCallerDone marks a call cut short by its caller's ctx: no failure of
// the shared tier.
var errCallerDone = errors.New("hybrid: caller's ctx ended")

// do runs one shared-tier call f as every such call runs: not at all while
// the breaker is open (ErrUnavailable), inside a span,
// with its outcome recorded by the breaker. A failure after the caller's
// ctx ended also wraps errCallerDone.
func (c *Cache[V]) do(ctx context.Context, op, name string, f func(ctx context.Context) error) error {
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
// (Stats.L2Errors, Events.L2Error).
func (c *Cache[V]) call(ctx context.Context, op, name string, f func(ctx context.Context) error) error {
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
func (c *Cache[V]) retry(ctx context.Context, op, name string, keep func() bool, f func(ctx context.Context) error) error {
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

// readRemote reads key from the shared tier and, on a hit, stores it in L1
// as p says if tok is still valid. Errors and undecodable values count as
// misses. The bytes read come back too, for a fill to replace them if
// stale.
func (c *Cache[V]) readRemote(ctx context.Context, key string, tok token, p *policy) (item[V], readState, []byte) {
	var it item[V]
	if c.remote == nil {
		return it, readMiss, nil
	}
	var b []byte
	var ok bool
	err := c.call(ctx, "get", key, func(ctx context.Context) (err error) {
		b, ok, err = c.remote.Get(ctx, c.prefix+key)
		return err
	})
	switch {
	case errors.Is(err, errCallerDone):
		return it, readCut, nil
	case err != nil:
		c.readFailed(err)
		return it, readDown, nil
	case !ok:
		c.n.l2Misses.Add(1)
		return it, readMiss, nil
	}
	st := c.take(ctx, nil, &it, key, b, tok, p)
	return it, st, b
}

// readFailed notes a failed read, which the caller answers from L1 and
// load: logged, and the shared tier taken as unreachable for entries held
// through a bus loss (see checkHeld).
func (c *Cache[V]) readFailed(err error) {
	c.loss.downUntil.Store(time.Now().Add(heldRecheck).UnixNano())
	if failed(err) {
		c.log.log(logL2, "hybrid: shared tier read failed; serving from L1 and load", "namespace", c.o.Namespace, "err", err)
	}
}

// take decodes b, read from the shared tier for key, into *it, which must
// be the zero item, and stores a live value in L1 (as part of lb, if not
// nil) as p says if tok is still valid. After readDeleted or readCorrupt,
// *it is the zero item again.
func (c *Cache[V]) take(ctx context.Context, lb *l1.Batch[item[V]], it *item[V], key string, b []byte, tok token, p *policy) readState {
	ttl, written, err := c.decodeInto(it, b, p.timed())
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
	c.storeLocal(lb, key, *it, c.size(b), min(ttl, p.localTTL), tok, p)
	return readHit
}

// found is one key's result of a batch read: what it found (st) and the
// value, if it found one (live, or stale for fail-safe); or of a wait for
// another instance's lease: its value or its error.
type found[V any] struct {
	it  item[V]
	st  readState
	err error
}

// readRemoteMany reads keys from the shared tier in one round trip where
// the Remote allows it (else one call per key), storing hits in L1 under
// their tokens. replace holds, by key, the stored bytes a fill is to
// replace: a value that did not decode, is stale, or is a tombstone. cut
// reports that the caller's ctx ended before the shared tier answered;
// then nothing was found.
func (c *Cache[V]) readRemoteMany(ctx context.Context, keys []string, toks []token, p *policy) (res []found[V], replace map[string][]byte, cut bool) {
	res = make([]found[V], len(keys))
	if c.remote == nil {
		return res, nil, false
	}
	keep := func(key string, b []byte, st readState) {
		if st == readCorrupt || st == readStale || st == readDeleted {
			if replace == nil {
				replace = make(map[string][]byte)
			}
			replace[key] = b
		}
	}
	if c.batch == nil {
		for i, key := range keys {
			it, st, raw := c.readRemote(ctx, key, toks[i], p)
			if st == readCut {
				return make([]found[V], len(keys)), nil, true // nothing finished: the fill reads all again
			}
			res[i] = found[V]{it: it, st: st}
			keep(key, raw, st)
		}
		return res, replace, false
	}
	var vals [][]byte
	err := c.call(ctx, "get_many", "", func(ctx context.Context) (err error) {
		vals, err = c.batch.GetMany(ctx, c.prefixed(keys))
		if err == nil && len(vals) != len(keys) {
			err = fmt.Errorf("hybrid: GetMany returned %d values for %d keys", len(vals), len(keys))
		}
		return err
	})
	if errors.Is(err, errCallerDone) {
		return res, nil, true
	}
	if err != nil {
		c.readFailed(err)
		for i := range res {
			res[i].st = readDown
		}
		return res, nil, false
	}
	lb := c.local.Batch()
	defer lb.Done()
	for i, b := range vals {
		if b == nil {
			c.n.l2Misses.Add(1)
			continue
		}
		res[i].st = c.take(ctx, lb, &res[i].it, keys[i], b, toks[i], p)
		keep(keys[i], b, res[i].st)
	}
	return res, replace, false
}

// storeRemote writes a loaded value to the shared tier for life (its
// lifetime there, fail-safe included): if old is nil, only where the key
// holds nothing; else only where it still holds old (the stale,
// undecodable or deleted entry the fill read), or unconditionally with a
// Remote that cannot compare. So a write by another instance since our
// read wins over our load. It is not announced: a fill changes nothing
// other instances hold. When another value is found, ours leaves L1 too.
//
// A fill whose key changed since tok (a Set or Delete here, or a message
// from another instance) writes nothing: its value may predate the change.
// It reports whether it wrote b.
func (c *Cache[V]) storeRemote(ctx context.Context, key string, b []byte, life time.Duration, old []byte, tok token) (wrote bool) {
	if c.remote == nil {
		return false
	}
	stored := true
	tried := false
	err := c.retry(ctx, "set", key, func() bool { return c.vers.valid(tok) }, func(ctx context.Context) (err error) {
		tried = true
		switch {
		case c.cas != nil && old != nil:
			stored, err = c.cas.CompareAndSet(ctx, c.prefix+key, old, b, life)
		case old != nil:
			err = c.remote.Set(ctx, c.prefix+key, b, life)
		default:
			stored, err = c.remote.SetIfAbsent(ctx, c.prefix+key, b, life)
		}
		return err
	})
	if err == nil && !stored {
		c.vers.bump(key)
		c.local.Delete(key)
	}
	return err == nil && stored && tried
}

// batchWrite collects the write-back of a batch fill.
type batchWrite struct {
	keys []string
	vals [][]byte
	ttls []time.Duration // lifetimes in the shared tier, fail-safe included
	toks []token
}

func (w *batchWrite) add(key string, b []byte, ttl time.Duration, tok token) {
	w.keys = append(w.keys, key)
	w.vals = append(w.vals, b)
	w.ttls = append(w.ttls, ttl)
	w.toks = append(w.toks, tok)
}

// storeRemoteMany is storeRemote (with old nil) for many keys, in one round
// trip where the Remote allows it. It reports, by key, those it wrote.
func (c *Cache[V]) storeRemoteMany(ctx context.Context, w batchWrite) (wrote map[string]bool) {
	if c.remote == nil || len(w.keys) == 0 {
		return nil
	}
	wrote = make(map[string]bool, len(w.keys))
	if c.batch == nil {
		for i, key := range w.keys {
			wrote[key] = c.storeRemote(ctx, key, w.vals[i], w.ttls[i], nil, w.toks[i])
		}
		return wrote
	}
	var todo batchWrite
	for i, key := range w.keys {
		if c.vers.valid(w.toks[i]) { // else changed since our read: our value may predate it
			todo.add(c.prefix+key, w.vals[i], w.ttls[i], w.toks[i])
		}
	}
	if len(todo.keys) == 0 {
		return wrote
	}
	var stored []bool
	err := c.retry(ctx, "set_many", "", always, func(ctx context.Context) (err error) {
		stored, err = c.batch.SetManyIfAbsent(ctx, todo.keys, todo.vals, todo.ttls)
		if err == nil && len(stored) != len(todo.keys) {
			err = fmt.Errorf("hybrid: SetManyIfAbsent returned %d results for %d keys", len(stored), len(todo.keys))
		}
		return err
	})
	if err != nil {
		return wrote
	}
	for i, ok := range stored {
		key := todo.keys[i][len(c.prefix):]
		wrote[key] = ok
		if !ok {
			c.vers.bump(key)
			c.local.Delete(key)
		}
	}
	return wrote
}

// writeAndPublish writes b under the shared-tier key rkey for life and
// publishes m: in one atomic step when the Remote is an Announcer, else
// write then publish. op names the call in spans, events and errors, name
// the key or tag it is about. With own, a write of key name is recorded in
// echoes as ours until its message comes back.
func (c *Cache[V]) writeAndPublish(ctx context.Context, op, name, rkey string, b []byte, life time.Duration, m message.Message, own bool) error {
	switch {
	case c.ann != nil:
		msg := message.Encode(m, c.o.Secret)
		var entry []byte // the message as the log keeps it: without a value
		if c.journal != nil {
			m.Value = nil
			entry = message.Encode(m, c.o.Secret)
		}
		if err := c.call(ctx, op, name, func(ctx context.Context) error {
			if own {
				c.echo.sent(name)
			}
			if entry != nil {
				return c.journal.SetPublishAndLog(ctx, rkey, b, life, c.o.Channel, msg, c.logKey(), entry, c.o.ReplayLogLen)
			}
			return c.ann.SetAndPublish(ctx, rkey, b, life, c.o.Channel, msg)
		}); err != nil {
			return fmt.Errorf("hybrid: %s: %w", about(op, name), err)
		}
		c.n.published.Add(1)
		return nil
	case c.remote != nil:
		if err := c.call(ctx, op, name, func(ctx context.Context) error {
			return c.remote.Set(ctx, rkey, b, life)
		}); err != nil {
			return fmt.Errorf("hybrid: %s: %w", about(op, name), err)
		}
	}
	if c.bus == nil {
		return nil
	}
	if err := c.publish(ctx, m); err != nil {
		return fmt.Errorf("hybrid: %s: announce: %w", about(op, name), err)
	}
	return nil
}

// about names a call about name (a key or tag; none for a Clear) in errors.
func about(op, name string) string {
	if name == "" {
		return op
	}
	return op + " " + strconv.Quote(name)
}

// readRecord reads the shared-tier key rkey as it is stored: one of the
// cache's own records (see tags.go), or a value that Expire rewrites. It
// returns the bytes, or ok false when there are none; an error when the
// shared tier cannot say.
func (c *Cache[V]) readRecord(ctx context.Context, op, name, rkey string) (b []byte, ok bool, err error) {
	err = c.call(ctx, op, name, func(ctx context.Context) (err error) {
		b, ok, err = c.remote.Get(ctx, rkey)
		return err
	})
	return b, ok, err
}

// expireShared moves the logical expiry of key's value in the shared tier
// to now, keeping the value for fail-safe, and announces the expiry on the
// bus. With a Replacer the rewrite and the message are one atomic step
// that keeps the value's physical lifetime and writes nothing if the key
// changed since it was read (the change, a write after this Expire, wins).
// Otherwise the value is rewritten with CompareAndSet, or a Set, for the
// logical lifetime it had left plus this cache's FailSafeMaxAge, and then
// announced. A key that holds nothing live (missing, a tombstone, bytes
// that do not decode, a value already stale) is only announced.
func (c *Cache[V]) expireShared(ctx context.Context, key string) error {
	m := message.Message{Op: message.OpExpire, Origin: c.origin, Namespace: c.scope, Keys: []string{key}}
	var old, expired []byte
	var left time.Duration
	if c.remote != nil {
		b, found, err := c.readRecord(ctx, "get", key, c.prefix+key)
		if err != nil {
			return fmt.Errorf("hybrid: expire %q: %w", key, err)
		}
		if found {
			old = b
			expired, left = expiredNow(b, c.def.ttl)
		}
	}
	if expired != nil && c.repl != nil {
		channel, msg := "", []byte(nil)
		if c.bus != nil {
			channel, msg = c.o.Channel, message.Encode(m, c.o.Secret)
		}
		if err := c.call(ctx, "expire", key, func(ctx context.Context) error {
			c.sentOwn(key)
			if c.journal != nil && c.replLog != nil {
				_, err := c.replLog.ReplacePublishAndLog(ctx, c.prefix+key, old, expired, channel, msg, c.logKey(), message.Encode(m, c.o.Secret), c.o.ReplayLogLen)
				return err
			}
			_, err := c.repl.ReplaceAndPublish(ctx, c.prefix+key, old, expired, channel, msg)
			return err
		}); err != nil {
			return fmt.Errorf("hybrid: expire %q: %w", key, err)
		}
		if c.bus != nil {
			c.n.published.Add(1)
		}
		return nil
	}
	if expired != nil {
		life := left + c.def.failSafe
		if err := c.call(ctx, "expire", key, func(ctx context.Context) (err error) {
			if c.cas != nil {
				_, err = c.cas.CompareAndSet(ctx, c.prefix+key, old, expired, life)
				return err
			}
			return c.remote.Set(ctx, c.prefix+key, expired, life)
		}); err != nil {
			return fmt.Errorf("hybrid: expire %q: %w", key, err)
		}
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
	if c.ann != nil {
		c.echo.sent(key)
	}
}
