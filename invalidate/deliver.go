package invalidate

import (
	"log/slog"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// hub is what a Bus shares over classic and sharded pub/sub: its logger,
// its counters, and the calls of its subscribers' callbacks.
type hub struct {
	log *slog.Logger

	received, delivered, disconnects, reconnects, losses, panics, moved atomic.Uint64
}

func (h *hub) stats() Stats {
	return Stats{
		Received:    h.received.Load(),
		Delivered:   h.delivered.Load(),
		Disconnects: h.disconnects.Load(),
		Reconnects:  h.reconnects.Load(),
		Losses:      h.losses.Load(),
		Panics:      h.panics.Load(),
		Moved:       h.moved.Load(),
	}
}

// dispatch hands m to every active subscriber of its channel.
func (b *Bus) dispatch(m *redis.Message) {
	b.received.Add(1)
	b.mu.Lock()
	subs := b.scratch[:0]
	if cs := b.chans[m.Channel]; cs != nil {
		subs = cs.appendActive(subs)
	}
	b.scratch = subs
	b.mu.Unlock()
	for i, s := range subs {
		b.deliver(s, []byte(m.Payload))
		subs[i] = nil
	}
}

// deliver calls s.onMessage unless s was removed. If it panics, s is told
// of a loss: it missed a message.
func (b *hub) deliver(s *sub, msg []byte) {
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
	b.callLoss(s, true)
}

// lose calls s.onLoss(restored) unless s was removed.
func (b *hub) lose(s *sub, restored bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return
	}
	b.losses.Add(1)
	b.callLoss(s, restored)
}

func (b *hub) callMessage(s *sub, msg []byte) (ok bool) {
	defer func() {
		if !ok {
			b.recovered("onMessage", s, recover())
		}
	}()
	s.onMessage(msg)
	return true
}

func (b *hub) callLoss(s *sub, restored bool) {
	ok := false
	defer func() {
		if !ok {
			b.recovered("onLoss", s, recover())
		}
	}()
	s.onLoss(restored)
	ok = true
}

func (b *hub) recovered(callback string, s *sub, v any) {
	b.panics.Add(1)
	b.log.Error("invalidate: subscriber callback panicked", "callback", callback, "channel", s.name, "panic", v)
}
