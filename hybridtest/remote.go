package hybridtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Remote is an in-memory shared tier: a map of byte values with lifetimes,
// and invalidation logs. It implements hybrid.Remote, hybrid.BatchRemote,
// hybrid.CompareAndSetter, hybrid.Announcer, hybrid.Journal,
// hybrid.Replacer, hybrid.NewerSetter, hybrid.NewerJournal and
// hybrid.Leaser with the semantics of l2.Store over one Redis server. The
// zero value is an empty store that is ready to use; set Bus and Now
// before the first call. It is safe for concurrent use.
//
// Every method, once its arguments pass their checks, in this order:
// returns ctx.Err() if ctx is already done;
// runs the BeforeGet hook (Get and GetMany, once per key); waits for the
// latency set with SetLatency or for ctx to end; returns the error set with
// FailWith; reads or writes; runs the AfterGet hook (Get and GetMany); and
// counts its call (see Calls), failed or not, as it returns.
type Remote struct {
	// Bus receives the messages of SetAndPublish, SetPublishAndLog,
	// DeleteAndPublish, ReplaceAndPublish, ReleaseLeases and
	// FillAndRelease, in the order of their writes. nil: those methods fail
	// (ReplaceAndPublish, ReleaseLeases and FillAndRelease only when given
	// a channel).
	Bus *Bus

	// Now returns the time that lifetimes are measured against, so a test
	// can move time forward without sleeping. nil: time.Now.
	Now func() time.Time

	mu        sync.Mutex
	items     map[string]item
	err       error
	latency   time.Duration
	beforeGet func(key string)
	afterGet  func(key string)
	calls     Calls
	changed   chan struct{} // closed and replaced when calls changes
	journal   journal
}

type item struct {
	value   []byte
	expires time.Time // zero: never
}

// Calls counts the calls of each method of a Remote, failed ones included.
// A call is counted when it returns.
type Calls struct {
	Get, GetMany, Set, SetIfAbsent, SetManyIfAbsent, Delete int
	SetAndPublish, DeleteAndPublish, CompareAndSet          int
	SetPublishAndLog, OpenLog, ReadLog                      int
	ReplaceAndPublish, SetIfNewerAndPublish                 int
	SetIfNewerPublishAndLog                                 int
	// One per call of the lease methods, however many keys it covers.
	TakeLeases, ExtendLeases, ReleaseLeases int
	FillAndRelease                          int
}

// Total returns the number of calls of every method.
func (c Calls) Total() int {
	return c.Get + c.GetMany + c.Set + c.SetIfAbsent + c.SetManyIfAbsent + c.Delete + c.SetAndPublish + c.DeleteAndPublish + c.CompareAndSet +
		c.SetPublishAndLog + c.OpenLog + c.ReadLog + c.ReplaceAndPublish + c.SetIfNewerAndPublish +
		c.SetIfNewerPublishAndLog + c.TakeLeases + c.ExtendLeases + c.ReleaseLeases + c.FillAndRelease
}

// ErrNoBus is returned by SetAndPublish, SetPublishAndLog, DeleteAndPublish
// and, given a channel, ReplaceAndPublish, ReleaseLeases and FillAndRelease
// of a Remote whose Bus is nil. Check it with errors.Is.
var ErrNoBus = errors.New("hybridtest: Remote.Bus is nil")

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

