package hybrid_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
)

// TestReadYourWrites is the first promise: after Set returns nil, Get on the
// same instance sees the value, every time, while another instance reads
// the key concurrently.
func TestReadYourWrites(t *testing.T) {
	for _, secret := range []string{"", "s3cret"} {
		t.Run("secret="+strconv.Quote(secret), func(t *testing.T) {
			s := newSharedTier(t)
			o := s.options()
			if secret != "" {
				o.Secret = []byte(secret)
			}
			a := newTestCache[int](t, o)
			b := newTestCache[int](t, o)
			ctx := context.Background()

			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, _, _ = b.Get(ctx, "k")
				}
			})
			defer func() {
				close(stop)
				wg.Wait()
			}()

			misses := 0
			for i := range 2000 {
				if err := a.Set(ctx, "k", i); err != nil {
					t.Fatalf("Set #%d: %v", i, err)
				}
				v, ok, err := a.Get(ctx, "k")
				if err != nil || !ok || v != i {
					misses++
					if misses <= 5 {
						t.Errorf("Get right after Set(k, %d): got %d, %v, %v", i, v, ok, err)
					}
				}
			}
			if misses > 0 {
				t.Errorf("%d of 2000 reads missed their own write, want 0", misses)
			}
		})
	}
}

func TestSetThenGetOrCreateSkipsLoad(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	ctx := context.Background()
	if err := c.Set(ctx, "k", "set"); err != nil {
		t.Fatal(err)
	}
	v, err := c.GetOrCreate(ctx, "k", neverLoad(t))
	if err != nil || v != "set" {
		t.Errorf("GetOrCreate after Set: got %q, %v, want \"set\", nil", v, err)
	}
	if v, ok := s.stored(t, "k"); !ok || v != "set" {
		t.Errorf("Remote holds %q (ok %v), want \"set\"", v, ok)
	}
}

func TestBusPublishFails(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.Remote = nil // bus only: Set publishes on its own
	c := newTestCache[string](t, o)
	down := errors.New("bus down")
	s.bus.FailWith(down)
	if err := c.Set(context.Background(), "k", "v"); !errors.Is(err, down) {
		t.Errorf("Set: got %v, want an error wrapping %v", err, down)
	}
	if err := c.Clear(context.Background()); !errors.Is(err, down) {
		t.Errorf("Clear: got %v, want an error wrapping %v", err, down)
	}
	if st := c.Stats(); st.PublishErrors != 2 {
		t.Errorf("PublishErrors: got %d, want 2", st.PublishErrors)
	}
}

// TestIntegrationWritesFailRedisDown (promise 6, write path): with no Redis
// to reach, Set and Delete return errors, and a failed Set leaves nothing
// behind in L1; GetOrCreate still answers from load, Get without error.
func TestIntegrationWritesFailRedisDown(t *testing.T) {
	ctx := context.Background()
	ro := &redis.Options{Addr: deadAddr(t)}
	shortTimeouts(ro)
	rdb := redis.NewClient(ro)
	t.Cleanup(func() { rdb.Close() })
	remote := &countingRemote{s: l2.New(rdb, l2.Options{})}
	c := newTestCache[string](t, hybrid.Options{Namespace: redistest.Prefix(t), Remote: remote})
	var loads atomic.Int64
	load := func(context.Context, string) (string, error) {
		loads.Add(1)
		return "loaded", nil
	}
	const bound = 2 * time.Second
	timed := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		if d := time.Since(start); d > bound {
			t.Errorf("%s took %v, want at most %v", what, d, bound)
		}
	}
	timed("GetOrCreate", func() {
		if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "loaded" {
			t.Errorf("GetOrCreate: got %q, %v, want \"loaded\", nil", v, err)
		}
	})
	timed("Set", func() {
		if err := c.Set(ctx, "k", "written"); err == nil {
			t.Error("Set with Redis down: got nil, want an error")
		}
	})
	timed("Get", func() {
		v, ok, err := c.Get(ctx, "k")
		if err != nil || (ok && v == "written") {
			t.Errorf("Get after the failed Set: got %q, %v, %v; want no error and never the value of the failed Set", v, ok, err)
		}
	})
	timed("GetOrCreate", func() {
		if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "loaded" {
			t.Errorf("GetOrCreate after the failed Set: got %q, %v, want \"loaded\" (load stands in)", v, err)
		}
	})
	timed("Delete", func() {
		if err := c.Delete(ctx, "k"); err == nil {
			t.Error("Delete with Redis down: got nil, want an error")
		}
	})
	timed("GetOrCreate", func() {
		if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "loaded" {
			t.Errorf("GetOrCreate after the failed Delete: got %q, %v, want \"loaded\"", v, err)
		}
	})
	st := c.Stats()
	t.Logf("Redis unreachable: %d loads, L2Errors %d", loads.Load(), st.L2Errors)
	if loads.Load() != 3 {
		t.Errorf("loads: got %d, want 3 (the failed Set and Delete each drop the key from L1)", loads.Load())
	}
	if st.L2Errors == 0 {
		t.Error("L2Errors: got 0, want the failures counted")
	}
}
