package hybrid_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/hybridcache/hybridcache/hybrid"
)

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
