package hybrid

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/hybridcache/hybridcache/internal/flight"
)

// This file holds fills: what runs, detached from its callers, when a key
// misses L1, and the calls of the load functions.

// runFill runs fill on a worker (see run). Its closure is made here, so
// that only a call that needs one moves its arguments to the heap.
func (c *Cache[V]) runFill(ctx context.Context, key string, load func(context.Context, string) (V, error), e policy, call *flight.Call[V], stale *item[V], pre *remoteRead[V]) bool {
	return c.run(func() { c.fill(ctx, key, load, e, call, stale, pre) })
}

// fill runs one shared miss: the shared tier (unless pre holds what the
// leader read there itself), then load. It runs detached from the caller
// that started it (that caller may leave) and ends with Close or
// LoadTimeout. stale, if not nil, is an expired L1 value that fail-safe may
// serve if load fails.
func (c *Cache[V]) fill(caller context.Context, key string, load func(context.Context, string) (V, error), e policy, call *flight.Call[V], stale *item[V], pre *remoteRead[V]) {
	defer c.abandoned(key, call)
	finish := func(v V, err error) { c.flights.Finish(key, call, v, err) }
	ctx, cancel := c.fillContext(caller, e.loadTimeout)
	defer cancel()

	if pre == nil {
		if pre = c.readShared(ctx, key, call, &e); pre == nil {
			return // finished by readShared, with what it found
		}
	}
	tok, it, st, raw := pre.tok, pre.it, pre.st, pre.raw
	var read *item[V]
	if st == readStale {
		read = &it
	}
	var fbs []fallback[V]
	if s := c.staleFor(stale, read, &e); s != nil {
		fbs = []fallback[V]{{key: key, call: call, tok: tok, it: *s}}
	}
	// Replace what the shared tier holds when it is stale, corrupt or a
	// tombstone, if it still holds that; otherwise write only if absent.
	var old []byte
	if st == readStale || st == readCorrupt || st == readDeleted {
		old = raw
	}

	var v V
	var h *heldLease // our lease on key, if we took one
	// Released here if the load ends the goroutine (runtime.Goexit).
	defer func() { c.abandon(ctx, h, key, 0) }()
	var peer *found[V]
	err := c.loadSoftly(fbs, &e, func(queued func()) (err error) {
		if c.leasing(&e) && st != readDown {
			if h, peer = c.leaseOne(ctx, key, tok, &e); peer != nil {
				return peer.err
			}
		}
		v, err = c.runLoad(ctx, key, load, queued)
		return err
	})
	if peer != nil {
		// Another instance loaded it (or failed to): its result is ours.
		switch {
		case err != nil:
			if failSafe(err) {
				c.serveStale(fbs, err, &e)
			}
			finish(v, err)
		case peer.it.absent:
			finish(v, fmt.Errorf("hybrid: %q: %w", key, ErrNotFound))
		default:
			finish(peer.it.v, nil)
		}
		return
	}
	if err != nil {
		if errors.Is(err, ErrNotFound) && e.negativeTTL > 0 {
			ttl, localTTL := e.negativeTTL, min(e.negativeTTL, e.localTTL)
			b := c.encodeAbsent(ttl, e.tags)
			c.storeLocal(nil, key, tagged(item[V]{absent: true}, e.tags), c.size(b), localTTL, tok, &e)
			finish(v, err)
			c.storeFilled(ctx, key, b, e.physical(ttl), old, tok, h)
			return
		}
		if failSafe(err) {
			c.serveStale(fbs, err, &e)
		}
		finish(v, err)
		c.releaseLeases(ctx, h, nil, err)
		return
	}
	ttl, localTTL := c.lifetimes(&e)
	b, err := c.encode(key, v, ttl, e.tags)
	if err != nil {
		c.notStored(key, err)
		finish(v, nil)
		c.releaseLeases(ctx, h, nil, errNotStored)
		return
	}
	// L1 first, so that no caller arriving after finish loads again; then
	// the waiters; then the shared tier; then the instances waiting for
	// our lease.
	c.storeLocal(nil, key, tagged(item[V]{v: v}, e.tags), c.size(b), localTTL, tok, &e)
	finish(v, nil)
	c.storeFilled(ctx, key, b, e.physical(ttl), old, tok, h)
}

