package hybrid

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/flight"
	"github.com/hybridcache/hybridcache/internal/message"
	"github.com/hybridcache/hybridcache/l1"
)

// item is what L1 holds for a key: a value, or a remembered absence, and,
// when fail-safe or eager refresh is on, its timing. The timing sits behind
// a pointer so that an untimed hit copies as little as possible.
type item[V any] struct {
	v      V
	absent bool
	t      *timing
}

// timing is an item's schedule, in Unix nanoseconds (L1's clock).
type timing struct {
	// due is when a hit must look closer: a refresh or the logical expiry.
	due int64
	// expires is the logical expiry: past it the value is stale, kept only
	// as a fail-safe fallback.
	expires int64
	// staleAt is when this value first went stale (a throttled stale serve
	// moves expires, not staleAt), bounding fail-safe by FailSafeMaxAge.
	staleAt int64
	// written is when the value was written to the shared tier.
	written int64
	// tags are the value's tags (WithTags).
	tags []string
	// size is the L1 weight of the value without its key (see size), kept
	// so that a fail-safe re-store weighs the value as its first store did.
	size int
}

// writtenAt is when it was written, 0 if unknown.
func (it item[V]) writtenAt() int64 {
	if it.t == nil {
		return 0
	}
	return it.t.written
}

// entryOverhead is the weight added to every L1 entry for its key, header
// and bookkeeping.
const entryOverhead = 64

// Cache is a typed two-tier cache. It is safe for concurrent use. Create it
// with New and release it with Close.
type Cache[V any] struct {
	o      Options
	def    entry              // the entry of a call without options
	copy   func(V) (V, error) // copies values for callers; nil: shared
	prefix string             // Namespace + ":"
	local  *l1.Cache[item[V]]
	remote Remote
	ann    Announcer // remote as Announcer, when it is one and a Bus is set
	// readBound is how long a shared-tier read can block at most (see
	// BoundedReader); 0: unknown.
	readBound time.Duration
	bus       Bus
	codec     Codec
	origin    message.Origin

	flights flight.Group[V]
	fence   *fence
	tags    tagState
	br      breaker
	n       counters
	log     limitedLog

	// mu guards closed against wg.Add, so Close can wait for every fill.
	mu     sync.RWMutex
	closed atomic.Bool
	wg     sync.WaitGroup  // fill workers
	jobs   chan func()     // hands a fill to an idle worker
	stop   context.Context // cancelled by Close; ends fills
	cancel context.CancelFunc
	unsub  func()
}

