package hybrid_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/hybridcache/hybridcache/hybrid"
)

// TestGetOrCreateManyWithDoubles: one page of keys, some in L1, some only
// in the shared tier, some nowhere: one batch read, one load of what is
// missing, one batch write.
func TestGetOrCreateManyWithDoubles(t *testing.T) {
	eachCtx(t, func(t *testing.T, ctx context.Context) {
		s := newSharedTier(t)
		p := newPeers(t, s, 2, hybrid.Options{})
		a, b := p[0], p[1]
		set(t, b, "inL1", "1")     // a reads it into its L1 below
		set(t, b, "inRemote", "2") // only in the shared tier for a
		s.flush(t)
		fillFromRemote(t, a, "inL1", "1")
		before := s.remote.Calls()

		var asked []string
		load := func(_ context.Context, missing []string) (map[string]string, error) {
			asked = slices.Clone(missing)
			return map[string]string{"new1": "n1", "new2": "n2"}, nil // "absent" is not found
		}
		got, err := a.GetOrCreateMany(ctx, []string{"inL1", "inRemote", "new1", "new2", "absent", "new1"}, load)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"inL1": "1", "inRemote": "2", "new1": "n1", "new2": "n2"}
		if !maps.Equal(got, want) {
			t.Errorf("GetOrCreateMany: got %v, want %v", got, want)
		}
		slices.Sort(asked)
		if w := []string{"absent", "new1", "new2"}; !slices.Equal(asked, w) {
			t.Errorf("load asked for %q, want %q", asked, w)
		}
		s.waitWrites(t, before.Set+before.SetIfAbsent+before.SetAndPublish+1)
		after := s.remote.Calls()
		if n := after.GetMany - before.GetMany; n != 1 {
			t.Errorf("GetMany calls: got %d, want 1", n)
		}
		if n := after.SetManyIfAbsent - before.SetManyIfAbsent; n != 1 {
			t.Errorf("SetManyIfAbsent calls: got %d, want 1", n)
		}
		if n := after.Get - before.Get; n != 0 {
			t.Errorf("single Gets: got %d, want 0", n)
		}
		for k, v := range map[string]string{"new1": "n1", "new2": "n2"} {
			if sv, ok := s.stored(t, k); !ok || sv != v {
				t.Errorf("Remote holds %s = %q (%v), want %q", k, sv, ok, v)
			}
		}
		if _, ok := s.stored(t, "absent"); ok {
			t.Error("Remote holds a key that load did not return")
		}
		// Now all in L1: nothing more reaches the Remote.
		calls := s.remote.Calls()
		got, err = a.GetOrCreateMany(ctx, []string{"inL1", "inRemote", "new1", "new2"}, load)
		if err != nil || len(got) != 4 {
			t.Errorf("second GetOrCreateMany: got %v, %v, want 4 values", got, err)
		}
		if s.remote.Calls() != calls {
			t.Errorf("second GetOrCreateMany reached the Remote: %+v, was %+v", s.remote.Calls(), calls)
		}
	})
}

func TestGetOrCreateManyLoadError(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	errDB := errors.New("db down")
	got, err := c.GetOrCreateMany(context.Background(), []string{"a", "b"}, func(context.Context, []string) (map[string]string, error) {
		return nil, errDB
	})
	if !errors.Is(err, errDB) {
		t.Errorf("GetOrCreateMany: got %v, want an error wrapping %v", err, errDB)
	}
	if len(got) != 0 {
		t.Errorf("GetOrCreateMany: got %v, want no values", got)
	}
	if keys := s.remote.Keys(); len(keys) != 0 {
		t.Errorf("Remote keys: got %q, want none", keys)
	}
}

func TestGetOrCreateManyEmptyKey(t *testing.T) {
	c := newTestCache[string](t, hybrid.Options{})
	got, err := c.GetOrCreateMany(context.Background(), []string{"", "a"}, func(_ context.Context, missing []string) (map[string]string, error) {
		return map[string]string{"a": "1"}, nil
	})
	if !errors.Is(err, hybrid.ErrEmptyKey) {
		t.Errorf("GetOrCreateMany with an empty key: got %v, want an error wrapping %v", err, hybrid.ErrEmptyKey)
	}
	if got["a"] != "1" {
		t.Errorf("GetOrCreateMany with an empty key: got %v, want a = 1 still", got)
	}
}
