package l2

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file holds what every call shares: its time bound, the wrapping of
// its error, and the sending of its commands and scripts.

// subject names a call in its errors: its operation and its key, or how
// many keys (or leases) it had.
type subject struct {
	op   string // "get", "write", "take", ...
	noun string // what it counts, plural: "keys", "leases"
	key  string // the key, when n is 1
	n    int
}

// about returns the subject of op on keys.
func about(op, noun string, keys []string) subject {
	sub := subject{op: op, noun: noun, n: len(keys)}
	if len(keys) == 1 {
		sub.key = keys[0]
	}
	return sub
}

func (sub subject) String() string {
	if sub.n == 1 {
		return sub.op + " " + strconv.Quote(sub.key)
	}
	return sub.op + " " + strconv.Itoa(sub.n) + " " + sub.noun
}

// fail returns err as an error of sub: "l2: <sub>: <err>".
func (sub subject) fail(err error) error {
	return fmt.Errorf("l2: %s: %w", sub, err)
}

// call runs fn with ctx bounded by t, and returns its error, with the
// reason ctx ended added (see withCause), as an error of sub.
func call(ctx context.Context, t *timeout, sub subject, fn func(ctx context.Context) error) error {
	ctx = withTimeout(ctx, t)
	if err := fn(ctx); err != nil {
		return sub.fail(withCause(ctx, err))
	}
	return nil
}

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

// socketDeadlines says how rdb bounds its socket reads: ctx is true if it
// applies ctx deadlines to them (built with ContextTimeoutEnabled, and
// without socket deadlines switched off); own is its own read timeout
// (its ReadTimeout, 5 seconds by default; 0: none). It reads the options
// of a *redis.Client, *redis.ClusterClient or *redis.Ring, also one
// embedded in another type; known is false for any other client.
func socketDeadlines(rdb redis.UniversalClient) (ctx bool, own time.Duration, known bool) {
	const def = 5 * time.Second // go-redis's default ReadTimeout
	switch c := rdb.(type) {
	case interface{ Options() *redis.Options }:
		// NewClient has turned 0 into the default, -1 (no timeout) into 0
		// and -2 (no socket deadlines) into -1.
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0, max(o.ReadTimeout, 0), true
	case interface{ Options() *redis.ClusterOptions }:
		// NewClusterClient has turned 0 into the default and -1 into 0; -2
		// is left as is.
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0, max(o.ReadTimeout, 0), true
	case interface{ Options() *redis.RingOptions }:
		// A Ring keeps the options as given: 0 is the default, -1 no
		// timeout, -2 no socket deadlines.
		o := c.Options()
		own := o.ReadTimeout
		switch {
		case own == 0:
			own = def
		case own < 0:
			own = 0
		}
		return o.ContextTimeoutEnabled && o.ReadTimeout >= -1 && o.WriteTimeout >= -1, own, true
	}
	return false, 0, false
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
// is returned as it is). It needs no cancel: the deadline's timer is
// shared.
func withTimeout(ctx context.Context, t *timeout) context.Context {
	if t.d == 0 || ctx.Err() != nil {
		return ctx
	}
	now := time.Now()
	if dl, ok := ctx.Deadline(); ok && dl.Sub(now) <= t.d {
		return ctx
	}
	return bounded{ctx, t.batch(now)}
}

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

// script is a Lua script the Store runs by EVALSHA, and by EVAL where a
// server does not know it.
type script = redis.Script

// run sends cmds, which queue makes on c (one command: the client itself,
// which sends it at once; more: a pipeline, one round trip per node), and
// sends again by EVAL, in order, the scripts that failed with NOSCRIPT (a
// server restarted, or its script cache flushed). queue returns the
// commands in order, and for each script command, at the same index of
// scripts, how to send it again by EVAL (nil for other commands).
//
// It returns the first error no command holds (the network, ctx); then
// no command is to be trusted. Each command's own error stays in it.
func (s *Store) run(ctx context.Context, n int, queue func(c redis.Cmdable) (cmds []redis.Cmder, again []func(redis.Cmdable) *redis.Cmd)) ([]redis.Cmder, error) {
	var c redis.Cmdable = s.rdb
	var pipe redis.Pipeliner
	if n > 1 {
		pipe = s.rdb.Pipeline()
		c = pipe
	}
	cmds, again := queue(c)
	if err := exec(ctx, pipe, cmds); err != nil {
		return nil, err
	}
	var retry []int
	for i, cmd := range cmds {
		if again[i] != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) == 0 {
		return cmds, nil
	}
	c, pipe = s.rdb, nil
	if len(retry) > 1 {
		pipe = s.rdb.Pipeline()
		c = pipe
	}
	redo := make([]redis.Cmder, len(retry))
	for j, i := range retry {
		redo[j] = again[i](c)
	}
	if err := exec(ctx, pipe, redo); err != nil {
		return nil, err
	}
	for j, i := range retry {
		cmds[i] = redo[j]
	}
	return cmds, nil
}

// exec sends the commands of pipe, if not nil (else the one command was
// sent when it was made), and returns a failure that left the commands
// without an error of their own: the network, ctx, or a server's refusal
// of the connection itself (a wrong password, with no command answered).
// A server's reply to a command is that command's error.
func exec(ctx context.Context, pipe redis.Pipeliner, cmds []redis.Cmder) error {
	var err error
	if pipe != nil {
		_, err = pipe.Exec(ctx)
	} else if len(cmds) == 1 {
		err = cmds[0].Err()
	}
	var re redis.Error
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		return nil
	case !errors.As(err, &re):
		return err
	}
	for _, c := range cmds {
		if c.Err() != nil && !errors.Is(c.Err(), redis.Nil) {
			return nil // answered command by command
		}
	}
	return err
}

// evalEach runs sc once per element (n in all), the i-th with keys(i) (full
// keys) as KEYS and args(i) as ARGV, by run, and returns each reply in
// order. Any failure is returned.
func (s *Store) evalEach(ctx context.Context, sc *script, n int, keys func(i int) []string, args func(i int) []any) ([]*redis.Cmd, error) {
	cmds, err := s.run(ctx, n, func(c redis.Cmdable) ([]redis.Cmder, []func(redis.Cmdable) *redis.Cmd) {
		cmds := make([]redis.Cmder, n)
		again := make([]func(redis.Cmdable) *redis.Cmd, n)
		for i := range n {
			cmds[i] = sc.EvalSha(ctx, c, keys(i), args(i)...)
			again[i] = func(c redis.Cmdable) *redis.Cmd { return sc.Eval(ctx, c, keys(i), args(i)...) }
		}
		return cmds, again
	})
	if err != nil {
		return nil, err
	}
	out := make([]*redis.Cmd, n)
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return nil, err
		}
		out[i] = cmd.(*redis.Cmd)
	}
	return out, nil
}
