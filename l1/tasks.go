package l1

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// tasks is otter's executor: otter hands it the upkeep that follows a
// write or that a read asks for (draining its buffers, evicting, expiring)
// and the OnDeletion notices. Otter's default starts a goroutine for each,
// which wakes a second thread that, on few cores, takes the core the next
// fill's Redis round trip needs; running upkeep on a reader would make L1
// hits dearer. So every task is queued, and the next write of this Cache
// runs the queue when its otter call returns. A task that arrives with no
// write under way comes from a read that found an expired entry (otter asks
// for upkeep on every such read), whose fill is then the next write, or
// from a read that filled otter's read buffer. Until that upkeep runs,
// otter drops the reads that find the buffer full, and W-TinyLFU learns
// nothing from them: on a run of hits that cost l1 1.5 to 6 points of hit
// ratio on production traces (bench/RESULTS.md). So a hit that finds the
// queue non-empty runs it (Cache.Get), as otter's own executor would on
// another goroutine. So that no task waits for a write or a hit that never
// comes, a timer also runs the queue within bound. It is armed at most
// once per bound, and writers leave it to fire (at worst one goroutine per
// bound) rather than pay to stop it.
type tasks struct {
	// writing counts the writes under way.
	writing atomic.Int32
	// queued is len(queue), readable without the lock.
	queued atomic.Int32
	bound  time.Duration
	timer  *time.Timer
	// fires counts the timer's runs to come: each arming adds one, each
	// run, or a stop that cancels one, takes it away.
	fires sync.WaitGroup

	mu    sync.Mutex
	queue []func()
	spare []func()
	// armed: the timer will run the queue. closed: tasks run in place.
	armed, closed bool
}

func (t *tasks) init(bound time.Duration) {
	t.bound = bound
	t.timer = time.AfterFunc(math.MaxInt64, t.flush)
	t.timer.Stop()
}

// submit is the executor given to otter.
func (t *tasks) submit(fn func()) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		fn()
		return
	}
	t.queue = append(t.queue, fn)
	t.queued.Store(int32(len(t.queue)))
	// A writer that is still under way when its count is read here will
	// run the queue after it ends (see done); if none is, the timer will.
	if t.writing.Load() == 0 && !t.armed {
		t.armed = true
		t.fires.Add(1)
		t.timer.Reset(t.bound)
	}
	t.mu.Unlock()
}

// begin marks a write as under way; done ends it and runs the queue.
func (t *tasks) begin() { t.writing.Add(1) }

// done runs the queue while the write still counts as under way, so that
// what the tasks submit in turn (otter's notices of the entries its upkeep
// evicted) is queued and run here too; then once more after the count
// drops, for a task queued in between.
func (t *tasks) done() {
	t.run()
	t.writing.Add(-1)
	t.run()
}

// runNow runs the queue on the calling goroutine, as a write would.
func (t *tasks) runNow() {
	t.begin()
	t.done()
}

// flush is the timer's: it runs the queue as a write would.
func (t *tasks) flush() {
	defer t.fires.Done()
	t.mu.Lock()
	t.armed = false
	t.mu.Unlock()
	t.begin()
	t.done()
}

// close runs what is queued, waits for a run of the timer under way, and
// makes later tasks run in place.
func (t *tasks) close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	if t.armed && t.timer.Stop() {
		t.armed = false
		t.fires.Done()
	}
	t.mu.Unlock()
	t.fires.Wait()
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
