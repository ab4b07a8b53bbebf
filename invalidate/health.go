package invalidate

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// touch records that the connection said something.
func (b *Bus) touch() { b.lastSeen.Store(int64(time.Since(b.epoch))) }

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
