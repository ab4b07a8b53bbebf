package hybrid

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// breaker stops calls to a failing shared tier for a while, so a dead
// Redis costs each request nothing instead of a timeout: after threshold
// consecutive failures it opens for openFor, then lets one probe through;
// the probe's success closes it, its failure opens it again.
type breaker struct {
	threshold int64 // 0: never opens
	openFor   time.Duration

	failures  atomic.Int64
	openUntil atomic.Int64 // UnixNano; 0 while closed
	probing   atomic.Bool
	opens     atomic.Uint64
}

// allow reports whether a call may go to the shared tier now.
func (b *breaker) allow() bool {
	until := b.openUntil.Load()
	if until == 0 {
		return true
	}
	if time.Now().UnixNano() < until {
		return false
	}
	return b.probing.CompareAndSwap(false, true)
}

// record notes the outcome of a call that allow let through, made with
// ctx. A call cut short by its own ctx (cancelled, or its deadline passed)
// says nothing about the shared tier and is not counted.
func (b *breaker) record(ctx context.Context, err error) {
	if b.threshold == 0 || (err != nil && callerDone(ctx)) || errors.Is(err, context.Canceled) {
		b.probing.Store(false)
		return
	}
	if err == nil {
		b.failures.Store(0)
		b.openUntil.Store(0)
		b.probing.Store(false)
		return
	}
	if n := b.failures.Add(1); n >= b.threshold || b.probing.Load() {
		now := time.Now()
		if old := b.openUntil.Swap(now.Add(b.openFor).UnixNano()); old <= now.UnixNano() {
			b.opens.Add(1) // it was closed, or half-open for a probe
		}
		b.probing.Store(false)
	}
}

// neutral ends a call that allow let through whose outcome says nothing
// about the shared tier.
func (b *breaker) neutral() { b.probing.Store(false) }

// callerDone reports whether ctx has ended, counting a deadline that has
// passed even if ctx's own timer has not fired yet (a network deadline set
// from it can fire first).
// callerErr is the error of a call that callerDone says its ctx cut short:
// ctx's own, or DeadlineExceeded when the deadline has passed and ctx has
// not noticed yet.
func callerErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

func callerDone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}
