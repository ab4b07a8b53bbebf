package hybridtest_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/hybridtest"
)

// This file tests what the double adds to the contract: its knobs (faults,
// latency, hooks, counts, a clock) and its choices where the contract
// leaves one (TestRemote checks the contract).

var feed = tier.Feed{Channel: "ch", Log: "log", LogLen: 100}

// calls makes one call of every method of r, with messages and a log
// entry, and returns their errors.
func calls(ctx context.Context, r *hybridtest.Remote) []error {
	_, e1 := r.Get(ctx, []string{"k", "other"})
	_, e2 := r.Write(ctx, []tier.Write{
		{Key: "k", Value: []byte("v"), Msg: []byte("m"), Log: []byte("e")},
		{Key: "k", Value: []byte("v2"), If: tier.IfAbsent, Else: []byte("u")},
		{Key: "n", Value: []byte("v"), If: tier.IfNewer},
		{Key: "q", Value: []byte("v"), If: tier.IfEqual, Lease: "l", Token: "t"},
	}, feed)
	_, e3 := r.TakeLeases(ctx, []string{"l"}, []string{"k"}, "t", time.Minute)
	_, e4 := r.ExtendLeases(ctx, []string{"l"}, "t", time.Minute)
	e5 := r.ReleaseLeases(ctx, []string{"l"}, "t", []byte("m"), feed)
	_, e6 := r.ReadLog(ctx, "log", "", 10)
	_, e7 := r.ReadLog(ctx, "log", "0-0", 10)
	return []error{e1, e2, e3, e4, e5, e6, e7}
}

var once = hybridtest.Calls{Get: 1, Write: 1, TakeLeases: 1, ExtendLeases: 1, ReleaseLeases: 1, ReadLog: 2, OpenLog: 1,
	Read: 2, Writes: 4, Always: 1, IfAbsent: 1, IfEqual: 1, IfNewer: 1, Releasing: 1}

func TestRemoteCalls(t *testing.T) {
	r, _, _ := newRemote(t)
	ctx := t.Context()
	for i, err := range calls(ctx, r) {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	want := once
	want.Written = 2 // the Always and the IfNewer
	if got := r.Calls(); got != want {
		t.Errorf("Calls: got %+v, want %+v", got, want)
	}
	if got := r.Calls().Total(); got != 7 {
		t.Errorf("Calls().Total: got %d, want 7", got)
	}
	// Calls with nothing to do, or with bad arguments, make no round trip.
	_, _ = r.Get(ctx, nil)
	_, _ = r.Write(ctx, nil, feed)
	_, _ = r.Write(ctx, []tier.Write{{Key: "k", If: 9}}, feed)
	_, _ = r.TakeLeases(ctx, nil, nil, "t", time.Minute)
	_, _ = r.TakeLeases(ctx, []string{"l"}, nil, "t", time.Minute)
	_, _ = r.ExtendLeases(ctx, []string{"l"}, "t", 0)
	_ = r.ReleaseLeases(ctx, nil, "t", []byte("m"), feed)
	_, _ = r.ReadLog(ctx, "log", "x", 10)
	if got := r.Calls(); got != want {
		t.Errorf("Calls after calls with nothing to do or bad arguments: got %+v, want %+v", got, want)
	}
}

func TestRemoteFailWith(t *testing.T) {
	r, bus, got := newRemote(t)
	ctx := t.Context()
	r.Put("k", []byte("old"), 0)
	r.Put("l", []byte("t*"), time.Minute)
	down := errors.New("connection refused")
	r.FailWith(down)
	for i, err := range calls(ctx, r) {
		if !errors.Is(err, down) {
			t.Errorf("call %d: got %v, want %v", i, err, down)
		}
	}
	if c := r.Calls(); c != once {
		t.Errorf("Calls: got %+v, want %+v", c, once)
	}
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if msgs := got.all(); len(msgs) != 0 {
		t.Errorf("failed calls published %q", msgs)
	}
	if keys := r.Keys(); !slices.Equal(keys, []string{"k", "l"}) {
		t.Errorf("failed calls left keys %q, want [k l]", keys)
	}
	if v, _ := r.Peek("k"); string(v) != "old" {
		t.Errorf("failed writes changed k to %q, want \"old\"", v)
	}
	if es, _ := r.PeekLog("log"); es != nil {
		t.Errorf("failed calls logged %q", es)
	}
	r.FailWith(nil)
	for i, err := range calls(ctx, r) {
		if err != nil {
			t.Errorf("call %d after FailWith(nil): %v", i, err)
		}
	}
}

func TestRemoteCancelledContext(t *testing.T) {
	r, _, _ := newRemote(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for i, err := range calls(ctx, r) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("call %d with a cancelled ctx: got %v, want %v", i, err, context.Canceled)
		}
	}
}

func TestRemoteLatencyHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, _ := newRemote(t)
		r.SetLatency(time.Hour)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		for i, err := range calls(ctx, r) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("call %d with an hour of latency and a 10ms deadline: got %v, want %v", i, err, context.DeadlineExceeded)
			}
		}
		r.SetLatency(time.Second)
		start := time.Now()
		if _, err := r.Write(t.Context(), []tier.Write{{Key: "a"}, {Key: "b"}}, tier.Feed{}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("a Write of 2 with 1s latency took %v, want 1s (one round trip)", d)
		}
	})
}

func TestRemoteInfo(t *testing.T) {
	if got := (&hybridtest.Remote{}).Info(); got.Log != true || got.ReadBound != 0 || got.Prefix != "" {
		t.Errorf("Info: got %+v, want a log, no read bound, no prefix", got)
	}
	if got := (&hybridtest.Remote{NoLog: true}).Info(); got.Log {
		t.Errorf("Info with NoLog: got %+v, want no log", got)
	}
}

// TestRemoteNoBus: without a Bus, only a call with a message due fails.
func TestRemoteNoBus(t *testing.T) {
	var r hybridtest.Remote
	ctx := t.Context()
	st, err := r.Write(ctx, []tier.Write{
		{Key: "a", Value: []byte("1")},
		{Key: "b", Value: []byte("2"), If: tier.IfAbsent, Else: []byte("not stored")}, // stores: no message
		{Key: "a", Value: []byte("3"), Msg: []byte("m")},
		{Key: "c", Value: []byte("4")},
	}, feed)
	if !errors.Is(err, hybridtest.ErrNoBus) || !slices.Equal(st, []bool{true, true, false, false}) {
		t.Errorf("Write without a Bus: got %v, %v; want [true true false false], %v", st, err, hybridtest.ErrNoBus)
	}
	if got := r.Keys(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("keys: got %q, want [a b]", got)
	}
	if _, err := r.Write(ctx, []tier.Write{{Key: "a", Msg: []byte("m")}}, tier.Feed{}); err != nil {
		t.Errorf("Write with a message and no channel, without a Bus: %v", err)
	}
	if _, err := r.TakeLeases(ctx, []string{"l"}, []string{"a"}, "t", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := r.ReleaseLeases(ctx, []string{"l"}, "t", []byte("m"), feed); err != nil {
		t.Errorf("ReleaseLeases of a lease no one asked for, without a Bus: %v", err)
	}
	if err := r.ReleaseLeases(ctx, []string{"l"}, "t", []byte("m"), feed); !errors.Is(err, hybridtest.ErrNoBus) {
		t.Errorf("ReleaseLeases of a lease no longer held, without a Bus: got %v, want %v", err, hybridtest.ErrNoBus)
	}
}

// TestRemoteFailingBus: the write whose publish fails is not made, nor
// logged, nor its lease released; those before it are reported.
func TestRemoteFailingBus(t *testing.T) {
	r, bus, _ := newRemote(t)
	ctx := t.Context()
	r.Put("l", []byte("t*"), time.Minute) // a lease of t, asked for
	down := errors.New("bus down")
	bus.FailWith(down)
	st, err := r.Write(ctx, []tier.Write{
		{Key: "a", Value: []byte("1")},
		{Key: "b", Value: []byte("2"), Msg: []byte("m"), Log: []byte("e"), Lease: "l", Token: "t"},
	}, feed)
	if !errors.Is(err, down) || !slices.Equal(st, []bool{true, false}) {
		t.Errorf("Write with the bus failing: got %v, %v; want [true false], %v", st, err, down)
	}
	if got := r.Keys(); !slices.Equal(got, []string{"a", "l"}) {
		t.Errorf("keys: got %q, want [a l]", got)
	}
	if es, _ := r.PeekLog("log"); es != nil {
		t.Errorf("a write whose publish failed logged %q", es)
	}
	if err := r.ReleaseLeases(ctx, []string{"l"}, "t", []byte("m"), feed); !errors.Is(err, down) {
		t.Errorf("ReleaseLeases with the bus failing: got %v, want %v", err, down)
	}
	if v, _ := r.Peek("l"); string(v) != "t*" {
		t.Errorf("after a release whose publish failed, the lease holds %q, want \"t*\"", v)
	}
}

func TestRemoteWriteBadArguments(t *testing.T) {
	ctx := t.Context()
	r, _, _ := newRemote(t)
	for _, c := range []struct {
		what string
		w    tier.Write
		f    tier.Feed
	}{
		{"an unknown Cond", tier.Write{If: tier.IfSeq + 1}, feed},
		{"IfSeq without Seq", tier.Write{If: tier.IfSeq}, feed},
		{"KeepTTL with Always", tier.Write{KeepTTL: true}, feed},
		{"a negative StampAt", tier.Write{If: tier.IfNewer, StampAt: -1}, feed},
		{"a lease without a token", tier.Write{Lease: "l"}, feed},
		{"Log without Feed.Log", tier.Write{Msg: []byte("m"), Log: []byte("e")}, tier.Feed{Channel: "ch", LogLen: 10}},
		{"Log with Feed.LogLen 0", tier.Write{Msg: []byte("m"), Log: []byte("e")}, tier.Feed{Channel: "ch", Log: "log"}},
	} {
		c.w.Key = "bad"
		if _, err := r.Write(ctx, []tier.Write{{Key: "good"}, c.w}, c.f); err == nil {
			t.Errorf("Write with %s: got nil error, want one", c.what)
		}
	}
	if r.Len() != 0 {
		t.Errorf("Writes with bad arguments stored %q", r.Keys())
	}
	nolog := &hybridtest.Remote{NoLog: true}
	if _, err := nolog.Write(ctx, []tier.Write{{Key: "k", Log: []byte("e")}}, feed); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Write with Log on a Remote with NoLog: got %v, want errors.ErrUnsupported", err)
	}
}

