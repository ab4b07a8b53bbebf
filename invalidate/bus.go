package invalidate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrClosed is returned by Publish and Subscribe after Close. Check for it
// with errors.Is(err, invalidate.ErrClosed).
var ErrClosed = errors.New("invalidate: bus closed")

// Defaults for the zero Options.
const (
	defaultReconnectMin   = 50 * time.Millisecond
	defaultReconnectMax   = 2 * time.Second
	defaultHealthInterval = 3 * time.Second

	// logEvery is the least time between two log lines of one kind
	// (connection lost, reconnect failed, reconnected) during an outage.
	logEvery = 30 * time.Second
)

// Options configures a Bus. The zero value is ready to use.
type Options struct {
	// Logger receives connection losses and reconnects, rate-limited, and
	// recovered callback panics. Default (nil): slog.Default().
	Logger *slog.Logger

	// ReconnectMin is the first wait before reconnecting after the
	// connection was lost. Each failed attempt doubles the wait, up to
	// ReconnectMax, and every wait is jittered down by up to half.
	// Default (zero or negative): 50 ms.
	ReconnectMin time.Duration

	// ReconnectMax caps the wait between reconnect attempts. Default (zero
	// or negative): 2 s; a value below ReconnectMin is raised to it.
	ReconnectMax time.Duration

	// HealthInterval is how long the pub/sub connection may stay silent
	// before the Bus sends a PING over it. When neither the PONG nor any
	// other message arrives within another HealthInterval, the connection
	// is taken for dead: subscribers are told of the loss and the Bus
	// reconnects. A dead connection is thus noticed within about two
	// intervals. Default (zero): 3 s. Negative: no health check, so a
	// connection that stops answering without being closed goes unnoticed
	// until the operating system gives up on it.
	HealthInterval time.Duration
}

// Stats are counters since New, read with Bus.Stats.
type Stats struct {
	// Received counts messages read from Redis.
	Received uint64
	// Delivered counts onMessage calls that returned normally.
	Delivered uint64
	// Disconnects counts losses of a working pub/sub connection.
	Disconnects uint64
	// Reconnects counts connections made working again after a loss.
	Reconnects uint64
	// Losses counts onLoss calls: for each outage, two per subscriber
	// (lost, then restored), and one for each onMessage panic.
	Losses uint64
	// Panics counts callbacks that panicked.
	Panics uint64
}

// Bus is a message bus over Redis pub/sub: it publishes messages on
// channels and calls subscribers' callbacks with the messages that arrive,
// and tells them when messages may have been lost. It is safe for concurrent
// use. A Bus holds one pub/sub connection, shared by all its subscriptions.
// Its goroutines (one that receives and calls the callbacks, one that runs
// the health check) start with the first Subscribe and stop in Close.
type Bus struct {
	rdb    redis.UniversalClient
	log    *slog.Logger
	min    time.Duration
	max    time.Duration
	health time.Duration

	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup
	shut   atomic.Bool // Close was called; read without mu by Publish

	epoch    time.Time
	lastSeen atomic.Int64 // time.Since(epoch) when the connection last said anything

	// wmu orders writes on the pub/sub connection: whoever queues an
	// expected confirmation in expect holds wmu until the matching command
	// is written, so confirmations come back in queue order.
	wmu sync.Mutex

	mu      sync.Mutex
	closed  bool
	started bool
	chans   map[string]*chanState
	// expect holds, per channel, the SUBSCRIBE (the chanState) and
	// UNSUBSCRIBE (nil) commands written on the current connection whose
	// confirmation has not arrived yet, oldest first.
	expect   map[string][]*chanState
	ps       *redis.PubSub // current connection; nil while down
	psCancel context.CancelFunc
	psErr    error // why ps was closed by someone other than the receive loop
	lastErr  error // last connection error, for Subscribe's error

	scratch []*sub // reused by the receive goroutine

	received, delivered, disconnects, reconnects, losses, panics atomic.Uint64
}

