package hybrid_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"

	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
)

func TestL1OnlyGetOrCreateLoadsOnce(t *testing.T) {
	c := newTestCache[int](t, hybrid.Options{})
	ctx := context.Background()
	loads := 0
	load := func(context.Context, string) (int, error) {
		loads++
		return 42, nil
	}
	for i := range 5 {
		v, err := c.GetOrCreate(ctx, "k", load)
		if err != nil || v != 42 {
			t.Fatalf("GetOrCreate #%d: got %d, %v, want 42, nil", i, v, err)
		}
	}
	if loads != 1 {
		t.Errorf("load ran %d times, want 1", loads)
	}
	if s := c.Stats(); s.Load.Calls != 1 || s.L1.Hits != 4 || s.L1.Misses != 1 {
		t.Errorf("Stats: got Load.Calls %d, L1.Hits %d, L1.Misses %d, want 1, 4, 1", s.Load.Calls, s.L1.Hits, s.L1.Misses)
	}
}

func TestL1OnlySetGetDelete(t *testing.T) {
	c := newTestCache[[]string](t, hybrid.Options{})
	ctx := context.Background()
	if _, ok, err := c.Get(ctx, "k"); ok || err != nil {
		t.Fatalf("Get on an empty cache: got ok %v, err %v, want a miss", ok, err)
	}
	want := []string{"a", "b"}
	if err := c.Set(ctx, "k", want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := c.Get(ctx, "k")
	if err != nil || !ok || !slices.Equal(got, want) {
		t.Fatalf("Get after Set: got %q, %v, %v, want %q, true, nil", got, ok, err, want)
	}
	v, err := c.GetOrCreate(ctx, "k", func(context.Context, string) ([]string, error) {
		t.Error("load called for a key set before")
		return nil, nil
	})
	if err != nil || !slices.Equal(v, want) {
		t.Errorf("GetOrCreate after Set: got %q, %v, want %q", v, err, want)
	}
	if err := c.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := c.Get(ctx, "k"); ok || err != nil {
		t.Errorf("Get after Delete: got %q, %v, %v, want a miss", got, ok, err)
	}
	if err := c.Delete(ctx, "never-set"); err != nil {
		t.Errorf("Delete of a missing key: %v", err)
	}
}

func TestClosed(t *testing.T) {
	s := newSharedTier(t)
	c, err := hybrid.New[string](s.options())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// "k" is still in L1: the closed check must come before the hit.
	if v, err := c.GetOrCreate(ctx, "k", neverLoad(t)); !errors.Is(err, hybrid.ErrClosed) {
		t.Errorf("GetOrCreate of a key in L1: got %q, %v, want %v", v, err, hybrid.ErrClosed)
	}
	if _, err := c.GetOrCreate(ctx, "other", neverLoad(t)); !errors.Is(err, hybrid.ErrClosed) {
		t.Errorf("GetOrCreate: got %v, want %v", err, hybrid.ErrClosed)
	}
	if _, _, err := c.Get(ctx, "k"); !errors.Is(err, hybrid.ErrClosed) {
		t.Errorf("Get: got %v, want %v", err, hybrid.ErrClosed)
	}
	if err := c.Set(ctx, "k", "v"); !errors.Is(err, hybrid.ErrClosed) {
		t.Errorf("Set: got %v, want %v", err, hybrid.ErrClosed)
	}
	if err := c.Delete(ctx, "k"); !errors.Is(err, hybrid.ErrClosed) {
		t.Errorf("Delete: got %v, want %v", err, hybrid.ErrClosed)
	}
	if err := c.Clear(ctx); !errors.Is(err, hybrid.ErrClosed) {
		t.Errorf("Clear: got %v, want %v", err, hybrid.ErrClosed)
	}
	if _, err := c.GetOrCreateMany(ctx, []string{"k"}, func(context.Context, []string) (map[string]string, error) {
		t.Error("load called on a closed cache")
		return nil, nil
	}); !errors.Is(err, hybrid.ErrClosed) {
		t.Errorf("GetOrCreateMany: got %v, want %v", err, hybrid.ErrClosed)
	}
	if _, err := c.GetMany(ctx, []string{"k"}); !errors.Is(err, hybrid.ErrClosed) {
		t.Errorf("GetMany: got %v, want %v", err, hybrid.ErrClosed)
	}
	_ = c.Stats() // still answers
	if got := s.bus.Stats().Subscriptions; got != 0 {
		t.Errorf("bus subscriptions after Close: got %d, want 0", got)
	}
}

func TestNewSubscribeFails(t *testing.T) {
	bus := new(hybridtest.Bus)
	defer bus.Close()
	down := errors.New("connection refused")
	bus.FailWith(down)
	c, err := hybrid.New[string](hybrid.Options{Namespace: testNS, Bus: bus})
	if !errors.Is(err, down) {
		t.Fatalf("New with a failing bus: got %v, want an error wrapping %v", err, down)
	}
	if c != nil {
		t.Error("New with a failing bus: got a cache, want nil")
	}
}

// TestCloseWaitsForFill: Close cancels the ctx of a fill in progress and
// returns only once the load has returned.
func TestCloseWaitsForFill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		sawDone, release := make(chan struct{}), make(chan struct{})
		load := func(ctx context.Context, _ string) (string, error) {
			<-ctx.Done()
			close(sawDone)
			<-release
			return "", ctx.Err()
		}
		caller := goGetOrCreate(context.Background(), c, "k", load)
		synctest.Wait()
		closed := make(chan struct{})
		go func() {
			c.Close()
			close(closed)
		}()
		<-sawDone // Close cancelled the load's ctx
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while the load was still running")
		default:
		}
		close(release)
		<-closed
		if r := <-caller; !errors.Is(r.err, context.Canceled) {
			t.Errorf("caller of the cancelled fill: got %q, %v, want an error wrapping %v", r.v, r.err, context.Canceled)
		}
		if _, err := c.GetOrCreate(t.Context(), "k", loadTop); !errors.Is(err, hybrid.ErrClosed) {
			t.Errorf("GetOrCreate after Close: got %v, want %v", err, hybrid.ErrClosed)
		}
	})
}

// TestCloseLeavesNoGoroutines: after Close of every cache and of the bus,
// nothing of theirs runs.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := newSharedTier(t)
	var caches []*hybrid.Cache[string]
	for range 3 {
		c, err := hybrid.New[string](s.options())
		if err != nil {
			t.Fatal(err)
		}
		caches = append(caches, c)
	}
	ctx := context.Background()
	for i, c := range caches {
		if _, err := c.GetOrCreate(ctx, "k", loadTop); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, "k", "v"+string(rune('0'+i))); err != nil {
			t.Fatal(err)
		}
	}
	// A fill still blocked when Close comes.
	started := make(chan struct{})
	go func() {
		_, _ = caches[0].GetOrCreate(ctx, "slow", func(ctx context.Context, _ string) (string, error) {
			close(started)
			<-ctx.Done()
			return "", ctx.Err()
		})
	}()
	<-started
	for _, c := range caches {
		c.Close()
	}
	s.bus.Close()
}