func TestRemoteBeforeGetHoldsRead(t *testing.T) {
	ctx := t.Context()
	var r hybridtest.Remote
	r.Put("k", []byte("old"), 0)
	reached, release := make(chan string), make(chan struct{})
	r.SetBeforeGet(func(key string) {
		reached <- key
		<-release
	})
	got := make(chan string)
	go func() {
		vs, _ := r.Get(ctx, []string{"k"})
		got <- string(vs[0])
	}()
	if k := <-reached; k != "k" {
		t.Errorf("hook got key %q, want \"k\"", k)
	}
	r.Put("k", []byte("new"), 0) // the read is held: a write now lands before it
	close(release)
	if v := <-got; v != "new" {
		t.Errorf("held Get returned %q, want \"new\"", v)
	}
	var seen []string
	r.SetBeforeGet(func(key string) { seen = append(seen, key) })
	if _, err := r.Get(ctx, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b"}; !slices.Equal(seen, want) {
		t.Errorf("Get ran the hook for %q, want %q", seen, want)
	}
}

func TestRemoteAfterGetHoldsOldValue(t *testing.T) {
	ctx := t.Context()
	var r hybridtest.Remote
	r.Put("k", []byte("old"), 0)
	reached, release := make(chan string), make(chan struct{})
	r.SetAfterGet(func(key string) {
		reached <- key
		<-release
	})
	got := make(chan string)
	go func() {
		vs, _ := r.Get(ctx, []string{"k"})
		got <- string(vs[0])
	}()
	if k := <-reached; k != "k" {
		t.Errorf("hook got key %q, want \"k\"", k)
	}
	r.Put("k", []byte("new"), 0) // the read has happened
	close(release)
	if v := <-got; v != "old" {
		t.Errorf("held Get returned %q, want \"old\"", v)
	}
	if c := r.Calls(); c.Get != 1 || c.Read != 1 {
		t.Errorf("Calls: got %+v, want 1 Get of 1 key", c)
	}
}

