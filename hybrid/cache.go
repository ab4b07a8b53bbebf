package hybrid

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/hybridcache/hybridcache/internal/flight"
	"github.com/hybridcache/hybridcache/internal/message"
	"github.com/hybridcache/hybridcache/l1"
)

// This file holds the Cache, its construction and its end, and the
// workers that run fills.

// item is what L1 holds for a key: a value, or a remembered absence, and,
// when fail-safe or eager refresh is on, its timing. The timing sits behind
// a pointer so that an untimed hit copies as little as possible.
type item[V any] struct {
	v      V
	absent bool
	stored uint32 // when it was stored in L1 (see storedNow): held and swap judge it by this
	t      *timing
}

// timing is an item's schedule, in Unix nanoseconds (L1's clock).
type timing struct {
	// due is when a hit must look closer: a refresh or the logical expiry.
	due int64
	// expires is the logical expiry: past it the value is stale, kept only
	// as a fail-safe fallback.
	expires int64
	// staleAt is when this value first went stale (a throttled stale serve
	// moves expires, not staleAt), bounding fail-safe by FailSafeMaxAge.
	staleAt int64
	// written is when the value was written to the shared tier.
	written int64
	// remote is the value's logical expiry in the shared tier, as its
	// envelope says (0: none or unknown); see GetEntry.
	remote int64
	// tags are the value's tags (WithTags).
	tags []string
	// version is the version its load gave it (SetVersion), "" for none.
	version string
	// flags are its envelope's flags; with written and version they make
	// the head that a not-modified refresh checks (see envelope.Head).
	flags byte
	// fresh marks a timing made for an item not yet stored, which stamp
	// may fill in rather than copy: no other copy of the item shares it.
	fresh bool
	// size is the L1 weight of the value without its key (see size), kept
	// so that a fail-safe re-store weighs the value as its first store did.
	size int
	// ends is when L1 drops the entry (lifetime and fail-safe's age), so
	// that a new schedule (see reschedule) keeps it.
	ends int64
	// delta is how long the value took to load (0: not known); scale is
	// XFetch's beta times delta, 0 when XFetch does not schedule the entry.
	delta, scale int64
	// fails counts the refreshes of the value that failed in a row; again
	// makes the hit at due refresh without XFetch's draw.
	fails uint8
	again bool
}

// writtenAt is when it was written, 0 if unknown.
func (it item[V]) writtenAt() int64 {
	if it.t == nil {
		return 0
	}
	return it.t.written
}

// Cache is a typed two-tier cache. It is safe for concurrent use. Create it
// with New and release it with Close.
type Cache[V any] struct {
	o      Options
	def    policy             // the policy of a call without options
	copy   func(V) (V, error) // copies values for callers; nil: shared
	prefix string             // Namespace + ":"
	scope  string             // the Remote's prefix and Namespace (see Options.scope)
	local  *l1.Cache[item[V]]
	born   time.Time // when New ran, with its monotonic reading (see storedNow)
	shared           // the Remote and its capabilities
	bus    Bus
	codec  Codec
	origin message.Origin

	flights flight.Group[V]
	loss    lossState
	down    downState
	seqs    *seqState           // where no log is kept: catch-up by counters; nil: none
	unver   unverifiedSet       // fills whose write-back failed (see unverified.go)
	slots   *semaphore.Weighted // MaxConcurrentLoads; nil: unbounded
	batch   *coalescer[V]       // RefreshBatch; nil: refreshes load alone
	leases  leaseState
	vers    *versions
	echo    *echoes
	tags    tagState
	queue   *writeQueue // nil: failed writes are not queued
	br      breaker
	n       counters
	ver     verifier // Options.VerifyRate
	log     limitedLog

	// mu guards closed against wg.Add, so Close can wait for every fill.
	mu     sync.RWMutex
	closed atomic.Bool
	wg     sync.WaitGroup  // fill workers and the verifier
	jobs   chan func()     // hands a fill to an idle worker
	stop   context.Context // cancelled by Close; ends fills
	cancel context.CancelFunc
	unsub  func()
}