// leaseOne is the lease step of a single-key fill (see leased): it returns
// the lease this fill took on key (nil: load without one), or the result
// another instance's load gave, with err set to ctx's error if ctx ended
// while it waited.
func (c *Cache[V]) leaseOne(ctx context.Context, key string, tok token, e *policy) (h *heldLease, peer *found[V]) {
	left := c.leased(ctx, []string{key}, []token{tok}, nil, e,
		func(_ int, it item[V], err error) { peer = &found[V]{it: it, err: err} },
		func(_ []int, held *heldLease) { h = held })
	if left != nil {
		return nil, &found[V]{err: callerErr(ctx)}
	}
	return h, peer
}

// abandoned ends call with an error wrapping ErrPanic if its fill returns
// without having ended it: a load that calls runtime.Goexit skips all but
// deferred calls, and its waiters must still get an answer. A call that
// only answered with a stale value (see serveStale) ends here too.
func (c *Cache[V]) abandoned(key string, call *flight.Call[V]) {
	var zero V
	if call.Done() {
		c.flights.Finish(key, call, zero, nil) // keeps its result
		return
	}
	c.flights.Finish(key, call, zero, fmt.Errorf("%w: %q: %w", ErrPanic, key, errGoexit))
}

// errGoexit is the cause of the error a load that calls runtime.Goexit
// leaves its waiters.
var errGoexit = errors.New("load called runtime.Goexit")

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

// runLoad calls load for key (see guard).
func (c *Cache[V]) runLoad(ctx context.Context, key string, load func(context.Context, string) (V, error), queued func()) (v V, err error) {
	err = c.guard(ctx, key, 0, queued, func(ctx context.Context) (err error) {
		v, err = load(ctx, key)
		return err
	})
	return v, err
}

// runLoadMany calls a batch load for keys (see guard). The loader gets its
// own copy of keys: it may keep or change the slice.
func (c *Cache[V]) runLoadMany(ctx context.Context, keys []string, load func(context.Context, []string) (map[string]V, error), queued func()) (m map[string]V, err error) {
	err = c.guard(ctx, "", len(keys), queued, func(ctx context.Context) (err error) {
		m, err = load(ctx, append([]string(nil), keys...))
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// guard runs one call of a load function, f, for key or for a batch of n
// keys, as every such call runs: within MaxConcurrentLoads (see slot, which
// calls queued if it has to wait), counted, inside a span, a panic turned
// into an error wrapping ErrPanic, an error wrapped with what it loaded
// (errors.Is still sees the load's own).
func (c *Cache[V]) guard(ctx context.Context, key string, n int, queued func(), f func(ctx context.Context) error) (err error) {
	if c.slots != nil {
		if err := c.slot(ctx, queued); err != nil {
			return fmt.Errorf("hybrid: load %s: waiting for a load slot: %w", loaded(key, n), err)
		}
		defer c.slots.Release(1)
	}
	c.n.loads.Add(1)
	op := "load"
	if n > 0 {
		op = "load_many"
	}
	ctx, end := c.span(ctx, op, key)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v\n%s", ErrPanic, loaded(key, n), r, debug.Stack())
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			c.n.loadErrors.Add(1)
		}
		end(err)
	}()
	if err = f(ctx); err != nil {
		return fmt.Errorf("hybrid: load %s: %w", loaded(key, n), err)
	}
	return nil
}

// slot takes one of the MaxConcurrentLoads slots, waiting for one with
// ctx (the fill's: LoadTimeout and Close end it) if none is free. A wait is
// counted, and queued, if not nil, is called first: a fill with stale
// values at hand lets its callers have them instead of waiting too.
func (c *Cache[V]) slot(ctx context.Context, queued func()) error {
	if c.slots.TryAcquire(1) {
		return nil
	}
	c.n.loadsQueued.Add(1)
	if queued != nil {
		queued()
	}
	err := c.slots.Acquire(ctx, 1)
	if err != nil && c.closed.Load() {
		return ErrClosed
	}
	return err
}

// loaded names what a load was for, in errors.
func loaded(key string, n int) string {
	if n > 0 {
		return fmt.Sprintf("batch of %d keys", n)
	}
	return strconv.Quote(key)
}