// New returns a Cache configured by o, or an error naming the first
// setting that is wrong.
func New[V any](o Options) (*Cache[V], error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cache[V]{
		o:      o,
		def:    o.defaults(),
		copy:   copier[V](&o),
		prefix: o.Namespace + ":",
		remote: o.Remote,
		bus:    o.Bus,
		codec:  o.Codec,
		fence:  newFence(),
		jobs:   make(chan func()),
		log:    limitedLog{l: o.Logger, every: o.LogEvery},
		br:     breaker{threshold: int64(o.BreakerThreshold), openFor: o.BreakerOpenFor},
	}
	if _, err := rand.Read(c.origin[:]); err != nil {
		return nil, fmt.Errorf("hybrid: instance id: %w", err)
	}
	if a, ok := o.Remote.(Announcer); ok && o.Bus != nil {
		c.ann = a
	}
	if b, ok := o.Remote.(BoundedReader); ok {
		c.readBound = max(b.ReadBound(), 0)
	}
	c.local, err = l1.New[item[V]](l1.Options{
		MaxWeight: uint64(o.LocalMaxBytes),
		OnEvict: func(key string, expired bool) {
			if expired {
				c.n.expirations.Add(1)
			} else {
				c.n.evictions.Add(1)
			}
			if f := o.Events.Evicted; f != nil {
				f(key, expired)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("hybrid: %w", err)
	}
	c.stop, c.cancel = context.WithCancel(context.Background())
	if c.bus != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.unsub, err = c.bus.Subscribe(ctx, o.Channel, c.onMessage, c.onLoss)
		if err != nil {
			c.cancel()
			c.local.Close()
			return nil, fmt.Errorf("hybrid: subscribe to %q: %w", o.Channel, err)
		}
	}
	return c, nil
}

// GetOrCreate returns the value for key: from L1, else from the shared
// tier, else from load, whose result is stored in both tiers. Concurrent
// callers that miss on one key share one shared-tier read and one load;
// each waits only as long as its own ctx allows.
//
// A load error is returned wrapped (errors.Is sees it) and is not cached.
// Shared-tier failures are not returned: they are counted and logged, and
// the call goes on to load. The value returned is shared with L1 and other
// callers: do not modify it, or set Options.CopyOnRead.
//
// The first caller to miss makes the shared-tier read on its own goroutine
// when the Remote bounds its reads (BoundedReader, such as *l2.Store on a
// client built with ContextTimeoutEnabled): if its ctx ends during that
// read, it returns within the read bound. Otherwise, and for every load,
// the fill runs on a worker goroutine, and a caller returns as soon as its
// ctx ends. Callers that join a fill always return as soon as their ctx ends.
//
// When load returns an error wrapping ErrNotFound and Options.NegativeTTL is
// set, the absence is remembered in both tiers for that long: later calls
// return ErrNotFound without calling load.
func (c *Cache[V]) GetOrCreate(ctx context.Context, key string, load func(ctx context.Context, key string) (V, error), opts ...EntryOption) (V, error) {
	if it, ok := c.local.Get(key); ok && !c.closed.Load() {
		if it.t != nil && c.local.Now() >= it.t.due {
			return c.out(c.getOrCreateDue(ctx, key, it, load, opts))
		}
		if it.absent {
			return it.v, ErrNotFound
		}
		if c.copy != nil {
			return c.copy(it.v)
		}
		return it.v, nil
	}
	return c.out(c.getOrCreateSlow(ctx, key, load, opts, nil))
}

func (c *Cache[V]) getOrCreateSlow(ctx context.Context, key string, load func(ctx context.Context, key string) (V, error), opts []EntryOption, stale *item[V]) (V, error) {
	var zero V
	if err := c.check(ctx, key); err != nil {
		return zero, err
	}
	if load == nil {
		return zero, errors.New("hybrid: GetOrCreate: nil load function")
	}
	e, err := c.o.entry(&c.def, opts)
	if err != nil {
		return zero, err
	}
	call, leader := c.flights.Join(key)
	if leader {
		var pre *remoteRead[V]
		if c.leaderReads(ctx) {
			if pre = c.leadRead(ctx, key, call, &e); pre == nil {
				return call.Wait(ctx)
			}
			if pre.st == readCut {
				pre = nil // the fill reads again, for the callers still waiting
			}
		}
		if !c.runFill(ctx, key, load, e, call, stale, pre) {
			c.flights.Finish(key, call, zero, ErrClosed)
			return zero, ErrClosed
		}
	}
	return call.Wait(ctx)
}

// remoteRead is what a leader found in the shared tier when it read it
// itself, before it handed the rest of its fill to a worker.
type remoteRead[V any] struct {
	tok token
	it  item[V]
	st  readState
	raw []byte
}

// leaderReads reports whether the leader of a fill makes its shared-tier
// read itself, saving the hand-off to a worker goroutine and back: when its
// ctx cannot end (it would wait for the whole fill anyway), or when the
// Remote bounds how long a read can block (BoundedReader), so that a
// caller whose ctx ends during the read waits no longer than that bound.
// Otherwise the whole fill runs on a worker and the caller can leave at once.
func (c *Cache[V]) leaderReads(ctx context.Context) bool {
	return c.readBound > 0 || ctx.Done() == nil
}

// leadRead is the shared-tier read of a fill, made by its leader (see
// leaderReads). A read that finds a live value finishes call and returns
// nil; otherwise leadRead returns what it read for the fill to go on with
// (readCut if the leader's ctx ended first).
func (c *Cache[V]) leadRead(ctx context.Context, key string, call *flight.Call[V], e *entry) *remoteRead[V] {
	if e.loadTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = c.leadContext(ctx, e.loadTimeout)
		defer cancel()
	}
	return c.readShared(ctx, key, call, e)
}

// leadContext bounds a leader's read by the load timeout. A ctx that cannot
// end serves as a fill's context, which adds the end that Close brings; one
// that can keeps its own end.
func (c *Cache[V]) leadContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return c.fillContext(ctx, timeout)
	}
	return context.WithTimeout(ctx, timeout)
}

// readShared is a fill's read of the shared tier: a live value (or a
// remembered absence) finishes call and gives nil; anything else is
// returned for the fill to go on with.
func (c *Cache[V]) readShared(ctx context.Context, key string, call *flight.Call[V], e *entry) *remoteRead[V] {
	tok := c.fence.token(key)
	it, st, raw := c.readRemote(ctx, key, tok, e)
	if st != readHit {
		return &remoteRead[V]{tok: tok, it: it, st: st, raw: raw}
	}
	if it.absent {
		c.flights.Finish(key, call, it.v, fmt.Errorf("hybrid: %q: %w", key, ErrNotFound))
	} else {
		c.flights.Finish(key, call, it.v, nil)
	}
	return nil
}

// runFill runs fill on a worker (see run). Its closure is made here, so
// that only a call that needs one moves its arguments to the heap.
func (c *Cache[V]) runFill(ctx context.Context, key string, load func(context.Context, string) (V, error), e entry, call *flight.Call[V], stale *item[V], pre *remoteRead[V]) bool {
	return c.run(func() { c.fill(ctx, key, load, e, call, stale, pre) })
}

// run hands job to an idle fill worker, or starts one, unless the cache is
// closed. Workers outlive their job for workerIdle, so a busy cache reuses
// goroutines whose stacks have already grown to what a Redis call needs.
func (c *Cache[V]) run(job func()) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return false
	}
	select {
	case c.jobs <- job:
	default:
		c.wg.Add(1)
		go c.worker(job)
	}
	return true
}

