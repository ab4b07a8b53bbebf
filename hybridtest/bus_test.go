package hybridtest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/hybridcache/hybridcache/hybridtest"
)

// recorder collects what a subscription receives; a loss is recorded as
// "LOSS".
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) onMessage(msg []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, string(msg))
}

func (r *recorder) onLoss(bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, "LOSS")
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func subscribe(t *testing.T, b *hybridtest.Bus, channel string, r *recorder) func() {
	t.Helper()
	unsub, err := b.Subscribe(t.Context(), channel, r.onMessage, r.onLoss)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", channel, err)
	}
	return unsub
}

func publish(t *testing.T, b *hybridtest.Bus, channel, msg string) {
	t.Helper()
	if err := b.Publish(t.Context(), channel, []byte(msg)); err != nil {
		t.Fatalf("Publish(%q, %q): %v", channel, msg, err)
	}
}

func flush(t *testing.T, b *hybridtest.Bus) {
	t.Helper()
	if err := b.Flush(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func TestBusDeliversInOrderToEverySubscription(t *testing.T) {
	b := new(hybridtest.Bus)
	defer b.Close()
	var r1, r2, other recorder
	defer subscribe(t, b, "ch", &r1)()
	defer subscribe(t, b, "ch", &r2)()
	defer subscribe(t, b, "other", &other)()
	var want []string
	for i := range 1000 {
		m := fmt.Sprint(i)
		publish(t, b, "ch", m)
		want = append(want, m)
	}
	publish(t, b, "nobody", "x")
	flush(t, b)
	if got := r1.events(); !slices.Equal(got, want) {
		t.Errorf("first subscription: got %d messages, want %d in order", len(got), len(want))
	}
	if got := r2.events(); !slices.Equal(got, want) {
		t.Errorf("second subscription: got %d messages, want %d in order", len(got), len(want))
	}
	if got := other.events(); len(got) != 0 {
		t.Errorf("subscription on another channel got %q, want nothing", got)
	}
	if got, want := b.Stats(), (hybridtest.BusStats{Published: 1001, Delivered: 2000, Subscriptions: 3}); got != want {
		t.Errorf("Stats: got %+v, want %+v", got, want)
	}
}

func TestBusCallbackNotOnPublisherGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := new(hybridtest.Bus)
		defer b.Close()
		release := make(chan struct{})
		unsub, err := b.Subscribe(t.Context(), "ch", func([]byte) { <-release }, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer unsub()
		// A callback on the publisher's goroutine would block Publish.
		returned := make(chan error, 1)
		go func() { returned <- b.Publish(t.Context(), "ch", []byte("m")) }()
		synctest.Wait()
		close(release)
		select {
		case err := <-returned:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("Publish did not return while the callback blocked")
		}
		flush(t, b)
	})
}

