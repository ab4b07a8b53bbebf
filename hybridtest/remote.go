package hybridtest

import (
	"context"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"slices"
	"sync"
	"time"
)

// Remote is an in-memory shared tier: a map of byte values with
// lifetimes, load leases and invalidation logs. It implements the shared
// tier's contract (tier.Remote) with the semantics of l2.Store over one
// Redis server, and TestRemote checks it. The zero value is an empty store
// that is ready to use; set Bus, Now and NoLog before the first call. It
// is safe for concurrent use.
//
// Every method of the contract, once its arguments pass their checks and
// if it has anything to do (a key, a write), in this order: returns
// ctx.Err() if ctx is already done; runs the BeforeGet hook (Get, once per
// key); waits for the latency set with SetLatency or for ctx to end;
// returns the error set with FailWith; reads or writes; runs the AfterGet
// hook (Get, once per key); and counts its call (see Calls), failed or
// not, as it returns. A call whose arguments fail their checks, or that
// has nothing to do, returns at once and is not counted: it would make no
// round trip to Redis either.
//
// Info reports a ReadBound of 0: a call honours its ctx while it waits
// out its latency, but the Get hooks may hold a read for as long as a
// test likes, whatever the ctx, so the Remote bounds nothing.
type Remote struct {
	// Bus receives the messages of Write and ReleaseLeases, in the order of
	// their writes. nil: a call with a message to publish fails with
	// ErrNoBus, and does nothing.
	Bus *Bus

	// Now returns the time that lifetimes are measured against, so a test
	// can move time forward without sleeping. nil: time.Now.
	Now func() time.Time

	// NoLog makes the Remote keep no log, as l2.Store on Redis Cluster:
	// Info().Log is false, and ReadLog, and Write given a write with Log
	// set, fail with an error wrapping errors.ErrUnsupported.
	NoLog bool

	// SplitBatch makes the Remote announce a batch's Feed.Msg in a step of
	// its own after its writes, as l2.Store on Redis Cluster does:
	// Info().AtomicBatch is false.
	SplitBatch bool

	mu        sync.Mutex
	items     map[string]item
	err       error
	latency   time.Duration
	beforeGet func(key string)
	afterGet  func(key string)
	calls     Calls
	changed   chan struct{} // closed and replaced when calls changes
	journal   journal
	seqFloor  int64 // the highest value given to a sequence counter
}

var (
	_ tier.Remote     = (*Remote)(nil)
	_ tier.HeadReader = (*Remote)(nil)
)

type item struct {
	value   []byte
	expires time.Time // zero: never
}

// Calls counts the calls made to a Remote, failed ones included (see
// Remote for which calls count). A call is counted as it returns.
type Calls struct {
	// Get, Write, TakeLeases, ExtendLeases, ReleaseLeases and ReadLog count
	// the calls of each method, one per call however many keys or writes
	// it covers: for Get and Write, one per round trip to the shared tier.
	Get, Write, TakeLeases, ExtendLeases, ReleaseLeases, ReadLog int
	// Heads counts the calls of Heads (tier.HeadReader), one per call.
	Heads int
	// OpenLog counts the ReadLog calls that opened a log (after == "");
	// ReadLog counts them too.
	OpenLog int
	// Read counts the keys that Get calls asked for.
	Read int
	// Writes counts the writes that Write calls were given; Always,
	// IfAbsent, IfEqual, IfNewer and IfSeq count those of each Cond, Releasing
	// those that release a lease (Write.Lease set), and Touches those that
	// change a value in place (Write.Touch). Written counts the writes
	// that Write reported stored.
	Writes, Always, IfAbsent, IfEqual, IfNewer, IfSeq, Releasing, Touches, Written int
}

// Total returns the number of calls of every method.
func (c Calls) Total() int {
	return c.Get + c.Write + c.TakeLeases + c.ExtendLeases + c.ReleaseLeases + c.ReadLog + c.Heads
}

// ErrNoBus is returned by Write and ReleaseLeases of a Remote whose Bus is
// nil when they have a message to publish. Check it with errors.Is.
var ErrNoBus = errors.New("hybridtest: Remote.Bus is nil")

// Info describes r: no prefix, no read bound (see Remote), a log unless
// NoLog is set, and atomic announced batches unless SplitBatch is set.
func (r *Remote) Info() tier.Info {
	return tier.Info{Log: !r.NoLog, AtomicBatch: !r.SplitBatch}
}

