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

// TestStoreBoundDeadAddress: go-redis's default client (3 retries; 5 dial
// attempts 100 ms apart) takes about 1.7 s to give up on a dead address.
// With l2's ReadTimeout and WriteTimeout at 300 ms, GetOrCreate answers
// from the loader, and Set and Delete return an error, each within twice
// that bound.
func TestStoreBoundDeadAddress(t *testing.T) {
	const bound = 300 * time.Millisecond
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: deadAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	so := l2.Options{ReadTimeout: bound, WriteTimeout: bound}
	a := newSplitInstance(t, "A", rdb, nil, so, hybrid.Options{Namespace: redistest.Prefix(t)}, invalidate.Options{})
	timed := func(what string, f func() error) error {
		t.Helper()
		start := time.Now()
		err := f()
		d := time.Since(start)
		t.Logf("%s: %v after %v", what, err, d.Round(time.Millisecond))
		if d > 2*bound {
			t.Errorf("%s took %v, want at most %v (store bound %v)", what, d, 2*bound, bound)
		}
		return err
	}

	err := timed("GetOrCreate", func() error {
		v, err := a.c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) { return "loaded", nil })
		if err == nil && v != "loaded" {
			t.Errorf("GetOrCreate: got %q, want \"loaded\"", v)
		}
		return err
	})
	if err != nil {
		t.Errorf("GetOrCreate: got %v, want the loaded value (the loader stands in for Redis)", err)
	}
	for _, w := range []struct {
		name string
		do   func() error
	}{
		{"Set", func() error { return a.c.Set(ctx, "k", "v") }},
		{"Delete", func() error { return a.c.Delete(ctx, "k") }},
	} {
		if err := timed(w.name, w.do); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: got %v, want an error wrapping context.DeadlineExceeded", w.name, err)
		}
	}
	if st := a.c.Stats(); st.L2Errors == 0 {
		t.Error("L2Errors: got 0, want the failed read counted")
	}
}
