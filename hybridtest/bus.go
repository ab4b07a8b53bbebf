package hybridtest

import (
	"context"
	"errors"
	"sync"
)

// Bus is an in-memory publish/subscribe pipe that implements hybrid.Bus.
// The zero value is ready to use; call Close when done, after the caches
// that use it. It is safe for concurrent use.
//
// Each subscription has its own goroutine and its own unbounded queue:
// Publish copies the message into the queue of every subscription on the
// channel and returns at once, never blocking and never dropping a message.
// Each subscription then receives the messages of its channel one at a
// time, in publish order, never on the publisher's goroutine. A message
// published by one goroutine after another's Publish returned comes later.
//
// NOTE: a callback must not call Flush, Close or its own unsubscribe
// function, which wait for callbacks to finish.
type Bus struct {
	mu      sync.Mutex
	subs    map[string][]*subscription // by channel
	pending int                        // queued or running callbacks
	idle    chan struct{}              // closed when pending drops to 0
	closed  bool
	err     error
	wg      sync.WaitGroup // subscription goroutines
	stats   BusStats
}

// BusStats counts what a Bus did.
type BusStats struct {
	Published     uint64 // Publish calls that succeeded
	Delivered     uint64 // onMessage calls that returned
	Losses        uint64 // onLoss calls that returned
	Dropped       uint64 // queued messages and losses discarded by unsubscribe or Close
	Subscriptions int    // active subscriptions now
}

type subscription struct {
	channel   string
	onMessage func([]byte)
	onLoss    func(restored bool)
	cond      *sync.Cond // on Bus.mu
	queue     []event
	stopped   bool
	done      chan struct{} // closed when the goroutine ends
}

// event is a message, or a loss when msg is nil and loss is true.
type event struct {
	msg  []byte
	loss bool
	// restored is what onLoss is told: delivery goes on (true) or has
	// stopped (false).
	restored bool
}

// ErrClosed is returned by Publish and Subscribe on a closed Bus. Check it
// with errors.Is.
var ErrClosed = errors.New("hybridtest: bus closed")

// FailWith makes every later Publish and Subscribe return err, until
// FailWith(nil). Delivery of messages already published goes on.
func (b *Bus) FailWith(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err = err
}

// Publish queues a copy of msg for every subscription on channel and
// returns without waiting for delivery. A channel without subscriptions
// takes the message and delivers it nowhere, as Redis does.
func (b *Bus) Publish(ctx context.Context, channel string, msg []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	if b.err != nil {
		return b.err
	}
	for _, s := range b.subs[channel] {
		b.pushLocked(s, event{msg: append(make([]byte, 0, len(msg)), msg...)})
	}
	b.stats.Published++
	return nil
}

// SimulateLoss tells every subscription, on every channel, that messages
// may have been lost and delivery goes on (onLoss(true)), as a bus does
// when its connection is restored: each one's onLoss runs after the
// messages queued before it. It returns without waiting; call Flush to wait.
func (b *Bus) SimulateLoss() { b.simulate(true) }

// SimulateDrop tells every subscription that delivery has stopped
// (onLoss(false)), as a bus does when its connection drops. Messages
// published afterwards are still delivered; a test that models an outage
// leaves them out, and ends it with SimulateLoss.
func (b *Bus) SimulateDrop() { b.simulate(false) }

func (b *Bus) simulate(restored bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, subs := range b.subs {
		for _, s := range subs {
			b.pushLocked(s, event{loss: true, restored: restored})
		}
	}
}

func (b *Bus) pushLocked(s *subscription, e event) {
	if b.pending == 0 {
		b.idle = make(chan struct{})
	}
	b.pending++
	s.queue = append(s.queue, e)
	s.cond.Signal()
}

// doneLocked records that n queued events are finished or discarded.
func (b *Bus) doneLocked(n int) {
	b.pending -= n
	if b.pending == 0 && b.idle != nil {
		close(b.idle)
		b.idle = nil
	}
}

// Subscribe starts delivering the messages of channel to onMessage, and
// losses to onLoss (nil: ignored). The subscription is active when
// Subscribe returns. The returned function ends it: it discards what is
// still queued, waits for a callback in progress and returns; after it,
// neither callback runs again. Calling it more than once is harmless.
func (b *Bus) Subscribe(ctx context.Context, channel string, onMessage func(msg []byte), onLoss func(restored bool)) (unsubscribe func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if onMessage == nil {
		return nil, errors.New("hybridtest: Subscribe: nil onMessage")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.err != nil {
		return nil, b.err
	}
	s := &subscription{
		channel:   channel,
		onMessage: onMessage,
		onLoss:    onLoss,
		cond:      sync.NewCond(&b.mu),
		done:      make(chan struct{}),
	}
	if b.subs == nil {
		b.subs = make(map[string][]*subscription)
	}
	b.subs[channel] = append(b.subs[channel], s)
	b.stats.Subscriptions++
	b.wg.Add(1)
	go b.run(s)
	var once sync.Once
	return func() { once.Do(func() { b.stop(s) }) }, nil
}

// run delivers s's events until s is stopped.
func (b *Bus) run(s *subscription) {
	defer b.wg.Done()
	defer close(s.done)
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		for len(s.queue) == 0 && !s.stopped {
			s.cond.Wait()
		}
		if s.stopped {
			return
		}
		e := s.queue[0]
		s.queue[0] = event{}
		s.queue = s.queue[1:]
		b.mu.Unlock()
		if e.loss {
			if s.onLoss != nil {
				s.onLoss(e.restored)
			}
		} else {
			s.onMessage(e.msg)
		}
		b.mu.Lock()
		if e.loss {
			b.stats.Losses++
		} else {
			b.stats.Delivered++
		}
		b.doneLocked(1)
	}
}

// stop ends s: no event is delivered after it returns.
func (b *Bus) stop(s *subscription) {
	b.mu.Lock()
	if !s.stopped {
		s.stopped = true
		subs := b.subs[s.channel]
		if i := indexOf(subs, s); i >= 0 {
			b.subs[s.channel] = append(subs[:i:i], subs[i+1:]...)
			if len(b.subs[s.channel]) == 0 {
				delete(b.subs, s.channel)
			}
			b.stats.Subscriptions--
		}
		b.stats.Dropped += uint64(len(s.queue))
		b.doneLocked(len(s.queue))
		s.queue = nil
		s.cond.Signal()
	}
	b.mu.Unlock()
	<-s.done
}

func indexOf(subs []*subscription, s *subscription) int {
	for i, x := range subs {
		if x == s {
			return i
		}
	}
	return -1
}

// Flush waits until no message or loss is queued or being delivered, on
// any subscription (each one delivered, or discarded by an unsubscribe),
// or until ctx ends, when it returns ctx.Err(). Everything published
// before Flush was called has then been delivered, and so have the
// messages that its callbacks published in turn.
func (b *Bus) Flush(ctx context.Context) error {
	b.mu.Lock()
	if b.pending == 0 {
		b.mu.Unlock()
		return nil
	}
	idle := b.idle
	b.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns a snapshot of the bus's counters.
func (b *Bus) Stats() BusStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// Close ends every subscription, discarding what is still queued, and waits
// for their goroutines to exit. Later Publish and Subscribe calls return
// ErrClosed; unsubscribe functions still work and do nothing. Close is
// idempotent.
func (b *Bus) Close() error {
	b.mu.Lock()
	b.closed = true
	var all []*subscription
	for _, subs := range b.subs {
		all = append(all, subs...)
	}
	b.mu.Unlock()
	for _, s := range all {
		b.stop(s)
	}
	b.wg.Wait()
	return nil
}