// workerIdle is how long a fill worker waits for its next job.
const workerIdle = 5 * time.Second

func (c *Cache[V]) worker(job func()) {
	defer c.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		job()
		idle.Reset(workerIdle)
		select {
		case job = <-c.jobs:
		case <-idle.C:
			return
		case <-c.stop.Done():
			return
		}
	}
}

// fill runs one shared miss: the shared tier (unless pre holds what the
// leader read there itself), then load. It runs detached from the caller
// that started it (that caller may leave) and ends with Close or
// LoadTimeout. stale, if not nil, is an expired L1 value that fail-safe may
// serve if load fails.
func (c *Cache[V]) fill(caller context.Context, key string, load func(context.Context, string) (V, error), e entry, call *flight.Call[V], stale *item[V], pre *remoteRead[V]) {
	finished := false
	finish := func(v V, err error) {
		if !finished {
			finished = true
			c.flights.Finish(key, call, v, err)
		}
	}
	// A load that calls runtime.Goexit skips everything but deferred calls:
	// its waiters must still get an answer.
	defer func() {
		if !finished {
			var zero V
			c.flights.Finish(key, call, zero, fmt.Errorf("%w: %q: load called runtime.Goexit", ErrPanic, key))
		}
	}()
	ctx, cancel := c.fillContext(caller, e.loadTimeout)
	defer cancel()

	if pre == nil {
		if pre = c.readShared(ctx, key, call, &e); pre == nil {
			finished = true // by readShared, with what it found
			return
		}
	}
	tok, it, st, raw := pre.tok, pre.it, pre.st, pre.raw
	switch st {
	case readStale:
		if stale == nil || it.writtenAt() > stale.writtenAt() {
			stale = &it
		}
	}
	if !c.usable(stale, &e) {
		stale = nil
	}
	// Replace what the shared tier holds when it is stale, corrupt or a
	// tombstone, if it still holds that; otherwise write only if absent.
	var old []byte
	if st == readStale || st == readCorrupt || st == readDeleted {
		old = raw
	}

	v, err := c.loadSoftly(ctx, key, load, stale, finish, &e)
	if err != nil {
		if errors.Is(err, ErrNotFound) && e.negativeTTL > 0 {
			ttl, localTTL := e.negativeTTL, min(e.negativeTTL, e.localTTL)
			b := c.encodeAbsent(ttl, e.tags)
			c.storeLocal(key, tagged(item[V]{absent: true}, e.tags), c.size(b), localTTL, tok, &e)
			finish(v, err)
			c.storeRemote(ctx, key, b, e.physical(ttl), old, tok)
			return
		}
		if stale != nil && !errors.Is(err, ErrNotFound) {
			c.serveStale(key, *stale, tok, err, &e)
			finish(stale.v, nil)
			return
		}
		finish(v, err)
		return
	}
	ttl, localTTL := c.lifetimes(&e)
	b, err := c.encode(key, v, ttl, e.tags)
	if err != nil {
		c.notStored(key, err)
		finish(v, nil)
		return
	}
	// L1 first, so that no caller arriving after finish loads again; then
	// the waiters; then the shared tier.
	c.storeLocal(key, tagged(item[V]{v: v}, e.tags), c.size(b), localTTL, tok, &e)
	finish(v, nil)
	c.storeRemote(ctx, key, b, e.physical(ttl), old, tok)
}

// lifetimes returns the shared-tier and L1 lifetimes of one write: e's,
// shortened by a random part of up to its jitter so that entries written
// together do not expire together.
func (c *Cache[V]) lifetimes(e *entry) (ttl, localTTL time.Duration) {
	if e.jitter == 0 {
		return e.ttl, e.localTTL
	}
	f := 1 - mrand.Float64()*e.jitter
	return time.Duration(float64(e.ttl) * f), time.Duration(float64(e.localTTL) * f)
}

// notStored counts and logs a loaded value that could not be encoded or
// was too large.
func (c *Cache[V]) notStored(key string, err error) {
	if errors.Is(err, ErrValueTooLarge) {
		c.n.oversized.Add(1)
	} else {
		c.n.encodeErrors.Add(1)
	}
	c.log.log(logOversize, "hybrid: loaded value not stored", "namespace", c.o.Namespace, "key", key, "err", err)
}

// fillContext is the context of a shared fill: the caller's values without
// its cancellation, ended by Close and by timeout (the load timeout; 0:
// none).
func (c *Cache[V]) fillContext(caller context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx := context.Context(fillCtx{Context: c.stop, values: caller})
	if timeout > 0 {
		return context.WithTimeout(ctx, timeout)
	}
	return ctx, func() {}
}

// fillCtx is done when the cache closes (its embedded Context is the
// cache's stop) and has the values of the caller that started the fill.
// It costs one allocation where WithoutCancel, WithCancel and AfterFunc
// together cost six.
type fillCtx struct {
	context.Context
	values context.Context
}

