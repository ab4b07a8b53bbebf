package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

// storeKeys writes n keys w00000.. (value "v" + key) through c, in one
// SetMany, and returns their names.
func storeKeys(t *testing.T, c *hybrid.Cache[string], n int) []string {
	t.Helper()
	items := make(map[string]string, n)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("w%05d", i)
		items[keys[i]] = "v" + keys[i]
	}
	if err := c.SetMany(t.Context(), items); err != nil {
		t.Fatalf("SetMany: %v", err)
	}
	return keys
}

// localOnly reports whether c's L1 holds key, without a shared-tier read.
func localOnly(t *testing.T, c *hybrid.Cache[string], key string) (string, bool) {
	t.Helper()
	v, ok, err := c.Get(t.Context(), key, hybrid.WithSkip(hybrid.SkipRemoteRead))
	if err != nil {
		t.Fatalf("Get(%q, SkipRemoteRead): %v", key, err)
	}
	return v, ok
}

// TestWarmFillsL1 is Warm on real Redis: a fresh instance reads 1,200
// stored keys and 30 missing ones in pages of 500 (3 reads), then answers
// the stored keys from L1 with no load and no Redis read; the missing keys
// are not stored.
func TestWarmFillsL1(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns})[0]
	keys := storeKeys(t, a.c, 1200)
	// B starts after A's writes, as a new instance does: their messages,
	// applied during Warm, would rightly keep Warm's reads out of L1.
	b := newInstance(t, "B", singleNode(nil), hybrid.Options{Namespace: ns}, invalidate.Options{})
	var missing []string
	for i := range 30 {
		missing = append(missing, fmt.Sprintf("missing%d", i))
	}
	n, err := b.c.Warm(t.Context(), append(append([]string{}, keys...), missing...))
	if err != nil || n != len(keys) {
		t.Fatalf("Warm = %d, %v; want %d, nil", n, err, len(keys))
	}
	if got := b.remote.calls(); got.GetBatch != 3 || got.GetBatchKeys != 1230 || got.Get != 0 {
		t.Fatalf("Warm's reads: %+v; want 3 GetMany calls of 1230 keys in all", got)
	}
	loads := &counter{}
	for _, key := range keys {
		v, err := b.c.GetOrCreate(t.Context(), key, loads.load)
		if err != nil || v != "v"+key {
			t.Fatalf("GetOrCreate(%q) = %q, %v; want %q", key, v, err, "v"+key)
		}
	}
	if got := b.remote.calls(); loads.calls.Load() != 0 || got.GetBatch != 3 || got.Get != 0 {
		t.Fatalf("after Warm, reads of the warmed keys made %d loads and Redis reads %+v; want none", loads.calls.Load(), got)
	}
	for _, key := range missing {
		if _, ok := localOnly(t, b.c, key); ok {
			t.Errorf("Warm stored %q, which Redis does not hold", key)
		}
	}
}

// TestWarmSkipsRefusedKeys: a key whose per-key options
// (Options.PerKey) are refused is skipped, as GetMany and
// GetOrCreateMany skip it, and named in the error; Warm goes on with the
// rest of its page and the pages after it.
func TestWarmSkipsRefusedKeys(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns})[0]
	keys := storeKeys(t, a.c, 1200)
	const refused = "w00100" // in the first page
	b := newInstance(t, "B", singleNode(nil), hybrid.Options{Namespace: ns,
		PerKey: func(key string) []hybrid.EntryOption {
			if key == refused {
				return []hybrid.EntryOption{hybrid.WithTTL(-time.Second)}
			}
			return nil
		}}, invalidate.Options{})
	n, err := b.c.Warm(t.Context(), keys)
	if n != len(keys)-1 || err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", refused)) {
		t.Errorf("Warm = %d, %v; want %d and an error naming %q", n, err, len(keys)-1, refused)
	}
	cold := 0
	for _, key := range keys {
		if key == refused {
			continue // every call about it is refused
		}
		if _, ok := localOnly(t, b.c, key); !ok {
			cold++
		}
	}
	if cold > 0 {
		t.Errorf("%d of the %d good keys not in L1 after Warm, want 0", cold, len(keys)-1)
	}
}

