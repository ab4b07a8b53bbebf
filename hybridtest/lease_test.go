package hybridtest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybridtest"
)

// guards returns a key for each lease of keys to guard: "g:" and the lease's
// key.
func guards(keys []string) []string {
	if keys == nil {
		return nil
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = "g:" + k
	}
	return out
}

func TestRemoteTakeLeases(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	r := &hybridtest.Remote{Now: clk.Now}
	const ttl = 10 * time.Second
	taken, left, values, _, err := r.TakeLeases(ctx, []string{"a", "b"}, []string{"g:a", "g:b"}, "t1", ttl)
	if err != nil || !slices.Equal(taken, []bool{true, true}) || !slices.Equal(left, []time.Duration{0, 0}) || len(values) != 2 || values[0] != nil || values[1] != nil {
		t.Fatalf("TakeLeases(t1) = %v, %v, %q, %v; want [true true], [0 0], [nil nil], nil", taken, left, values, err)
	}
	// A lease is an entry like any other: the token, for ttl.
	if v, ok := r.Peek("a"); !ok || string(v) != "t1" {
		t.Errorf("a holds %q, %v; want \"t1\", true", v, ok)
	}
	if got, want := r.Keys(), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("Keys: got %q, want %q", got, want)
	}

	clk.Advance(4 * time.Second)
	taken, left, _, holders, err := r.TakeLeases(ctx, []string{"a", "c", "c", "b"}, []string{"g:a", "g:c", "g:c", "g:b"}, "t2", time.Minute)
	if want := []bool{false, true, false, false}; err != nil || !slices.Equal(taken, want) {
		t.Fatalf("TakeLeases(t2) = %v, %v; want %v, nil", taken, err, want)
	}
	if want := []string{"t1", "", "t2", "t1"}; !slices.Equal(holders, want) {
		t.Errorf("holders: got %q, want %q", holders, want)
	}
	if want := []time.Duration{6 * time.Second, 0, time.Minute, 6 * time.Second}; !slices.Equal(left, want) {
		t.Errorf("left: got %v, want %v", left, want)
	}
	// Each lease found held is marked as asked for, c by its repeat: its
	// token and a '*', with the lifetime it had.
	for k, want := range map[string]string{"a": "t1*", "b": "t1*", "c": "t2*"} {
		if v, ok := r.Peek(k); !ok || string(v) != want {
			t.Errorf("after t2's take, %s holds %q, %v; want %q, true", k, v, ok, want)
		}
	}
	// The holder itself does not take its lease again (SET NX); marked
	// once, a lease stays so.
	taken, left, _, _, err = r.TakeLeases(ctx, []string{"a"}, []string{"g:a"}, "t1", ttl)
	if err != nil || taken[0] || left[0] != 6*time.Second {
		t.Errorf("TakeLeases(t1) again = %v, %v, %v; want [false], [6s], nil", taken, left, err)
	}
	if v, _ := r.Peek("a"); string(v) != "t1*" {
		t.Errorf("after another take, a holds %q, want \"t1*\"", v)
	}

	// Within a millisecond of its end, a lease still has 1ms left.
	clk.Advance(6*time.Second - time.Microsecond)
	if _, left, _, _, _ := r.TakeLeases(ctx, []string{"a"}, []string{"g:a"}, "t2", ttl); left[0] != time.Millisecond {
		t.Errorf("left a microsecond before expiry: got %v, want 1ms", left[0])
	}
	clk.Advance(time.Microsecond)
	if _, ok := r.Peek("a"); ok {
		t.Error("lease a outlived its ttl")
	}
	if taken, _, _, _, err := r.TakeLeases(ctx, []string{"a"}, []string{"g:a"}, "t2", ttl); err != nil || !taken[0] {
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
	taken, left, _, _, err := r.TakeLeases(t.Context(), []string{"l"}, []string{"g:l"}, "t", ttl)
	if err != nil || taken[0] || left[0] != ttl {
		t.Fatalf("TakeLeases over a key without expiry = %v, %v, %v; want [false], [%v], nil", taken, left, err, ttl)
	}
	if v, _ := r.Peek("l"); string(v) != "stray*" {
		t.Errorf("after the take, l holds %q, want \"stray*\" (marked)", v)
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
	if _, _, _, _, err := r.TakeLeases(ctx, []string{"a", "b"}, []string{"g:a", "g:b"}, "t1", time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, err := r.TakeLeases(ctx, []string{"c"}, []string{"g:c"}, "t2", time.Second); err != nil {
		t.Fatal(err)
	}
	// b is asked for: still t1's.
	if taken, _, _, _, err := r.TakeLeases(ctx, []string{"b"}, []string{"g:b"}, "t3", time.Hour); err != nil || taken[0] {
		t.Fatalf("TakeLeases(t3, b) = %v, %v; want [false], nil", taken, err)
	}
	clk.Advance(500 * time.Millisecond)
	held, err := r.ExtendLeases(ctx, []string{"a", "c", "missing", "b"}, "t1", time.Minute)
	if want := []bool{true, false, false, true}; err != nil || !slices.Equal(held, want) {
		t.Fatalf("ExtendLeases(t1) = %v, %v; want %v, nil", held, err, want)
	}
	if v, _ := r.Peek("b"); string(v) != "t1*" {
		t.Errorf("b, marked, after its holder extended it holds %q, want \"t1*\"", v)
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
	clk := newClock()
	bus := new(hybridtest.Bus)
	defer bus.Close()
	r := &hybridtest.Remote{Bus: bus, Now: clk.Now}
	// A subscriber that tries to take the lease a message names on hearing
	// it finds it released (and, when it does not, asks for it).
	var (
		mu   sync.Mutex
		got  []string
		took []bool
	)
	unsub, err := bus.Subscribe(ctx, "ch", func(m []byte) {
		_, lease, _ := strings.Cut(string(m), " ")
		taken, _, _, _, err := r.TakeLeases(ctx, []string{lease}, []string{"g:" + lease}, "waiter", time.Minute)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, string(m))
		took = append(took, err == nil && taken[0])
		if taken != nil && taken[0] {
			_ = r.ReleaseLeases(ctx, []string{lease}, "waiter", "", nil)
		}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	take := func(token string, ttl time.Duration, keys ...string) {
		t.Helper()
		if taken, _, _, _, err := r.TakeLeases(ctx, keys, guards(keys), token, ttl); err != nil || slices.Contains(taken, false) {
			t.Fatalf("TakeLeases(%s, %q) = %v, %v; want all taken", token, keys, taken, err)
		}
	}
	release := func(token string, keys []string, channel, msg string) {
		t.Helper()
		if err := r.ReleaseLeases(ctx, keys, token, channel, []byte(msg)); err != nil {
			t.Fatalf("ReleaseLeases(%s, %q): %v", token, keys, err)
		}
		if err := bus.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	holds := func(key, want string) {
		t.Helper()
		v, ok := r.Peek(key)
		if ok != (want != "") || string(v) != want {
			t.Errorf("%s holds %q, %v; want %q", key, v, ok, want)
		}
	}
	take("t1", time.Minute, "a", "b", "c", "f")
	take("t1", time.Second, "d", "e")

	// A stranger releases nothing and marks nothing; as the leases are not
	// held under its token, someone may wait: its message goes out. (On
	// hearing it, the subscriber asks for a.)
	release("t2", []string{"a", "b"}, "ch", "m1 a")
	holds("a", "t1*")
	holds("b", "t1")
	// The holder's release of leases no one asked for deletes them, with
	// no message; a lease named twice is released once, quietly too.
	release("t1", []string{"b", "b"}, "ch", "not sent")
	holds("b", "")
	// Asked for, a lease's release announces, once for all the leases.
	release("t1", []string{"a", "c"}, "ch", "m2 a")
	holds("a", "")
	holds("c", "")
	// Expired, or another's since: someone may wait, and another's lease
	// stays as it is.
	clk.Advance(time.Second)
	release("t1", []string{"d"}, "ch", "m3 d")
	take("t3", time.Minute, "e")
	release("t1", []string{"e"}, "ch", "m4 e")
	holds("e", "t3*") // asked for by the subscriber, on hearing m4
	// No channel: no message, even for a lease asked for.
	if taken, _, _, _, err := r.TakeLeases(ctx, []string{"f"}, []string{"g:f"}, "t2", time.Minute); err != nil || taken[0] {
		t.Fatalf("TakeLeases(t2, f) = %v, %v; want [false], nil", taken, err)
	}
	release("t1", []string{"f"}, "", "not sent")
	holds("f", "")

	mu.Lock()
	if want := []string{"m1 a", "m2 a", "m3 d", "m4 e"}; !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
	if want := []bool{false, true, true, false}; !slices.Equal(took, want) {
		t.Errorf("the subscriber took the lease on hearing each message: got %v, want %v", took, want)
	}
	mu.Unlock()
	if got, want := bus.Stats().Published, uint64(4); got != want {
		t.Errorf("Bus published %d messages, want %d", got, want)
	}
}

// TestRemoteReleaseLeasesFailingBus: when a message is due and the publish
// fails, nothing is released; when none is due, the bus is not used, and
// the release succeeds.
func TestRemoteReleaseLeasesFailingBus(t *testing.T) {
	ctx := t.Context()
	bus := new(hybridtest.Bus)
	defer bus.Close()
	r := &hybridtest.Remote{Bus: bus}
	if taken, _, _, _, err := r.TakeLeases(ctx, []string{"asked", "quiet"}, []string{"g:asked", "g:quiet"}, "t1", time.Minute); err != nil || slices.Contains(taken, false) {
		t.Fatalf("TakeLeases(t1) = %v, %v; want all taken", taken, err)
	}
	if taken, _, _, _, err := r.TakeLeases(ctx, []string{"asked"}, []string{"g:asked"}, "t2", time.Minute); err != nil || taken[0] {
		t.Fatalf("TakeLeases(t2) = %v, %v; want [false], nil", taken, err)
	}
	down := errors.New("bus down")
	bus.FailWith(down)
	if err := r.ReleaseLeases(ctx, []string{"quiet", "asked"}, "t1", "ch", []byte("m")); !errors.Is(err, down) {
		t.Errorf("ReleaseLeases of a lease asked for with a failing bus: got %v, want %v", err, down)
	}
	for k, want := range map[string]string{"asked": "t1*", "quiet": "t1"} {
		if v, ok := r.Peek(k); !ok || string(v) != want {
			t.Errorf("after a failed release, %s holds %q, %v; want %q, true", k, v, ok, want)
		}
	}
	if err := r.ReleaseLeases(ctx, []string{"quiet"}, "t1", "ch", []byte("m")); err != nil {
		t.Errorf("ReleaseLeases of a lease not asked for with a failing bus: %v", err)
	}
	if v, ok := r.Peek("quiet"); ok {
		t.Errorf("after its release, quiet holds %q", v)
	}
	bus.FailWith(nil)
	if got := bus.Stats().Published; got != 0 {
		t.Errorf("Bus published %d messages, want none", got)
	}
}

func TestRemoteLeasesNoBus(t *testing.T) {
	var r hybridtest.Remote
	ctx := t.Context()
	if _, _, _, _, err := r.TakeLeases(ctx, []string{"l"}, []string{"g:l"}, "t", time.Minute); err != nil {
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
			taken, left, values, _, err := r.TakeLeases(ctx, keys, guards(keys), "t", ttl)
			if err == nil || taken != nil || left != nil || values != nil || !strings.HasPrefix(err.Error(), "hybridtest: ") {
				t.Errorf("TakeLeases(%d keys, ttl %v) = %v, %v, %q, %v; want an error", len(keys), ttl, taken, left, values, err)
			}
			held, err := r.ExtendLeases(ctx, keys, "t", ttl)
			if err == nil || held != nil || !strings.HasPrefix(err.Error(), "hybridtest: ") {
				t.Errorf("ExtendLeases(%d keys, ttl %v) = %v, %v; want an error", len(keys), ttl, held, err)
			}
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second, time.Millisecond - 1} {
		wrote, err := r.FillAndRelease(ctx, "k", nil, []byte("v"), ttl, "l", "t", "", nil, nil)
		if err == nil || wrote || !strings.HasPrefix(err.Error(), "hybridtest: ") {
			t.Errorf("FillAndRelease(ttl %v) = %v, %v; want an error", ttl, wrote, err)
		}
	}
	for _, g := range [][]string{nil, {"g:1"}, {"g:1", "g:2", "g:3"}} {
		keys := []string{"l1", "l2"}
		if len(g) == 1 {
			keys = nil
		}
		taken, left, values, _, err := r.TakeLeases(ctx, keys, g, "t", time.Second)
		if err == nil || taken != nil || left != nil || values != nil || !strings.HasPrefix(err.Error(), "hybridtest: ") {
			t.Errorf("TakeLeases(%d keys, %d guards) = %v, %v, %q, %v; want an error", len(keys), len(g), taken, left, values, err)
		}
	}
	if r.Len() != 0 {
		t.Errorf("Keys after bad calls: got %q, want none", r.Keys())
	}

	// No keys: nothing to do, even with a done ctx or a failing store.
	r.FailWith(errors.New("down"))
	done, cancel := context.WithCancel(ctx)
	cancel()
	if taken, left, values, _, err := r.TakeLeases(done, nil, nil, "t", time.Second); err != nil || len(taken) != 0 || len(left) != 0 || len(values) != 0 {
		t.Errorf("TakeLeases(nil) = %v, %v, %q, %v; want none, nil", taken, left, values, err)
	}
	if held, err := r.ExtendLeases(done, nil, "t", time.Second); err != nil || len(held) != 0 {
		t.Errorf("ExtendLeases(nil) = %v, %v; want none, nil", held, err)
	}
	if err := r.ReleaseLeases(done, nil, "t", "", nil); err != nil {
		t.Errorf("ReleaseLeases(nil, no channel): %v", err)
	}
	if got, want := r.Calls(), (hybridtest.Calls{TakeLeases: 10, ExtendLeases: 7, ReleaseLeases: 1, FillAndRelease: 3}); got != want {
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
			taken, _, _, _, err := r.TakeLeases(t.Context(), []string{"l"}, []string{"g:l"}, "t", time.Minute)
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

func TestRemoteTakeLeasesValues(t *testing.T) {
	// For each lease taken, what its guarded key held right after the
	// take; nil for nothing, and for the leases not taken.
	ctx := t.Context()
	r := new(hybridtest.Remote)
	r.Put("v:0", []byte("zero"), time.Minute)
	r.Put("v:1", []byte{}, time.Minute)
	r.Put("v:3", []byte("three"), time.Minute)
	r.Put("v:4", []byte("four"), time.Minute)
	if _, _, _, _, err := r.TakeLeases(ctx, []string{"l:3"}, []string{"v:3"}, "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	keys := []string{"l:0", "l:1", "l:2", "l:3", "l:4", "l:4"}
	taken, _, values, _, err := r.TakeLeases(ctx, keys, []string{"v:0", "v:1", "v:2", "v:3", "v:4", "v:4"}, "me", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, true, false, true, false}; !slices.Equal(taken, want) {
		t.Errorf("taken: got %v, want %v", taken, want)
	}
	want := [][]byte{[]byte("zero"), {}, nil, nil, []byte("four"), nil}
	for i := range want {
		if !bytes.Equal(values[i], want[i]) || (values[i] == nil) != (want[i] == nil) {
			t.Errorf("values[%d]: got %q (nil: %v), want %q (nil: %v)", i, values[i], values[i] == nil, want[i], want[i] == nil)
		}
	}
	// A copy: changing it changes nothing stored.
	values[0][0] = 'Z'
	if v, _ := r.Peek("v:0"); string(v) != "zero" {
		t.Errorf("after the caller changed a value, v:0 holds %q, want \"zero\"", v)
	}
}

func TestRemoteFillAndRelease(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	bus := new(hybridtest.Bus)
	defer bus.Close()
	r := &hybridtest.Remote{Bus: bus, Now: clk.Now}
	// A subscriber that, on hearing a message, reads the key and the lease
	// finds the write made and the lease released.
	var (
		mu    sync.Mutex
		heard []string
	)
	unsub, err := bus.Subscribe(ctx, "ch", func(m []byte) {
		f := strings.Fields(string(m))
		key, lease := f[0], f[1]
		v, _ := r.Peek(key)
		_, held := r.Peek(lease)
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, fmt.Sprintf("%s: %s=%q, lease held %v", m, key, v, held))
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	if _, _, _, _, err := r.TakeLeases(ctx, []string{"la", "lb", "lc", "le", "lq", "lu", "lv"}, []string{"a", "b", "c", "e", "q", "u", "v"}, "me", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, err := r.TakeLeases(ctx, []string{"ls", "lt"}, []string{"s", "t"}, "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	// All but lu, lv and ls are asked for.
	asked := []string{"la", "lb", "lc", "le", "lq", "lt"}
	if taken, _, _, _, err := r.TakeLeases(ctx, asked, asked, "waiter", time.Minute); err != nil || slices.Contains(taken, true) {
		t.Fatalf("TakeLeases(waiter) = %v, %v; want none taken", taken, err)
	}
	r.Put("b", []byte("other's"), time.Minute)
	r.Put("e", []byte{}, time.Minute)
	r.Put("v", []byte("there"), time.Minute)
	const ttl = 10 * time.Second
	tests := []struct {
		key, lease string
		old        []byte
		value      string
		wrote      bool
		want       string // what key holds after; "-": nothing
		channel    string
		silent     bool   // no one may wait for the lease: no message
		leaseAfter string // what the lease holds after; "": nothing
	}{
		{key: "a", lease: "la", value: "a1", wrote: true, want: "a1", channel: "ch"},                         // absent
		{key: "b", lease: "lb", value: "b1", want: "other's", channel: "ch"},                                 // present
		{key: "b", lease: "lb", old: []byte("other's"), value: "b2", wrote: true, want: "b2", channel: "ch"}, // old matches, lease gone
		{key: "b", lease: "lb", old: []byte("other's"), value: "b3", want: "b2", channel: "ch"},              // old does not
		{key: "c", lease: "lc", old: []byte("x"), value: "c1", want: "-", channel: "ch"},                     // missing, old given
		{key: "c", lease: "lc", old: []byte{}, value: "c2", want: "-", channel: "ch"},                        // missing, old empty
		{key: "e", lease: "le", old: []byte{}, value: "e1", wrote: true, want: "e1", channel: "ch"},          // empty, old empty
		{key: "s", lease: "ls", value: "s1", wrote: true, want: "s1", channel: "ch", leaseAfter: "other"},    // a stranger's lease stays
		{key: "t", lease: "lt", value: "t1", wrote: true, want: "t1", channel: "ch", leaseAfter: "other*"},   // and one asked for
		{key: "q", lease: "lq", value: "q1", wrote: true, want: "q1"},                                        // no channel
		{key: "u", lease: "lu", value: "u1", wrote: true, want: "u1", channel: "ch", silent: true},           // not asked for
		{key: "v", lease: "lv", value: "v1", want: "there", channel: "ch", silent: true},                     // not asked for, present
	}
	var want []string
	for _, tt := range tests {
		stored, unstored := []byte(tt.key+" "+tt.lease+" stored"), []byte(tt.key+" "+tt.lease+" unstored")
		wrote, err := r.FillAndRelease(ctx, tt.key, tt.old, []byte(tt.value), ttl, tt.lease, "me", tt.channel, stored, unstored)
		if err != nil || wrote != tt.wrote {
			t.Errorf("FillAndRelease(%s, old %q, %s) = %v, %v; want %v, nil", tt.key, tt.old, tt.value, wrote, err, tt.wrote)
		}
		v, ok := r.Peek(tt.key)
		if (tt.want == "-") == ok || (ok && string(v) != tt.want) {
			t.Errorf("after FillAndRelease(%s, old %q, %s), %s holds %q, %v; want %q", tt.key, tt.old, tt.value, tt.key, v, ok, tt.want)
		}
		if err := bus.Flush(ctx); err != nil { // the subscriber looks now
			t.Fatal(err)
		}
		if v, held := r.Peek(tt.lease); held != (tt.leaseAfter != "") || string(v) != tt.leaseAfter {
			t.Errorf("after FillAndRelease(%s), lease %s holds %q, %v; want %q", tt.key, tt.lease, v, held, tt.leaseAfter)
		}
		if tt.channel != "" && !tt.silent {
			msg := unstored
			if tt.wrote {
				msg = stored
			}
			want = append(want, fmt.Sprintf("%s: %s=%q, lease held %v", msg, tt.key, tt.want, tt.leaseAfter != ""))
		}
	}
	mu.Lock()
	for i := range want {
		want[i] = strings.ReplaceAll(want[i], `="-"`, `=""`)
	}
	if !slices.Equal(heard, want) {
		t.Errorf("the subscriber heard\n%s\nwant\n%s", strings.Join(heard, "\n"), strings.Join(want, "\n"))
	}
	mu.Unlock()

	// The value lives for ttl.
	clk.Advance(ttl - time.Millisecond)
	if _, ok := r.Peek("a"); !ok {
		t.Error("a gone before its ttl")
	}
	clk.Advance(time.Millisecond)
	if _, ok := r.Peek("a"); ok {
		t.Error("a outlived its ttl")
	}
	if got := r.Calls(); got.FillAndRelease != len(tests) || got.Total() != len(tests)+3 {
		t.Errorf("Calls: got %+v, want %d FillAndRelease, %d in all", got, len(tests), len(tests)+3)
	}
}

func TestRemoteFillAndReleaseFailures(t *testing.T) {
	ctx := t.Context()
	// Given a channel, no Bus is an error, and nothing is done.
	var nobus hybridtest.Remote
	if _, _, _, _, err := nobus.TakeLeases(ctx, []string{"l"}, []string{"k"}, "t", time.Minute); err != nil {
		t.Fatal(err)
	}
	if wrote, err := nobus.FillAndRelease(ctx, "k", nil, []byte("v"), time.Minute, "l", "t", "ch", nil, nil); !errors.Is(err, hybridtest.ErrNoBus) || wrote {
		t.Errorf("FillAndRelease with a channel and no Bus = %v, %v; want false, %v", wrote, err, hybridtest.ErrNoBus)
	}
	if got, want := nobus.Keys(), []string{"l"}; !slices.Equal(got, want) {
		t.Errorf("Keys after a FillAndRelease without a Bus: got %q, want %q", got, want)
	}
	if wrote, err := nobus.FillAndRelease(ctx, "k", nil, []byte("v"), time.Minute, "l", "t", "", nil, nil); err != nil || !wrote {
		t.Errorf("FillAndRelease without a channel or a Bus = %v, %v; want true, nil", wrote, err)
	}
	if got, want := nobus.Keys(), []string{"k"}; !slices.Equal(got, want) {
		t.Errorf("Keys after FillAndRelease: got %q, want %q", got, want)
	}

	// When a message is due (the lease was asked for) and the publish
	// fails, nothing is written or released.
	bus := new(hybridtest.Bus)
	defer bus.Close()
	r := &hybridtest.Remote{Bus: bus}
	if _, _, _, _, err := r.TakeLeases(ctx, []string{"l", "m"}, []string{"k", "k2"}, "t", time.Minute); err != nil {
		t.Fatal(err)
	}
	if taken, _, _, _, err := r.TakeLeases(ctx, []string{"l"}, []string{"k"}, "waiter", time.Minute); err != nil || taken[0] {
		t.Fatalf("TakeLeases(waiter) = %v, %v; want [false], nil", taken, err)
	}
	down := errors.New("bus down")
	bus.FailWith(down)
	if wrote, err := r.FillAndRelease(ctx, "k", nil, []byte("v"), time.Minute, "l", "t", "ch", nil, nil); !errors.Is(err, down) || wrote {
		t.Errorf("FillAndRelease with a failing bus = %v, %v; want false, %v", wrote, err, down)
	}
	if got, want := r.Keys(), []string{"l", "m"}; !slices.Equal(got, want) {
		t.Errorf("Keys after a failed FillAndRelease: got %q, want %q", got, want)
	}
	if v, _ := r.Peek("l"); string(v) != "t*" {
		t.Errorf("after a failed FillAndRelease, l holds %q, want \"t*\"", v)
	}
	// When none is due, the bus is not used: written and released.
	if wrote, err := r.FillAndRelease(ctx, "k2", nil, []byte("v"), time.Minute, "m", "t", "ch", nil, nil); err != nil || !wrote {
		t.Errorf("FillAndRelease of a lease not asked for with a failing bus = %v, %v; want true, nil", wrote, err)
	}
	if got, want := r.Keys(), []string{"k2", "l"}; !slices.Equal(got, want) {
		t.Errorf("Keys after FillAndRelease of m: got %q, want %q", got, want)
	}
	bus.FailWith(nil)
	if got := bus.Stats().Published; got != 0 {
		t.Errorf("Bus published %d messages, want none", got)
	}
}