func (f fillCtx) Value(key any) any { return f.values.Value(key) }

// runLoad calls load, turning a panic into an error.
func (c *Cache[V]) runLoad(ctx context.Context, key string, load func(context.Context, string) (V, error)) (v V, err error) {
	c.n.loads.Add(1)
	ctx, end := c.span(ctx, "load", key)
	defer func() {
		if r := recover(); r != nil {
			var zero V
			v, err = zero, fmt.Errorf("%w: %q: %v\n%s", ErrPanic, key, r, debug.Stack())
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			c.n.loadErrors.Add(1)
		}
		end(err)
	}()
	v, err = load(ctx, key)
	if err != nil {
		return v, fmt.Errorf("hybrid: load %q: %w", key, err)
	}
	return v, nil
}

// readState is what a shared-tier read found.
type readState uint8

const (
	readMiss    readState = iota // nothing, or the shared tier failed
	readHit                      // a live value (or remembered absence), now in L1
	readStale                    // a value past its logical expiry (fail-safe)
	readCorrupt                  // bytes that do not decode
	readDeleted                  // a tombstone left by a delete
	readCut                      // the caller's ctx ended first: nothing known, nothing failed
)

// readRemote reads key from the shared tier and, on a hit, stores it in L1
// as e says if tok is still valid. Errors and undecodable values count as
// misses. The bytes read come back too, for a fill to replace them if
// stale.
func (c *Cache[V]) readRemote(ctx context.Context, key string, tok token, e *entry) (item[V], readState, []byte) {
	var it item[V]
	if c.remote == nil {
		return it, readMiss, nil
	}
	if !c.br.allow() {
		c.n.l2Skipped.Add(1)
		return it, readMiss, nil
	}
	sctx, end := c.span(ctx, "get", key)
	b, ok, err := c.remote.Get(sctx, c.prefix+key)
	end(err)
	c.br.record(ctx, err)
	if err != nil && callerDone(ctx) {
		return it, readCut, nil
	}
	if err != nil {
		c.l2Failed("get", err)
		c.log.log(logL2, "hybrid: shared tier read failed; serving from L1 and load", "namespace", c.o.Namespace, "err", err)
		return it, readMiss, nil
	}
	if !ok {
		c.n.l2Misses.Add(1)
		return it, readMiss, nil
	}
	it, st := c.takeRemote(ctx, key, b, tok, e)
	return it, st, b
}

// takeRemote decodes a value read from the shared tier and stores a live
// one in L1 as e says if tok is still valid.
func (c *Cache[V]) takeRemote(ctx context.Context, key string, b []byte, tok token, e *entry) (item[V], readState) {
	var it item[V]
	st := c.takeRemoteInto(ctx, nil, &it, key, b, tok, e)
	return it, st
}

