package hybrid_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
)

func TestBreakerKeepsCallsAwayFromAFailingRemote(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := s.options()
		o.BreakerThreshold = 3
		o.BreakerOpenFor = time.Second
		c := newTestCache[string](t, o)
		ctx := context.Background()
		down := errors.New("connection refused")
		s.remote.FailWith(down)

		load := func(_ context.Context, key string) (string, error) { return "loaded:" + key, nil }
		for i := range 10 {
			key := string(rune('a' + i))
			if v, err := c.GetOrCreate(ctx, key, load); err != nil || v != "loaded:"+key {
				t.Fatalf("GetOrCreate(%s) with Redis down: got %q %v, want the loaded value", key, v, err)
			}
			synctest.Wait() // let the fill's write-back attempts finish
		}
		st := c.Stats()
		if st.L2.BreakerOpens != 1 {
			t.Errorf("L2.BreakerOpens: got %d, want 1", st.L2.BreakerOpens)
		}
		if st.L2.Skipped == 0 {
			t.Error("L2.Skipped: got 0, want calls skipped while the breaker is open")
		}
		calls := s.remote.Calls().Total()
		if err := c.Set(ctx, "k", "v"); !errors.Is(err, hybrid.ErrUnavailable) {
			t.Errorf("Set while open: got %v, want ErrUnavailable", err)
		}
		if got := s.remote.Calls().Total(); got != calls {
			t.Errorf("Set while open reached the Remote (%d calls, was %d)", got, calls)
		}

		// Redis comes back; after OpenFor one probe closes the breaker.
		s.remote.FailWith(nil)
		time.Sleep(o.BreakerOpenFor + time.Millisecond)
		if err := c.Set(ctx, "k", "v"); err != nil {
			t.Fatalf("Set after OpenFor with Redis back: %v", err)
		}
		if err := c.Set(ctx, "k2", "v2"); err != nil {
			t.Fatalf("second Set after the probe: %v", err)
		}
		if v, ok := s.stored(t, "k2"); !ok || v != "v2" {
			t.Errorf("Redis holds %q %v, want v2", v, ok)
		}
	})
}

func TestBreakerProbeFailureReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		o := s.options()
		o.BreakerThreshold = 1
		o.BreakerOpenFor = time.Second
		c := newTestCache[string](t, o)
		ctx := context.Background()
		set(t, c, "k", "v0") // the instance learns the clear record
		s.remote.FailWith(errors.New("down"))
		if err := c.Set(ctx, "k", "v"); err == nil || errors.Is(err, hybrid.ErrUnavailable) {
			t.Fatalf("first Set: got %v, want the Remote's error", err)
		}
		if err := c.Set(ctx, "k", "v"); !errors.Is(err, hybrid.ErrUnavailable) {
			t.Fatalf("Set while open: got %v, want ErrUnavailable", err)
		}
		time.Sleep(o.BreakerOpenFor + time.Millisecond)
		if err := c.Set(ctx, "k", "v"); err == nil || errors.Is(err, hybrid.ErrUnavailable) {
			t.Fatalf("probe: got %v, want the Remote's error", err)
		}
		if err := c.Set(ctx, "k", "v"); !errors.Is(err, hybrid.ErrUnavailable) {
			t.Fatalf("after a failed probe: got %v, want ErrUnavailable", err)
		}
		if got := c.Stats().L2.BreakerOpens; got != 2 {
			t.Errorf("L2.BreakerOpens: got %d, want 2", got)
		}
	})
}
