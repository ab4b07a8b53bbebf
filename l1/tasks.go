package l1

import (
	"sync"
	"sync/atomic"
)

// tasks is otter's executor. Otter hands its executor the upkeep that
// follows a write (draining its buffers, evicting, expiring) and the
// OnDeletion notices of deletes and replacements; its default executor
// starts a goroutine for each. On a write that is most of the cost: the
// new goroutine wakes a second thread, which on a machine of few cores
// takes the core that the Redis round trip of the next fill needs. Measured
// on 2 cores (hybrid's BenchmarkPaired_L2Hit, the read made on the caller's
// goroutine), an L1 miss served by Redis cost 1.5 times a raw GET and
// decode with a goroutine per write, and 1.15 times with the upkeep run in
// place; this package's BenchmarkSet went from about 1.2 us to 0.65 us.
//
// So a task that arrives while a write of this Cache is under way is
// queued, and the writer runs it when its otter call returns: the upkeep of
// one write is a few hundred nanoseconds of work on the goroutine that
// caused it. A task that arrives when no write is under way (the drain
// that a full read buffer asks for) still gets a goroutine: running it in
// place would put that work on a reader, and L1 hits would cost several
// times more.
type tasks struct {
	// writing counts the writes under way.
	writing atomic.Int32
	// queued is len(queue), readable without the lock.
	queued atomic.Int32
	mu     sync.Mutex
	queue  []func()
	spare  []func()
}

// submit is the executor given to otter.
func (t *tasks) submit(fn func()) {
	if t.writing.Load() == 0 {
		go fn()
		return
	}
	t.mu.Lock()
	t.queue = append(t.queue, fn)
	t.queued.Store(int32(len(t.queue)))
	t.mu.Unlock()
	// A writer that is still under way when its count is read here will
	// run the queue after it ends (see done); if none is, nobody would run
	// fn in time.
	if t.writing.Load() == 0 {
		go t.run()
	}
}

// begin marks a write as under way; done ends it and runs what it queued.
func (t *tasks) begin() { t.writing.Add(1) }

// done runs the queue while the write still counts as under way, so that
// what the tasks submit in turn (otter's notices of the entries its upkeep
// evicted) is queued and run here too rather than given a goroutine each;
// then once more after the count drops, for a task queued in between.
func (t *tasks) done() {
	t.run()
	t.writing.Add(-1)
	t.run()
}

// run runs the queued tasks, including any they queue.
func (t *tasks) run() {
	for t.queued.Load() > 0 {
		t.mu.Lock()
		q := t.queue
		t.queue, t.spare = t.spare[:0], nil
		t.queued.Store(0)
		t.mu.Unlock()
		for i, fn := range q {
			q[i] = nil
			fn()
		}
		t.mu.Lock()
		if t.spare == nil {
			t.spare = q[:0]
		}
		t.mu.Unlock()
	}
}
