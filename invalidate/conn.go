package invalidate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// kill closes ps, the connection in use, for reason: the receive loop then
// sees an error and reconnects.
func (b *Bus) kill(ps *redis.PubSub, reason error) {
	b.mu.Lock()
	var cancel context.CancelFunc
	if b.ps == ps {
		if b.psErr == nil {
			b.psErr = reason
		}
		cancel = b.psCancel
	}
	b.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	_ = ps.Close()
}

// stableFactor: a connection lost after it stayed up stableFactor times
// the wait before it resets the backoff to ReconnectMin; one lost sooner
// doubles it, like a failed attempt. Waiting then takes at most about a
// third of the time while connections outlive their waits, and a server
// that drops connections as soon as they answer (flapping) still gets
// waits growing to ReconnectMax. A reset only after ReconnectMax (2 s) of
// life, as before, kept a bus whose connection was cut every 300 ms down
// about 65% of the time (TestBackoffUnderRepeatedKills; now about 15%).
const stableFactor = 2

// run is the receive goroutine: it connects, reads until the connection
// fails, reports the loss, backs off and starts again, until Close.
func (b *Bus) run() {
	defer b.wg.Done()
	var (
		attempt   int           // failed attempts since the connection last worked for a while
		waited    time.Duration // the last wait before reconnecting
		failures  int           // failed attempts in this outage
		everUp    bool          // a connection has worked
		downSince time.Time     // start of the outage; zero while up
		lost      = limiter{every: logEvery}
		retry     = limiter{every: logEvery}
		back      = limiter{every: logEvery}
	)
	for {
		ps, ctx, cancel, err := b.connect()
		if ps == nil {
			return // closed
		}
		var upAt time.Time
		if err == nil {
			err = b.receive(ctx, ps, func() {
				// The new connection answered.
				upAt = time.Now()
				if !everUp {
					everUp = true
				} else {
					b.reconnects.Add(1)
					if n, ok := back.allow(); ok {
						b.log.Info("invalidate: pub/sub connection restored",
							"down", time.Since(downSince).Round(time.Millisecond),
							"attempts", failures+1, "suppressed", n)
					}
				}
				downSince, failures = time.Time{}, 0
			})
		}
		err = b.drop(ps, cancel, err, !upAt.IsZero())
		if err == nil {
			return // closed
		}

		switch {
		case !upAt.IsZero():
			// A working connection was lost.
			downSince = time.Now()
			if time.Since(upAt) >= stableFactor*waited {
				attempt = 0
			}
			if n, ok := lost.allow(); ok {
				b.log.Warn("invalidate: pub/sub connection lost, reconnecting", "err", err, "suppressed", n)
			}
		default:
			failures++
			if downSince.IsZero() {
				downSince = time.Now()
			}
			if n, ok := retry.allow(); ok {
				msg := "invalidate: pub/sub reconnect failed, retrying"
				if !everUp {
					msg = "invalidate: pub/sub connect failed, retrying"
				}
				b.log.Warn(msg, "err", err, "attempts", failures,
					"down", time.Since(downSince).Round(time.Millisecond), "suppressed", n)
			}
		}

		waited = b.backoff(attempt)
		if !b.wait(waited) {
			return
		}
		attempt++
	}
}

// backoff returns the wait before reconnect attempt n (0-based): ReconnectMin
// doubled n times, capped at ReconnectMax, less a random part of up to half.
func (b *Bus) backoff(n int) time.Duration {
	d := b.max
	if n < 32 && b.min<<n < b.max && b.min<<n > 0 {
		d = b.min << n
	}
	half := d / 2
	return d - half + rand.N(half+1)
}

// wait waits for d or Close, reporting false on Close.
func (b *Bus) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-b.done:
		return false
	}
}