// takeRemoteInto is takeRemote decoding into *it, which must be the zero
// item: a batch decodes into a slice it allocated once, where the item of
// takeRemote escapes to the heap, one allocation per key. After a
// readDeleted or readCorrupt, *it is the zero item again.
func (c *Cache[V]) takeRemoteInto(ctx context.Context, lb *l1.Batch[item[V]], it *item[V], key string, b []byte, tok token, e *entry) readState {
	ttl, err := c.decodeInto(it, b, e.timed())
	if err == nil && it.t != nil && len(it.t.tags) > 0 && c.tagDeleted(ctx, it.t.tags, it.t.written) {
		err = errTombstone // deleted by DeleteByTag
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
	c.storeLocalIn(lb, key, *it, c.size(b), min(ttl, e.localTTL), tok, e)
	return readHit
}

// errTombstone is decode's answer for a tombstone: a miss, not corruption.
var errTombstone = errors.New("hybrid: deleted")

// decode turns a stored envelope into an item and its remaining lifetime;
// with timed, the item's timing holds when it was written and went stale.
func (c *Cache[V]) decode(b []byte, timed bool) (item[V], time.Duration, error) {
	var it item[V]
	ttl, err := c.decodeInto(&it, b, timed)
	if err != nil {
		return item[V]{}, 0, err
	}
	return it, ttl, nil
}

// decodeInto is decode into *it, which must be the zero item. On an error
// *it may be partly set.
func (c *Cache[V]) decodeInto(it *item[V], b []byte, timed bool) (time.Duration, error) {
	h, payload, err := envelope.Decode(b)
	if err != nil {
		return 0, err
	}
	if h.Codec != c.codec.ID() {
		return 0, fmt.Errorf("hybrid: value written with codec %d, this cache uses %d", h.Codec, c.codec.ID())
	}
	// A remaining lifetime <= 0 means the value is stale: kept past its
	// logical expiry for fail-safe.
	ttl := c.o.LocalTTL
	if !h.Expires.IsZero() {
		ttl = time.Until(h.Expires)
	}
	if timed || len(h.Tags) > 0 {
		it.t = &timing{written: h.Written.UnixNano(), staleAt: h.Expires.UnixNano(), tags: h.Tags, size: c.size(b)}
	}
	if h.Flags&envelope.FlagDeleted != 0 {
		return 0, errTombstone
	}
	if h.Flags&envelope.FlagAbsent != 0 {
		if len(payload) != 0 {
			return 0, errors.New("hybrid: absence marker with a payload")
		}
		it.absent = true
		return ttl, nil
	}
	if h.Flags&envelope.FlagCompressed != 0 {
		if payload, err = c.decompress(payload); err != nil {
			return 0, err
		}
	}
	if err := c.codec.Unmarshal(payload, &it.v); err != nil {
		return 0, err
	}
	return ttl, nil
}

// encodeTombstone returns the envelope a delete leaves behind. Its payload
// is a random nonce, so that no two deletes leave the same bytes and a
// fill's compare-and-set against one tombstone never matches a later one.
func (c *Cache[V]) encodeTombstone(ttl time.Duration) []byte {
	now := time.Now()
	h := envelope.Header{Codec: c.codec.ID(), Flags: envelope.FlagDeleted, Written: now, Expires: now.Add(ttl)}
	var nonce [8]byte
	binary.LittleEndian.PutUint64(nonce[:], mrand.Uint64())
	return envelope.Append(make([]byte, 0, envelope.HeaderLen+len(nonce)), h, nonce[:])
}

// encodeAbsent returns the envelope of a remembered absence.
func (c *Cache[V]) encodeAbsent(ttl time.Duration, tags []string) []byte {
	now := time.Now()
	h := envelope.Header{Codec: c.codec.ID(), Flags: envelope.FlagAbsent, Written: now, Expires: now.Add(ttl), Tags: tags}
	return envelope.Append(make([]byte, 0, envelope.HeaderLen+envelope.TagsLen(tags)), h, nil)
}

// encode returns v's envelope, or an error wrapping ErrValueTooLarge.
func (c *Cache[V]) encode(key string, v V, ttl time.Duration, tags []string) ([]byte, error) {
	payload, err := c.codec.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("hybrid: encode %q: %w", key, err)
	}
	if len(payload) > c.o.MaxValueBytes {
		return nil, fmt.Errorf("%w: %q encodes to %d bytes, limit %d", ErrValueTooLarge, key, len(payload), c.o.MaxValueBytes)
	}
	now := time.Now()
	h := envelope.Header{Codec: c.codec.ID(), Written: now, Expires: now.Add(ttl), Tags: tags}
	if z, ok := c.compress(payload); ok {
		payload, h.Flags = z, envelope.FlagCompressed
	}
	return envelope.Append(make([]byte, 0, envelope.HeaderLen+envelope.TagsLen(tags)+len(payload)), h, payload), nil
}

// storeRemote writes a loaded value to the shared tier for life (its
// lifetime there, fail-safe included): if old is nil,
// only where the key holds nothing; else only where it still holds old (the
// stale, undecodable or deleted entry the fill read), or unconditionally
// with a Remote that cannot compare. So a write by another instance since
// our read wins over our load. It is not announced: a fill changes nothing
// other instances hold. When another value is found, ours leaves L1 too.
//
// A fill whose key changed since tok (a Set or Delete here, or a message
// from another instance) writes nothing: its value may predate the change.
func (c *Cache[V]) storeRemote(ctx context.Context, key string, b []byte, life time.Duration, old []byte, tok token) {
	if c.remote == nil {
		return
	}
	stored, err := true, error(nil)
	for attempt := 0; ; attempt++ {
		if !c.fence.valid(tok) {
			return
		}
		if !c.br.allow() {
			c.n.l2Skipped.Add(1)
			return
		}
		sctx, end := c.span(ctx, "set", key)
		if cas, ok := c.remote.(CompareAndSetter); ok && old != nil {
			stored, err = cas.CompareAndSet(sctx, c.prefix+key, old, b, life)
		} else if old != nil {
			err = c.remote.Set(sctx, c.prefix+key, b, life)
		} else {
			stored, err = c.remote.SetIfAbsent(sctx, c.prefix+key, b, life)
		}
		end(err)
		c.br.record(ctx, err)
		if err == nil || !c.retryWrite(ctx, "set", attempt, err) {
			break
		}
	}
	if err != nil {
		return
	}
	if !stored {
		c.fence.bump(key)
		c.local.Delete(key)
	}
}

// writeRetries are the pauses before the second and third attempt of a
// background write to the shared tier.
var writeRetries = [...]time.Duration{20 * time.Millisecond, 100 * time.Millisecond}