// chanState is one subscribed channel.
type chanState struct {
	name      string
	subs      []*sub
	confirmed bool          // Redis confirmed SUBSCRIBE on the current connection
	ready     chan struct{} // closed when confirmed becomes true
	lost      bool          // its active subscribers were told of a loss and await the restore
}

// sub is one subscription.
type sub struct {
	cs        *chanState
	onMessage func([]byte)
	onLoss    func()
	active    bool // Subscribe returned it; under Bus.mu

	mu      sync.Mutex // held while one of its callbacks runs
	removed bool       // under mu
}

// New returns a Bus over rdb, which may be a single-node, Sentinel
// (failover) or Cluster client. It does no I/O: the pub/sub connection is
// opened by the first Subscribe. The Bus does not close rdb; close the Bus
// first. New panics if rdb is nil.
func New(rdb redis.UniversalClient, o Options) *Bus {
	if rdb == nil {
		panic("invalidate: New: nil redis client")
	}
	b := &Bus{
		rdb:    rdb,
		log:    o.Logger,
		min:    o.ReconnectMin,
		max:    o.ReconnectMax,
		health: o.HealthInterval,
		done:   make(chan struct{}),
		epoch:  time.Now(),
		chans:  make(map[string]*chanState),
		expect: make(map[string][]*chanState),
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	if b.min <= 0 {
		b.min = defaultReconnectMin
	}
	if b.max <= 0 {
		b.max = defaultReconnectMax
	}
	if b.max < b.min {
		b.max = b.min
	}
	if b.health == 0 {
		b.health = defaultHealthInterval
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b
}

// Publish sends msg to every subscriber of channel, on every instance,
// including this Bus's own. It returns once Redis accepted the message, not
// once it was delivered; a nil error does not mean anyone received it.
func (b *Bus) Publish(ctx context.Context, channel string, msg []byte) error {
	if b.shut.Load() {
		return ErrClosed
	}
	if err := b.rdb.Publish(ctx, channel, msg).Err(); err != nil {
		return fmt.Errorf("invalidate: publish %q: %w", channel, err)
	}
	return nil
}

// Subscribe calls onMessage with every message published on channel, and
// onLoss whenever messages may have been lost (see the package
// documentation). It returns once Redis has confirmed the subscription, so
// a message published after Subscribe returns is delivered; if ctx ends
// first, or the Bus is closed, it returns an error and subscribes nothing.
// Several subscriptions to one channel each get every message.
//
// unsubscribe ends the subscription; after it returns, neither callback is
// called again (it waits for one in progress). It is idempotent and safe to
// call after Close.
//
// NOTE: the callbacks run on the Bus's goroutine and must not block, nor
// call Subscribe, Close or their own unsubscribe.
func (b *Bus) Subscribe(ctx context.Context, channel string, onMessage func(msg []byte), onLoss func()) (unsubscribe func(), err error) {
	switch {
	case channel == "":
		return nil, errors.New("invalidate: subscribe: empty channel name")
	case onMessage == nil:
		return nil, fmt.Errorf("invalidate: subscribe %q: nil onMessage", channel)
	case onLoss == nil:
		return nil, fmt.Errorf("invalidate: subscribe %q: nil onLoss", channel)
	}
	s := &sub{onMessage: onMessage, onLoss: onLoss}

	b.wmu.Lock()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.wmu.Unlock()
		return nil, ErrClosed
	}
	if !b.started {
		b.started = true
		b.wg.Add(1)
		go b.run()
		if b.health > 0 {
			b.wg.Add(1)
			go b.watch()
		}
	}
	cs := b.chans[channel]
	var ps *redis.PubSub
	if cs == nil {
		cs = &chanState{name: channel, ready: make(chan struct{})}
		b.chans[channel] = cs
		if b.ps != nil {
			// Connected: subscribe now. Otherwise the receive loop
			// subscribes every channel when it connects.
			ps = b.ps
			b.expect[channel] = append(b.expect[channel], cs)
		}
	}
	s.cs = cs
	cs.subs = append(cs.subs, s)
	b.mu.Unlock()
	if ps != nil {
		if err := ps.Subscribe(b.ctx, channel); err != nil {
			b.kill(ps, fmt.Errorf("subscribe %q: %w", channel, err))
		}
	}
	b.wmu.Unlock()

	b.mu.Lock()
	for {
		if b.closed {
			b.mu.Unlock()
			b.unsubscribe(s)
			return nil, ErrClosed
		}
		if cs.confirmed {
			s.active = true
			b.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { b.unsubscribe(s) }) }, nil
		}
		ready := cs.ready
		b.mu.Unlock()
		select {
		case <-ready:
		case <-b.done:
		case <-ctx.Done():
			b.mu.Lock()
			last := b.lastErr
			b.mu.Unlock()
			b.unsubscribe(s)
			if last != nil {
				return nil, fmt.Errorf("invalidate: subscribe %q: %w (connection: %v)", channel, ctx.Err(), last)
			}
			return nil, fmt.Errorf("invalidate: subscribe %q: %w", channel, ctx.Err())
		}
		b.mu.Lock()
	}
}