// connect opens a pub/sub connection and subscribes every current channel.
// ctx ends when the connection is killed or the Bus closed. connect returns
// a nil PubSub when the Bus is closed; on error the PubSub is returned too,
// for drop to close.
func (b *Bus) connect() (*redis.PubSub, context.Context, context.CancelFunc, error) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, nil, nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(b.ctx)
	ps := b.rdb.Subscribe(ctx) // no channels: no I/O yet
	names := make([]string, 0, len(b.chans))
	for name, cs := range b.chans {
		names = append(names, name)
		b.expect[name] = append(b.expect[name], cs)
	}
	b.ps, b.psCancel = ps, cancel
	b.touch()
	b.mu.Unlock()

	// Bound the dial and handshake, which ignore cancellation once the
	// socket is open, so that a server that accepts but never answers is
	// left in time.
	wctx := ctx
	if b.health > 0 {
		var stop context.CancelFunc
		wctx, stop = context.WithTimeout(ctx, max(2*b.health, time.Second))
		defer stop()
	}
	var err error
	if len(names) > 0 {
		err = ps.Subscribe(wctx, names...)
	} else {
		err = ps.Ping(wctx) // nothing to subscribe: check the connection
	}
	return ps, ctx, cancel, err
}

// receive reads from ps and dispatches until an error. up is called when
// the first reply arrives. ctx is the connection's: when kill cancels it,
// go-redis's own attempt to reconnect inside Receive gives up at once.
func (b *Bus) receive(ctx context.Context, ps *redis.PubSub, up func()) error {
	first := true
	for {
		v, err := ps.Receive(ctx)
		if err != nil {
			return err
		}
		b.touch()
		if first {
			first = false
			b.mu.Lock()
			b.lastErr = nil
			b.mu.Unlock()
			up()
		}
		switch m := v.(type) {
		case *redis.Message:
			b.dispatch(m)
		case *redis.Subscription:
			if err := b.confirm(m); err != nil {
				return err
			}
		case *redis.Pong:
		default:
			return fmt.Errorf("unexpected pub/sub reply %T", v)
		}
	}
}

// confirm matches a (un)subscribe confirmation with the command that asked
// for it. One that nobody asked for means go-redis reconnected and
// re-subscribed on its own, so messages may have been lost: it is an error.
func (b *Bus) confirm(m *redis.Subscription) error {
	b.mu.Lock()
	q := b.expect[m.Channel]
	want := m.Kind == "subscribe"
	if len(q) == 0 || (q[0] != nil) != want || (m.Kind != "subscribe" && m.Kind != "unsubscribe") {
		b.mu.Unlock()
		return fmt.Errorf("unexpected %s confirmation for %q", m.Kind, m.Channel)
	}
	cs := q[0]
	if len(q) == 1 {
		delete(b.expect, m.Channel)
	} else {
		q[0] = nil
		b.expect[m.Channel] = q[1:]
	}
	if cs == nil || b.chans[cs.name] != cs {
		b.mu.Unlock()
		return nil // an unsubscribe, or a subscribe of a channel left since
	}
	if !cs.confirmed {
		cs.confirmed = true
		close(cs.ready)
	}
	subs := b.scratch[:0]
	if cs.lost {
		// Restored after a loss: tell the subscribers again.
		cs.lost = false
		subs = cs.appendActive(subs)
	}
	b.scratch = subs
	b.mu.Unlock()
	for i, s := range subs {
		b.lose(s, true)
		subs[i] = nil
	}
	return nil
}

// drop ends connection ps after err and, unless the Bus is closed, tells
// every active subscriber of the loss, once per outage: a subscriber told
// already hears again only when its channel is restored. It returns why the
// connection ended, or nil when the Bus is closed. wasUp says the
// connection had worked.
func (b *Bus) drop(ps *redis.PubSub, cancel context.CancelFunc, err error, wasUp bool) error {
	b.mu.Lock()
	if b.psErr != nil {
		err = b.psErr // the real reason, not "use of closed connection"
	}
	b.ps, b.psCancel, b.psErr = nil, nil, nil
	clear(b.expect)
	closed := b.closed
	if !closed {
		b.lastErr = err
	}
	subs := b.scratch[:0]
	for _, cs := range b.chans {
		if cs.confirmed {
			cs.confirmed = false
			cs.ready = make(chan struct{})
		}
		if closed || cs.lost {
			continue // told already: the restore is still to come
		}
		n := len(subs)
		subs = cs.appendActive(subs)
		cs.lost = len(subs) > n
	}
	b.scratch = subs
	b.mu.Unlock()

	cancel()
	_ = ps.Close()
	if closed {
		return nil
	}
	if wasUp {
		b.disconnects.Add(1)
	}
	for i, s := range subs {
		b.lose(s, false)
		subs[i] = nil
	}
	if err == nil {
		err = errors.New("connection ended")
	}
	return err
}