// TestWarmKeepsConcurrentSet: a Set made on the warming instance after
// Redis answered its page, before the page is stored, is not overwritten by
// the page's older value.
func TestWarmKeepsConcurrentSet(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns})[0]
	keys := storeKeys(t, a.c, 20)
	// B starts after A's writes, as a new instance does: their messages,
	// applied during Warm, would rightly keep Warm's reads out of L1.
	b := newInstance(t, "B", singleNode(nil), hybrid.Options{Namespace: ns}, invalidate.Options{})
	var once atomic.Bool
	b.remote.setAfterGet(func(k string) {
		if k == ns+":"+keys[3] && once.CompareAndSwap(false, true) {
			if err := b.c.Set(context.Background(), keys[3], "newer"); err != nil {
				t.Errorf("Set: %v", err)
			}
		}
	})
	if _, err := b.c.Warm(t.Context(), keys); err != nil {
		t.Fatalf("Warm: %v", err)
	}
	b.remote.setAfterGet(nil)
	if !once.Load() {
		t.Fatal("the Set during Warm did not run")
	}
	if v, ok := localOnly(t, b.c, keys[3]); !ok || v != "newer" {
		t.Errorf("after Warm, L1 holds %q (ok %v) for the key Set during it; want %q", v, ok, "newer")
	}
	if v, ok := localOnly(t, b.c, keys[4]); !ok || v != "v"+keys[4] {
		t.Errorf("after Warm, L1 holds %q (ok %v) for %s; want %q", v, ok, keys[4], "v"+keys[4])
	}
}

// TestWarmCancelled: ctx cancelled while the first of three pages is read
// ends Warm with ctx.Err() and no further page read; what it reports
// stored is in L1.
func TestWarmCancelled(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns})[0]
	keys := storeKeys(t, a.c, 1200)
	// B starts after A's writes, as a new instance does: their messages,
	// applied during Warm, would rightly keep Warm's reads out of L1.
	b := newInstance(t, "B", singleNode(nil), hybrid.Options{Namespace: ns}, invalidate.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	b.remote.setAfterGet(func(string) { cancel() })
	done := make(chan struct{})
	var n int
	var err error
	go func() {
		defer close(done)
		n, err = b.c.Warm(ctx, keys)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Warm did not return within 10s of its ctx's end")
	}
	b.remote.setAfterGet(nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Warm after cancel: n %d, err %v; want context.Canceled", n, err)
	}
	if got := b.remote.calls(); got.GetBatch != 1 {
		t.Errorf("Warm read %d pages after its ctx ended during the first; want 1", got.GetBatch)
	}
	held := 0
	for _, key := range keys {
		if _, ok := localOnly(t, b.c, key); ok {
			held++
		}
	}
	if held != n {
		t.Errorf("L1 holds %d warmed keys, Warm reported %d", held, n)
	}
}

// TestWarmRedisDown: with its Redis client closed, Warm returns the read's
// error and stores nothing.
func TestWarmRedisDown(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns})[0]
	keys := storeKeys(t, a.c, 10)
	rdb := singleNode(nil)(t)
	b := newInstanceOn(t, "B", rdb, hybrid.Options{Namespace: ns}, invalidate.Options{})
	rdb.Close()
	n, err := b.c.Warm(t.Context(), keys)
	if err == nil || n != 0 {
		t.Fatalf("Warm with Redis down = %d, %v; want 0 and an error", n, err)
	}
	for _, key := range keys {
		if _, ok := localOnly(t, b.c, key); ok {
			t.Errorf("Warm with Redis down stored %q", key)
		}
	}
}

