package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"github.com/hybridcache/hybridcache/internal/envelope"
)

func TestNewValidatesOptions(t *testing.T) {
	remote := new(hybridtest.Remote)
	bus := new(hybridtest.Bus)
	defer bus.Close()
	tests := []struct {
		name  string
		o     hybrid.Options
		field string // "" for no error
	}{
		{"zero", hybrid.Options{}, ""},
		{"remote without namespace", hybrid.Options{Remote: remote}, "Namespace"},
		{"bus without namespace", hybrid.Options{Bus: bus}, "Namespace"},
		{"remote with namespace", hybrid.Options{Namespace: "n", Remote: remote}, ""},
		{"bus only", hybrid.Options{Namespace: "n", Bus: bus}, ""},
		{"LocalTTL longer than TTL", hybrid.Options{Namespace: "n", Remote: remote, TTL: time.Minute, LocalTTL: 2 * time.Minute}, "LocalTTL"},
		{"LocalTTL longer than default TTL", hybrid.Options{Namespace: "n", Remote: remote, LocalTTL: time.Hour}, "LocalTTL"},
		{"LocalTTL equal to TTL", hybrid.Options{Namespace: "n", Remote: remote, TTL: time.Minute, LocalTTL: time.Minute}, ""},
		{"LocalTTL longer than TTL without Remote", hybrid.Options{TTL: time.Minute, LocalTTL: time.Hour}, ""},
		{"negative TTL", hybrid.Options{TTL: -1}, "TTL"},
		{"negative LocalTTL", hybrid.Options{LocalTTL: -time.Second}, "LocalTTL"},
		{"negative LoadTimeout", hybrid.Options{LoadTimeout: -time.Second}, "LoadTimeout"},
		{"negative LogEvery", hybrid.Options{LogEvery: -time.Second}, "LogEvery"},
		{"negative LocalMaxBytes", hybrid.Options{LocalMaxBytes: -1}, "LocalMaxBytes"},
		{"negative MaxValueBytes", hybrid.Options{MaxValueBytes: -1}, "MaxValueBytes"},
		{"negative InlineMaxBytes means never inline", hybrid.Options{InlineMaxBytes: -1}, ""},
		{"negative MaxKeyBytes", hybrid.Options{MaxKeyBytes: -1}, "MaxKeyBytes"},
		// "X" with key "v2:1" and "X:v2" with key "1" would be one Redis key.
		{"namespace with the separator", hybrid.Options{Namespace: "X:v2", Remote: remote}, "Namespace"},
		{"namespace with other punctuation", hybrid.Options{Namespace: "app.v2-products/eu", Remote: remote}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := hybrid.New[string](tt.o)
			if c != nil {
				defer c.Close()
			}
			if tt.field == "" {
				if err != nil {
					t.Fatalf("New: got %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New: got no error, want one naming Options.%s", tt.field)
			}
			if c != nil {
				t.Errorf("New: got a cache and an error, want a nil cache")
			}
			// The message must name the field for the user to fix.
			if !strings.Contains(err.Error(), "Options."+tt.field) {
				t.Errorf("New: got %q, want it to name Options.%s", err, tt.field)
			}
		})
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

func TestEntryOptionsValidated(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	ctx := context.Background()
	tests := []struct {
		name string
		opts []hybrid.EntryOption
	}{
		{"zero TTL", []hybrid.EntryOption{hybrid.WithTTL(0)}},
		{"negative LocalTTL", []hybrid.EntryOption{hybrid.WithLocalTTL(-time.Second)}},
		{"zero EntryOption", []hybrid.EntryOption{{}}},
		{"LocalTTL longer than TTL", []hybrid.EntryOption{hybrid.WithTTL(time.Second), hybrid.WithLocalTTL(time.Minute)}},
		{"negative NegativeTTL", []hybrid.EntryOption{hybrid.WithNegativeTTL(-time.Second)}},
		{"jitter of 1", []hybrid.EntryOption{hybrid.WithTTLJitter(1)}},
		{"negative fail-safe", []hybrid.EntryOption{hybrid.WithFailSafe(-time.Second)}},
		{"zero fail-safe throttle", []hybrid.EntryOption{hybrid.WithFailSafeThrottle(0)}},
		{"negative soft timeout", []hybrid.EntryOption{hybrid.WithSoftTimeout(-1)}},
		{"negative load timeout", []hybrid.EntryOption{hybrid.WithLoadTimeout(-1)}},
		{"eager refresh NaN", []hybrid.EntryOption{hybrid.WithEagerRefresh(math.NaN())}},
		{"eager refresh below 0", []hybrid.EntryOption{hybrid.WithEagerRefresh(-0.5)}},
		{"empty tag", []hybrid.EntryOption{hybrid.WithTags("a", "")}},
		{"long tag", []hybrid.EntryOption{hybrid.WithTags(strings.Repeat("t", 201))}},
		{"too many tags", []hybrid.EntryOption{hybrid.WithTags(tagsN(20)...), hybrid.WithTags(tagsN(20)...)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := c.Set(ctx, "k", "v", tt.opts...); err == nil {
				t.Error("Set: got no error, want one")
			}
			if _, err := c.GetOrCreate(ctx, "k", neverLoad(t), tt.opts...); err == nil {
				t.Error("GetOrCreate: got no error, want one")
			}
		})
	}
	if got := s.remote.Calls().Total(); got != 0 {
		t.Errorf("invalid entry options reached the Remote %d times, want 0", got)
	}
}

// TestZeroOptionsL1Only checks that the zero Options make a working cache
// with nothing but L1.
func TestZeroOptionsL1Only(t *testing.T) {
	c := newTestCache[string](t, hybrid.Options{})
	ctx := context.Background()
	l := &counter{value: "v"}
	for i := range 3 {
		v, err := c.GetOrCreate(ctx, "k", l.load)
		if err != nil || v != "v" {
			t.Fatalf("GetOrCreate #%d: got %q, %v, want \"v\", nil", i, v, err)
		}
	}
	if got := l.calls.Load(); got != 1 {
		t.Errorf("load ran %d times, want 1", got)
	}
	if err := c.Set(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	if v, ok := getString(t, c, "a"); !ok || v != "1" {
		t.Errorf("Get(a) after Set: got %q, %v, want \"1\", true", v, ok)
	}
	if err := c.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if v, ok := getString(t, c, "a"); ok {
		t.Errorf("Get(a) after Delete: got %q, want a miss", v)
	}
	if err := c.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok := getString(t, c, "k"); ok {
		t.Errorf("Get(k) after Clear: got %q, want a miss", v)
	}
	s := c.Stats()
	want := hybrid.Stats{L1Hits: 3, L1Misses: 3, Loads: 1}
	if s.L1Hits != want.L1Hits || s.L1Misses != want.L1Misses || s.Loads != want.Loads || s.L2Hits+s.L2Misses+s.L2Errors+s.Published != 0 {
		t.Errorf("Stats: got %+v, want L1Hits 3, L1Misses 3, Loads 1 and no L2 or bus counts", s)
	}
}

// TestDefaults checks the defaults that show from outside: the JSON codec,
// a shared-tier lifetime of 10 minutes, an L1 lifetime of 1 minute and the
// channel "hybridcache:" + Namespace.
func TestDefaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		ctx := t.Context()
		var got [][]byte
		unsub, err := s.bus.Subscribe(ctx, testChannel, func(m []byte) { got = append(got, m) }, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer unsub()

		start := time.Now()
		if err := c.Set(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
		s.flush(t)
		if len(got) != 1 {
			t.Errorf("got %d messages on %q, want 1", len(got), testChannel)
		}
		b, ok := s.remote.Peek(testNS + ":k")
		if !ok {
			t.Fatal("the Remote does not hold ns:k after Set")
		}
		h, payload, err := envelope.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.Codec != codec.IDJSON || string(payload) != `"v"` {
			t.Errorf("stored codec %d payload %s, want %d \"v\"", h.Codec, payload, codec.IDJSON)
		}
		if d := h.Expires.Sub(start); d != 10*time.Minute {
			t.Errorf("stored expiry %v after the write, want 10m", d)
		}

		gets := s.remote.Calls().Get
		time.Sleep(time.Minute - time.Millisecond)
		if v, ok := getString(t, c, "k"); !ok || v != "v" {
			t.Errorf("Get just before LocalTTL: got %q, %v, want \"v\", true", v, ok)
		}
		if n := s.remote.Calls().Get - gets; n != 0 {
			t.Errorf("Get just before LocalTTL read the Remote %d times, want 0", n)
		}
		time.Sleep(2 * time.Millisecond)
		if v, ok := getString(t, c, "k"); !ok || v != "v" {
			t.Errorf("Get just after LocalTTL: got %q, %v, want \"v\", true", v, ok)
		}
		if n := s.remote.Calls().Get - gets; n != 1 {
			t.Errorf("Get just after LocalTTL read the Remote %d times, want 1", n)
		}
	})
}

// tagsN returns n distinct tags.
func tagsN(n int) []string {
	tags := make([]string, n)
	for i := range tags {
		tags[i] = fmt.Sprint("tag", i)
	}
	return tags
}
