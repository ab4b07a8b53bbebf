package hybridtest_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybridtest"
)

// clock is a settable time source for Remote.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newRemote returns a Remote on a new Bus, and what the Bus delivers on
// channel "ch".
func newRemote(t *testing.T) (*hybridtest.Remote, *hybridtest.Bus, *received) {
	t.Helper()
	bus := new(hybridtest.Bus)
	t.Cleanup(func() { bus.Close() })
	var got received
	unsub, err := bus.Subscribe(t.Context(), "ch", got.add, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unsub)
	return &hybridtest.Remote{Bus: bus}, bus, &got
}

// received collects what a Bus delivers on one channel.
type received struct {
	mu   sync.Mutex
	msgs []string
}

func (r *received) add(msg []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, string(msg))
}

func (r *received) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}
