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
// fill's Redis round trip needs. So every task is queued, and the next
// write of this Cache runs the queue when its otter call returns. A task
// that arrives with no write under way comes from a read that found an
// expired entry (otter asks for upkeep on every such read), whose fill is
// then the next write, or from a read that filled otter's read buffer.
// Until that upkeep runs, otter drops the reads that find the buffer full,
// and W-TinyLFU learns nothing from them: on runs of hits that cost l1 up
// to 1.3 points of hit ratio on whole production traces, 3.4 on prefixes
// (bench/RESULTS.md). So a hit that finds the queue non-empty runs it
// (tryRun), while its cache still writes (Cache.hitUpkeep). So that no task waits for a write or a
// hit that never comes, a timer also runs the queue within bound. It is
// armed at most once per bound, and writers leave it to fire (at worst one
// goroutine per bound) rather than pay to stop it.
type tasks struct {
	// writing counts the writes under way, and the runs of the queue
	// that act as one (tryRun, flush).
	writing atomic.Int32
	// writes counts the writes begun.
	writes atomic.Uint64
	// hitRunning: a hit is running the queue (tryRun).
	hitRunning atomic.Bool
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
func (t *tasks) begin() {
	t.writes.Add(1)
	t.writing.Add(1)
}

// done runs the queue while the write still counts as under way, so that
// what the tasks submit in turn (otter's notices of the entries its upkeep
// evicted) is queued and run here too; then once more after the count
// drops, for a task queued in between.
func (t *tasks) done() {
	t.run()
	t.writing.Add(-1)
	t.run()
}

// tryRun runs the queue on the calling goroutine, as a write would,
// unless another hit is doing so, so that hits do not line up behind one
// another's upkeep.
func (t *tasks) tryRun() {
	if t.hitRunning.Load() || !t.hitRunning.CompareAndSwap(false, true) {
		return
	}
	t.writing.Add(1)
	t.done()
	t.hitRunning.Store(false)
}

// flush is the timer's: it runs the queue as a write would.
func (t *tasks) flush() {
	defer t.fires.Done()
	t.mu.Lock()
	t.armed = false
	t.mu.Unlock()
	t.writing.Add(1)
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