// retryWrite counts a failed background write (once, however many
// attempts) and reports whether to try again after a pause; when it gives
// up, the loss is counted and logged.
func (c *Cache[V]) retryWrite(ctx context.Context, op string, attempt int, err error) bool {
	if attempt == 0 {
		c.l2Failed(op, err)
	}
	if attempt < len(writeRetries) {
		t := time.NewTimer(writeRetries[attempt])
		defer t.Stop()
		select {
		case <-t.C:
			c.n.writeRetries.Add(1)
			return true
		case <-ctx.Done():
		}
	}
	c.n.writesDropped.Add(1)
	c.log.log(logL2, "hybrid: shared tier write given up; value kept in L1 only", "namespace", c.o.Namespace, "attempts", attempt+1, "err", err)
	return false
}

// storeLocal puts it in L1 for ttl, scheduled as e says, unless key
// changed since tok was taken. The
// check runs under the lock of key's L1 entry, and every change bumps the
// fence before it touches the entry, so no change can slip in between the
// check and the store. It reports whether it stored.
func (c *Cache[V]) storeLocal(key string, it item[V], size int, ttl time.Duration, tok token, e *entry) bool {
	return c.storeLocalIn(nil, key, it, size, ttl, tok, e)
}

// storeLocalIn is storeLocal as part of lb, or alone if lb is nil. size is
// the value's weight as size gives it.
func (c *Cache[V]) storeLocalIn(lb *l1.Batch[item[V]], key string, it item[V], size int, ttl time.Duration, tok token, e *entry) bool {
	it, ttl = c.stamp(it, size, ttl, e)
	w := weight(key, size)
	valid := func() bool { return c.fence.valid(tok) }
	var stored bool
	if lb != nil {
		stored = lb.SetIf(key, it, w, ttl, valid)
	} else {
		stored = c.local.SetIf(key, it, w, ttl, valid)
	}
	if !stored {
		c.n.fillsDiscarded.Add(1)
		return false
	}
	return true
}

// weight is the L1 weight of key holding a value of size (see size): every
// L1 store weighs its entry here.
func weight(key string, size int) uint32 {
	return uint32(min(len(key)+size+entryOverhead, 1<<31))
}

// live reports whether an entry that L1 returned is within its lifetime,
// and counts it as a miss if not (an entry kept past it for fail-safe).
func (c *Cache[V]) live(it item[V]) bool {
	if it.t == nil || c.local.Now() < it.t.expires {
		return true
	}
	c.n.pastLife.Add(1)
	return false
}

// Get returns the value for key from L1 or the shared tier, without
// loading. ok is false when neither holds it; shared-tier failures count as
// misses (see Stats) and are not returned.
func (c *Cache[V]) Get(ctx context.Context, key string) (v V, ok bool, err error) {
	if it, ok := c.local.Get(key); ok && !c.closed.Load() && c.live(it) {
		if c.copy != nil && !it.absent {
			v, err = c.copy(it.v)
			return v, err == nil, err
		}
		return it.v, !it.absent, nil
	}
	if err := c.check(ctx, key); err != nil {
		return v, false, err
	}
	it, st, _ := c.readRemote(ctx, key, c.fence.token(key), &c.def)
	ok = st == readHit && !it.absent
	if err := ctx.Err(); err != nil && !ok {
		return v, false, err
	}
	if !ok {
		return v, false, nil
	}
	v, err = c.out(it.v, nil)
	return v, err == nil, err
}

// Set stores v under key in both tiers and tells other instances. After
// Set returns nil, every Get on this instance sees v until it is changed
// again or expires. Errors from the shared tier or the bus are returned.
func (c *Cache[V]) Set(ctx context.Context, key string, v V, opts ...EntryOption) error {
	if err := c.check(ctx, key); err != nil {
		return err
	}
	e, err := c.o.entry(&c.def, opts)
	if err != nil {
		return err
	}
	if v, err = c.out(v, nil); err != nil {
		return err
	}
	return c.set(ctx, key, v, &e)
}

// set is Set after its checks.
func (c *Cache[V]) set(ctx context.Context, key string, v V, e *entry) error {
	ttl, localTTL := c.lifetimes(e)
	b, err := c.encode(key, v, ttl, e.tags)
	if err != nil {
		return err
	}
	tok := c.fence.bumpToken(key)
	if err := c.writeAndAnnounce(ctx, key, b, e.physical(ttl)); err != nil {
		c.fence.bump(key)
		c.local.Delete(key)
		return err
	}
	// Bump again: a fill that read the old value before our write must not
	// store it after us. Anyone else's bump since tok means a newer change
	// may exist, so we drop instead of store.
	tok, ok := c.fence.advance(tok)
	// A fill in progress read the old value: later callers must not join it.
	c.flights.Forget(key)
	if !ok {
		c.local.Delete(key)
		return nil
	}
	if !c.storeLocal(key, tagged(item[V]{v: v}, e.tags), c.size(b), localTTL, tok, e) {
		c.local.Delete(key)
	}
	return nil
}

