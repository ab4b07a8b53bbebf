package l2

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// bound turns an Options timeout into the Store's: 0 is def, a negative
// value is no bound (0).
func bound(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// ReadBound returns the longest a Get (or GetMany) may block:
// Options.ReadTimeout when the client applies ctx deadlines to its sockets,
// else 0, meaning that the Store does not bound it. New finds out once, from
// the options of a *redis.Client, *redis.ClusterClient or *redis.Ring (also
// one embedded in another type): the client must be built with
// ContextTimeoutEnabled: true and must not switch socket deadlines off
// (ReadTimeout or WriteTimeout -2). With any other client, or a negative
// Options.ReadTimeout, ReadBound is 0.
//
// Without ContextTimeoutEnabled, a ctx deadline still ends waits for a
// dial, a pooled connection or a retry, so a Get to a dead address still
// ends by ReadTimeout; but a Get on a connection to a stalled server lasts
// until the client's own ReadTimeout (5 seconds by default).
//
// NOTE: hooks added to the client run inside the call and are bounded only
// as far as they honour ctx.
func (s *Store) ReadBound() time.Duration { return s.readBound }

// deadlinesReachSocket reports whether rdb applies ctx deadlines to its
// socket reads and writes: built with ContextTimeoutEnabled, and without
// socket deadlines switched off.
func deadlinesReachSocket(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case interface{ Options() *redis.Options }:
		// NewClient has turned -2 (no socket deadlines) into -1, and -1
		// (no timeout) into 0.
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0
	case interface{ Options() *redis.ClusterOptions }:
		// NewClusterClient has turned -1 into 0; -2 is left as is.
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0
	case interface{ Options() *redis.RingOptions }:
		// A Ring keeps the options as given: -1 is no timeout, -2 none.
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= -1 && o.WriteTimeout >= -1
	}
	return false
}

// timeout is one of the Store's bounds on a call: d (0: none). Calls that
// start within one tick share one deadline (a batch: one channel and one
// timer), so that a call pays no timer and no context of its own; a call's
// deadline is at most d after it starts, and at least d minus a tick.
type timeout struct {
	d   time.Duration
	cur atomic.Pointer[batch]
	mu  sync.Mutex // serialises making the next batch
}

// batch is the deadline shared by the calls that start in one tick.
type batch struct {
	deadline time.Time
	joinBy   int64         // UnixNano: later calls start the next batch
	done     chan struct{} // closed at deadline
}

// tick is how long calls may join one batch.
const tick = 5 * time.Millisecond

func newTimeout(d time.Duration) *timeout { return &timeout{d: d} }

// batch returns the batch a call starting at now joins.
func (t *timeout) batch(now time.Time) *batch {
	if b := t.cur.Load(); b != nil && now.UnixNano() < b.joinBy {
		return b
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.cur.Load(); b != nil && now.UnixNano() < b.joinBy {
		return b
	}
	b := &batch{deadline: now.Add(t.d), joinBy: now.Add(tick).UnixNano(), done: make(chan struct{})}
	time.AfterFunc(t.d, func() { close(b.done) })
	t.cur.Store(b)
	return b
}

// bounded is a caller's ctx with a batch's deadline, sooner than its own.
//
// NOTE: its Done channel closes at that deadline only: go-redis, which
// waits on Done for a pooled connection, a dial or a retry, sees the
// caller's ctx cancelled at the call's start (see withTimeout) and
// otherwise by the deadline at the latest.
type bounded struct {
	context.Context
	b *batch
}

func (c bounded) Deadline() (time.Time, bool) { return c.b.deadline, true }
func (c bounded) Done() <-chan struct{}       { return c.b.done }

func (c bounded) Err() error {
	select {
	case <-c.b.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// withTimeout bounds ctx by t unless ctx ends sooner (a ctx already done
// is returned as it is). The caller defers cancel, which is a no-op: the
// deadline's timer is shared.
func withTimeout(ctx context.Context, t *timeout) (context.Context, context.CancelFunc) {
	if t.d == 0 || ctx.Err() != nil {
		return ctx, noCancel
	}
	now := time.Now()
	if dl, ok := ctx.Deadline(); ok && dl.Sub(now) <= t.d {
		return ctx, noCancel
	}
	return bounded{ctx, t.batch(now)}, noCancel
}

func noCancel() {}

// withCause adds the reason ctx ended to err. go-redis reports a deadline
// that cut a read short as a network timeout; with the cause added,
// errors.Is(err, context.DeadlineExceeded) holds as well. The deadline is
// checked by the clock too, since the socket may time out a moment before
// ctx's own timer marks it done.
func withCause(ctx context.Context, err error) error {
	cause := ctx.Err()
	if cause == nil {
		if d, ok := ctx.Deadline(); !ok || time.Now().Before(d) {
			return err
		}
		cause = context.DeadlineExceeded
	}
	if errors.Is(err, cause) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, cause)
}
