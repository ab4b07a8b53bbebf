// Package flight runs one fill per key however many callers want it: the
// first caller of a key becomes its leader and starts the work, later
// callers join and wait for the same result.
//
// Unlike golang.org/x/sync/singleflight it separates joining from running,
// so a batch can lead some keys and join others, and each waiter waits with
// its own context.
package flight

import (
	"context"
	"sync"
)

// Group holds the fills in progress, by key. The zero value is ready.
type Group[T any] struct {
	mu    sync.Mutex
	calls map[string]*Call[T]
}

// Call is one fill in progress.
type Call[T any] struct {
	done chan struct{}
	val  T
	err  error
}

// Join returns the call in progress for key, or starts one and reports
// leader == true. A leader must call Finish exactly once.
func (g *Group[T]) Join(key string) (c *Call[T], leader bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok {
		return c, false
	}
	if g.calls == nil {
		g.calls = make(map[string]*Call[T])
	}
	c = &Call[T]{done: make(chan struct{})}
	g.calls[key] = c
	return c, true
}

// Finish ends c, the call for key, with its result and wakes its waiters.
// Later Joins of key start a new call.
func (g *Group[T]) Finish(key string, c *Call[T], v T, err error) {
	g.mu.Lock()
	if g.calls[key] == c {
		delete(g.calls, key)
	}
	g.mu.Unlock()
	c.val, c.err = v, err
	close(c.done)
}

// Forget makes later Joins of key start a new call instead of joining the
// one in progress, whose waiters still get its result. Use it when the
// call's result is known to be out of date.
func (g *Group[T]) Forget(key string) {
	g.mu.Lock()
	delete(g.calls, key)
	g.mu.Unlock()
}

// ForgetAll is Forget for every key.
func (g *Group[T]) ForgetAll() {
	g.mu.Lock()
	clear(g.calls)
	g.mu.Unlock()
}

// Wait returns the call's result, or ctx's error if ctx ends first. A
// waiter that leaves does not affect the call or the other waiters.
func (c *Call[T]) Wait(ctx context.Context) (T, error) {
	select {
	case <-c.done:
		return c.val, c.err
	default:
	}
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
