package hybrid_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

func TestCompression(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.CompressAbove = 1024
	a := newTestCache[string](t, o)
	plain := s.options() // a reader with compression off still reads it
	b := newTestCache[string](t, plain)
	ctx := context.Background()
	big := strings.Repeat("compressible text ", 1000) // 18 KB
	if err := a.Set(ctx, "big", big); err != nil {
		t.Fatal(err)
	}
	if err := a.Set(ctx, "small", "short"); err != nil {
		t.Fatal(err)
	}
	raw, _ := s.remote.Peek(testNS + ":big")
	if raw[2]&envelope.FlagCompressed == 0 || len(raw) > len(big)/4 {
		t.Errorf("big stored in %d bytes, flags %#x: want compressed", len(raw), raw[2])
	}
	raw, _ = s.remote.Peek(testNS + ":small")
	if raw[2]&envelope.FlagCompressed != 0 {
		t.Errorf("small value compressed; want it plain (below CompressAbove)")
	}
	s.flush(t)
	for _, k := range []string{"big", "small"} {
		v, ok := getString(t, b, k)
		if want := map[string]string{"big": big, "small": "short"}[k]; !ok || v != want {
			t.Errorf("%s read by a cache without compression: got %d bytes %v", k, len(v), ok)
		}
	}
	// L1's weight is updated by its maintenance, a little later.
	deadline := time.Now().Add(5 * time.Second)
	for b.Stats().L1.Size < uint64(len(big)) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := b.Stats(); st.L1.Size < uint64(len(big)) {
		t.Errorf("L1.Size %d: want at least the decoded size %d", st.L1.Size, len(big))
	}
}

// A compressed value that would inflate past MaxValueBytes, or that does
// not decompress, is a counted miss; nothing that large is allocated.
func TestCompressionBadInput(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.CompressAbove = 1024
	o.MaxValueBytes = 1 << 20
	c := newTestCache[string](t, o)
	now := time.Now()
	h := envelope.Header{Codec: codec.IDJSON, Flags: envelope.FlagCompressed, Written: now, Expires: now.Add(time.Hour)}
	bomb := s2.Encode(nil, make([]byte, 64<<20)) // 64 MiB of zeros
	s.remote.Put(testNS+":bomb", envelope.Append(nil, h, bomb), time.Hour)
	s.remote.Put(testNS+":junk", envelope.Append(nil, h, []byte("not s2 at all")), time.Hour)
	l := &counter{value: "loaded"}
	for _, k := range []string{"bomb", "junk"} {
		if v, err := c.GetOrCreate(context.Background(), k, l.load); err != nil || v != "loaded" {
			t.Errorf("%s: got %q %v, want the load's value", k, v, err)
		}
	}
	if st := c.Stats(); st.L2.DecodeErrors != 2 {
		t.Errorf("L2.DecodeErrors: got %d, want 2", st.L2.DecodeErrors)
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
	year10000 := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
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
		{"write time in year 10000", withStamp(valid, 3, year10000)},
		{"write time before 1970", withStamp(valid, 3, -1)},
		{"expiry in year 10000", withStamp(valid, envelope.ExpiresAt, year10000)},
		{"expiry before 1970", withStamp(valid, envelope.ExpiresAt, -1)},
	}
}

// withStamp returns a copy of the envelope b whose write time (at offset
// 3) or logical expiry (at envelope.ExpiresAt) is ms Unix milliseconds.
func withStamp(b []byte, off int, ms int64) []byte {
	b = slices.Clone(b)
	binary.BigEndian.PutUint64(b[off:off+8], uint64(ms))
	return b
}

