package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// slowDB is a database row per key behind a load that can be held: a load
// reads the row when it starts and returns what it read once let go.
type slowDB struct {
	mu    sync.Mutex
	rows  map[string]string
	hold  chan struct{} // nil: loads return at once
	delay time.Duration // how long a load not held takes
	began chan string   // a load's key, as it starts (when hold is set)
	loads atomic.Int64
}

func newSlowDB() *slowDB { return &slowDB{rows: map[string]string{}} }

func (d *slowDB) put(key, v string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rows[key] = v
}

func (d *slowDB) remove(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.rows, key)
}

// holdLoads makes the loads that start from now wait until the returned
// func is called.
func (d *slowDB) holdLoads() (release func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hold, d.began = make(chan struct{}), make(chan string, 64)
	hold := d.hold
	var once sync.Once
	return func() { once.Do(func() { close(hold) }) }
}

func (d *slowDB) read(key string) (string, bool, chan struct{}, chan string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.rows[key]
	return v, ok, d.hold, d.began
}

func (d *slowDB) load(ctx context.Context, key string) (string, error) {
	d.loads.Add(1)
	v, ok, hold, began := d.read(key)
	if hold == nil {
		time.Sleep(d.delay)
	} else {
		began <- key
		select {
		case <-hold:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if !ok {
		return "", hybrid.ErrNotFound
	}
	return v, nil
}

func (d *slowDB) loadMany(ctx context.Context, keys []string) (map[string]string, error) {
	out := make(map[string]string, len(keys))
	for _, key := range keys {
		v, err := d.load(ctx, key)
		switch {
		case errors.Is(err, hybrid.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			out[key] = v
		}
	}
	return out, nil
}

// TestRefreshLosesToNewerWrite: a background refresh whose load read the
// database before a Set or Delete made elsewhere (by a peer, or by the
// refreshing instance itself) does not write its older value over that
// change: once the refresh has ended, Redis and both instances hold the
// newer write (or nothing, after a Delete). Eager refresh, XFetch and the
// batch refresh alike, on a real redis-server, with and without values in
// messages.
func TestRefreshLosesToNewerWrite(t *testing.T) {
	modes := []struct {
		name string
		set  func(o *hybrid.Options, db *slowDB) []hybrid.RefreshBatch[string]
	}{
		{"eager", func(o *hybrid.Options, _ *slowDB) []hybrid.RefreshBatch[string] { o.EagerRefresh = 0.2; return nil }},
		// A first load of 200 ms makes XFetch's window span the lifetime:
		// a hit 1.5 s before expiry refreshes with probability 0.47.
		{"xfetch", func(o *hybrid.Options, db *slowDB) []hybrid.RefreshBatch[string] {
			o.XFetchBeta, db.delay = 10, 200*time.Millisecond
			return nil
		}},
		{"batch", func(o *hybrid.Options, db *slowDB) []hybrid.RefreshBatch[string] {
			o.EagerRefresh = 0.2
			return []hybrid.RefreshBatch[string]{hybrid.BatchRefresh(db.loadMany, 4, 10*time.Millisecond)}
		}},
	}
	writers := []struct {
		name   string
		own    bool // the refreshing instance writes
		delete bool
	}{
		{"peer-set", false, false},
		{"own-set", true, false},
		{"peer-delete", false, true},
	}
	for _, im := range invalidationModes {
		for _, m := range modes {
			for _, w := range writers {
				t.Run(im.name+"/"+m.name+"/"+w.name, func(t *testing.T) {
					ctx := context.Background()
					db := newSlowDB()
					db.put("k", "v1")
					ns := redistest.Prefix(t)
					o := hybrid.Options{Namespace: ns, Secret: im.secret, TTL: 2 * time.Second, LocalTTL: 2 * time.Second}
					batch := m.set(&o, db)
					ins := newInstances(t, 2, singleNode(nil), o, batch...)
					a, b := ins[0], ins[1]
					if v, err := a.c.GetOrCreate(ctx, "k", db.load); err != nil || v != "v1" {
						t.Fatalf("A: first GetOrCreate: %q, %v", v, err)
					}
					waitFor(t, 5*time.Second, "the write-back", func() bool { _, ok := redisValue(t, a.rdb, ns, "k"); return ok }, nil)
					fill(t, b, "k", "v1")

					time.Sleep(500 * time.Millisecond) // past the eager refresh's due time (0.4 s)
					release := db.holdLoads()
					defer release()
					// Hits until one starts a refresh (XFetch draws).
					var began bool
					for deadline := time.Now().Add(time.Second); !began && time.Now().Before(deadline); {
						if v, err := a.c.GetOrCreate(ctx, "k", db.load); err != nil || v != "v1" {
							t.Fatalf("A: due hit: %q, %v; want v1 at once", v, err)
						}
						select {
						case <-db.began:
							began = true
						case <-time.After(5 * time.Millisecond):
						}
					}
					if !began {
						t.Fatal("no refresh started")
					}
					// The refresh's load read v1. Now the newer write.
					writer := b
					if w.own {
						writer = a
					}
					if w.delete {
						db.remove("k")
						if err := writer.c.Delete(ctx, "k"); err != nil {
							t.Fatal(err)
						}
					} else {
						db.put("k", "v2")
						setStr(t, writer, "k", "v2")
					}
					release()
					// The refresh, let go, ends within milliseconds; give it
					// time to write, then check that nothing went back.
					time.Sleep(300 * time.Millisecond)
					want, wantOK := "v2", !w.delete
					check := func() string {
						var errs []string
						if v, ok := redisValue(t, a.rdb, ns, "k"); ok != wantOK || (ok && v != want) {
							errs = append(errs, fmt.Sprintf("Redis holds %q (%v)", v, ok))
						}
						for _, in := range ins {
							if v, ok := getStr(t, in, "k"); ok != wantOK || (ok && v != want) {
								errs = append(errs, fmt.Sprintf("%s serves %q (%v)", in.name, v, ok))
							}
						}
						return fmt.Sprint(errs)
					}
					if got := check(); got != "[]" {
						t.Errorf("after the refresh: %s; want %q (found %v) everywhere", got, want, wantOK)
					}
				})
			}
		}
	}
}

// TestRefreshStoringNothingKeepsSchedule: a refresh whose load stores
// nothing (it says DoNotCache, or a batch refresh leaves the key out) leaves
// the current value to serve until it expires and does not come due again
// meanwhile: one refresh load per lifetime, however many hits, where a
// re-read of Redis used to give the entry a new schedule (a refresh due at
// a fifth of what was left, about 8 loads in 1.5 s).
func TestRefreshStoringNothingKeepsSchedule(t *testing.T) {
	for _, mode := range []string{"do-not-cache", "batch-leaves-out"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			ns := redistest.Prefix(t)
			var refreshLoads atomic.Int64
			var first atomic.Bool
			load := func(ctx context.Context, key string) (string, error) {
				if first.CompareAndSwap(false, true) {
					return "v", nil
				}
				refreshLoads.Add(1)
				hybrid.SettingsFrom(ctx).DoNotCache()
				return "not-cached", nil
			}
			o := hybrid.Options{Namespace: ns, TTL: 1500 * time.Millisecond, LocalTTL: 1500 * time.Millisecond, EagerRefresh: 0.2}
			var batch []hybrid.RefreshBatch[string]
			if mode == "batch-leaves-out" {
				batch = append(batch, hybrid.BatchRefresh(func(context.Context, []string) (map[string]string, error) {
					refreshLoads.Add(1)
					return nil, nil
				}, 1, time.Millisecond))
			}
			a := newInstances(t, 1, singleNode(nil), o, batch...)[0]
			start := time.Now()
			if v, err := a.c.GetOrCreate(ctx, "k", load); err != nil || v != "v" {
				t.Fatalf("first: %q, %v", v, err)
			}
			// Hits every 2 ms until just before expiry.
			for time.Since(start) < 1300*time.Millisecond {
				if v, err := a.c.GetOrCreate(ctx, "k", load); err != nil || v != "v" {
					t.Fatalf("hit at %v: %q, %v; want the current v", time.Since(start), v, err)
				}
				time.Sleep(2 * time.Millisecond)
			}
			if n := refreshLoads.Load(); n != 1 {
				t.Errorf("%d refresh loads in one lifetime, want 1 (Stats.Load: %+v)", n, a.c.Stats().Load)
			}
		})
	}
}
