package invalidate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
)

// Options configures a Bus. The zero value is ready to use.
type Options struct {
	// Logger receives connection losses and reconnects, rate-limited, and
	// recovered callback panics. Default (nil): slog.Default().
	Logger *slog.Logger

	// ReconnectMin is the first wait before reconnecting after the
	// connection was lost. Each failed attempt, and each connection lost
	// before it stayed up twice the wait before it, doubles the wait, up to
	// ReconnectMax; a connection that stayed up that long starts it again
	// at ReconnectMin. Every wait is jittered down by up to half.
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

	// Classic keeps classic pub/sub (PUBLISH, SUBSCRIBE) on a Redis
	// Cluster client, where the Bus otherwise uses sharded pub/sub (see
	// the package documentation, "Redis Cluster"). A Bus and the Stores
	// that publish on its channels must agree: l2.Options.Classic is the
	// same choice for a Store. No effect on other clients.
	Classic bool
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
	// Moved counts, over sharded pub/sub, the subscriptions of a slot that
	// Redis Cluster ended because the slot moved to another master (a
	// migration or a failover); each is a loss, and the Bus subscribes
	// the slot again where it went.
	Moved uint64
}

// Bus is a message bus over Redis pub/sub: it publishes messages on
// channels and calls subscribers' callbacks with the messages that arrive,
// and tells them when messages may have been lost. It is safe for concurrent
// use. A Bus holds one pub/sub connection, shared by all its subscriptions.
// Its goroutines (one that receives and calls the callbacks, one that runs
// the health check) start with the first Subscribe and stop in Close.
type Bus struct {
	hub
	rdb    redis.UniversalClient
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

	sh *sharded // nil: classic pub/sub
}

// chanState is one subscribed channel.
type chanState struct {
	name      string
	subs      []*sub
	confirmed bool          // Redis confirmed SUBSCRIBE on the current connection
	ready     chan struct{} // closed when confirmed becomes true
	lost      bool          // its active subscribers were told of a loss and await the restore
}

// appendActive appends to subs the active subscribers of cs (returned by
// Subscribe, not yet unsubscribed). The caller holds Bus.mu.
func (cs *chanState) appendActive(subs []*sub) []*sub {
	for _, s := range cs.subs {
		if s.active {
			subs = append(subs, s)
		}
	}
	return subs
}

// sub is one subscription.
type sub struct {
	name      string     // the channel subscribed, for logs
	cs        *chanState // of a Bus over classic pub/sub
	base      *shardBase // of a Bus over sharded pub/sub
	onMessage func([]byte)
	onLoss    func(restored bool)
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
		hub:    hub{log: o.Logger},
		rdb:    rdb,
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
	if c, ok := rdb.(clusterClient); ok && !o.Classic {
		b.sh = newSharded(c)
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
	if b.sh != nil {
		return b.publishSharded(ctx, channel, msg)
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
func (b *Bus) Subscribe(ctx context.Context, channel string, onMessage func(msg []byte), onLoss func(restored bool)) (unsubscribe func(), err error) {
	switch {
	case channel == "":
		return nil, errors.New("invalidate: subscribe: empty channel name")
	case onMessage == nil:
		return nil, fmt.Errorf("invalidate: subscribe %q: nil onMessage", channel)
	case onLoss == nil:
		return nil, fmt.Errorf("invalidate: subscribe %q: nil onLoss", channel)
	}
	s := &sub{name: channel, onMessage: onMessage, onLoss: onLoss}
	if b.sh != nil {
		return b.subscribeSharded(ctx, channel, s)
	}

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
	return b.awaitUp(ctx, s, func() bool { return cs.confirmed }, func() chan struct{} { return cs.ready }, b.unsubscribe)
}

// awaitUp waits, entered with b.mu held, until up reports s's channel
// subscribed (ready returns a channel closed when it may be), then makes s
// active and returns its unsubscribe function. When ctx ends or b closes
// first, it removes s with unsub and fails.
func (b *Bus) awaitUp(ctx context.Context, s *sub, up func() bool, ready func() chan struct{}, unsub func(*sub)) (unsubscribe func(), err error) {
	for {
		if b.closed {
			b.mu.Unlock()
			unsub(s)
			return nil, ErrClosed
		}
		if up() {
			s.active = true
			b.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { unsub(s) }) }, nil
		}
		r := ready()
		b.mu.Unlock()
		select {
		case <-r:
		case <-b.done:
		case <-ctx.Done():
			b.mu.Lock()
			last := b.lastErr
			b.mu.Unlock()
			unsub(s)
			if last != nil {
				return nil, fmt.Errorf("invalidate: subscribe %q: %w (connection: %v)", s.name, ctx.Err(), last)
			}
			return nil, fmt.Errorf("invalidate: subscribe %q: %w", s.name, ctx.Err())
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
func (b *Bus) Stats() Stats { return b.stats() }

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
	if b.sh != nil {
		b.closeSharded()
	}
	if ps != nil {
		_ = ps.Close() // unblocks Receive
	}
	b.wg.Wait()
	return nil
}
