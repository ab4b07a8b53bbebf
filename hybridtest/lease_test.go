package hybridtest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybridtest"
)

func TestRemoteTakeLeases(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	r := &hybridtest.Remote{Now: clk.Now}
	const ttl = 10 * time.Second
	taken, left, err := r.TakeLeases(ctx, []string{"a", "b"}, "t1", ttl)
	if err != nil || !slices.Equal(taken, []bool{true, true}) || !slices.Equal(left, []time.Duration{0, 0}) {
		t.Fatalf("TakeLeases(t1) = %v, %v, %v; want [true true], [0 0], nil", taken, left, err)
	}
	// A lease is an entry like any other: the token, for ttl.
	if v, ok := r.Peek("a"); !ok || string(v) != "t1" {
		t.Errorf("a holds %q, %v; want \"t1\", true", v, ok)
	}
	if got, want := r.Keys(), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("Keys: got %q, want %q", got, want)
	}

	clk.Advance(4 * time.Second)
	taken, left, err = r.TakeLeases(ctx, []string{"a", "c", "c", "b"}, "t2", time.Minute)
	if want := []bool{false, true, false, false}; err != nil || !slices.Equal(taken, want) {
		t.Fatalf("TakeLeases(t2) = %v, %v; want %v, nil", taken, err, want)
	}
	if want := []time.Duration{6 * time.Second, 0, time.Minute, 6 * time.Second}; !slices.Equal(left, want) {
		t.Errorf("left: got %v, want %v", left, want)
	}
	// The holder itself does not take its lease again (SET NX).
	taken, left, err = r.TakeLeases(ctx, []string{"a"}, "t1", ttl)
	if err != nil || taken[0] || left[0] != 6*time.Second {
		t.Errorf("TakeLeases(t1) again = %v, %v, %v; want [false], [6s], nil", taken, left, err)
	}

	// Within a millisecond of its end, a lease still has 1ms left.
	clk.Advance(6*time.Second - time.Microsecond)
	if _, left, _ := r.TakeLeases(ctx, []string{"a"}, "t2", ttl); left[0] != time.Millisecond {
		t.Errorf("left a microsecond before expiry: got %v, want 1ms", left[0])
	}
	clk.Advance(time.Microsecond)
	if _, ok := r.Peek("a"); ok {
		t.Error("lease a outlived its ttl")
	}
	if taken, _, err := r.TakeLeases(ctx, []string{"a"}, "t2", ttl); err != nil || !taken[0] {
		t.Errorf("TakeLeases(t2) after expiry = %v, %v; want [true], nil", taken, err)
	}
	if got := r.Calls(); got.TakeLeases != 5 || got.Total() != 5 {
		t.Errorf("Calls: got %+v, want 5 TakeLeases (one per call)", got)
	}
}

func TestRemoteTakeLeaseWithoutExpiry(t *testing.T) {
	// As l2.Store: a key without an expiry is given ttl, so that it cannot
	// hold its lease for ever.
	clk := newClock()
	r := &hybridtest.Remote{Now: clk.Now}
	r.Put("l", []byte("stray"), 0)
	const ttl = 10 * time.Second
	taken, left, err := r.TakeLeases(t.Context(), []string{"l"}, "t", ttl)
	if err != nil || taken[0] || left[0] != ttl {
		t.Fatalf("TakeLeases over a key without expiry = %v, %v, %v; want [false], [%v], nil", taken, left, err, ttl)
	}
	clk.Advance(ttl)
	if _, ok := r.Peek("l"); ok {
		t.Errorf("l outlived the ttl the take gave it")
	}
}