func TestWarmBadInput(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns})[0]
	keys := storeKeys(t, a.c, 2)
	if n, err := a.c.Warm(t.Context(), nil); n != 0 || err != nil {
		t.Errorf("Warm(nil) = %d, %v; want 0, nil", n, err)
	}
	n, err := a.c.Warm(t.Context(), []string{"", keys[0], "\x00hot", keys[1]})
	if n != 2 || !errors.Is(err, hybrid.ErrEmptyKey) || !errors.Is(err, hybrid.ErrReservedKey) {
		t.Errorf("Warm with bad keys = %d, %v; want 2 and ErrEmptyKey, ErrReservedKey", n, err)
	}
	local := newTestCache[string](t, hybrid.Options{})
	if _, err := local.Warm(t.Context(), keys); err == nil {
		t.Error("Warm without a Remote: no error")
	}
	if _, err := hybrid.New[string](hybrid.Options{HotSetEvery: -time.Second}); err == nil {
		t.Error("New with a negative HotSetEvery: no error")
	}
	if _, err := hybrid.New[string](hybrid.Options{HotSetSize: -1}); err == nil {
		t.Error("New with a negative HotSetSize: no error")
	}
	if _, err := hybrid.New[string](hybrid.Options{HotSetEvery: time.Second}); err == nil || !strings.Contains(err.Error(), "HotSetEvery") {
		t.Errorf("New with HotSetEvery and no Remote: %v, want an error naming HotSetEvery", err)
	}
}

// TestWarmHot: instance A records its hot keys (its recorder, every 20ms);
// a new instance C warms from that record and answers A's hot keys from L1
// with no load and one Redis read.
func TestWarmHot(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns, HotSetEvery: 20 * time.Millisecond, HotSetSize: 10})[0]
	keys := storeKeys(t, a.c, 200)
	hot := keys[50:60]
	for range 200 {
		for _, key := range hot {
			getString(t, a.c, key)
		}
	}
	var rec []hybrid.HotKey
	waitFor(t, 10*time.Second, "a hot set of 10 keys recorded", func() bool {
		var err error
		rec, err = a.c.HotSetRecord(t.Context())
		return err == nil && len(rec) == 10
	}, func() string { return fmt.Sprint(rec) })
	want := map[string]bool{}
	for _, key := range hot {
		want[key] = true
	}
	for _, h := range rec {
		if !want[h.Key] {
			t.Errorf("hot set holds %q, not one of the keys read", h.Key)
		}
	}
	c := newInstance(t, "C", singleNode(nil), hybrid.Options{Namespace: ns}, invalidate.Options{})
	n, err := c.c.WarmHot(t.Context())
	if err != nil || n != 10 {
		t.Fatalf("WarmHot = %d, %v; want 10, nil", n, err)
	}
	before := c.remote.calls()
	loads := &counter{}
	for _, key := range hot {
		if v, err := c.c.GetOrCreate(t.Context(), key, loads.load); err != nil || v != "v"+key {
			t.Fatalf("GetOrCreate(%q) = %q, %v", key, v, err)
		}
	}
	if after := c.remote.calls(); loads.calls.Load() != 0 || after != before {
		t.Errorf("after WarmHot: %d loads, Redis reads %+v -> %+v; want none", loads.calls.Load(), before, after)
	}
	if before.GetBatch != 1 || before.GetRecord == 0 {
		t.Errorf("WarmHot read %+v; want the hot set's record and one page", before)
	}
}

// TestHotSetCorruptRecord: a hot-set record that does not decode is an
// error for WarmHot (and the record read), and the recorder replaces it.
func TestHotSetCorruptRecord(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns})[0]
	if err := a.rdb.Set(t.Context(), ns+":\x00hot", "\x07garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.HotSetRecord(t.Context()); err == nil {
		t.Error("the hot set of a garbled record: no error")
	}
	if n, err := a.c.WarmHot(t.Context()); err == nil || n != 0 {
		t.Errorf("WarmHot of a garbled record = %d, %v; want 0 and an error", n, err)
	}
	keys := storeKeys(t, a.c, 3)
	for range 100 {
		getString(t, a.c, keys[1])
	}
	if err := a.c.RecordHotSet(t.Context()); err != nil {
		t.Fatalf("recording over a garbled record: %v", err)
	}
	if hot, err := a.c.HotSetRecord(t.Context()); err != nil || len(hot) != 1 || hot[0].Key != keys[1] {
		t.Errorf("the hot set after recording = %v, %v; want [%s]", hot, err, keys[1])
	}
}
