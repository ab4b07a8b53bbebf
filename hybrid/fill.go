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

	v, err := c.loadSoftly(ctx, key, load, stale, call, &e)
	if err != nil {
		if errors.Is(err, ErrNotFound) && e.negativeTTL > 0 {
			ttl, localTTL := e.negativeTTL, min(e.negativeTTL, e.localTTL)
			b := c.encodeAbsent(ttl, e.tags)
			c.storeLocal(nil, key, tagged(item[V]{absent: true}, e.tags), c.size(b), localTTL, tok, &e)
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
	c.storeLocal(nil, key, tagged(item[V]{v: v}, e.tags), c.size(b), localTTL, tok, &e)
	finish(v, nil)
	c.storeRemote(ctx, key, b, e.physical(ttl), old, tok)
}

// abandoned ends call with an error wrapping ErrPanic if its fill returns
// without having ended it: a load that calls runtime.Goexit skips all but
// deferred calls, and its waiters must still get an answer.
func (c *Cache[V]) abandoned(key string, call *flight.Call[V]) {
	if !call.Done() {
		var zero V
		c.flights.Finish(key, call, zero, fmt.Errorf("%w: %q: load called runtime.Goexit", ErrPanic, key))
	}
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

// runLoad calls load for key (see guard).
func (c *Cache[V]) runLoad(ctx context.Context, key string, load func(context.Context, string) (V, error)) (v V, err error) {
	err = c.guard(ctx, key, 0, func(ctx context.Context) (err error) {
		v, err = load(ctx, key)
		return err
	})
	return v, err
}

// runLoadMany calls a batch load for keys (see guard). The loader gets its
// own copy of keys: it may keep or change the slice.
func (c *Cache[V]) runLoadMany(ctx context.Context, keys []string, load func(context.Context, []string) (map[string]V, error)) (m map[string]V, err error) {
	err = c.guard(ctx, "", len(keys), func(ctx context.Context) (err error) {
		m, err = load(ctx, append([]string(nil), keys...))
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// guard runs one call of a load function, f, for key or for a batch of n
// keys, as every such call runs: counted, inside a span, a panic turned
// into an error wrapping ErrPanic, an error wrapped with what it loaded
// (errors.Is still sees the load's own).
func (c *Cache[V]) guard(ctx context.Context, key string, n int, f func(ctx context.Context) error) (err error) {
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

// loaded names what a load was for, in errors.
func loaded(key string, n int) string {
	if n > 0 {
		return fmt.Sprintf("batch of %d keys", n)
	}
	return strconv.Quote(key)
}
