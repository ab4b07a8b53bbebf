package hybrid_test

import (
	"context"
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
		{"LocalTTL longer than TTL is cut", hybrid.Options{Namespace: "n", Remote: remote, TTL: time.Minute, LocalTTL: 2 * time.Minute}, ""},
		{"LocalTTL longer than default TTL is cut", hybrid.Options{Namespace: "n", Remote: remote, LocalTTL: time.Hour}, ""},
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
		{"negative MaxConcurrentLoads", hybrid.Options{MaxConcurrentLoads: -1}, "MaxConcurrentLoads"},
		{"MaxConcurrentLoads", hybrid.Options{MaxConcurrentLoads: 4}, ""},
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

// TestNewRefusesGlobNamespace: a glob character in a Namespace would make
// SCAN MATCH "Namespace:*" list other namespaces' keys too ("ns*:*" lists
// "ns2:k"), so New refuses it, naming the field and the character.
func TestNewRefusesGlobNamespace(t *testing.T) {
	remote := new(hybridtest.Remote)
	tests := []struct {
		namespace string
		char      string // as the error quotes it; "" for no error
	}{
		{"ns*", `'*'`},
		{"n?", `'?'`},
		{"ns[12]", `'['`},
		{"ns]", `']'`},
		{`ns\x`, `'\\'`},
		{"a*b?", `'*'`}, // the first one found
		{"products.v2-eu/1_a", ""},
	}
	for _, tt := range tests {
		t.Run(tt.namespace, func(t *testing.T) {
			c, err := hybrid.New[string](hybrid.Options{Namespace: tt.namespace, Remote: remote})
			if c != nil {
				defer c.Close()
			}
			if tt.char == "" {
				if err != nil {
					t.Fatalf("New: got %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New: got no error, want one naming Options.Namespace and %s", tt.char)
			}
			if c != nil {
				t.Errorf("New: got a cache and an error, want a nil cache")
			}
			if msg := err.Error(); !strings.Contains(msg, "Options.Namespace") || !strings.Contains(msg, tt.char) {
				t.Errorf("New: got %q, want it to name Options.Namespace and %s", msg, tt.char)
			}
		})
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
	want := hybrid.Stats{L1: hybrid.L1Stats{Hits: 3, Misses: 3}, Load: hybrid.LoadStats{Calls: 1}}
	if s.L1.Hits != want.L1.Hits || s.L1.Misses != want.L1.Misses || s.Load.Calls != want.Load.Calls || s.L2.Hits+s.L2.Misses+s.L2.Errors+s.Invalidations.Sent != 0 {
		t.Errorf("Stats: got %+v, want L1.Hits 3, L1.Misses 3, Load.Calls 1 and no L2 or bus counts", s)
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
			t.Errorf("Get just after LocalTTL read the Remote %d times, want 1 (the value; the clear record was read before the write)", n)
		}
	})
}

func TestTTLJitterValidated(t *testing.T) {
	for _, j := range []float64{-0.1, 1, 2} {
		if _, err := hybrid.New[string](hybrid.Options{TTLJitter: j}); err == nil {
			t.Errorf("TTLJitter %v: got nil error", j)
		}
	}
}

func TestLeaseOptionsChecked(t *testing.T) {
	if _, err := hybrid.New[string](hybrid.Options{Namespace: "n", Remote: &hybridtest.Remote{}, LoadLease: time.Second}); err == nil {
		t.Error("New accepted LoadLease without a Bus")
	}
	if _, err := hybrid.New[string](hybrid.Options{LoadLease: time.Second}); err == nil {
		t.Error("New accepted LoadLease without a Remote")
	}
	if _, err := hybrid.New[string](hybrid.Options{LoadLease: -time.Second}); err == nil {
		t.Error("New accepted a negative LoadLease")
	}
	// Near the largest Duration, the release's timeout (the lease plus a
	// second) and the wait's deadline would overflow.
	for _, f := range []struct {
		name string
		o    hybrid.Options
	}{
		{"LoadLease", hybrid.Options{LoadLease: math.MaxInt64 - 1}},
		{"LoadLease", hybrid.Options{LoadLease: 25 * time.Hour}},
		{"LeaseWait", hybrid.Options{LoadLease: time.Second, LeaseWait: math.MaxInt64}},
	} {
		f.o.Namespace, f.o.Remote, f.o.Bus, f.o.Logger = "n", &hybridtest.Remote{}, new(hybridtest.Bus), quiet
		c, err := hybrid.New[string](f.o)
		if err == nil {
			c.Close()
			t.Errorf("New accepted a %s out of range", f.name)
		} else if !strings.Contains(err.Error(), "Options."+f.name) {
			t.Errorf("New with a %s out of range: %v, want an error naming the field", f.name, err)
		}
	}
	c := newTestCache[string](t, hybrid.Options{})
	if _, err := c.GetOrCreate(context.Background(), "k", loadTop, hybrid.WithLoadLease(time.Second)); err == nil {
		t.Error("a lease was accepted by a cache without a Remote")
	}
	if _, err := c.GetOrCreate(context.Background(), "k", loadTop, hybrid.WithLoadLease(time.Microsecond)); err == nil {
		t.Error("a 1 µs lease was accepted")
	}
	bus := new(hybridtest.Bus)
	leasing := newTestCache[string](t, hybrid.Options{Namespace: "n", Remote: &hybridtest.Remote{Bus: bus}, Bus: bus})
	if _, err := leasing.GetOrCreate(context.Background(), "k", loadTop, hybrid.WithLoadLease(math.MaxInt64)); err == nil {
		t.Error("a lease of the largest Duration was accepted")
	}
}
