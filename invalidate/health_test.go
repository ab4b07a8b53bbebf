package invalidate_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

func TestHealthCheckFindsSilentConnection(t *testing.T) {
	ch := redistest.Prefix(t)
	p := startProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	pub := newBus(t, srv.Client(t), invalidate.Options{})
	b := newBus(t, rdb, invalidate.Options{HealthInterval: 100 * time.Millisecond, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond})
	r := newRecorder()
	subscribe(t, b, ch, r)
	publish(t, pub, ch, "before")
	r.expect(t, "before")

	// The connection stays open, but nothing goes through it any more.
	p.Hold()
	r.waitLoss(t, "silent connection")
	r.waitLoss(t, "new connection")
	publish(t, pub, ch, "after")
	r.expect(t, "after")
	if got := r.losses.Load(); got != 2 {
		t.Errorf("onLoss calls for one outage: got %d, want 2 (lost, restored)", got)
	}
	if st := b.Stats(); st.Disconnects < 1 || st.Reconnects < 1 {
		t.Errorf("Stats: got Disconnects %d, Reconnects %d, want at least 1, 1", st.Disconnects, st.Reconnects)
	}
}

func TestHealthCheckFindsPausedServer(t *testing.T) {
	// CLIENT PAUSE stops the whole server: only on one we own.
	srv.NeedOwned(t)
	ch := redistest.Prefix(t)
	admin := srv.Client(t)
	pub := newBus(t, srv.Client(t), invalidate.Options{})
	b := newBus(t, srv.Client(t), invalidate.Options{HealthInterval: 100 * time.Millisecond, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond})
	r := newRecorder()
	subscribe(t, b, ch, r)

	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	r.waitLoss(t, "paused server")
	r.waitLoss(t, "server resumed")
	publish(t, pub, ch, "after")
	r.expect(t, "after")
	if got := r.losses.Load(); got != 2 {
		t.Errorf("onLoss calls for one outage: got %d, want 2 (lost, restored)", got)
	}
}

func TestHealthCheckKeepsQuietConnection(t *testing.T) {
	// A healthy connection with no traffic answers its PINGs and is kept.
	ch := redistest.Prefix(t)
	b := newBus(t, srv.Client(t), invalidate.Options{HealthInterval: 100 * time.Millisecond})
	r := newRecorder()
	subscribe(t, b, ch, r)
	// Not a synchronisation: the quiet time itself is what is tested, long
	// enough for several health checks, none of which may fail.
	time.Sleep(600 * time.Millisecond)
	publish(t, b, ch, "x")
	r.expect(t, "x")
	if got := r.losses.Load(); got != 0 {
		t.Fatalf("onLoss calls on a healthy quiet connection: got %d, want 0", got)
	}
}
