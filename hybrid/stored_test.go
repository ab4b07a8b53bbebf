package hybrid_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
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
	for b.Stats().L1Bytes < uint64(len(big)) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := b.Stats(); st.L1Bytes < uint64(len(big)) {
		t.Errorf("L1Bytes %d: want at least the decoded size %d", st.L1Bytes, len(big))
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
	if st := c.Stats(); st.DecodeErrors != 2 {
		t.Errorf("DecodeErrors: got %d, want 2", st.DecodeErrors)
	}
}

// cfg is a mutable value with a Clone method.
type cfg struct {
	Flags  map[string]bool
	clones *atomic.Int64
}

func (c cfg) Clone() cfg {
	if c.clones != nil {
		c.clones.Add(1)
	}
	m := make(map[string]bool, len(c.Flags))
	for k, v := range c.Flags {
		m[k] = v
	}
	return cfg{Flags: m, clones: c.clones}
}

func TestCopyOnRead(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.CopyOnRead = true
	c := newTestCache[map[string]int](t, o)
	ctx := context.Background()
	in := map[string]int{"a": 1}
	if err := c.Set(ctx, "k", in); err != nil {
		t.Fatal(err)
	}
	in["a"] = 99 // the caller's map, not the cache's
	check := func(what string, m map[string]int, err error) {
		t.Helper()
		if err != nil || m["a"] != 1 {
			t.Fatalf("%s: got %v %v, want a=1", what, m, err)
		}
		m["a"] = 42 // must not reach the cache
	}
	v, _, err := c.Get(ctx, "k")
	check("Get", v, err)
	v, err = c.GetOrCreate(ctx, "k", nil)
	check("GetOrCreate hit", v, err)
	many, err := c.GetMany(ctx, []string{"k"})
	check("GetMany", many["k"], err)
	many, err = c.GetOrCreateMany(ctx, []string{"k"}, func(context.Context, []string) (map[string]map[string]int, error) {
		t.Error("GetOrCreateMany loaded a key L1 holds")
		return nil, nil
	})
	check("GetOrCreateMany", many["k"], err)
	v, err = c.GetOrCreate(ctx, "loaded", func(context.Context, string) (map[string]int, error) {
		return map[string]int{"a": 1}, nil
	})
	check("GetOrCreate miss", v, err)
	v, err = c.GetOrCreate(ctx, "loaded", nil)
	check("GetOrCreate after the miss", v, err)

	// A type with a Clone method is copied by it.
	var clones atomic.Int64
	d := newTestCache[cfg](t, o)
	if err := d.Set(ctx, "c", cfg{Flags: map[string]bool{"x": true}, clones: &clones}); err != nil {
		t.Fatal(err)
	}
	got, _, err := d.Get(ctx, "c")
	if err != nil || !got.Flags["x"] {
		t.Fatalf("Get: %v %v", got, err)
	}
	got.Flags["x"] = false
	if again, _, _ := d.Get(ctx, "c"); !again.Flags["x"] {
		t.Error("a change to a returned copy reached the cache")
	}
	if clones.Load() != 3 { // Set, Get, Get
		t.Errorf("Clone calls: got %d, want 3", clones.Load())
	}
}

// Without CopyOnRead, values are shared, as documented.
func TestValuesSharedByDefault(t *testing.T) {
	c := newTestCache[map[string]int](t, hybrid.Options{})
	ctx := context.Background()
	if err := c.Set(ctx, "k", map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	v, _, _ := c.Get(ctx, "k")
	v["a"] = 2
	if again, _, _ := c.Get(ctx, "k"); again["a"] != 2 {
		t.Errorf("got %v, want the shared map with a=2", again)
	}
}
