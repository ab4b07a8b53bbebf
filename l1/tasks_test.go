package l1

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

// TestTasksWriteRunsQueue: a task submitted during a write, or before it
// with none under way, runs when the write ends, on the writer's goroutine.
func TestTasksWriteRunsQueue(t *testing.T) {
	var ts tasks
	ts.init(time.Hour)
	defer ts.close()
	ran := 0 // written by tasks run on this goroutine only
	ts.submit(func() { ran++ })
	ts.begin()
	ts.submit(func() { ran++ })
	if ran != 0 {
		t.Fatalf("before the write ended: %d tasks ran, want 0", ran)
	}
	ts.done()
	if ran != 2 {
		t.Errorf("after the write: %d tasks ran, want 2", ran)
	}
}

// TestTasksTimerRunsQueue: with no write to come, a task runs within the
// bound, as do the tasks it submits.
func TestTasksTimerRunsQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ts tasks
		ts.init(time.Millisecond)
		defer ts.close()
		var ran atomic.Int32
		ts.submit(func() {
			ran.Add(1)
			ts.submit(func() { ran.Add(1) })
		})
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := ran.Load(); n != 2 {
			t.Errorf("after the bound: %d tasks ran, want 2", n)
		}
	})
}

// TestTasksClose: close runs what is queued, waits for a run of the timer
// under way (however close it falls to the timer), and later tasks run in
// place.
func TestTasksClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for i := range 200 {
		var ts tasks
		ts.init(time.Duration(i%4) * time.Microsecond)
		var ran atomic.Int32
		ts.submit(func() { ran.Add(1) })
		ts.close()
		if n := ran.Load(); n != 1 {
			t.Fatalf("after close: the task ran %d times, want once", n)
		}
		ts.submit(func() { ran.Add(1) })
		if n := ran.Load(); n != 2 {
			t.Fatalf("a task submitted after close ran %d times by the time submit returned, want once", n-1)
		}
		ts.close()
	}
}

// TestHitRunsQueueWhileWriting: a hit runs what is queued while its cache
// writes, leaves it to the next write once the cache has not written for
// hitWindow hits, and runs it again after a write.
func TestHitRunsQueueWhileWriting(t *testing.T) {
	c, err := New[int](Options{MaxWeight: 1 << 20, Resolution: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ran := 0 // written by tasks run on this goroutine only
	hit := func(queue bool) {
		t.Helper()
		if queue {
			c.tasks.submit(func() { ran++ })
		}
		if _, ok := c.Get("k"); !ok {
			t.Fatal("miss")
		}
	}
	c.Set("k", 1, 1, time.Hour)
	hit(true)
	if ran != 1 {
		t.Fatalf("hit after a write: %d tasks ran, want 1", ran)
	}
	for range hitWindow {
		hit(false)
	}
	hit(true)
	if ran != 1 {
		t.Errorf("hit %d hits after the last write: %d tasks ran, want 1 (left for the next write)", hitWindow, ran)
	}
	c.Set("k", 2, 1, time.Hour)
	if ran != 2 {
		t.Errorf("after the write: %d tasks ran, want 2", ran)
	}
	hit(true)
	if ran != 3 {
		t.Errorf("hit after the write: %d tasks ran, want 3", ran)
	}
}