func TestRemoteExtendLeases(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	r := &hybridtest.Remote{Now: clk.Now}
	if _, _, err := r.TakeLeases(ctx, []string{"a", "b"}, "t1", time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.TakeLeases(ctx, []string{"c"}, "t2", time.Second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(500 * time.Millisecond)
	held, err := r.ExtendLeases(ctx, []string{"a", "c", "missing", "b"}, "t1", time.Minute)
	if want := []bool{true, false, false, true}; err != nil || !slices.Equal(held, want) {
		t.Fatalf("ExtendLeases(t1) = %v, %v; want %v, nil", held, err, want)
	}
	if _, ok := r.Peek("missing"); ok {
		t.Error("ExtendLeases made a lease")
	}
	clk.Advance(time.Second)
	if got, want := r.Keys(), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("Keys 1.5s after the takes: got %q, want %q (only the extended)", got, want)
	}
	clk.Advance(time.Minute - time.Second)
	if r.Len() != 0 {
		t.Errorf("Keys a minute after the extend: got %q, want none", r.Keys())
	}
	if held, err := r.ExtendLeases(ctx, []string{"a"}, "t1", time.Minute); err != nil || held[0] {
		t.Errorf("ExtendLeases of an expired lease = %v, %v; want [false], nil", held, err)
	}
}

func TestRemoteReleaseLeases(t *testing.T) {
	ctx := t.Context()
	bus := new(hybridtest.Bus)
	defer bus.Close()
	r := &hybridtest.Remote{Bus: bus}
	// A subscriber that tries to take the lease on hearing the message
	// finds it released.
	var (
		mu   sync.Mutex
		got  []string
		took []bool
	)
	unsub, err := bus.Subscribe(ctx, "ch", func(m []byte) {
		taken, _, err := r.TakeLeases(ctx, []string{"a"}, "waiter", time.Minute)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(m))
		took = append(took, err == nil && taken[0])
		if taken != nil && taken[0] {
			_ = r.ReleaseLeases(ctx, []string{"a"}, "waiter", "", nil)
		}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	if _, _, err := r.TakeLeases(ctx, []string{"a", "b"}, "t1", time.Minute); err != nil {
		t.Fatal(err)
	}

	// A stranger releases nothing; its message goes out all the same.
	if err := r.ReleaseLeases(ctx, []string{"a", "b"}, "t2", "ch", []byte("m1")); err != nil {
		t.Fatalf("ReleaseLeases(t2): %v", err)
	}
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Keys(), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("Keys after a stranger's release: got %q, want %q", got, want)
	}
	// The holder's release deletes.
	if err := r.ReleaseLeases(ctx, []string{"a", "missing"}, "t1", "ch", []byte("m2")); err != nil {
		t.Fatalf("ReleaseLeases(t1): %v", err)
	}
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// No channel: no message.
	if err := r.ReleaseLeases(ctx, []string{"b"}, "t1", "", []byte("not sent")); err != nil {
		t.Fatalf("ReleaseLeases without a channel: %v", err)
	}
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Len() != 0 {
		t.Errorf("Keys after the holder's releases: got %q, want none", r.Keys())
	}
	mu.Lock()
	if want := []string{"m1", "m2"}; !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
	if want := []bool{false, true}; !slices.Equal(took, want) {
		t.Errorf("the subscriber took the lease on hearing each message: got %v, want %v", took, want)
	}
	mu.Unlock()

	// When the publish fails, nothing is released.
	if _, _, err := r.TakeLeases(ctx, []string{"c"}, "t1", time.Minute); err != nil {
		t.Fatal(err)
	}
	down := errors.New("bus down")
	bus.FailWith(down)
	if err := r.ReleaseLeases(ctx, []string{"c"}, "t1", "ch", []byte("m3")); !errors.Is(err, down) {
		t.Errorf("ReleaseLeases with a failing bus: got %v, want %v", err, down)
	}
	bus.FailWith(nil)
	if v, ok := r.Peek("c"); !ok || string(v) != "t1" {
		t.Errorf("after a failed release, c holds %q, %v; want \"t1\", true", v, ok)
	}
}

func TestRemoteLeasesNoBus(t *testing.T) {
	var r hybridtest.Remote
	ctx := t.Context()
	if _, _, err := r.TakeLeases(ctx, []string{"l"}, "t", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := r.ReleaseLeases(ctx, []string{"l"}, "t", "ch", nil); !errors.Is(err, hybridtest.ErrNoBus) {
		t.Errorf("ReleaseLeases with a channel and no Bus: got %v, want %v", err, hybridtest.ErrNoBus)
	}
	if err := r.ReleaseLeases(ctx, []string{"l"}, "t", "", nil); err != nil {
		t.Errorf("ReleaseLeases without a channel or a Bus: %v", err)
	}
	if r.Len() != 0 {
		t.Errorf("Keys after the release: got %q, want none", r.Keys())
	}
}

func TestRemoteLeasesBadArguments(t *testing.T) {
	var r hybridtest.Remote
	ctx := t.Context()
	for _, ttl := range []time.Duration{0, -time.Second, time.Millisecond - 1} {
		for _, keys := range [][]string{{"l"}, nil} {
			taken, left, err := r.TakeLeases(ctx, keys, "t", ttl)
			if err == nil || taken != nil || left != nil || !strings.HasPrefix(err.Error(), "hybridtest: ") {
				t.Errorf("TakeLeases(%d keys, ttl %v) = %v, %v, %v; want an error", len(keys), ttl, taken, left, err)
			}
			held, err := r.ExtendLeases(ctx, keys, "t", ttl)
			if err == nil || held != nil || !strings.HasPrefix(err.Error(), "hybridtest: ") {
				t.Errorf("ExtendLeases(%d keys, ttl %v) = %v, %v; want an error", len(keys), ttl, held, err)
			}
		}
	}
	if r.Len() != 0 {
		t.Errorf("Keys after bad calls: got %q, want none", r.Keys())
	}

	// No keys: nothing to do, even with a done ctx or a failing store.
	r.FailWith(errors.New("down"))
	done, cancel := context.WithCancel(ctx)
	cancel()
	if taken, left, err := r.TakeLeases(done, nil, "t", time.Second); err != nil || len(taken) != 0 || len(left) != 0 {
		t.Errorf("TakeLeases(nil) = %v, %v, %v; want none, nil", taken, left, err)
	}
	if held, err := r.ExtendLeases(done, nil, "t", time.Second); err != nil || len(held) != 0 {
		t.Errorf("ExtendLeases(nil) = %v, %v; want none, nil", held, err)
	}
	if err := r.ReleaseLeases(done, nil, "t", "", nil); err != nil {
		t.Errorf("ReleaseLeases(nil, no channel): %v", err)
	}
	if got, want := r.Calls(), (hybridtest.Calls{TakeLeases: 7, ExtendLeases: 7, ReleaseLeases: 1}); got != want {
		t.Errorf("Calls: got %+v, want %+v (every call counts)", got, want)
	}
}

func TestRemoteReleaseLeasesNoKeys(t *testing.T) {
	// With no keys but a channel, the message still goes out.
	ctx := t.Context()
	bus := new(hybridtest.Bus)
	defer bus.Close()
	r := &hybridtest.Remote{Bus: bus}
	var got []string
	unsub, err := bus.Subscribe(ctx, "ch", func(m []byte) { got = append(got, string(m)) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	if err := r.ReleaseLeases(ctx, nil, "t", "ch", []byte("m")); err != nil {
		t.Fatal(err)
	}
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"m"}; !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
}

func TestRemoteTakeLeasesConcurrent(t *testing.T) {
	var r hybridtest.Remote
	const takers = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for range takers {
		wg.Go(func() {
			taken, _, err := r.TakeLeases(t.Context(), []string{"l"}, "t", time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			if taken[0] {
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n != 1 {
		t.Errorf("%d of %d takers took the lease, want 1", n, takers)
	}
}
