package hybrid

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
)

// This file holds the coalescing of background refreshes (RefreshBatch):
// refreshes of keys that come due at about the same time, from GetOrCreate
// and GetOrCreateMany calls alike, wait a little for one another and share
// one call of a batch loader.

// RefreshBatch gathers the background refreshes of a Cache[V] into batch
// loads; New takes it. Make one with BatchRefresh; the zero value gathers
// nothing.
type RefreshBatch[V any] struct {
	load func(ctx context.Context, keys []string) (map[string]V, error)
	size int
	wait time.Duration
}

// BatchRefresh returns a RefreshBatch for New: the background refreshes
// (EagerRefresh, XFetchBeta) of the keys that come due, up to size of them,
// or as many as came within wait of the first, are made by one call of
// load, which is used in place of the load functions their callers gave (a
// GetOrCreate caller gives one for one key). load is called as a
// GetOrCreateMany load function is: with the keys, detached from every
// caller (a batch serves many; it gets none of their ctx values), under
// LoadTimeout; a key it does not return keeps its value until it expires.
// Keys whose calls' entry options differ are batched apart. size is 1 to
// 10,000, wait up to 1 minute: refreshes serve the current value while they
// wait, so a wait costs the callers nothing.
//
//	c, err := hybrid.New(opts, hybrid.BatchRefresh(loadProducts, 100, 20*time.Millisecond))
func BatchRefresh[V any](load func(ctx context.Context, keys []string) (map[string]V, error), size int, wait time.Duration) RefreshBatch[V] {
	return RefreshBatch[V]{load: load, size: size, wait: wait}
}

// The bounds of BatchRefresh's size and wait.
const (
	maxRefreshBatch     = 10_000
	maxRefreshBatchWait = time.Minute
)

// off reports whether b is the zero RefreshBatch.
func (b RefreshBatch[V]) off() bool { return b.load == nil && b.size == 0 && b.wait == 0 }

// check validates b, unless it is the zero RefreshBatch (off).
func (b RefreshBatch[V]) check() error {
	switch {
	case b.off():
		return nil
	case b.load == nil:
		return errors.New("hybrid: RefreshBatch: nil load function")
	case b.size < 1 || b.size > maxRefreshBatch:
		return fmt.Errorf("hybrid: RefreshBatch: size %d is outside [1, %d]", b.size, maxRefreshBatch)
	case b.wait <= 0 || b.wait > maxRefreshBatchWait:
		return fmt.Errorf("hybrid: RefreshBatch: wait %v is outside (0, %v]", b.wait, maxRefreshBatchWait)
	}
	return nil
}

// coalescer holds the refreshes waiting for a batch load.
type coalescer[V any] struct {
	load func(context.Context, []string) (map[string]V, error)
	size int
	wait time.Duration
	mu   sync.Mutex
	open []*refreshBuffer[V] // filling, one per policy
}

// refreshBuffer is one batch of refreshes filling up, all under one policy.
type refreshBuffer[V any] struct {
	e    policy
	keys []string
	held []item[V]
	full chan struct{} // closed when it holds size keys
}

// newCoalescer returns the coalescer that the RefreshBatch given to New
// (at most one) asks for (nil: none), or an error if it is not valid.
func newCoalescer[V any](batch []RefreshBatch[V]) (*coalescer[V], error) {
	if len(batch) > 1 {
		return nil, fmt.Errorf("hybrid: New: %d RefreshBatch values, at most 1", len(batch))
	}
	if len(batch) == 0 || batch[0].off() {
		return nil, nil
	}
	b := batch[0]
	if err := b.check(); err != nil {
		return nil, err
	}
	return &coalescer[V]{load: b.load, size: b.size, wait: b.wait}, nil
}

// add puts keys, claimed for a refresh under e (held, by index), in the
// buffer of e, which starts filling if there is none and is loaded once it
// holds size keys or its wait is over.
func (q *coalescer[V]) add(c *Cache[V], keys []string, held []item[V], e policy) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var b *refreshBuffer[V]
	for _, o := range q.open {
		if samePolicy(&o.e, &e) {
			b = o
			break
		}
	}
	if b == nil {
		b = &refreshBuffer[V]{e: e, full: make(chan struct{})}
		if !c.run(func() { q.collect(c, b) }) {
			return // closed: the entries expire as they would have
		}
		q.open = append(q.open, b)
	}
	b.keys, b.held = append(b.keys, keys...), append(b.held, held...)
	if len(b.keys) >= q.size {
		q.drop(b)
		close(b.full)
	}
}

// collect waits for b to fill or for its wait to end, then refreshes its
// keys with one load. Close ends the wait; the keys are then not refreshed.
func (q *coalescer[V]) collect(c *Cache[V], b *refreshBuffer[V]) {
	t := time.NewTimer(q.wait)
	defer t.Stop()
	select {
	case <-b.full:
	case <-t.C:
	case <-c.stop.Done():
	}
	q.mu.Lock()
	q.drop(b)
	keys, held := b.keys, b.held
	q.mu.Unlock()
	if c.closed.Load() {
		return
	}
	if len(keys) > 1 {
		c.n.refreshesCoalesced.Add(uint64(len(keys)))
	}
	c.refreshMany(context.Background(), keys, held, loader[V]{many: q.load}, b.e)
}

// drop takes b out of the open buffers, if it is there. q.mu is held.
func (q *coalescer[V]) drop(b *refreshBuffer[V]) {
	for i, o := range q.open {
		if o == b {
			q.open = append(q.open[:i], q.open[i+1:]...)
			return
		}
	}
}

// samePolicy reports whether a and b are the same policy. It compares
// every field, so that a field added to policy is not forgotten here; it
// runs once per refresh that waits for a batch.
func samePolicy(a, b *policy) bool { return reflect.DeepEqual(*a, *b) }