// New returns a Cache configured by o, or an error naming the first
// setting that is wrong. It logs to Options.Logger, once and at warning
// level, each setting that contradicts another or costs the user. batch,
// at most one, made by BatchRefresh, gathers background refreshes into
// batch loads; without it each refresh loads with its caller's load
// function.
func New[V any](o Options, batch ...RefreshBatch[V]) (*Cache[V], error) {
	set := o
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cache[V]{
		o:      o,
		def:    o.defaults(),
		copy:   copier[V](&o),
		born:   time.Now(),
		prefix: o.Namespace + ":",
		scope:  o.scope(),
		shared: resolveShared(&o, o.Namespace+":\x00log"),
		bus:    o.Bus,
		codec:  o.Codec,
		vers:   &versions{slots: newSlots()},
		echo:   &echoes{slots: newSlots()},
		jobs:   make(chan func()),
		log:    limitedLog{l: o.Logger, every: o.LogEvery},
		br:     breaker{threshold: int64(o.BreakerThreshold), openFor: o.BreakerOpenFor},
	}
	if o.MaxConcurrentLoads > 0 {
		c.slots = semaphore.NewWeighted(int64(o.MaxConcurrentLoads))
	}
	if c.batch, err = newCoalescer(batch); err != nil {
		return nil, err
	}
	if _, err := rand.Read(c.origin[:]); err != nil {
		return nil, fmt.Errorf("hybrid: instance id: %w", err)
	}
	c.local, err = l1.New[item[V]](l1.Options{
		MaxWeight: uint64(o.LocalMaxBytes),
		OnEvict: func(key string, expired bool) {
			if expired {
				c.n.expirations.Add(1)
			} else {
				c.n.evictions.Add(1)
			}
			if f := o.Events.Evicted; f != nil {
				f(key, expired)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("hybrid: %w", err)
	}
	c.stop, c.cancel = context.WithCancel(context.Background())
	if o.QueueWrites > 0 && c.remote != nil {
		c.queue = newWriteQueue(o.QueueWrites)
	}
	if c.logged() {
		// Before subscribing: what was published since is harmless to
		// miss (L1 is empty), and replayed once more after a loss anyway.
		switch pos, err := c.openLog(); {
		case errors.Is(err, errors.ErrUnsupported):
			c.feed.Log = ""
		case err == nil:
			c.loss.noteTrusted(pos)
		}
	}
	c.seqs = c.newSeqState()
	if c.bus != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.unsub, err = c.bus.Subscribe(ctx, o.Channel, c.onMessage, c.onLoss)
		if err != nil {
			c.cancel()
			c.local.Close()
			return nil, fmt.Errorf("hybrid: subscribe to %q: %w", o.Channel, err)
		}
		if c.seqs != nil {
			c.seqBaseline()
		}
	}
	c.startHotSet()
	o.batched = c.batch != nil
	for _, line := range advice(&o, &set) {
		o.Logger.Warn(line, "namespace", o.Namespace)
	}
	c.startVerifier()
	return c, nil
}

// run hands job to an idle fill worker, or starts one, unless the cache is
// closed. Workers outlive their job for workerIdle, so a busy cache reuses
// goroutines whose stacks have already grown to what a Redis call needs.
func (c *Cache[V]) run(job func()) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed.Load() {
		return false
	}
	select {
	case c.jobs <- job:
	default:
		c.wg.Add(1)
		go c.worker(job)
	}
	return true
}

// workerIdle is how long a fill worker waits for its next job.
const workerIdle = 5 * time.Second

func (c *Cache[V]) worker(job func()) {
	defer c.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		job()
		idle.Reset(workerIdle)
		select {
		case job = <-c.jobs:
		case <-idle.C:
			return
		case <-c.stop.Done():
			return
		}
	}
}

// Close unsubscribes from the bus, cancels fills in progress and waits for
// them, for the verifier (Options.VerifyRate) and for the hot-set recorder
// (Options.HotSetEvery), stops the replay of queued writes (see
// Options.QueueWrites; writes still queued are dropped, logged as one
// warning with their number and counted in Stats.Queue.DroppedOnClose) and
// waits for it, and stops L1's goroutines. It does not close the Remote or
// the Bus, which the caller owns and may share. Later calls return
// ErrClosed.
func (c *Cache[V]) Close() error {
	c.mu.Lock()
	if c.closed.Swap(true) {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	if c.unsub != nil {
		c.unsub()
	}
	c.cancel()
	c.wg.Wait()
	c.local.Close()
	if c.queue != nil {
		if n := c.queue.dropAll(); n > 0 {
			c.n.queueDroppedOnClose.Add(uint64(n))
			c.log.l.Warn("hybrid: cache closed with writes still queued; dropped, never written to the shared tier", "namespace", c.o.Namespace, "dropped", n)
		}
	}
	return nil
}
