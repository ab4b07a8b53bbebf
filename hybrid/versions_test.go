package hybrid_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

// heldBus is a Bus that, while held, keeps the messages it receives, so
// that a test can hand them over in an order of its choosing (deliver).
type heldBus struct {
	hybrid.Bus
	mu        sync.Mutex
	held      bool
	kept      [][]byte
	onMessage func([]byte)
}

func (b *heldBus) Subscribe(ctx context.Context, channel string, onMessage func([]byte), onLoss func(bool)) (func(), error) {
	b.mu.Lock()
	b.onMessage = onMessage
	b.mu.Unlock()
	return b.Bus.Subscribe(ctx, channel, func(msg []byte) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.held {
			b.kept = append(b.kept, msg)
			return
		}
		onMessage(msg)
	}, onLoss)
}

// hold starts keeping messages.
func (b *heldBus) hold() {
	b.mu.Lock()
	b.held = true
	b.mu.Unlock()
}

// waitKept waits until n messages are kept.
func (b *heldBus) waitKept(t *testing.T, n int) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprint(n, " messages kept"), func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.kept) >= n
	}, nil)
}

// deliver hands over the kept messages numbered in order, one at a time,
// as the bus goroutine would (under the lock, so never two at once).
func (b *heldBus) deliver(order ...int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, i := range order {
		b.onMessage(b.kept[i])
	}
}

// TestIntegrationOwnMessageTwice: A's own message arrives twice (on the bus
// and again in a replay, say) while a later write of A's to the same key
// still waits for its message. The second copy must not count as that later
// write's, or a peer's older value is swapped in over A's newer write
// (promise 2).
func TestIntegrationOwnMessageTwice(t *testing.T) {
	srv.NeedReal(t)
	o := hybrid.Options{Namespace: redistest.Prefix(t), Secret: []byte("s")}
	hb := &heldBus{}
	a := newInstanceWrapped(t, "A", singleNode(nil)(t), o, invalidate.Options{}, func(b hybrid.Bus) hybrid.Bus { hb.Bus = b; return hb })
	b := newInstance(t, "B", singleNode(nil), o, invalidate.Options{})
	setStr(t, a, "k", "v0")
	waitStat(t, a, "Invalidations.Own", statOwnIgnored, 1)

	hb.hold()
	setStr(t, a, "k", "a1")
	setStr(t, b, "k", "b2")
	setStr(t, a, "k", "a3") // L1 holds a3; Redis too
	hb.waitKept(t, 3)
	hb.deliver(0, 0, 1) // a1 twice, then b2; a3's message is still on its way
	if v, ok := getStr(t, a, "k"); !ok || v != "a3" {
		t.Errorf("A: Get: got %q, %v, want its own \"a3\" (Redis holds it; b2 is older)", v, ok)
	}
	hb.deliver(2)
	if v, ok := getStr(t, a, "k"); !ok || v != "a3" {
		t.Errorf("A: Get after a3's message: got %q, %v, want \"a3\"", v, ok)
	}
}
