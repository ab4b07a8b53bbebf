package hybrid_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
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
	if s := c.Stats(); s.Loads != 1 || s.L1Hits != 4 || s.L1Misses != 1 {
		t.Errorf("Stats: got Loads %d, L1Hits %d, L1Misses %d, want 1, 4, 1", s.Loads, s.L1Hits, s.L1Misses)
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

// TestGetOrCreateTiers follows one key through the three tiers: a full
// miss loads and stores in both tiers, the same instance then hits L1 and
// a second instance sharing the Remote hits L2.
func TestGetOrCreateTiers(t *testing.T) {
	eachCtx(t, func(t *testing.T, ctx context.Context) {
		s := newSharedTier(t)
		o := hybrid.Options{Namespace: testNS, Remote: s.remote}
		a := newTestCache[string](t, o)
		b := newTestCache[string](t, o)
		l := &counter{value: "v1"}

		// Full miss.
		if v, err := a.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Fatalf("first GetOrCreate: got %q, %v, want \"v1\", nil", v, err)
		}
		s.waitWrites(t, 1)
		if got, want := s.remote.Keys(), []string{"ns:k"}; !slices.Equal(got, want) {
			t.Errorf("Remote keys after the fill: got %q, want %q", got, want)
		}
		if v, ok := s.stored(t, "k"); !ok || v != "v1" {
			t.Errorf("Remote holds %q (ok %v), want \"v1\"", v, ok)
		}
		st := a.Stats()
		if st.L1Misses != 1 || st.L2Misses != 1 || st.Loads != 1 || st.L1Hits != 0 || st.L2Hits != 0 || st.L1Entries != 1 {
			t.Errorf("Stats after a full miss: got %+v, want L1Misses 1, L2Misses 1, Loads 1, L1Entries 1", st)
		}
		if c := s.remote.Calls(); c.Get != 1 || c.SetIfAbsent != 1 {
			t.Errorf("Remote calls after a full miss: got %+v, want 1 Get and 1 SetIfAbsent", c)
		}

		// L1 hit.
		if v, err := a.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Fatalf("second GetOrCreate: got %q, %v, want \"v1\", nil", v, err)
		}
		if st := a.Stats(); st.L1Hits != 1 || st.Loads != 1 {
			t.Errorf("Stats after an L1 hit: got L1Hits %d, Loads %d, want 1, 1", st.L1Hits, st.Loads)
		}
		if got := s.remote.Calls().Get; got != 1 {
			t.Errorf("an L1 hit read the Remote: %d Gets, want 1", got)
		}

		// L2 hit, on another instance.
		if v, err := b.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Fatalf("GetOrCreate on the second instance: got %q, %v, want \"v1\", nil", v, err)
		}
		if v, err := b.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Fatalf("second GetOrCreate on the second instance: got %q, %v, want \"v1\", nil", v, err)
		}
		st = b.Stats()
		if st.L1Misses != 1 || st.L2Hits != 1 || st.L1Hits != 1 || st.Loads != 0 || st.L2Misses != 0 {
			t.Errorf("Stats of the second instance: got %+v, want L1Misses 1, L2Hits 1, L1Hits 1, no load", st)
		}
		if got := l.calls.Load(); got != 1 {
			t.Errorf("load ran %d times in all, want 1", got)
		}
		if c := s.remote.Calls(); c.Get != 2 || c.SetIfAbsent != 1 || c.Total() != 3 {
			t.Errorf("Remote calls: got %+v, want 2 Gets and 1 SetIfAbsent", c)
		}
	})
}

func TestGetMissWithoutLoad(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	if v, ok := getString(t, c, "k"); ok {
		t.Fatalf("Get of a missing key: got %q, want a miss", v)
	}
	s.remote.Put("ns:k", envelopeOf(t, "there", time.Minute), time.Minute)
	if v, ok := getString(t, c, "k"); !ok || v != "there" {
		t.Errorf("Get of a key in the Remote: got %q, %v, want \"there\", true", v, ok)
	}
	if v, ok := getString(t, c, "k"); !ok || v != "there" {
		t.Errorf("second Get: got %q, %v, want \"there\", true", v, ok)
	}
	if got := s.remote.Calls().Get; got != 2 {
		t.Errorf("Remote Gets: got %d, want 2 (a miss, then one read whose value stays in L1)", got)
	}
	if st := c.Stats(); st.L2Misses != 1 || st.L2Hits != 1 || st.L1Hits != 1 {
		t.Errorf("Stats: got %+v, want L2Misses 1, L2Hits 1, L1Hits 1", st)
	}
}