// writeAndAnnounce writes b (nil: delete) to the shared tier for life and
// announces it.
func (c *Cache[V]) writeAndAnnounce(ctx context.Context, key string, b []byte, life time.Duration) error {
	op := "set"
	m := message.Message{Op: message.OpSet, Origin: c.origin, Namespace: c.o.Namespace, Keys: []string{key}}
	if b == nil {
		// A delete leaves a tombstone for TTL rather than nothing, so that a
		// fill that read the key before the delete cannot write its outdated
		// value back (its write-if-absent finds the tombstone).
		op, m.Op = "delete", message.OpDelete
		b, life = c.encodeTombstone(c.def.ttl), c.def.physical(c.def.ttl)
	} else if c.ann != nil && len(c.o.Secret) > 0 && len(b) <= c.o.InlineMaxBytes {
		m.Value = b
	}
	return c.writeAndPublish(ctx, op, key, c.prefix+key, b, life, m, true)
}

// writeAndPublish writes b under the shared-tier key rkey for life and
// publishes m: in one atomic step when the Remote is an Announcer, else
// write then publish. op names the call in spans, events and errors, name
// the key or tag it is about. With own, a write of key name is recorded in
// the fence as ours until its message comes back.
func (c *Cache[V]) writeAndPublish(ctx context.Context, op, name, rkey string, b []byte, life time.Duration, m message.Message, own bool) error {
	if c.remote != nil && !c.br.allow() {
		c.n.l2Skipped.Add(1)
		return fmt.Errorf("hybrid: %s %q: %w", op, name, ErrUnavailable)
	}
	switch {
	case c.remote != nil && c.ann != nil:
		msg := message.Encode(m, c.o.Secret)
		if own {
			c.fence.ownWrite(name)
		}
		sctx, end := c.span(ctx, op, name)
		err := c.ann.SetAndPublish(sctx, rkey, b, life, c.o.Channel, msg)
		end(err)
		c.br.record(ctx, err)
		if err != nil {
			c.l2Failed(op, err)
			return fmt.Errorf("hybrid: %s %q: %w", op, name, err)
		}
		c.n.published.Add(1)
		return nil
	case c.remote != nil:
		sctx, end := c.span(ctx, op, name)
		err := c.remote.Set(sctx, rkey, b, life)
		end(err)
		c.br.record(ctx, err)
		if err != nil {
			c.l2Failed(op, err)
			return fmt.Errorf("hybrid: %s %q: %w", op, name, err)
		}
	}
	if c.bus == nil {
		return nil
	}
	if err := c.publish(ctx, m); err != nil {
		return fmt.Errorf("hybrid: %s %q: announce: %w", op, name, err)
	}
	return nil
}

func (c *Cache[V]) publish(ctx context.Context, m message.Message) error {
	if err := c.bus.Publish(ctx, c.o.Channel, message.Encode(m, c.o.Secret)); err != nil {
		c.n.publishErrors.Add(1)
		if f := c.o.Events.L2Error; f != nil {
			f("publish", err)
		}
		return err
	}
	c.n.published.Add(1)
	return nil
}

// Delete removes key from both tiers and tells other instances to drop it.
// L1 drops it even when the shared tier fails, whose error is returned.
func (c *Cache[V]) Delete(ctx context.Context, key string) error {
	if err := c.check(ctx, key); err != nil {
		return err
	}
	err := c.writeAndAnnounce(ctx, key, nil, 0)
	// After the shared tier: a fill that read the old value meanwhile must
	// not store it, and later callers must not join it.
	c.fence.bump(key)
	c.flights.Forget(key)
	c.local.Delete(key)
	return err
}

// Clear drops every L1 entry of this namespace, on this instance and, via
// the bus, on every other. The shared tier is left as it is.
func (c *Cache[V]) Clear(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	c.fence.bumpAll()
	c.flights.ForgetAll()
	c.local.Clear()
	if c.bus == nil {
		return nil
	}
	if err := c.publish(ctx, message.Message{Op: message.OpClear, Origin: c.origin, Namespace: c.o.Namespace}); err != nil {
		return fmt.Errorf("hybrid: clear: announce: %w", err)
	}
	return nil
}

// onMessage applies another instance's invalidation to L1. It runs on the
// bus's goroutine.
func (c *Cache[V]) onMessage(b []byte) {
	m, err := message.Decode(b, c.o.Secret)
	if err != nil || m.Namespace != c.o.Namespace {
		c.n.invalid.Add(1)
		c.log.log(logBus, "hybrid: invalidation message ignored", "namespace", c.o.Namespace, "err", err)
		return
	}
	keysOnly := m.Op == message.OpSet || m.Op == message.OpDelete
	if len(c.o.Secret) > 0 && !m.Authentic {
		// Unsigned, a message may at most drop the keys it names: a clear or
		// a tag delete is ignored, and so is one that claims to be ours.
		c.n.unauthentic.Add(1)
		if !keysOnly || m.Origin == c.origin {
			return
		}
	}
	if m.Origin == c.origin {
		c.n.ownIgnored.Add(1)
		if keysOnly && c.ann != nil {
			c.fence.ownMessage(m.Keys[0]) // a tag's message names no key we wrote
		}
		return
	}
	// Counted once applied, so a count seen means L1 reflects the message.
	defer c.invalidated(m.Op.String(), m.Keys)
	switch m.Op {
	case message.OpTag:
		c.onTagMessage(m)
	case message.OpClear:
		c.fence.bumpAll()
		c.flights.ForgetAll()
		c.local.Clear()
	case message.OpSet, message.OpDelete:
		for i, key := range m.Keys {
			tok := c.fence.bumpToken(key)
			c.flights.Forget(key)
			if i == 0 && m.Value != nil && c.fence.mayReplace(key) && c.swap(key, m.Value, tok) {
				continue
			}
			c.local.Delete(key)
		}
	}
}