func TestBusCopiesMessages(t *testing.T) {
	b := new(hybridtest.Bus)
	defer b.Close()
	var r recorder
	defer subscribe(t, b, "ch", &r)()
	defer subscribe(t, b, "ch", &recorder{})()
	unsub, err := b.Subscribe(t.Context(), "ch", func(msg []byte) { msg[0] = 'X' }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	msg := []byte("abc")
	if err := b.Publish(t.Context(), "ch", msg); err != nil {
		t.Fatal(err)
	}
	msg[0] = 'Y'
	flush(t, b)
	if got := r.events(); !slices.Equal(got, []string{"abc"}) {
		t.Errorf("got %q, want [\"abc\"] whatever the publisher and other subscribers do with their slices", got)
	}
}

func TestBusSimulateLoss(t *testing.T) {
	b := new(hybridtest.Bus)
	defer b.Close()
	var r1, r2 recorder
	defer subscribe(t, b, "a", &r1)()
	defer subscribe(t, b, "b", &r2)()
	unsubNil, err := b.Subscribe(t.Context(), "a", func([]byte) {}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsubNil()
	publish(t, b, "a", "1")
	b.SimulateLoss()
	publish(t, b, "a", "2")
	flush(t, b)
	if got, want := r1.events(), []string{"1", "LOSS", "2"}; !slices.Equal(got, want) {
		t.Errorf("channel a: got %q, want %q", got, want)
	}
	if got, want := r2.events(), []string{"LOSS"}; !slices.Equal(got, want) {
		t.Errorf("channel b: got %q, want %q", got, want)
	}
	if got := b.Stats().Losses; got != 3 {
		t.Errorf("Stats.Losses: got %d, want 3", got)
	}
}

func TestBusUnsubscribe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := new(hybridtest.Bus)
		defer b.Close()
		release := make(chan struct{})
		calls := 0
		unsub, err := b.Subscribe(t.Context(), "ch", func([]byte) {
			calls++
			<-release
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		publish(t, b, "ch", "1")
		publish(t, b, "ch", "2")
		publish(t, b, "ch", "3")
		synctest.Wait() // the first callback is blocked

		unsubscribed := make(chan struct{})
		go func() {
			unsub()
			close(unsubscribed)
		}()
		synctest.Wait()
		select {
		case <-unsubscribed:
			t.Fatal("unsubscribe returned while a callback was running")
		default:
		}
		if got := b.Stats().Subscriptions; got != 0 {
			t.Errorf("Subscriptions while unsubscribing: got %d, want 0", got)
		}
		close(release)
		<-unsubscribed
		publish(t, b, "ch", "after")
		flush(t, b)
		if calls != 1 {
			t.Errorf("got %d callbacks, want 1 (the queued messages are discarded)", calls)
		}
		if got, want := b.Stats(), (hybridtest.BusStats{Published: 4, Delivered: 1, Dropped: 2}); got != want {
			t.Errorf("Stats: got %+v, want %+v", got, want)
		}
		unsub() // harmless
	})
}

func TestBusFlush(t *testing.T) {
	b := new(hybridtest.Bus)
	defer b.Close()
	flush(t, b) // nothing queued
	release := make(chan struct{})
	unsub, err := b.Subscribe(t.Context(), "ch", func([]byte) { <-release }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	publish(t, b, "ch", "m")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := b.Flush(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Flush with a blocked callback and a cancelled ctx: got %v, want %v", err, context.Canceled)
	}
	close(release)
	flush(t, b)
	if got := b.Stats().Delivered; got != 1 {
		t.Errorf("after Flush: Delivered %d, want 1", got)
	}
}

func TestBusFlushWaitsForChainedMessages(t *testing.T) {
	b := new(hybridtest.Bus)
	defer b.Close()
	var r recorder
	defer subscribe(t, b, "out", &r)()
	unsub, err := b.Subscribe(t.Context(), "in", func(msg []byte) {
		_ = b.Publish(context.Background(), "out", msg)
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	publish(t, b, "in", "relay")
	flush(t, b)
	if got := r.events(); !slices.Equal(got, []string{"relay"}) {
		t.Errorf("got %q, want [\"relay\"]", got)
	}
}

func TestBusFailWith(t *testing.T) {
	b := new(hybridtest.Bus)
	defer b.Close()
	down := errors.New("connection refused")
	b.FailWith(down)
	if err := b.Publish(t.Context(), "ch", nil); !errors.Is(err, down) {
		t.Errorf("Publish: got %v, want %v", err, down)
	}
	if _, err := b.Subscribe(t.Context(), "ch", func([]byte) {}, nil); !errors.Is(err, down) {
		t.Errorf("Subscribe: got %v, want %v", err, down)
	}
	b.FailWith(nil)
	if err := b.Publish(t.Context(), "ch", nil); err != nil {
		t.Errorf("Publish after FailWith(nil): %v", err)
	}
}

func TestBusClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := new(hybridtest.Bus)
		var r recorder
		unsub := subscribe(t, b, "ch", &r)
		release := make(chan struct{})
		unsub2, err := b.Subscribe(t.Context(), "ch", func([]byte) { <-release }, nil)
		if err != nil {
			t.Fatal(err)
		}
		publish(t, b, "ch", "m")
		synctest.Wait() // the second callback is blocked
		closed := make(chan struct{})
		go func() {
			b.Close()
			close(closed)
		}()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while a callback was running")
		default:
		}
		close(release)
		<-closed
		if err := b.Publish(t.Context(), "ch", nil); !errors.Is(err, hybridtest.ErrClosed) {
			t.Errorf("Publish after Close: got %v, want %v", err, hybridtest.ErrClosed)
		}
		if _, err := b.Subscribe(t.Context(), "ch", func([]byte) {}, nil); !errors.Is(err, hybridtest.ErrClosed) {
			t.Errorf("Subscribe after Close: got %v, want %v", err, hybridtest.ErrClosed)
		}
		unsub()
		unsub2()
		if err := b.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		flush(t, b)
		if got := b.Stats().Subscriptions; got != 0 {
			t.Errorf("Subscriptions after Close: got %d, want 0", got)
		}
	})
}

func TestBusSubscribeErrors(t *testing.T) {
	b := new(hybridtest.Bus)
	defer b.Close()
	if _, err := b.Subscribe(t.Context(), "ch", nil, nil); err == nil {
		t.Error("Subscribe with a nil onMessage: got nil error, want one")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.Subscribe(ctx, "ch", func([]byte) {}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Subscribe with a cancelled ctx: got %v, want %v", err, context.Canceled)
	}
	if err := b.Publish(ctx, "ch", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Publish with a cancelled ctx: got %v, want %v", err, context.Canceled)
	}
}

func TestBusConcurrentPublishers(t *testing.T) {
	b := new(hybridtest.Bus)
	defer b.Close()
	var r recorder
	defer subscribe(t, b, "ch", &r)()
	const publishers, each = 8, 250
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for i := range each {
				if err := b.Publish(context.Background(), "ch", fmt.Appendf(nil, "%d:%d", p, i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	flush(t, b)
	got := r.events()
	if len(got) != publishers*each {
		t.Fatalf("got %d messages, want %d", len(got), publishers*each)
	}
	// Per publisher, the order is kept.
	next := make([]int, publishers)
	for _, m := range got {
		var p, i int
		if _, err := fmt.Sscanf(m, "%d:%d", &p, &i); err != nil {
			t.Fatal(err)
		}
		if i != next[p] {
			t.Fatalf("publisher %d: got message %d, want %d", p, i, next[p])
		}
		next[p]++
	}
}
