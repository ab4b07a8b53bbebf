package invalidate_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

var _ hybrid.Bus = (*invalidate.Bus)(nil)

var srv *redistest.Server

func TestMain(m *testing.M) {
	redistest.MainCheck(m, &srv, func() error { return goleak.Find() })
}

// wait bounds every wait for something the bus should do.
const wait = 5 * time.Second

// testLogger sends the bus's log to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newBus returns a Bus on rdb, closed when t ends.
func newBus(t *testing.T, rdb redis.UniversalClient, o invalidate.Options) *invalidate.Bus {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	b := invalidate.New(rdb, o)
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: got %v, want nil", err)
		}
	})
	return b
}

// recorder is a subscriber that records what it is told. Its callbacks
// never block: a full buffer is counted as an overflow.
type recorder struct {
	msgs     chan string
	loss     chan struct{}
	losses   atomic.Int64
	overflow atomic.Int64
}

func newRecorder() *recorder {
	return &recorder{msgs: make(chan string, 4096), loss: make(chan struct{}, 256)}
}

func (r *recorder) onMessage(msg []byte) {
	select {
	case r.msgs <- string(msg):
	default:
		r.overflow.Add(1)
	}
}

func (r *recorder) onLoss(bool) {
	r.losses.Add(1)
	select {
	case r.loss <- struct{}{}:
	default:
		r.overflow.Add(1)
	}
}

// next returns the next message, failing t after wait.
func (r *recorder) next(t *testing.T) string {
	t.Helper()
	select {
	case m := <-r.msgs:
		return m
	case <-time.After(wait):
		t.Fatalf("no message within %v", wait)
		return ""
	}
}

// expect fails t unless the next message is want.
func (r *recorder) expect(t *testing.T, want string) {
	t.Helper()
	if got := r.next(t); got != want {
		t.Fatalf("message: got %q, want %q", got, want)
	}
}

// waitLoss waits for one onLoss call.
func (r *recorder) waitLoss(t *testing.T, what string) {
	t.Helper()
	select {
	case <-r.loss:
	case <-time.After(wait):
		t.Fatalf("%s: no onLoss within %v (losses so far: %d)", what, wait, r.losses.Load())
	}
}

// noMessage fails t if a message is waiting.
func (r *recorder) noMessage(t *testing.T) {
	t.Helper()
	select {
	case m := <-r.msgs:
		t.Fatalf("unexpected message %q", m)
	default:
	}
}

func subscribe(t *testing.T, b *invalidate.Bus, channel string, r *recorder) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	unsub, err := b.Subscribe(ctx, channel, r.onMessage, r.onLoss)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", channel, err)
	}
	return unsub
}

func publish(t *testing.T, b *invalidate.Bus, channel, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := b.Publish(ctx, channel, []byte(msg)); err != nil {
		t.Fatalf("Publish(%q, %q): %v", channel, msg, err)
	}
}

// deadAddr returns an address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
