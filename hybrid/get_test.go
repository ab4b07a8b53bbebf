package hybrid_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

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
		s.waitStored(t, "k")
		if got, want := s.valueKeys(), []string{"ns:k"}; !slices.Equal(got, want) {
			t.Errorf("Remote keys after the fill: got %q, want %q", got, want)
		}
		if v, ok := s.stored(t, "k"); !ok || v != "v1" {
			t.Errorf("Remote holds %q (ok %v), want \"v1\"", v, ok)
		}
		st := a.Stats()
		if st.L1.Misses != 1 || st.L2.Misses != 1 || st.Load.Calls != 1 || st.L1.Hits != 0 || st.L2.Hits != 0 || st.L1.Entries != 1 {
			t.Errorf("Stats after a full miss: got %+v, want L1.Misses 1, L2.Misses 1, Load.Calls 1, L1.Entries 1", st)
		}
		// The key's sequence counter is read before the load, the clear
		// record before the first write.
		if c := s.remote.Calls(); c.Get != 3 || c.IfAbsent != 1 {
			t.Errorf("Remote calls after a full miss: got %+v, want 3 Gets (the key, its sequence counter, the clear record) and 1 IfAbsent write", c)
		}

		// L1 hit.
		if v, err := a.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Fatalf("second GetOrCreate: got %q, %v, want \"v1\", nil", v, err)
		}
		if st := a.Stats(); st.L1.Hits != 1 || st.Load.Calls != 1 {
			t.Errorf("Stats after an L1 hit: got L1.Hits %d, Load.Calls %d, want 1, 1", st.L1.Hits, st.Load.Calls)
		}
		if got := s.remote.Calls().Get; got != 3 {
			t.Errorf("an L1 hit read the Remote: %d Gets, want 3", got)
		}

		// L2 hit, on another instance.
		if v, err := b.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Fatalf("GetOrCreate on the second instance: got %q, %v, want \"v1\", nil", v, err)
		}
		if v, err := b.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Fatalf("second GetOrCreate on the second instance: got %q, %v, want \"v1\", nil", v, err)
		}
		st = b.Stats()
		if st.L1.Misses != 1 || st.L2.Hits != 1 || st.L1.Hits != 1 || st.Load.Calls != 0 || st.L2.Misses != 0 {
			t.Errorf("Stats of the second instance: got %+v, want L1.Misses 1, L2.Hits 1, L1.Hits 1, no load", st)
		}
		if got := l.calls.Load(); got != 1 {
			t.Errorf("load ran %d times in all, want 1", got)
		}
		// b's hit read the clear record too, once: a Clear may have made the
		// value a miss (see TestClearRecordReadOncePerInstance).
		if c := s.remote.Calls(); c.Get != 5 || c.IfAbsent != 1 || c.IfSeq != 1 || c.Total() != 7 {
			t.Errorf("Remote calls: got %+v, want 5 Gets (a miss, its sequence counter, a's and b's reads of the clear record, b's hit), the counter's IfAbsent write (missing, so made) and the write-back's IfSeq", c)
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
	if got := s.remote.Calls().Get; got != 3 {
		t.Errorf("Remote Gets: got %d, want 3 (a miss, then one read whose value stays in L1, and the clear record once)", got)
	}
	if st := c.Stats(); st.L2.Misses != 1 || st.L2.Hits != 1 || st.L1.Hits != 1 {
		t.Errorf("Stats: got %+v, want L2.Misses 1, L2.Hits 1, L1.Hits 1", st)
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
	base := s.remote.Calls().Total() // New opens the invalidation log
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
	if got := s.remote.Calls().Total() - base; got != 0 {
		t.Errorf("calls with a cancelled ctx reached the Remote %d times, want 0", got)
	}
}

func TestEmptyKey(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	base := s.remote.Calls().Total() // New opens the invalidation log
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
	if got := s.remote.Calls().Total() - base; got != 0 {
		t.Errorf("empty keys reached the Remote %d times, want 0", got)
	}
}

// TestKeysCheckedEverywhere: every entry point, single and batch, refuses
// the same keys (empty, reserved for the cache's records, over
// MaxKeyBytes); a batch serves the rest of its page. A page holding a tag
// record's key once overwrote the record, and GetMany returned it.
func TestKeysCheckedEverywhere(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	p := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns, Secret: []byte("s"), MaxKeyBytes: 16})
	a, b := p[0], p[1]
	bad := []struct {
		key  string
		want error
	}{
		{"", hybrid.ErrEmptyKey},
		{"\x00tag:shop", hybrid.ErrReservedKey},
		{"\x00", hybrid.ErrReservedKey},
		{strings.Repeat("k", 17), hybrid.ErrKeyTooLong},
	}
	if err := a.c.Set(ctx, "before", "v", hybrid.WithTags("shop")); err != nil {
		t.Fatal(err)
	}
	if err := a.c.DeleteByTag(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // written after the delete, by the clock tags compare
	if err := a.c.Set(ctx, "after", "v", hybrid.WithTags("shop")); err != nil {
		t.Fatal(err)
	}
	setStr(t, a, "good", "g") // in Redis before b's GetMany looks
	record, err := a.rdb.Get(ctx, ns+":\x00tag:shop").Bytes()
	if err != nil {
		t.Fatalf("the tag record: %v", err)
	}

	for _, k := range bad {
		load := func(context.Context, string) (string, error) {
			t.Errorf("load(%q) called for a bad key", k.key)
			return "x", nil
		}
		if _, err := a.c.GetOrCreate(ctx, k.key, load); !errors.Is(err, k.want) {
			t.Errorf("GetOrCreate(%q): got %v, want %v", k.key, err, k.want)
		}
		if _, _, err := a.c.Get(ctx, k.key); !errors.Is(err, k.want) {
			t.Errorf("Get(%q): got %v, want %v", k.key, err, k.want)
		}
		if err := a.c.Set(ctx, k.key, "x"); !errors.Is(err, k.want) {
			t.Errorf("Set(%q): got %v, want %v", k.key, err, k.want)
		}
		if err := a.c.Delete(ctx, k.key); !errors.Is(err, k.want) {
			t.Errorf("Delete(%q): got %v, want %v", k.key, err, k.want)
		}
		page := []string{"good", k.key, "new"}
		var asked []string
		got, err := a.c.GetOrCreateMany(ctx, page, func(_ context.Context, miss []string) (map[string]string, error) {
			asked = append(asked, miss...)
			m := map[string]string{}
			for _, key := range miss {
				m[key] = "loaded"
			}
			return m, nil
		})
		if !errors.Is(err, k.want) {
			t.Errorf("GetOrCreateMany(%q): got %v, want %v", page, err, k.want)
		}
		if slices.Contains(asked, k.key) {
			t.Errorf("GetOrCreateMany(%q): load asked for %q", page, k.key)
		}
		if got["good"] != "g" || got["new"] != "loaded" {
			t.Errorf("GetOrCreateMany(%q): got %q, want the rest of the page served", page, got)
		}
		if _, ok := got[k.key]; ok {
			t.Errorf("GetOrCreateMany(%q): got a value for %q", page, k.key)
		}
		got, err = b.c.GetMany(ctx, page)
		if !errors.Is(err, k.want) {
			t.Errorf("GetMany(%q): got %v, want %v", page, err, k.want)
		}
		if _, ok := got[k.key]; ok || got["good"] != "g" {
			t.Errorf("GetMany(%q): got %q, want good (and new, once written back)", page, got)
		}
	}
	if now, err := a.rdb.Get(ctx, ns+":\x00tag:shop").Bytes(); err != nil || !bytes.Equal(now, record) {
		t.Errorf("the tag record changed: %q, %v; want %q", now, err, record)
	}
	// A whole page of bad keys: each gets its error, load is not called.
	_, err = a.c.GetOrCreateMany(ctx, []string{"", "\x00x"}, func(context.Context, []string) (map[string]string, error) {
		t.Error("load called for a page of bad keys")
		return nil, nil
	})
	if !errors.Is(err, hybrid.ErrEmptyKey) || !errors.Is(err, hybrid.ErrReservedKey) {
		t.Errorf("GetOrCreateMany of bad keys: got %v, want both ErrEmptyKey and ErrReservedKey", err)
	}
	for _, in := range p {
		if v, ok := getStr(t, in, "after"); !ok || v != "v" {
			t.Errorf("%s: a value tagged after the delete: got %q, %v, want \"v\"", in.name, v, ok)
		}
	}
}

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
		{"Get WithAllowStale", func() { _, _, _ = c.Get(ctx, "k", hybrid.WithAllowStale()) }},
		{"GetEntry", func() { _, _, _ = c.GetEntry(ctx, "k") }},
	}
	for _, tt := range tests {
		if got := testing.AllocsPerRun(1000, tt.f); got != 0 {
			t.Errorf("%s on an L1 hit: %v allocations, want 0", tt.name, got)
		}
	}
	if st := c.Stats(); st.L1.Misses != 0 {
		t.Errorf("L1.Misses: got %d, want 0 (every call was a hit)", st.L1.Misses)
	}
}

// TestStampedeOnRemoteRead: the callers pile up while the fill is still
// reading the shared tier; it is read once and load never runs.
func TestStampedeOnRemoteRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		s.remote.Put("ns:k", envelopeOf(t, "stored", time.Hour), time.Hour)
		release := make(chan struct{})
		s.remote.SetBeforeGet(func(string) { <-release })
		const n = 50
		results := make([]<-chan result, n)
		for i := range n {
			results[i] = goGetOrCreate(t.Context(), c, "k", neverLoad(t))
		}
		synctest.Wait()
		close(release)
		for i, ch := range results {
			if r := <-ch; r.err != nil || r.v != "stored" {
				t.Errorf("caller %d: got %q, %v, want \"stored\", nil", i, r.v, r.err)
			}
		}
		if got := s.remote.Calls().Get; got != 2 {
			t.Errorf("Remote Gets: got %d, want 2 (the value and the clear record, once each)", got)
		}
	})
}
