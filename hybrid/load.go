package hybrid

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"
)

// This file holds the calls of the load functions, as every fill makes
// them, and the context a fill runs in.

// loader is the load function of a fill: a GetOrCreate's (one) or a
// GetOrCreateMany's (many).
type loader[V any] struct {
	one  func(context.Context, string) (V, error)
	many func(context.Context, []string) (map[string]V, error)
}

// run calls the load for keys (see guard), with note, which the load's ctx
// carries (see StaleFrom and SetVersion). A batch loader gets its own copy
// of keys: it may keep or change the slice.
func (l loader[V]) run(c *Cache[V], ctx context.Context, keys []string, queued func(), note *loadNote[V]) (m map[string]V, err error) {
	if l.one == nil {
		err = c.guard(ctx, "", len(keys), queued, func(ctx context.Context) (err error) {
			m, err = l.many(note.in(ctx), append([]string(nil), keys...))
			return err
		})
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	var v V
	err = c.guard(ctx, keys[0], 0, queued, func(ctx context.Context) (err error) {
		v, err = l.one(note.in(ctx), keys[0])
		return err
	})
	if err != nil {
		return nil, err
	}
	return map[string]V{keys[0]: v}, nil
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
// none). slot is where the fill's loads find their LoadSettings (nil: the fill
// loads nothing).
func (c *Cache[V]) fillContext(caller context.Context, timeout time.Duration, slot *entrySlot) (context.Context, context.CancelFunc) {
	ctx := context.Context(fillCtx{Context: c.stop, values: caller, slot: slot})
	if timeout > 0 {
		return context.WithTimeout(ctx, timeout)
	}
	return ctx, func() {}
}

// fillCtx is done when the cache closes (its embedded Context is the
// cache's stop) and has the values of the caller that started the fill,
// and the fill's entrySlot (see SettingsFrom): its own, never a caller's, so
// that a load that starts a fill of another cache or key does not share
// its LoadSettings. It costs one allocation where WithoutCancel,
// WithCancel and AfterFunc together cost six.
type fillCtx struct {
	context.Context
	values context.Context
	slot   *entrySlot
}

func (f fillCtx) Value(key any) any {
	if _, ok := key.(entryKey); ok {
		return f.slot
	}
	return f.values.Value(key)
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
	op := OpLoad
	if n > 0 {
		op = OpLoadMany
	}
	ctx, end := c.span(ctx, op, key)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v\n%s", ErrPanic, loaded(key, n), r, debug.Stack())
		}
		switch {
		case errors.Is(err, ErrNotModified):
			end(nil) // an answer, not a failure
			return
		case err != nil && !errors.Is(err, ErrNotFound):
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
