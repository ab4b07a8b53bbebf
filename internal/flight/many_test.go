package flight_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/hybridcache/hybridcache/internal/flight"
)

func TestJoinManyLeadsNewKeysAndJoinsOthers(t *testing.T) {
	var g flight.Group[int]
	b, _ := g.Join("b")
	keys := []string{"a", "b", "c", "a"}
	calls := make([]*flight.Call[int], len(keys))
	lead := g.JoinMany(keys, calls, nil)
	if want := []int{0, 2}; !slices.Equal(lead, want) {
		t.Fatalf("JoinMany led %v, want %v", lead, want)
	}
	if calls[1] != b {
		t.Error("JoinMany started a call for a key already in flight")
	}
	if calls[3] != calls[0] {
		t.Error("a repeated key did not join the call of its first appearance")
	}
	if calls[0] == calls[2] {
		t.Error("two keys share a call")
	}
	if c, lead := g.Join("c"); lead || c != calls[2] {
		t.Error("Join after JoinMany did not join its call")
	}
	g.FinishMany(keys, calls, lead, func(i int) (int, error) { return i + 10, nil })
	g.Finish("b", b, 1, nil)
	for i, want := range []int{10, 1, 12, 10} {
		if v, err := calls[i].Wait(context.Background()); err != nil || v != want {
			t.Errorf("key %q: got %d, %v, want %d", keys[i], v, err, want)
		}
	}
	for _, key := range []string{"a", "b", "c"} {
		if _, lead := g.Join(key); !lead {
			t.Errorf("Join(%q) after FinishMany joined a finished call", key)
		}
	}
}

// TestFinishManyWakesWaiters: waiters blocked on calls that FinishMany ends
// get their results, an error included.
func TestFinishManyWakesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g flight.Group[string]
		keys := []string{"a", "b"}
		calls := make([]*flight.Call[string], len(keys))
		lead := g.JoinMany(keys, calls, nil)
		boom := errors.New("boom")
		type res struct {
			v   string
			err error
		}
		got := make([]chan res, len(keys))
		for i, c := range calls {
			got[i] = make(chan res, 2)
			for range 2 {
				go func() {
					v, err := c.Wait(context.Background())
					got[i] <- res{v, err}
				}()
			}
		}
		synctest.Wait() // every waiter blocks
		g.FinishMany(keys, calls, lead, func(i int) (string, error) {
			if i == 1 {
				return "", boom
			}
			return "A", nil
		})
		for range 2 {
			if r := <-got[0]; r.err != nil || r.v != "A" {
				t.Errorf("waiter of a: got %q, %v, want \"A\"", r.v, r.err)
			}
			if r := <-got[1]; !errors.Is(r.err, boom) {
				t.Errorf("waiter of b: got %q, %v, want boom", r.v, r.err)
			}
		}
	})
}

// TestFinishManyLeavesNewerCalls: a call forgotten while in flight and
// replaced by a new one is ended without removing the new one.
func TestFinishManyLeavesNewerCalls(t *testing.T) {
	var g flight.Group[int]
	keys := []string{"k"}
	calls := make([]*flight.Call[int], 1)
	lead := g.JoinMany(keys, calls, nil)
	g.Forget("k")
	fresh, _ := g.Join("k")
	g.FinishMany(keys, calls, lead, func(int) (int, error) { return 1, nil })
	if c, lead := g.Join("k"); lead || c != fresh {
		t.Error("FinishMany of the forgotten call removed the fresh one")
	}
	g.Finish("k", fresh, 2, nil)
}

// TestFinishTwice: only the first Finish of a call counts, so a leader can
// defer a fallback Finish.
func TestFinishTwice(t *testing.T) {
	var g flight.Group[int]
	c, _ := g.Join("k")
	if !g.Finish("k", c, 1, nil) {
		t.Error("the first Finish reported false, want true")
	}
	fresh, _ := g.Join("k")
	if g.Finish("k", c, 2, nil) {
		t.Error("a second Finish reported true, want false")
	}
	if v, err := c.Wait(context.Background()); err != nil || v != 1 {
		t.Errorf("after the second Finish: got %d, %v, want the first result 1", v, err)
	}
	if again, lead := g.Join("k"); lead || again != fresh {
		t.Error("a second Finish of an ended call removed the call that followed it")
	}
	g.FinishMany([]string{"k"}, []*flight.Call[int]{c}, []int{0}, func(int) (int, error) { return 3, nil })
	if v, _ := c.Wait(context.Background()); v != 1 {
		t.Errorf("after FinishMany of an ended call: got %d, want 1", v)
	}
	g.Finish("k", fresh, 4, nil)
}