// swap replaces key's L1 entry, if there is one, with the value carried by
// a message. It reports false when the value does not decode or is already
// stale. If the key changed here while we swapped (our own Set, say), the
// entry is dropped: the swapped value may be the older one.
func (c *Cache[V]) swap(key string, b []byte, tok token) bool {
	it, ttl, err := c.decode(b, c.def.timed())
	if err != nil {
		c.n.decodeErrors.Add(1)
		return false
	}
	if ttl <= 0 || (it.t != nil && len(it.t.tags) > 0 && c.tagKnownDeleted(it.t.tags, it.t.written)) {
		return false
	}
	var life time.Duration
	size := c.size(b)
	it, life = c.stamp(it, size, min(ttl, c.def.localTTL), &c.def)
	if c.local.Replace(key, it, weight(key, size), life) {
		c.n.swapped.Add(1)
	}
	if !c.fence.valid(tok) {
		c.local.Delete(key)
	}
	return true
}

// onLoss runs when invalidations may have been lost: nothing in L1 can be
// trusted any more.
func (c *Cache[V]) onLoss() {
	c.tags.clear()
	c.fence.bumpAll()
	c.flights.ForgetAll()
	c.local.Clear()
	// Counted once applied, as messages are: a loss seen in Stats means L1
	// has been flushed for it.
	c.n.busLosses.Add(1)
}

// check returns the error for a call that cannot proceed.
func (c *Cache[V]) check(ctx context.Context, key string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := c.checkKey(key); err != nil {
		return err
	}
	return ctx.Err()
}

// checkKey returns the error for a key no call accepts: empty, reserved
// for the cache's own records, or longer than MaxKeyBytes. Every entry
// point checks its keys here, single and batch.
func (c *Cache[V]) checkKey(key string) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case key[0] == 0:
		return ErrReservedKey
	case len(key) > c.o.MaxKeyBytes:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLong, len(key), c.o.MaxKeyBytes)
	}
	return nil
}

// Stats returns a snapshot of the cache's counters.
func (c *Cache[V]) Stats() Stats {
	ls := c.local.Stats()
	past := min(c.n.pastLife.Load(), ls.Hits)
	return Stats{
		L1Hits:         ls.Hits - past,
		L1Misses:       ls.Misses + past,
		L2Hits:         c.n.l2Hits.Load(),
		L2Misses:       c.n.l2Misses.Load(),
		Loads:          c.n.loads.Load(),
		LoadErrors:     c.n.loadErrors.Load(),
		L2Errors:       c.n.l2Errors.Load(),
		DecodeErrors:   c.n.decodeErrors.Load(),
		Oversized:      c.n.oversized.Load(),
		EncodeErrors:   c.n.encodeErrors.Load(),
		L1Evictions:    c.n.evictions.Load(),
		L1Expirations:  c.n.expirations.Load(),
		L1Entries:      c.local.Len(),
		L1Bytes:        c.local.Weight(),
		Published:      c.n.published.Load(),
		PublishErrors:  c.n.publishErrors.Load(),
		Received:       c.n.received.Load(),
		OwnIgnored:     c.n.ownIgnored.Load(),
		Swapped:        c.n.swapped.Load(),
		Invalid:        c.n.invalid.Load(),
		Unauthentic:    c.n.unauthentic.Load(),
		BusLosses:      c.n.busLosses.Load(),
		FillsDiscarded: c.n.fillsDiscarded.Load(),
		L2Skipped:      c.n.l2Skipped.Load(),
		BreakerOpens:   c.br.opens.Load(),
		WriteRetries:   c.n.writeRetries.Load(),
		WritesDropped:  c.n.writesDropped.Load(),
		StaleServed:    c.n.staleServed.Load(),
		SoftTimeouts:   c.n.softTimeouts.Load(),
		Refreshes:      c.n.refreshes.Load(),
		Namespace:      c.o.Namespace,
	}
}

// Close unsubscribes from the bus, cancels fills in progress and waits for
// them, and stops L1's goroutines. It does not close the Remote or the Bus,
// which the caller owns and may share. Later calls return ErrClosed.
func (c *Cache[V]) Close() error {
	c.mu.Lock()
	if c.closed.Swap(true) {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	if c.unsub != nil {
		c.unsub()
	}
	c.cancel()
	c.wg.Wait()
	c.local.Close()
	return nil
}