func TestLoadErrorNotCached(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	ctx := context.Background()
	errDB := errors.New("db down")
	l := &counter{err: errDB}
	for i := range 2 {
		_, err := c.GetOrCreate(ctx, "k", l.load)
		if !errors.Is(err, errDB) {
			t.Fatalf("GetOrCreate #%d: got %v, want an error wrapping %v", i, err, errDB)
		}
	}
	if got := l.calls.Load(); got != 2 {
		t.Errorf("load ran %d times for two calls, want 2 (errors are not cached)", got)
	}
	if st := c.Stats(); st.LoadErrors != 2 || st.Loads != 2 {
		t.Errorf("Stats: got Loads %d, LoadErrors %d, want 2, 2", st.Loads, st.LoadErrors)
	}
	if got := s.remote.Keys(); len(got) != 0 {
		t.Errorf("Remote keys after failed loads: got %q, want none", got)
	}
	l.err, l.value = nil, "ok"
	if v, err := c.GetOrCreate(ctx, "k", l.load); err != nil || v != "ok" {
		t.Errorf("GetOrCreate after the error cleared: got %q, %v, want \"ok\", nil", v, err)
	}
}

func TestGetOrCreateNilLoad(t *testing.T) {
	c := newTestCache[string](t, hybrid.Options{})
	if _, err := c.GetOrCreate(context.Background(), "k", nil); err == nil {
		t.Error("GetOrCreate with a nil load: got no error, want one")
	}
}

func TestGetOrCreateCancelledContext(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.GetOrCreate(ctx, "k", neverLoad(t)); !errors.Is(err, context.Canceled) {
		t.Errorf("GetOrCreate: got %v, want %v", err, context.Canceled)
	}
	if _, _, err := c.Get(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get: got %v, want %v", err, context.Canceled)
	}
	if err := c.Set(ctx, "k", "v"); !errors.Is(err, context.Canceled) {
		t.Errorf("Set: got %v, want %v", err, context.Canceled)
	}
	if got := s.remote.Calls().Total(); got != 0 {
		t.Errorf("calls with a cancelled ctx reached the Remote %d times, want 0", got)
	}
}

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

// corruptValues are stored values that must read as misses.
func corruptValues(t *testing.T) []struct {
	name string
	b    []byte
} {
	valid := envelopeOf(t, "planted", time.Hour)
	otherCodec := slices.Clone(valid)
	otherCodec[1] = codec.IDMsgpack
	futureFormat := slices.Clone(valid)
	futureFormat[0] = envelope.Format + 1
	unknownFlag := slices.Clone(valid)
	unknownFlag[2] = 0x80
	badPayload := envelope.Append(nil, envelope.Header{Codec: codec.IDJSON, Written: time.Now(), Expires: time.Now().Add(time.Hour)}, []byte(`{"unterminated`))
	wrongType := envelope.Append(nil, envelope.Header{Codec: codec.IDJSON, Written: time.Now(), Expires: time.Now().Add(time.Hour)}, []byte(`12`))
	return []struct {
		name string
		b    []byte
	}{
		{"random bytes", []byte("\x00\xff garbage \x13\x37 not an envelope at all")},
		{"empty", []byte{}},
		{"truncated envelope", valid[:envelope.HeaderLen-3]},
		{"other codec id", otherCodec},
		{"future format", futureFormat},
		{"unknown flag", unknownFlag},
		{"payload does not parse", badPayload},
		{"payload of another type", wrongType},
	}
}

// TestCorruptRemoteValue checks the documented handling of a stored value
// that does not decode: a miss counted in DecodeErrors; "the fill then
// loads and the new value replaces it".
func TestCorruptRemoteValue(t *testing.T) {
	for _, tt := range corruptValues(t) {
		t.Run(tt.name, func(t *testing.T) {
			eachCtx(t, func(t *testing.T, ctx context.Context) {
				s := newSharedTier(t)
				o := s.options()
				a := newTestCache[string](t, o)
				s.remote.Put("ns:k", tt.b, time.Hour)
				l := &counter{value: "loaded"}
				v, err := a.GetOrCreate(ctx, "k", l.load)
				if err != nil || v != "loaded" {
					t.Fatalf("GetOrCreate: got %q, %v, want \"loaded\", nil", v, err)
				}
				s.waitWrites(t, 1)
				st := a.Stats()
				if st.DecodeErrors != 1 || st.L2Misses != 1 || st.L2Hits != 0 || st.Loads != 1 {
					t.Errorf("Stats: got DecodeErrors %d, L2Misses %d, L2Hits %d, Loads %d, want 1, 1, 0, 1", st.DecodeErrors, st.L2Misses, st.L2Hits, st.Loads)
				}
				if v, ok := s.stored(t, "k"); !ok || v != "loaded" {
					t.Errorf("the Remote still holds a value that does not decode (got %q, %v), want the loaded value to replace it", v, ok)
				}
				// Same instance: an L1 hit. Another instance: an L2 hit.
				if v, err := a.GetOrCreate(ctx, "k", l.load); err != nil || v != "loaded" {
					t.Errorf("second GetOrCreate: got %q, %v, want \"loaded\"", v, err)
				}
				b := newTestCache[string](t, o)
				if v, err := b.GetOrCreate(ctx, "k", l.load); err != nil || v != "loaded" {
					t.Errorf("GetOrCreate on another instance: got %q, %v, want \"loaded\"", v, err)
				}
				if got := l.calls.Load(); got != 1 {
					t.Errorf("load ran %d times, want 1", got)
				}
				if st := b.Stats(); st.DecodeErrors != 0 || st.L2Hits != 1 {
					t.Errorf("other instance: got DecodeErrors %d, L2Hits %d, want 0, 1", st.DecodeErrors, st.L2Hits)
				}
			})
		})
	}
}

