package hybrid

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Events are optional hooks for telemetry of one's own: each is called, if
// set, when its event happens. They run on the goroutine that saw the event
// (a caller's, a fill's, the bus's or L1's maintenance goroutine), so they
// must be quick, must not block and must not call the Cache. Stats counts
// the same events whether or not hooks are set.
type Events struct {
	// Evicted is called when an entry leaves L1 because of its size bound
	// (expired false) or its lifetime (expired true); not on Set, Delete
	// or invalidation.
	Evicted func(key string, expired bool)

	// Invalidated is called after a message from another instance has been
	// applied to L1. op is the call that instance made: OpSet, OpDelete,
	// OpExpire, OpTouch (a refresh found the value not modified),
	// OpDeleteTag or OpClear (Clear or ClearL1); a SetMany or DeleteMany
	// comes as one OpSet or OpDelete naming its keys. keys holds
	// the keys, the tags for OpDeleteTag, and nothing for OpClear. The
	// slice must not be kept.
	Invalidated func(op Op, keys []string)

	// L2Error is called when a shared-tier or bus call fails; op names the
	// call (see Op).
	L2Error func(op Op, err error)

	// StaleServed is called when fail-safe serves a stale value for key:
	// cause is the load's error, or nil when the load goes on (it passed
	// SoftTimeout, or waits for a slot of MaxConcurrentLoads).
	StaleServed func(key string, cause error)
}

// Tracer starts a span around each load and each shared-tier call the
// cache makes, so that a tracing system (see the otel module) sees where a
// miss spends its time. op names the call (see Op); key is the key, or ""
// for a batch. Start returns the context the work runs under and a
// function that ends the span with the work's error. L1 hits are never
// traced.
type Tracer interface {
	Start(ctx context.Context, op Op, key string) (context.Context, func(err error))
}

// span starts a span when a Tracer is set.
func (c *Cache[V]) span(ctx context.Context, op Op, key string) (context.Context, func(error)) {
	if c.o.Tracer == nil {
		return ctx, endNothing
	}
	return c.o.Tracer.Start(ctx, op, key)
}

func endNothing(error) {}

// l2Failed counts a failed shared-tier or bus call and reports it.
func (c *Cache[V]) l2Failed(op Op, err error) {
	c.n.l2Errors.Add(1)
	if f := c.o.Events.L2Error; f != nil {
		f(op, err)
	}
}

// staleServed counts a stale value served for key and reports it.
func (c *Cache[V]) staleServed(key string, cause error) {
	c.n.staleServed.Add(1)
	if f := c.o.Events.StaleServed; f != nil {
		f(key, cause)
	}
}

// invalidated reports a message from another instance, once applied.
func (c *Cache[V]) invalidated(op Op, keys []string) {
	c.n.received.Add(1)
	if f := c.o.Events.Invalidated; f != nil {
		f(op, keys)
	}
}

// logKind names a kind of error that is logged at most once per LogEvery.
type logKind int

const (
	logL2 logKind = iota
	logDecode
	logBus
	logOversize
	logStale
	logQueue
	logOptions // options a load set (SettingsFrom) or Options.PerKey gave, refused
	logVerify  // an L1 entry the background verifier found divergent, or its failed read
	logKinds
)

// limitedLog writes at most one line per kind per interval, so a dead Redis
// costs a log line every few seconds, not one per request.
type limitedLog struct {
	l     *slog.Logger
	every time.Duration
	last  [logKinds]atomic.Int64
}

func (ll *limitedLog) log(kind logKind, msg string, args ...any) {
	now := time.Now().UnixNano()
	last := ll.last[kind].Load()
	if last != 0 && now-last < int64(ll.every) {
		return
	}
	if !ll.last[kind].CompareAndSwap(last, now) {
		return
	}
	ll.l.Warn(msg, args...)
}