// TestAbsurdTimesCorrupt: on real Redis, a stored value whose write time
// or expiry no writer makes (past MaxTime, as in year 10000, or before
// 1970) is corrupt: a miss counted in L2.DecodeErrors, which the fill's
// value replaces, on the instance that reads it and on another.
func TestAbsurdTimesCorrupt(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	ins := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns})
	a, b := ins[0], ins[1]
	ctx := context.Background()
	valid := envelopeOf(t, "planted", time.Hour)
	year10000 := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	stamps := map[string][]byte{
		"written-10000": withStamp(valid, 3, year10000),
		"written-neg":   withStamp(valid, 3, -1),
		"expires-10000": withStamp(valid, envelope.ExpiresAt, year10000),
		"expires-neg":   withStamp(valid, envelope.ExpiresAt, -1),
	}
	for key, raw := range stamps {
		if err := a.rdb.Set(ctx, ns+":"+key, raw, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if v, err := a.c.GetOrCreate(ctx, key, loadWith("loaded", func(*hybrid.LoadSettings) {})); err != nil || v != "loaded" {
			t.Errorf("%s: A: GetOrCreate: got %q, %v; want the loaded value", key, v, err)
		}
		waitFor(t, 5*time.Second, key+" replaced in Redis", func() bool {
			got, err := a.rdb.Get(ctx, ns+":"+key).Bytes()
			return err == nil && !slices.Equal(got, raw)
		}, nil)
		if v, _ := redisValue(t, a.rdb, ns, key); v != "loaded" {
			t.Errorf("%s: Redis holds %q, want the loaded value", key, v)
		}
		if v, ok := getStr(t, b, key); !ok || v != "loaded" {
			t.Errorf("%s: B: got %q, %v; want the loaded value", key, v, ok)
		}
	}
	if st := a.c.Stats(); st.L2.DecodeErrors != uint64(len(stamps)) || st.L2.Hits != 0 || st.Load.Calls != uint64(len(stamps)) {
		t.Errorf("A: L2.DecodeErrors %d, L2.Hits %d, Load.Calls %d; want %d, 0, %d", st.L2.DecodeErrors, st.L2.Hits, st.Load.Calls, len(stamps), len(stamps))
	}
}

// TestCorruptRemoteValue checks the documented handling of a stored value
// that does not decode: a miss counted in L2.DecodeErrors; "the fill then
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
				if st.L2.DecodeErrors != 1 || st.L2.Misses != 1 || st.L2.Hits != 0 || st.Load.Calls != 1 {
					t.Errorf("Stats: got L2.DecodeErrors %d, L2.Misses %d, L2.Hits %d, Load.Calls %d, want 1, 1, 0, 1", st.L2.DecodeErrors, st.L2.Misses, st.L2.Hits, st.Load.Calls)
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
				if st := b.Stats(); st.L2.DecodeErrors != 0 || st.L2.Hits != 1 {
					t.Errorf("other instance: got L2.DecodeErrors %d, L2.Hits %d, want 0, 1", st.L2.DecodeErrors, st.L2.Hits)
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
			if st := c.Stats(); st.L2.DecodeErrors != 1 {
				t.Errorf("L2.DecodeErrors: got %d, want 1", st.L2.DecodeErrors)
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
	if got, want := s.valueKeys(), []string{"ns:small"}; !slices.Equal(got, want) {
		t.Errorf("Remote keys: got %q, want %q", got, want)
	}
	if st := c.Stats(); st.Load.Oversized != 2 {
		t.Errorf("Stats.Load.Oversized: got %d, want 2", st.Load.Oversized)
	}
	// One IfAbsent write: the first fill of g made its sequence counter,
	// missing, before the load; no value was written back.
	if c := s.remote.Calls(); c.IfAbsent != 1 {
		t.Errorf("IfAbsent writes: got %d, want 1", c.IfAbsent)
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
	if keys := s.valueKeys(); len(keys) != 0 {
		t.Errorf("Remote keys: got %q, want none", keys)
	}
	if _, ok, _ := c.Get(ctx, "k"); ok {
		t.Error("L1 holds a value that could not be encoded")
	}
}

// A value past its logical expiry in the shared tier is a miss, not a
// decode error, and the load replaces it.
func TestExpiredRemoteValueIsAMiss(t *testing.T) {
	s := newSharedTier(t)
	a := newTestCache[string](t, s.options())
	old := envelope.Append(nil, envelope.Header{Codec: codec.IDJSON, Written: time.Now().Add(-time.Hour), Expires: time.Now().Add(-time.Minute)}, []byte(`"old"`))
	s.remote.Put(testNS+":k", old, time.Hour)
	l := &counter{value: "loaded"}
	if v, err := a.GetOrCreate(context.Background(), "k", l.load); err != nil || v != "loaded" {
		t.Fatalf("got %q %v, want loaded", v, err)
	}
	waitFor(t, 10*time.Second, "the write-back", func() bool { v, _ := s.stored(t, "k"); return v == "loaded" }, nil)
	if st := a.Stats(); st.L2.DecodeErrors != 0 || st.L2.Misses != 1 {
		t.Errorf("L2.DecodeErrors %d L2.Misses %d, want 0 and 1", st.L2.DecodeErrors, st.L2.Misses)
	}
	if v, _ := s.stored(t, "k"); v != "loaded" {
		t.Errorf("the shared tier holds %q, want the loaded value over the expired one", v)
	}
}