func TestCorruptRemoteValueGet(t *testing.T) {
	for _, tt := range corruptValues(t) {
		t.Run(tt.name, func(t *testing.T) {
			s := newSharedTier(t)
			c := newTestCache[string](t, s.options())
			s.remote.Put("ns:k", tt.b, time.Hour)
			if v, ok := getString(t, c, "k"); ok {
				t.Errorf("Get: got %q, want a miss", v)
			}
			if st := c.Stats(); st.DecodeErrors != 1 {
				t.Errorf("DecodeErrors: got %d, want 1", st.DecodeErrors)
			}
		})
	}
}

func TestOversizedValue(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.MaxValueBytes = 8
	c := newTestCache[string](t, o)
	ctx := context.Background()
	big := strings.Repeat("x", 100)

	err := c.Set(ctx, "k", big)
	if !errors.Is(err, hybrid.ErrValueTooLarge) {
		t.Fatalf("Set of a large value: got %v, want %v", err, hybrid.ErrValueTooLarge)
	}
	if err := c.Set(ctx, "small", "ok"); err != nil {
		t.Errorf("Set of a small value: %v", err)
	}

	l := &counter{value: big}
	for i := range 2 {
		v, err := c.GetOrCreate(ctx, "g", l.load)
		if err != nil || v != big {
			t.Fatalf("GetOrCreate #%d of a large value: got %d bytes, %v, want %d bytes, nil", i, len(v), err, len(big))
		}
	}
	if got := l.calls.Load(); got != 2 {
		t.Errorf("load ran %d times, want 2 (a value too large is stored nowhere)", got)
	}
	if got, want := s.remote.Keys(), []string{"ns:small"}; !slices.Equal(got, want) {
		t.Errorf("Remote keys: got %q, want %q", got, want)
	}
	if st := c.Stats(); st.Oversized != 2 {
		t.Errorf("Stats.Oversized: got %d, want 2", st.Oversized)
	}
	if c := s.remote.Calls(); c.SetIfAbsent != 0 {
		t.Errorf("SetIfAbsent calls: got %d, want 0", c.SetIfAbsent)
	}
}

func TestEmptyKey(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	ctx := context.Background()
	if _, err := c.GetOrCreate(ctx, "", neverLoad(t)); !errors.Is(err, hybrid.ErrEmptyKey) {
		t.Errorf("GetOrCreate: got %v, want %v", err, hybrid.ErrEmptyKey)
	}
	if _, _, err := c.Get(ctx, ""); !errors.Is(err, hybrid.ErrEmptyKey) {
		t.Errorf("Get: got %v, want %v", err, hybrid.ErrEmptyKey)
	}
	if err := c.Set(ctx, "", "v"); !errors.Is(err, hybrid.ErrEmptyKey) {
		t.Errorf("Set: got %v, want %v", err, hybrid.ErrEmptyKey)
	}
	if err := c.Delete(ctx, ""); !errors.Is(err, hybrid.ErrEmptyKey) {
		t.Errorf("Delete: got %v, want %v", err, hybrid.ErrEmptyKey)
	}
	if got := s.remote.Calls().Total(); got != 0 {
		t.Errorf("empty keys reached the Remote %d times, want 0", got)
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

// TestRemoteDown checks that reads degrade to load and L1 while the Remote
// fails, and that writes report the failure.
func TestRemoteDown(t *testing.T) {
	for _, announce := range []bool{true, false} {
		t.Run("announcer="+strconv.FormatBool(announce), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSharedTier(t)
				o := s.options()
				if !announce {
					o.Remote = struct{ hybrid.Remote }{s.remote} // hides Announcer
				}
				c := newTestCache[string](t, o)
				ctx := context.Background()
				down := errors.New("dial tcp: connection refused")
				s.remote.FailWith(down)

				l := &counter{value: "loaded"}
				for i := range 3 {
					v, err := c.GetOrCreate(ctx, "k", l.load)
					if err != nil || v != "loaded" {
						t.Fatalf("GetOrCreate #%d: got %q, %v, want \"loaded\", nil", i, v, err)
					}
				}
				synctest.Wait() // the fill has tried to write the Remote
				if got := l.calls.Load(); got != 1 {
					t.Errorf("load ran %d times, want 1 (then L1)", got)
				}
				if st := c.Stats(); st.L2Errors != 2 || st.L1Hits != 2 {
					t.Errorf("Stats: got L2Errors %d, L1Hits %d, want 2 (the read and the write of the fill), 2", st.L2Errors, st.L1Hits)
				}
				if v, ok := getString(t, c, "k"); !ok || v != "loaded" {
					t.Errorf("Get: got %q, %v, want \"loaded\" from L1", v, ok)
				}

				if err := c.Set(ctx, "k", "new"); !errors.Is(err, down) {
					t.Errorf("Set: got %v, want an error wrapping %v", err, down)
				}
				// A failed Set drops the key from L1: the old value must not
				// be served as if nothing happened.
				if v, ok := getString(t, c, "k"); ok {
					t.Errorf("Get after a failed Set: got %q, want a miss", v)
				}
				if err := c.Delete(ctx, "k"); !errors.Is(err, down) {
					t.Errorf("Delete: got %v, want an error wrapping %v", err, down)
				}
				if got := s.bus.Stats().Published; got != 0 {
					t.Errorf("messages published for failed writes: got %d, want 0", got)
				}

				s.remote.FailWith(nil)
				if err := c.Set(ctx, "k", "new"); err != nil {
					t.Errorf("Set after recovery: %v", err)
				}
				if v, ok := s.stored(t, "k"); !ok || v != "new" {
					t.Errorf("Remote after recovery holds %q (ok %v), want \"new\"", v, ok)
				}
			})
		})
	}
}

