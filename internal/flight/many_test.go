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

// TestAnswer: Answer gives the waiters a result at once and keeps the call
// in progress, so that a later Join gets that result instead of leading,
// until Finish, which does not change the result.
func TestAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g flight.Group[string]
		c, _ := g.Join("k")
		waited := make(chan string, 1)
		go func() {
			v, _ := c.Wait(context.Background())
			waited <- v
		}()
		synctest.Wait()
		if !g.Answer(c, "stale", nil) {
			t.Fatal("the first Answer reported false, want true")
		}
		if v := <-waited; v != "stale" {
			t.Errorf("waiter: got %q, want the answer \"stale\"", v)
		}
		if g.Answer(c, "again", nil) {
			t.Error("a second Answer reported true, want false")
		}
		joined, lead := g.Join("k")
		if lead || joined != c {
			t.Fatal("Join after Answer led a new call, want it to join the answered one")
		}
		if v, err := joined.Wait(context.Background()); err != nil || v != "stale" {
			t.Errorf("Join after Answer: got %q, %v, want \"stale\" at once", v, err)
		}
		if g.Finish("k", c, "fresh", nil) {
			t.Error("Finish after Answer reported true, want false")
		}
		if v, _ := c.Wait(context.Background()); v != "stale" {
			t.Errorf("after Finish: got %q, want the answer kept", v)
		}
		next, lead := g.Join("k")
		if !lead {
			t.Error("Join after Finish of an answered call joined it, want a new call")
		}
		g.Finish("k", next, "", nil)
	})
}

// TestAnswerThenFinishMany: FinishMany removes an answered call too.
func TestAnswerThenFinishMany(t *testing.T) {
	var g flight.Group[int]
	keys := []string{"a", "b"}
	calls := make([]*flight.Call[int], 2)
	lead := g.JoinMany(keys, calls, nil)
	g.Answer(calls[0], 1, nil)
	g.FinishMany(keys, calls, lead, func(i int) (int, error) { return 10 + i, nil })
	for i, want := range []int{1, 11} {
		if v, _ := calls[i].Wait(context.Background()); v != want {
			t.Errorf("key %q: got %d, want %d", keys[i], v, want)
		}
		if _, lead := g.Join(keys[i]); !lead {
			t.Errorf("Join(%q) after FinishMany joined an ended call", keys[i])
		}
	}
}