// FailWith makes every later call return err, until FailWith(nil).
func (r *Remote) FailWith(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

// SetLatency makes every later call wait d before it does anything (d <= 0:
// no wait). A call whose ctx ends first returns ctx.Err().
func (r *Remote) SetLatency(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latency = d
}

// SetBeforeGet sets a hook that Get calls with each of its keys before
// reading them (nil: none). The hook runs on the caller's goroutine with
// no lock held, so it may block to hold a read in flight.
func (r *Remote) SetBeforeGet(fn func(key string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.beforeGet = fn
}

// SetAfterGet sets a hook that Get calls with each of its keys after
// reading them and before returning (nil: none). Like the BeforeGet hook
// it runs with no lock held and may block: it holds a read that has
// already seen the stored values, so a test can change a value while the
// old one is on its way back.
func (r *Remote) SetAfterGet(fn func(key string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.afterGet = fn
}

// Calls returns a snapshot of the call counts.
func (r *Remote) Calls() Calls {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// WaitCalls waits until done, given the call counts, reports true, or
// until ctx ends, when it returns ctx.Err(). Use it to wait for a call made
// on another goroutine, such as the shared-tier write that a fill makes
// after GetOrCreate has returned.
//
// NOTE: a call is counted as it returns to its caller, so when WaitCalls
// returns the store has changed but the caller may not yet have acted on
// the result (updated its own counters, for instance).
func (r *Remote) WaitCalls(ctx context.Context, done func(Calls) bool) error {
	for {
		r.mu.Lock()
		if done(r.calls) {
			r.mu.Unlock()
			return nil
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// count records one call, made by inc, and wakes WaitCalls.
func (r *Remote) count(inc func(*Calls)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	inc(&r.calls)
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// begin runs the steps every call takes before touching the data: ctx, the
// BeforeGet hook (for each of keys), latency and the injected error.
func (r *Remote) begin(ctx context.Context, keys ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	hook, latency := r.beforeGet, r.latency
	r.mu.Unlock()
	if hook != nil {
		for _, k := range keys {
			hook(k)
		}
	}
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *Remote) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// getLocked returns key's value if it is present and alive, deleting it
// when it has expired. The slice is the stored one: copy it before it
// leaves the lock.
func (r *Remote) getLocked(key string, now time.Time) ([]byte, bool) {
	it, ok := r.items[key]
	if !ok {
		return nil, false
	}
	if !it.expires.IsZero() && !now.Before(it.expires) {
		delete(r.items, key)
		return nil, false
	}
	return it.value, true
}

// setLocked stores a copy of value under key for ttl (<= 0: no expiry).
func (r *Remote) setLocked(key string, value []byte, ttl time.Duration, now time.Time) {
	if r.items == nil {
		r.items = make(map[string]item)
	}
	it := item{value: stored(value)}
	if ttl > 0 {
		it.expires = now.Add(ttl)
	}
	r.items[key] = it
}

// clone copies b, keeping nil apart from empty.
func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// stored returns a copy of b as Redis stores it: nil becomes empty, so
// that a stored value is never nil.
func stored(b []byte) []byte { return append([]byte{}, b...) }

// Get returns a copy of the value of each of keys, in order, nil for a
// missing or expired key, as one read. With no keys it returns at once.
func (r *Remote) Get(ctx context.Context, keys []string) ([][]byte, error) {
	if len(keys) == 0 {
		return [][]byte{}, nil
	}
	defer r.count(func(c *Calls) { c.Get++; c.Read += len(keys) })
	if err := r.begin(ctx, keys...); err != nil {
		return nil, err
	}
	r.mu.Lock()
	now := r.now()
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if v, ok := r.getLocked(k, now); ok {
			out[i] = stored(v)
		}
	}
	hook := r.afterGet
	r.mu.Unlock()
	if hook != nil {
		for _, k := range keys {
			hook(k)
		}
	}
	return out, nil
}

// Heads returns a copy of the first n bytes (n > 0) of the value of each
// of keys (all of a shorter one), in order, nil for a missing or expired
// key, as one read: tier.HeadReader, as l2.Store has it (an empty value
// reads as missing there, and here). It takes the steps of Get but for
// the hooks, and counts in Calls.Heads.
func (r *Remote) Heads(ctx context.Context, keys []string, n int) ([][]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("hybridtest: Heads: length %d, want at least 1", n)
	}
	if len(keys) == 0 {
		return [][]byte{}, nil
	}
	defer r.count(func(c *Calls) { c.Heads++ })
	if err := r.begin(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if v, ok := r.getLocked(k, now); ok && len(v) > 0 {
			out[i] = stored(v[:min(n, len(v))])
		}
	}
	return out, nil
}

// Peek returns a copy of key's value, as Get does, without counting a call,
// running the hooks, waiting or failing. Tests use it to look at the
// store; a lease shows as its holder's token, followed by '*' once a taker
// found it held.
func (r *Remote) Peek(key string) (value []byte, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.getLocked(key, r.now())
	if !ok {
		return nil, false
	}
	return stored(v), true
}

// Put stores a copy of value under key for ttl (<= 0: no expiry), as a
// write with Always does, without counting a call, waiting, failing or
// publishing. Tests use it to plant a value, such as a corrupt one.
func (r *Remote) Put(key string, value []byte, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setLocked(key, value, ttl, r.now())
}

// Keys returns the live keys, leases included, sorted.
func (r *Remote) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	keys := make([]string, 0, len(r.items))
	for k := range r.items {
		if _, ok := r.getLocked(k, now); ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// Len returns the number of live keys, leases included.
func (r *Remote) Len() int { return len(r.Keys()) }