// SetBeforeGet sets a hook that Get, and GetMany for each of its keys, call
// with the key before reading it (nil: none). The hook runs on the caller's
// goroutine with no lock held, so it may block to hold a read in flight.
func (r *Remote) SetBeforeGet(fn func(key string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.beforeGet = fn
}

// SetAfterGet sets a hook that Get, and GetMany for each of its keys, call
// with the key after reading it and before returning (nil: none). Like the
// BeforeGet hook it runs with no lock held and may block: it holds a read
// that has already seen the stored value, so a test can change the value
// while the old one is on its way back.
func (r *Remote) SetAfterGet(fn func(key string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.afterGet = fn
}

// afterGetHook runs the AfterGet hook, if any, for keys.
func (r *Remote) afterGetHook(keys ...string) {
	r.mu.Lock()
	hook := r.afterGet
	r.mu.Unlock()
	if hook != nil {
		for _, k := range keys {
			hook(k)
		}
	}
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
		ch := r.changedLocked()
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *Remote) changedLocked() chan struct{} {
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
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
// hook (for each key in keys, when get is true), latency and the injected
// error.
func (r *Remote) begin(ctx context.Context, get bool, keys ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	hook, latency := r.beforeGet, r.latency
	r.mu.Unlock()
	if get && hook != nil {
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
	it := item{value: clone(value)}
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

// Get returns a copy of key's value. A missing or expired key is ok ==
// false with a nil error.
func (r *Remote) Get(ctx context.Context, key string) (value []byte, ok bool, err error) {
	defer r.count(func(c *Calls) { c.Get++ })
	if err := r.begin(ctx, true, key); err != nil {
		return nil, false, err
	}
	r.mu.Lock()
	v, ok := r.getLocked(key, r.now())
	v = clone(v)
	r.mu.Unlock()
	r.afterGetHook(key)
	return v, ok, nil
}

// Set stores a copy of value under key for ttl; a ttl of zero or less
// stores it without expiry.
func (r *Remote) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	defer r.count(func(c *Calls) { c.Set++ })
	if err := r.begin(ctx, false); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setLocked(key, value, ttl, r.now())
	return nil
}

// SetIfAbsent stores a copy of value under key for ttl, as Set does, only
// if key holds no live value (SET NX), and reports whether it did.
func (r *Remote) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (stored bool, err error) {
	defer r.count(func(c *Calls) { c.SetIfAbsent++ })
	if err := r.begin(ctx, false); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if _, ok := r.getLocked(key, now); ok {
		return false, nil
	}
	r.setLocked(key, value, ttl, now)
	return true, nil
}

// CompareAndSet stores value under key for ttl only if key holds exactly
// old (a missing or expired key holds nothing, which no old matches), and
// reports whether it stored.
func (r *Remote) CompareAndSet(ctx context.Context, key string, old, value []byte, ttl time.Duration) (stored bool, err error) {
	defer r.count(func(c *Calls) { c.CompareAndSet++ })
	if err := r.begin(ctx, false); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if cur, ok := r.getLocked(key, now); !ok || !bytes.Equal(cur, old) {
		return false, nil
	}
	r.setLocked(key, value, ttl, now)
	return true, nil
}

// Delete removes keys; missing keys are not an error.
func (r *Remote) Delete(ctx context.Context, keys ...string) error {
	defer r.count(func(c *Calls) { c.Delete++ })
	if err := r.begin(ctx, false); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		delete(r.items, k)
	}
	return nil
}

// GetMany returns one slot per key, in order: a copy of the value, or nil
// for a missing or expired key.
func (r *Remote) GetMany(ctx context.Context, keys []string) ([][]byte, error) {
	defer r.count(func(c *Calls) { c.GetMany++ })
	if err := r.begin(ctx, true, keys...); err != nil {
		return nil, err
	}
	r.mu.Lock()
	now := r.now()
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if v, ok := r.getLocked(k, now); ok {
			out[i] = clone(v)
			if out[i] == nil {
				out[i] = []byte{}
			}
		}
	}
	r.mu.Unlock()
	r.afterGetHook(keys...)
	return out, nil
}

// SetManyIfAbsent stores keys[i] = values[i] for ttls[i], as SetIfAbsent
// does, all in one step, and reports for each key whether it stored it. The
// three slices must have the same length; of a key named twice, only the
// first can be stored.
func (r *Remote) SetManyIfAbsent(ctx context.Context, keys []string, values [][]byte, ttls []time.Duration) (stored []bool, err error) {
	defer r.count(func(c *Calls) { c.SetManyIfAbsent++ })
	if len(values) != len(keys) || len(ttls) != len(keys) {
		return nil, fmt.Errorf("hybridtest: set many if absent: lengths differ: %d keys, %d values, %d ttls", len(keys), len(values), len(ttls))
	}
	if err := r.begin(ctx, false); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	stored = make([]bool, len(keys))
	for i, k := range keys {
		if _, ok := r.getLocked(k, now); ok {
			continue
		}
		r.setLocked(k, values[i], ttls[i], now)
		stored[i] = true
	}
	return stored, nil
}

// SetAndPublish stores value under key, as Set does, and publishes msg on
// channel of r.Bus, as one step: no other call of r runs between the two,
// so messages leave in the order of the writes. When the publish fails,
// nothing is written.
func (r *Remote) SetAndPublish(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte) error {
	defer r.count(func(c *Calls) { c.SetAndPublish++ })
	if r.Bus == nil {
		return ErrNoBus
	}
	if err := r.begin(ctx, false); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.Bus.Publish(ctx, channel, msg); err != nil {
		return err
	}
	r.setLocked(key, value, ttl, r.now())
	return nil
}

// SetIfNewerAndPublish stores value under key for ttl, as Set does, only
// if key holds nothing or a value whose write time (8 bytes big-endian at
// byte offset stampOffset; a value too short to hold one counts as older)
// is not newer than value's, and then publishes msg on channel of r.Bus
// (nothing when channel is empty), as one step (see SetAndPublish). stored
// is true when it wrote, and when key already held exactly value (then
// nothing is written or published); false when key holds a newer value.
// It is l2.Store's SetIfNewerAndPublish.
func (r *Remote) SetIfNewerAndPublish(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte, stampOffset int) (stored bool, err error) {
	defer r.count(func(c *Calls) { c.SetIfNewerAndPublish++ })
	if stampOffset < 0 {
		return false, fmt.Errorf("hybridtest: set if newer %q: negative stamp offset %d", key, stampOffset)
	}
	if r.Bus == nil && channel != "" {
		return false, ErrNoBus
	}
	if err := r.begin(ctx, false); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	switch r.newerLocked(key, value, stampOffset, now) {
	case holdsValue:
		return true, nil
	case holdsNewer:
		return false, nil
	}
	if channel != "" {
		if err := r.Bus.Publish(ctx, channel, msg); err != nil {
			return false, err
		}
	}
	r.setLocked(key, value, ttl, now)
	return true, nil
}

// What key holds, as SetIfNewerAndPublish sees it.
const (
	holdsOlder = iota // nothing, or a value not written after the new one
	holdsValue        // the new value itself
	holdsNewer        // a value written after the new one
)

// newerLocked compares what key holds with value, by their write times at
// offset off (8 bytes big-endian; a value too short counts as older).
func (r *Remote) newerLocked(key string, value []byte, off int, now time.Time) int {
	cur, ok := r.getLocked(key, now)
	if !ok {
		return holdsOlder
	}
	if bytes.Equal(cur, value) {
		return holdsValue
	}
	if len(cur) < off+8 || len(value) < off+8 {
		return holdsOlder
	}
	if binary.BigEndian.Uint64(cur[off:]) > binary.BigEndian.Uint64(value[off:]) {
		return holdsNewer
	}
	return holdsOlder
}

// ReplaceAndPublish stores value under key only if key holds exactly old (a
// missing or expired key holds nothing, which no old matches), keeping the
// lifetime key has left, and publishes msg on channel of r.Bus whether or
// not it replaced (nothing when channel is empty), as one step (see
// SetAndPublish). It reports whether it replaced.
func (r *Remote) ReplaceAndPublish(ctx context.Context, key string, old, value []byte, channel string, msg []byte) (replaced bool, err error) {
	defer r.count(func(c *Calls) { c.ReplaceAndPublish++ })
	if r.Bus == nil && channel != "" {
		return false, ErrNoBus
	}
	if err := r.begin(ctx, false); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if channel != "" {
		if err := r.Bus.Publish(ctx, channel, msg); err != nil {
			return false, err
		}
	}
	cur, ok := r.getLocked(key, r.now())
	if !ok || !bytes.Equal(cur, old) {
		return false, nil
	}
	it := r.items[key]
	it.value = clone(value)
	r.items[key] = it
	return true, nil
}

// DeleteAndPublish removes key and publishes msg on channel of r.Bus, as
// one step (see SetAndPublish).
func (r *Remote) DeleteAndPublish(ctx context.Context, key string, channel string, msg []byte) error {
	defer r.count(func(c *Calls) { c.DeleteAndPublish++ })
	if r.Bus == nil {
		return ErrNoBus
	}
	if err := r.begin(ctx, false); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.Bus.Publish(ctx, channel, msg); err != nil {
		return err
	}
	delete(r.items, key)
	return nil
}

// Peek returns a copy of key's value, as Get does, without counting a call,
// running the hook, waiting or failing. Tests use it to look at the store.
func (r *Remote) Peek(key string) (value []byte, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.getLocked(key, r.now())
	if !ok {
		return nil, false
	}
	return clone(v), true
}

// Put stores a copy of value under key for ttl, as Set does, without
// counting a call, waiting or failing. Tests use it to plant a value, such
// as a corrupt one.
func (r *Remote) Put(key string, value []byte, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setLocked(key, value, ttl, r.now())
}

// Keys returns the live keys, sorted.
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

// Len returns the number of live keys.
func (r *Remote) Len() int { return len(r.Keys()) }
