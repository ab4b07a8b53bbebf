package invalidate_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

func TestOrderIsPreserved(t *testing.T) {
	const n = 1000
	ch := redistest.Prefix(t)
	pub := newBus(t, srv.Client(t), invalidate.Options{})
	subBus := newBus(t, srv.Client(t), invalidate.Options{})
	r := newRecorder()
	subscribe(t, subBus, ch, r)
	for i := range n {
		publish(t, pub, ch, strconv.Itoa(i))
	}
	for i := range n {
		if got, want := r.next(t), strconv.Itoa(i); got != want {
			t.Fatalf("message %d: got %q, want %q", i, got, want)
		}
	}
	if got := r.overflow.Load(); got != 0 {
		t.Fatalf("recorder overflow: got %d, want 0", got)
	}
	subBus.Close() // waits for the callback in progress, so Stats are final
	st := subBus.Stats()
	if st.Received != n || st.Delivered != n {
		t.Fatalf("Stats: got Received %d, Delivered %d, want %d, %d", st.Received, st.Delivered, n, n)
	}
}

func TestTwoSubscribersOnOneChannel(t *testing.T) {
	ch := redistest.Prefix(t)
	pub := newBus(t, srv.Client(t), invalidate.Options{})
	subBus := newBus(t, srv.Client(t), invalidate.Options{})
	r1, r2 := newRecorder(), newRecorder()
	subscribe(t, subBus, ch, r1)
	subscribe(t, subBus, ch, r2)
	for _, m := range []string{"a", "b", "c"} {
		publish(t, pub, ch, m)
	}
	for _, r := range []*recorder{r1, r2} {
		for _, want := range []string{"a", "b", "c"} {
			r.expect(t, want)
		}
	}
	subBus.Close() // so that Stats are final
	if st := subBus.Stats(); st.Received != 3 || st.Delivered != 6 {
		t.Fatalf("Stats: got Received %d, Delivered %d, want 3, 6", st.Received, st.Delivered)
	}
}

func TestMessageCopiesAreSeparate(t *testing.T) {
	ch := redistest.Prefix(t)
	b := newBus(t, srv.Client(t), invalidate.Options{})
	got := make(chan []byte, 2)
	keep := func(msg []byte) { got <- msg }
	for range 2 {
		unsub, err := b.Subscribe(context.Background(), ch, keep, func(bool) {})
		if err != nil {
			t.Fatal(err)
		}
		defer unsub()
	}
	publish(t, b, ch, "xy")
	m1, m2 := <-got, <-got
	m1[0] = 'z'
	if string(m2) != "xy" {
		t.Fatalf("second subscriber's message after the first changed its own: got %q, want %q", m2, "xy")
	}
}

func TestUnsubscribeWaitsForCallback(t *testing.T) {
	ch := redistest.Prefix(t)
	b := newBus(t, srv.Client(t), invalidate.Options{})
	entered := make(chan string, 10)
	release := make(chan struct{})
	unsub, err := b.Subscribe(context.Background(), ch, func(msg []byte) {
		entered <- string(msg)
		<-release
	}, func(bool) {})
	if err != nil {
		t.Fatal(err)
	}
	stay := newRecorder()
	subscribe(t, b, ch, stay)

	publish(t, b, ch, "1")
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("callback not called")
	}
	done := make(chan struct{})
	go func() {
		unsub()
		close(done)
	}()
	// A negative check needs a window: unsubscribe must still be waiting.
	select {
	case <-done:
		t.Fatal("unsubscribe returned while the callback was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("unsubscribe did not return after the callback did")
	}

	publish(t, b, ch, "2")
	stay.expect(t, "1")
	stay.expect(t, "2")
	select {
	case m := <-entered:
		t.Fatalf("callback called after unsubscribe returned, with %q", m)
	default:
	}
}

func TestCallbackPanicIsReportedAsLoss(t *testing.T) {
	ch := redistest.Prefix(t)
	b := newBus(t, srv.Client(t), invalidate.Options{})
	r := newRecorder()
	unsub, err := b.Subscribe(context.Background(), ch, func(msg []byte) {
		if string(msg) == "boom" {
			panic("boom")
		}
		r.onMessage(msg)
	}, r.onLoss)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	publish(t, b, ch, "boom")
	publish(t, b, ch, "after")
	r.waitLoss(t, "panic")
	r.expect(t, "after")
	b.Close() // so that Stats are final
	st := b.Stats()
	if st.Panics != 1 || st.Losses != 1 || st.Delivered != 1 {
		t.Fatalf("Stats: got Panics %d, Losses %d, Delivered %d, want 1, 1, 1", st.Panics, st.Losses, st.Delivered)
	}
}