func TestRemoteSlowHonoursContext(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	s.remote.SetLatency(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.Set(ctx, "k", "v"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Set with a slow Remote: got %v, want %v", err, context.DeadlineExceeded)
	}
	if _, _, err := c.Get(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get with a slow Remote: got %v, want %v", err, context.DeadlineExceeded)
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

// loadTop is a top-level load function: a func value with no closure, as a
// caller on the hot path would pass.
func loadTop(context.Context, string) (string, error) { return "v", nil }

func TestL1HitAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		f    func()
	}{
		{"GetOrCreate", func() { _, _ = c.GetOrCreate(ctx, "k", loadTop) }},
		{"GetOrCreate WithTTL", func() { _, _ = c.GetOrCreate(ctx, "k", loadTop, hybrid.WithTTL(time.Minute)) }},
		{"GetOrCreate WithTTL WithLocalTTL", func() {
			_, _ = c.GetOrCreate(ctx, "k", loadTop, hybrid.WithTTL(time.Minute), hybrid.WithLocalTTL(time.Second))
		}},
		{"Get", func() { _, _, _ = c.Get(ctx, "k") }},
	}
	for _, tt := range tests {
		if got := testing.AllocsPerRun(1000, tt.f); got != 0 {
			t.Errorf("%s on an L1 hit: %v allocations, want 0", tt.name, got)
		}
	}
	if st := c.Stats(); st.L1Misses != 0 {
		t.Errorf("L1Misses: got %d, want 0 (every call was a hit)", st.L1Misses)
	}
}

func TestStatsL1Entries(t *testing.T) {
	c := newTestCache[string](t, hybrid.Options{})
	ctx := context.Background()
	for i := range 10 {
		if err := c.Set(ctx, "k"+strconv.Itoa(i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	// L1Bytes is not checked: otter accounts weights in its maintenance,
	// which runs later on its own goroutine.
	if st := c.Stats(); st.L1Entries != 10 {
		t.Errorf("Stats: got L1Entries %d, want 10", st.L1Entries)
	}
}

// TestUnencodableValue: a value the codec cannot encode is returned by
// GetOrCreate but stored nowhere, and refused by Set.
func TestUnencodableValue(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[float64](t, s.options())
	ctx := context.Background()
	nan := func(context.Context, string) (float64, error) { return math.NaN(), nil }
	v, err := c.GetOrCreate(ctx, "k", nan)
	if err != nil || !math.IsNaN(v) {
		t.Errorf("GetOrCreate of NaN (JSON cannot encode it): got %v, %v, want NaN, nil", v, err)
	}
	if err := c.Set(ctx, "k", math.NaN()); err == nil || errors.Is(err, hybrid.ErrValueTooLarge) {
		t.Errorf("Set of NaN: got %v, want an encoding error", err)
	}
	if keys := s.remote.Keys(); len(keys) != 0 {
		t.Errorf("Remote keys: got %q, want none", keys)
	}
	if _, ok, _ := c.Get(ctx, "k"); ok {
		t.Error("L1 holds a value that could not be encoded")
	}
}
