package hybrid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// TestFaultBreakerCallerDeadline: Redis is healthy but 60 ms away (a
// proxy delays each way by 30 ms); the client is built with
// ContextTimeoutEnabled, as l2's bounds ask. Get calls whose
// callers allow only 5 ms run out of their own time. That is the callers'
// budget, not a failure of the shared tier: like a cancelled context it
// must not open the breaker, or the next Set, with all the time it wants,
// fails with ErrUnavailable for BreakerOpenFor although Redis is fine.
//
// NOTE: breaker.record skips a failure when ctx.Err() != nil, but go-redis
// sets the socket deadline from ctx, and the read may time out a moment
// before ctx's timer marks ctx done (l2's withCause checks the deadline by
// the clock for that reason): some of the Gets are then counted, and a few
// in a row open the breaker. The control subtest shows that the store's own
// read timeout (l2.Options.ReadTimeout) does count, as it should.
func TestFaultBreakerCallerDeadline(t *testing.T) {
	srv.NeedReal(t)
	const (
		delay     = 30 * time.Millisecond // each way
		budget    = 5 * time.Millisecond
		threshold = 3
		// Many Gets: go-redis's socket deadline may fire a moment before
		// ctx's own timer marks it done, and a check of ctx.Err() alone
		// then takes the caller's deadline for a failure of Redis.
		gets = 30
	)
	// storeTimeout is the store's ReadTimeout; its WriteTimeout is the
	// default.
	run := func(t *testing.T, callerBudget, storeTimeout time.Duration) (hybrid.Stats, error) {
		ctx := context.Background()
		ns := redistest.Prefix(t)
		p := startProxy(t, srv.Addr)
		rdb := via(p, func(o *redis.Options) { o.ContextTimeoutEnabled = true; o.MaxRetries = -1 })(t)
		o := hybrid.Options{Namespace: ns, BreakerThreshold: threshold, BreakerOpenFor: 5 * time.Second}
		a := newSplitInstance(t, "A", rdb, nil, l2.Options{ReadTimeout: storeTimeout}, o, invalidate.Options{})
		setStr(t, a, "k", "v")
		setFault(t, p.Delay(delay))
		timedOut := 0
		for range gets {
			a.c.DropLocal("k")
			cctx, cancel := ctx, context.CancelFunc(func() {})
			if callerBudget > 0 {
				cctx, cancel = context.WithTimeout(ctx, callerBudget)
			}
			_, ok, err := a.c.Get(cctx, "k")
			cancel()
			if !ok {
				timedOut++
			}
			if ok || (err != nil && !errors.Is(err, context.DeadlineExceeded)) {
				t.Fatalf("Get with a %v budget, store timeout %v: got %v, %v, want a miss for lack of time", callerBudget, storeTimeout, ok, err)
			}
		}
		t.Logf("%d Gets with a %v budget and store timeout %v: %d ran out of time", gets, callerBudget, storeTimeout, timedOut)
		start := time.Now()
		err := a.c.Set(ctx, "k", "v2")
		t.Logf("then Set without a deadline: %v after %v; BreakerOpens %d, L2Errors %d",
			err, time.Since(start).Round(time.Millisecond), a.c.Stats().BreakerOpens, a.c.Stats().L2Errors)
		return a.c.Stats(), err
	}

	t.Run("caller-deadline-does-not-count", func(t *testing.T) {
		st, err := run(t, budget, -1)
		if err != nil {
			t.Errorf("Set on a healthy Redis after %d Gets ran out of their callers' %v: got %v, want nil "+
				"(a caller's deadline is not a shared-tier failure; BreakerOpens %d)", gets, budget, err, st.BreakerOpens)
		}
		if st.BreakerOpens != 0 {
			t.Errorf("BreakerOpens %d, want 0: the callers' own deadlines opened the breaker", st.BreakerOpens)
		}
	})

	t.Run("store-timeout-counts", func(t *testing.T) {
		// 25 ms: short of the 60 ms round trip through the proxy.
		st, err := run(t, 0, 25*time.Millisecond)
		if st.BreakerOpens != 1 || !errors.Is(err, hybrid.ErrUnavailable) {
			t.Errorf("after %d reads cut short by l2.Options.ReadTimeout: BreakerOpens %d, Set %v; want 1 and ErrUnavailable", gets, st.BreakerOpens, err)
		}
	})
}
