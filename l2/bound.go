package l2

import (
	"context"
	"errors"
	"fmt"
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

// withTimeout bounds ctx by d (0: no bound) unless ctx ends sooner. The
// caller always defers cancel.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		return ctx, func() {}
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
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