func TestRemoteWaitCalls(t *testing.T) {
	var r hybridtest.Remote
	done := make(chan error)
	go func() {
		done <- r.WaitCalls(t.Context(), func(c hybridtest.Calls) bool { return c.IfAbsent >= 2 })
	}()
	for range 2 {
		if _, err := r.Write(t.Context(), []tier.Write{{Key: "k", If: tier.IfAbsent}}, tier.Feed{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Errorf("WaitCalls: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.WaitCalls(ctx, func(c hybridtest.Calls) bool { return c.Get > 0 }); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitCalls for a call that never comes: got %v, want %v", err, context.Canceled)
	}
}

func TestRemoteCopies(t *testing.T) {
	ctx := t.Context()
	r, _, _ := newRemote(t)
	in := []byte("abc")
	if _, err := r.Write(ctx, []tier.Write{{Key: "w", Value: in, Msg: in, Log: in}}, feed); err != nil {
		t.Fatal(err)
	}
	r.Put("put", in, 0)
	in[0] = 'X'
	for _, k := range []string{"w", "put"} {
		vs, err := r.Get(ctx, []string{k})
		if err != nil || string(vs[0]) != "abc" {
			t.Errorf("%s: after the caller changed its buffer, got %q, %v; want \"abc\"", k, vs, err)
			continue
		}
		vs[0][0] = 'Y'
		if v, _ := r.Peek(k); string(v) != "abc" {
			t.Errorf("%s: after the caller changed what Get returned, got %q, want \"abc\"", k, v)
		}
	}
	if es, _ := r.PeekLog("log"); len(es) != 1 || string(es[0]) != "abc" {
		t.Errorf("the log: got %q, want [abc]", es)
	}
}

// TestRemoteNow: lifetimes follow Remote.Now.
func TestRemoteNow(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	r := &hybridtest.Remote{Now: clk.Now}
	r.Put("short", []byte("s"), time.Second)
	r.Put("kept", []byte("k"), time.Second)
	if _, err := r.Write(ctx, []tier.Write{{Key: "kept", If: tier.IfEqual, Old: []byte("k"), Value: []byte("k2"), KeepTTL: true}}, tier.Feed{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.TakeLeases(ctx, []string{"l"}, []string{"short"}, "t", time.Second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(400 * time.Millisecond)
	if ls, err := r.TakeLeases(ctx, []string{"l"}, []string{"short"}, "u", time.Second); err != nil || ls[0].Left != 600*time.Millisecond {
		t.Errorf("TakeLeases 400ms into a lease of 1s: got %+v, %v; want 600ms left", ls, err)
	}
	clk.Advance(600 * time.Millisecond)
	if got := r.Keys(); len(got) != 0 {
		t.Errorf("keys a second later: got %q, want none", got)
	}
}

func TestRemoteConcurrentUse(t *testing.T) {
	ctx := t.Context()
	r, _, _ := newRemote(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				k := strconv.Itoa(i % 10)
				var err error
				switch (g + i) % 4 {
				case 0:
					_, err = r.Write(ctx, []tier.Write{{Key: k, Value: []byte(k), Msg: []byte(k), Log: []byte(k)}}, feed)
				case 1:
					_, err = r.Get(ctx, []string{k, "x"})
				case 2:
					_, err = r.TakeLeases(ctx, []string{"l" + k}, []string{k}, fmt.Sprint(g), time.Minute)
				case 3:
					err = r.ReleaseLeases(ctx, []string{"l" + k}, fmt.Sprint(g), []byte("r"), feed)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := r.Calls().Total(); got != 800 {
		t.Errorf("got %d calls, want 800", got)
	}
}

// TestRemoteHeads counts each Heads call with work to do once, in
// Calls.Heads and Total, and fails it as FailWith says.
func TestRemoteHeads(t *testing.T) {
	r, _, _ := newRemote(t)
	ctx := t.Context()
	r.Put("k", []byte("value"), 0)
	got, err := r.Heads(ctx, []string{"k", "m"}, 3)
	if err != nil || string(got[0]) != "val" || got[1] != nil {
		t.Fatalf("Heads = %q, %v; want [val nil], nil", got, err)
	}
	_, _ = r.Heads(ctx, nil, 3)
	if _, err := r.Heads(ctx, []string{"k"}, 0); err == nil {
		t.Error("Heads with length 0: no error")
	}
	if c := r.Calls(); c.Heads != 1 || c.Total() != 1 || c.Get != 0 {
		t.Errorf("Calls = %+v, want one Heads and nothing else", c)
	}
	down := errors.New("down")
	r.FailWith(down)
	if _, err := r.Heads(ctx, []string{"k"}, 3); !errors.Is(err, down) {
		t.Errorf("Heads after FailWith = %v, want %v", err, down)
	}
	if c := r.Calls(); c.Heads != 2 {
		t.Errorf("Calls.Heads = %d after a failed call, want 2", c.Heads)
	}
}