// unsubscribe removes s, unsubscribes its channel from Redis if s was the
// last subscriber, and waits for a callback of s in progress.
func (b *Bus) unsubscribe(s *sub) {
	b.wmu.Lock()
	b.mu.Lock()
	cs := s.cs
	var ps *redis.PubSub
	for i, x := range cs.subs {
		if x != s {
			continue
		}
		cs.subs = slices.Delete(cs.subs, i, i+1)
		if len(cs.subs) == 0 && b.chans[cs.name] == cs {
			delete(b.chans, cs.name)
			if b.ps != nil && !b.closed {
				ps = b.ps
				b.expect[cs.name] = append(b.expect[cs.name], nil)
			}
		}
		break
	}
	s.active = false
	b.mu.Unlock()
	if ps != nil {
		if err := ps.Unsubscribe(b.ctx, cs.name); err != nil {
			b.kill(ps, fmt.Errorf("unsubscribe %q: %w", cs.name, err))
		}
	}
	b.wmu.Unlock()

	s.mu.Lock()
	s.removed = true
	s.mu.Unlock()
}

// Stats returns the Bus's counters.
func (b *Bus) Stats() Stats {
	return Stats{
		Received:    b.received.Load(),
		Delivered:   b.delivered.Load(),
		Disconnects: b.disconnects.Load(),
		Reconnects:  b.reconnects.Load(),
		Losses:      b.losses.Load(),
		Panics:      b.panics.Load(),
	}
}

// Close closes the pub/sub connection and stops the Bus's goroutines,
// waiting for them (and so for a callback in progress). Subscribers are not
// told of a loss. Afterwards Publish and Subscribe return ErrClosed.
// Close is idempotent and returns nil; it does not close the Redis client.
//
// NOTE: Close may wait for a connection attempt in progress, up to the
// client's dial and read timeouts.
func (b *Bus) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.shut.Store(true)
	ps := b.ps
	b.mu.Unlock()

	close(b.done)
	b.cancel()
	if ps != nil {
		_ = ps.Close() // unblocks Receive
	}
	b.wg.Wait()
	return nil
}

// touch records that the connection said something.
func (b *Bus) touch() { b.lastSeen.Store(int64(time.Since(b.epoch))) }

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

