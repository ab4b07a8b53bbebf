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
	"sync/atomic"
)

// Group holds the fills in progress, by key. The zero value is ready.
type Group[T any] struct {
	mu    sync.Mutex
	calls map[string]*Call[T]
}

// Call is one fill in progress.
//
// Its channel is made only when a waiter has to block: a call that ends
// before anyone waits on it, as most calls of a batch do for the batch's
// own caller, costs no channel.
type Call[T any] struct {
	done     atomic.Bool // set, under mu, once val and err hold the result
	answered atomic.Bool // ended by Answer: still key's call until Finish
	mu       sync.Mutex
	wake     chan struct{} // made by the first waiter that blocks; closed by Finish
	val      T
	err      error
}

// Join returns the call in progress for key, or starts one and reports
// leader == true. A leader must call Finish; only the first Finish of a
// call counts, so a leader may defer a fallback Finish.
func (g *Group[T]) Join(key string) (c *Call[T], leader bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok {
		return c, false
	}
	if g.calls == nil {
		g.calls = make(map[string]*Call[T])
	}
	c = new(Call[T])
	g.calls[key] = c
	return c, true
}

// JoinMany is Join for each of keys, under one lock. It sets calls[i] to
// the call of keys[i] and appends to lead the index of each key it started
// a call for, which the caller leads and must end with Finish or
// FinishMany (the first result counts). A key that appears twice joins the call of its
// first appearance. calls must be as long as keys.
func (g *Group[T]) JoinMany(keys []string, calls []*Call[T], lead []int) []int {
	// One allocation for the batch's calls: they are freed together, when
	// nobody holds any of them.
	slab := make([]Call[T], len(keys))
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.calls == nil {
		g.calls = make(map[string]*Call[T], len(keys))
	}
	for i, key := range keys {
		c, ok := g.calls[key]
		if !ok {
			c = &slab[0]
			slab = slab[1:]
			g.calls[key] = c
			lead = append(lead, i)
		}
		calls[i] = c
	}
	return lead
}

// Finish ends c, the call for key, with its result and wakes its waiters,
// and reports true; if c has already ended, it keeps the result c has and
// reports false (removing c if Answer ended it). Later Joins of key start a
// new call.
func (g *Group[T]) Finish(key string, c *Call[T], v T, err error) bool {
	if c.done.Load() && !c.answered.Load() {
		return false
	}
	g.mu.Lock()
	if g.calls[key] == c {
		delete(g.calls, key)
	}
	g.mu.Unlock()
	wake, first := c.settle(v, err, false)
	if wake != nil {
		close(wake)
	}
	return first
}

// FinishMany is Finish for each i in idx: it ends calls[i], the call for
// keys[i], with result(i), unless it has ended already. It takes g's lock once, and wakes the waiters
// only once all these calls have their result, so that a caller waiting
// on several of them is woken once rather than once for each.
func (g *Group[T]) FinishMany(keys []string, calls []*Call[T], idx []int, result func(i int) (T, error)) {
	if len(idx) == 0 {
		return
	}
	g.mu.Lock()
	for _, i := range idx {
		if g.calls[keys[i]] == calls[i] {
			delete(g.calls, keys[i])
		}
	}
	g.mu.Unlock()
	var buf [4]chan struct{}
	wakes := buf[:0]
	for _, i := range idx {
		if calls[i].done.Load() {
			continue
		}
		v, err := result(i)
		if wake, _ := calls[i].settle(v, err, false); wake != nil {
			wakes = append(wakes, wake)
		}
	}
	for _, wake := range wakes {
		close(wake)
	}
}

// Answer gives c's result, v and err, to its waiters now, while c stays
// the call in progress for its key: a caller that joins it later gets that
// result at once instead of starting a new call, until Finish or Forget.
// It reports false, and changes nothing, if c has ended already. Use it to
// answer with a fallback while the work goes on; Finish then only removes
// c (its result stays the one answered).
func (g *Group[T]) Answer(c *Call[T], v T, err error) bool {
	if c.done.Load() {
		return false
	}
	wake, first := c.settle(v, err, true)
	if wake != nil {
		close(wake)
	}
	return first
}

// settle stores c's result, unless it has one (first is false), and
// returns the channel to close to wake its waiters, if any is blocked.
// answered marks a result given by Answer, before done is set, so that
// whoever sees done also sees it.
func (c *Call[T]) settle(v T, err error, answered bool) (wake chan struct{}, first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done.Load() {
		return nil, false
	}
	c.val, c.err = v, err
	c.answered.Store(answered)
	c.done.Store(true)
	return c.wake, true
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

// Done reports whether the call has a result (from Finish or Answer).
func (c *Call[T]) Done() bool { return c.done.Load() }

// Wait returns the call's result, or ctx's error if ctx ends first. A
// waiter that leaves does not affect the call or the other waiters.
func (c *Call[T]) Wait(ctx context.Context) (T, error) {
	if c.done.Load() {
		return c.val, c.err
	}
	c.mu.Lock()
	if c.done.Load() {
		c.mu.Unlock()
		return c.val, c.err
	}
	if c.wake == nil {
		c.wake = make(chan struct{})
	}
	wake := c.wake
	c.mu.Unlock()
	select {
	case <-wake:
		return c.val, c.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
