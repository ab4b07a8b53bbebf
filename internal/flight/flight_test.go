package flight_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/hybridcache/hybridcache/internal/flight"
)

func TestOneLeaderManyWaiters(t *testing.T) {
	var g flight.Group[int]
	c, leader := g.Join("k")
	if !leader {
		t.Fatal("first Join: not the leader")
	}
	const waiters = 50
	var wg sync.WaitGroup
	results := make(chan int, waiters)
	for range waiters {
		w, lead := g.Join("k")
		if lead || w != c {
			t.Fatal("a later Join led a new call")
		}
		wg.Go(func() {
			v, err := w.Wait(context.Background())
			if err != nil {
				t.Error(err)
			}
			results <- v
		})
	}
	g.Finish("k", c, 7, nil)
	wg.Wait()
	close(results)
	for v := range results {
		if v != 7 {
			t.Errorf("waiter got %d, want 7", v)
		}
	}
	if _, lead := g.Join("k"); !lead {
		t.Error("Join after Finish did not start a new call")
	}
}

func TestWaiterLeavesOnItsContext(t *testing.T) {
	var g flight.Group[int]
	c, _ := g.Join("k")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	g.Finish("k", c, 1, nil)
	if v, err := c.Wait(context.Background()); err != nil || v != 1 {
		t.Errorf("Wait after Finish: got %d %v, want 1 nil", v, err)
	}
	// A finished call answers even to a cancelled context.
	if v, err := c.Wait(ctx); err != nil || v != 1 {
		t.Errorf("Wait with a cancelled ctx after Finish: got %d %v, want 1 nil", v, err)
	}
}

func TestErrorReachesEveryWaiter(t *testing.T) {
	var g flight.Group[string]
	boom := errors.New("boom")
	c, _ := g.Join("k")
	w, _ := g.Join("k")
	g.Finish("k", c, "", boom)
	if _, err := w.Wait(context.Background()); !errors.Is(err, boom) {
		t.Errorf("got %v, want boom", err)
	}
}

func TestKeysAreIndependent(t *testing.T) {
	var g flight.Group[int]
	a, la := g.Join("a")
	b, lb := g.Join("b")
	if !la || !lb || a == b {
		t.Fatal("two keys shared a call")
	}
	g.Finish("a", a, 1, nil)
	g.Finish("b", b, 2, nil)
}

func TestForget(t *testing.T) {
	var g flight.Group[int]
	old, _ := g.Join("k")
	waiter, _ := g.Join("k")
	g.Forget("k")
	fresh, leader := g.Join("k")
	if !leader || fresh == old {
		t.Fatal("Join after Forget joined the forgotten call")
	}
	g.Finish("k", old, 1, nil)
	if v, _ := waiter.Wait(context.Background()); v != 1 {
		t.Errorf("waiter of the forgotten call got %d, want 1", v)
	}
	// Finishing the forgotten call leaves the fresh one in place.
	if c, lead := g.Join("k"); lead || c != fresh {
		t.Error("finishing the forgotten call removed the fresh one")
	}
	g.Finish("k", fresh, 2, nil)
	a, _ := g.Join("a")
	g.ForgetAll()
	if _, lead := g.Join("a"); !lead {
		t.Error("Join after ForgetAll joined the old call")
	}
	g.Finish("a", a, 0, nil)
}