// run is the receive goroutine: it connects, reads until the connection
// fails, reports the loss, backs off and starts again, until Close.
func (b *Bus) run() {
	defer b.wg.Done()
	var (
		attempt   int       // failed attempts since the connection last worked for a while
		failures  int       // failed attempts in this outage
		everUp    bool      // a connection has worked
		downSince time.Time // start of the outage; zero while up
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
			if time.Since(upAt) >= b.max {
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

		if !b.wait(b.backoff(attempt)) {
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

// dispatch hands m to every active subscriber of its channel.
func (b *Bus) dispatch(m *redis.Message) {
	b.received.Add(1)
	b.mu.Lock()
	subs := b.scratch[:0]
	if cs := b.chans[m.Channel]; cs != nil {
		for _, s := range cs.subs {
			if s.active {
				subs = append(subs, s)
			}
		}
	}
	b.scratch = subs
	b.mu.Unlock()
	for i, s := range subs {
		b.deliver(s, []byte(m.Payload))
		subs[i] = nil
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
		for _, s := range cs.subs {
			if s.active {
				subs = append(subs, s)
			}
		}
	}
	b.scratch = subs
	b.mu.Unlock()
	for i, s := range subs {
		b.lose(s)
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
		for _, s := range cs.subs {
			if s.active {
				subs = append(subs, s)
				cs.lost = true
			}
		}
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
		b.lose(s)
		subs[i] = nil
	}
	if err == nil {
		err = errors.New("connection ended")
	}
	return err
}

// deliver calls s.onMessage unless s was removed. If it panics, s is told
// of a loss: it missed a message.
func (b *Bus) deliver(s *sub, msg []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return
	}
	if b.callMessage(s, msg) {
		b.delivered.Add(1)
		return
	}
	b.losses.Add(1)
	b.callLoss(s)
}

// lose calls s.onLoss unless s was removed.
func (b *Bus) lose(s *sub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return
	}
	b.losses.Add(1)
	b.callLoss(s)
}

func (b *Bus) callMessage(s *sub, msg []byte) (ok bool) {
	defer func() {
		if !ok {
			b.recovered("onMessage", s, recover())
		}
	}()
	s.onMessage(msg)
	return true
}

func (b *Bus) callLoss(s *sub) {
	ok := false
	defer func() {
		if !ok {
			b.recovered("onLoss", s, recover())
		}
	}()
	s.onLoss()
	ok = true
}

func (b *Bus) recovered(callback string, s *sub, v any) {
	b.panics.Add(1)
	b.log.Error("invalidate: subscriber callback panicked", "callback", callback, "channel", s.cs.name, "panic", v)
}

// watch is the health-check goroutine: it pings a connection that has been
// silent for the health interval and closes it when the ping goes
// unanswered for another interval.
func (b *Bus) watch() {
	defer b.wg.Done()
	t := time.NewTimer(b.health)
	defer t.Stop()
	var (
		pinged *redis.PubSub // the connection pinged, at pingAt, if any
		pingAt time.Duration
	)
	for {
		select {
		case <-t.C:
		case <-b.done:
			return
		}
		b.mu.Lock()
		ps := b.ps
		b.mu.Unlock()
		now := time.Since(b.epoch)
		last := time.Duration(b.lastSeen.Load())
		switch {
		case ps == nil:
			// Down: the receive loop is reconnecting.
			pinged = nil
			t.Reset(b.health)
		case pinged == ps && last < pingAt:
			// Pinged, and nothing heard since.
			if wait := pingAt + b.health - now; wait > 0 {
				t.Reset(wait)
				continue
			}
			b.kill(ps, fmt.Errorf("no reply to PING within %v", b.health))
			pinged = nil
			t.Reset(b.health)
		case now-last >= b.health:
			pinged, pingAt = ps, now
			ctx, cancel := context.WithTimeout(b.ctx, b.health)
			err := ps.Ping(ctx)
			cancel()
			if err != nil {
				b.kill(ps, fmt.Errorf("health check PING: %w", err))
				pinged = nil
			}
			t.Reset(b.health)
		default:
			pinged = nil
			t.Reset(last + b.health - now)
		}
	}
}

// limiter lets one event through per period and counts the others.
type limiter struct {
	every      time.Duration
	last       time.Time
	suppressed int
}

// allow reports whether to log now, and how many events were held back
// since the last one logged.
func (l *limiter) allow() (suppressed int, ok bool) {
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		return 0, false
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return n, true
}
