package hybridtest_test

import (
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"sync"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybridtest"
)

// This file tests the double's leases where TestRemote cannot: how they
// show in the store, and its choices where the contract leaves one.

// TestRemoteLeaseEntries: a lease is an entry holding its token, marked
// with '*' once a taker found it held.
func TestRemoteLeaseEntries(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	r := &hybridtest.Remote{Now: clk.Now}
	if _, err := r.TakeLeases(ctx, []string{"l"}, []string{"k"}, "t1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if v, _ := r.Peek("l"); string(v) != "t1" {
		t.Errorf("a lease taken: holds %q, want \"t1\"", v)
	}
	for range 2 {
		if ls, err := r.TakeLeases(ctx, []string{"l"}, []string{"k"}, "t2", time.Minute); err != nil || ls[0].Taken || ls[0].Holder != "t1" {
			t.Fatalf("TakeLeases of a held lease: %+v, %v", ls, err)
		}
		if v, _ := r.Peek("l"); string(v) != "t1*" {
			t.Errorf("a lease asked for: holds %q, want \"t1*\"", v)
		}
	}
	// A key found without an expiry is given one.
	r.Put("forever", []byte("t3"), 0)
	if ls, err := r.TakeLeases(ctx, []string{"forever"}, []string{"k"}, "t2", time.Second); err != nil || ls[0].Left != time.Second {
		t.Errorf("TakeLeases of a key without expiry: %+v, %v; want a second left", ls, err)
	}
	clk.Advance(time.Second)
	if _, ok := r.Peek("forever"); ok {
		t.Error("a key without expiry that a take found outlived the ttl it was given")
	}
	// Of repeated keys, only the first is taken.
	ls, err := r.TakeLeases(ctx, []string{"d", "d"}, []string{"k", "k"}, "t4", time.Minute)
	if err != nil || !ls[0].Taken || ls[1].Taken || ls[1].Holder != "t4" {
		t.Errorf("TakeLeases of a key twice: %+v, %v; want the first taken", ls, err)
	}
}

func TestRemoteTakeLeasesConcurrent(t *testing.T) {
	var r hybridtest.Remote
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		takes int
	)
	for g := range 16 {
		wg.Go(func() {
			ls, err := r.TakeLeases(t.Context(), []string{"l"}, []string{"k"}, fmt.Sprint(g), time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			if ls[0].Taken {
				mu.Lock()
				takes++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if takes != 1 {
		t.Errorf("16 takers of one lease: %d took it, want 1", takes)
	}
}

func TestRemoteLeaseBadArguments(t *testing.T) {
	var r hybridtest.Remote
	ctx := t.Context()
	if _, err := r.TakeLeases(ctx, []string{"l"}, []string{"k"}, "", time.Minute); err == nil {
		t.Error("TakeLeases with an empty token: got nil error, want one")
	}
	if _, err := r.ExtendLeases(ctx, []string{"l"}, "", time.Minute); err == nil {
		t.Error("ExtendLeases with an empty token: got nil error, want one")
	}
	if err := r.ReleaseLeases(ctx, []string{"l"}, "", nil, tier.Feed{}); err == nil {
		t.Error("ReleaseLeases with an empty token: got nil error, want one")
	}
	if r.Len() != 0 {
		t.Errorf("calls with bad arguments left keys %q", r.Keys())
	}
}

// TestRemoteReleaseQuietWithFailingBus: a release that announces nothing
// does not use the bus.
func TestRemoteReleaseQuietWithFailingBus(t *testing.T) {
	r, bus, _ := newRemote(t)
	ctx := t.Context()
	if _, err := r.TakeLeases(ctx, []string{"l"}, []string{"k"}, "t", time.Minute); err != nil {
		t.Fatal(err)
	}
	bus.FailWith(errors.New("bus down"))
	if err := r.ReleaseLeases(ctx, []string{"l"}, "t", []byte("m"), feed); err != nil {
		t.Errorf("ReleaseLeases of a lease no one asked for, with the bus failing: %v", err)
	}
	if r.Len() != 0 {
		t.Errorf("after the release: keys %q", r.Keys())
	}
}
