package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// Per-key defaults (Options.PerKey), on real Redis, across two
// instances.

// byPrefix is an Options.PerKey that counts its calls: keys
// "short:..." live 30 s and are tagged "short", "hot:..." live 300 ms in
// L1, "user:..." have their absence remembered, "bad:..." get options no
// call accepts.
type byPrefix struct{ calls atomic.Int64 }

func (p *byPrefix) options(key string) []hybrid.EntryOption {
	p.calls.Add(1)
	switch {
	case strings.HasPrefix(key, "short:"):
		return []hybrid.EntryOption{hybrid.WithTTL(30 * time.Second), hybrid.WithTags("short")}
	case strings.HasPrefix(key, "hot:"):
		return []hybrid.EntryOption{hybrid.WithLocalTTL(300 * time.Millisecond)}
	case strings.HasPrefix(key, "user:"):
		return []hybrid.EntryOption{hybrid.WithNegativeTTL(time.Minute)}
	case strings.HasPrefix(key, "bad:"):
		return []hybrid.EntryOption{hybrid.WithTTL(-time.Second)}
	}
	return nil
}

// The defaults of a key apply to what fills (single and batch) and Sets
// write, before the call's own options; the other instance finds what was
// written, absences included.
func TestPerKeyFillsAndSets(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	p := &byPrefix{}
	ins := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns, PerKey: p.options})
	a, b := ins[0], ins[1]
	ctx := context.Background()
	for _, key := range []string{"short:1", "long:1"} {
		if _, err := a.c.GetOrCreate(ctx, key, loadTop); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.c.GetOrCreate(ctx, "short:2", loadTop, hybrid.WithTTL(time.Hour)); err != nil {
		t.Fatal(err)
	}
	setStr(t, a, "short:3", "v")
	if _, err := a.c.GetOrCreate(ctx, "user:gone", (&missingRow{}).load); !errors.Is(err, hybrid.ErrNotFound) {
		t.Fatalf("user:gone: got %v, want ErrNotFound", err)
	}
	page := []string{"short:4", "long:2", "user:gone2"}
	bl := &batchLoad{}
	if got, err := a.c.GetOrCreateMany(ctx, page, func(ctx context.Context, keys []string) (map[string]string, error) {
		m, err := bl.load(ctx, keys)
		delete(m, "user:gone2")
		return m, err
	}, hybrid.WithTags("page")); err != nil || len(got) != 2 {
		t.Fatalf("GetOrCreateMany: got %v, %v", got, err)
	}
	for key, want := range map[string]struct {
		lo, hi time.Duration
		tags   []string
	}{
		"short:1":    {20 * time.Second, 30 * time.Second, []string{"short"}},
		"long:1":     {9 * time.Minute, 10 * time.Minute, nil},
		"short:2":    {59 * time.Minute, time.Hour, []string{"short"}}, // the call's TTL wins
		"short:3":    {20 * time.Second, 30 * time.Second, []string{"short"}},
		"user:gone":  {50 * time.Second, time.Minute, nil},
		"short:4":    {20 * time.Second, 30 * time.Second, []string{"short", "page"}},
		"long:2":     {9 * time.Minute, 10 * time.Minute, []string{"page"}},
		"user:gone2": {50 * time.Second, time.Minute, []string{"page"}},
	} {
		s := waitStored(t, a.rdb, ns, key)
		within(t, key+"'s PTTL", s.pttl, want.lo, want.hi)
		if !slices.Equal(s.h.Tags, want.tags) {
			t.Errorf("%s's tags: got %q, want %q", key, s.h.Tags, want.tags)
		}
		if absent := s.h.Flags&envelope.FlagAbsent != 0; absent != strings.HasPrefix(key, "user:") {
			t.Errorf("%s: flags %#x", key, s.h.Flags)
		}
	}
	for _, key := range []string{"user:gone", "user:gone2"} {
		if _, err := b.c.GetOrCreate(ctx, key, neverLoad(t)); !errors.Is(err, hybrid.ErrNotFound) {
			t.Errorf("B: %s: got %v, want ErrNotFound without a load", key, err)
		}
	}
	// A DeleteByTag of the default tag, on B, drops A's copies.
	if err := b.c.DeleteByTag(ctx, "short"); err != nil {
		t.Fatal(err)
	}
	waitStat(t, a, "Invalidations.Applied", statReceived, 1)
	if _, ok := getStr(t, a, "short:1"); ok {
		t.Error("A still holds short:1 after DeleteByTag(short)")
	}
}

// The defaults are asked for on misses and writes only: an L1 hit calls no
// provider and allocates nothing.
func TestPerKeyNotOnHits(t *testing.T) {
	s := newSharedTier(t)
	p := &byPrefix{}
	o := s.options()
	o.PerKey = p.options
	c := newTestCache[string](t, o)
	ctx := context.Background()
	if _, err := c.GetOrCreate(ctx, "short:1", loadTop); err != nil {
		t.Fatal(err)
	}
	calls := p.calls.Load()
	if calls == 0 {
		t.Fatal("the provider was not asked on a miss")
	}
	hit := func() {
		if _, err := c.GetOrCreate(ctx, "short:1", loadTop); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := c.Get(ctx, "short:1"); !ok {
			t.Fatal("miss")
		}
	}
	if n := testing.AllocsPerRun(100, hit); n != 0 && !raceEnabled {
		t.Errorf("an L1 hit allocates %v times, want 0", n)
	}
	if n := p.calls.Load(); n != calls {
		t.Errorf("the provider was asked %d times on L1 hits, want 0", n-calls)
	}
}

// Defaults no call accepts fail the calls about the key, with an error
// naming it; in a batch, the other keys are served.
func TestPerKeyRefused(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	p := &byPrefix{}
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns, PerKey: p.options})[0]
	ctx := context.Background()
	check := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), `Options.PerKey("bad:1")`) {
			t.Errorf("%s: got %v, want an error naming Options.PerKey and the key", what, err)
		}
	}
	_, err := a.c.GetOrCreate(ctx, "bad:1", neverLoad(t))
	check("GetOrCreate", err)
	check("Set", a.c.Set(ctx, "bad:1", "v"))
	_, _, err = a.c.Get(ctx, "bad:1")
	check("Get", err)
	bl := &batchLoad{}
	got, err := a.c.GetOrCreateMany(ctx, []string{"bad:1", "ok"}, bl.load)
	check("GetOrCreateMany", err)
	if got["ok"] != "loaded:ok" || len(got) != 1 {
		t.Errorf("GetOrCreateMany: got %v, want ok alone", got)
	}
	if calls := bl.snapshot(); len(calls) != 1 || !slices.Equal(calls[0], []string{"ok"}) {
		t.Errorf("batch loads: %q, want one of [ok]", calls)
	}
	got, err = a.c.GetMany(ctx, []string{"bad:1", "ok"})
	check("GetMany", err)
	if got["ok"] != "loaded:ok" || len(got) != 1 {
		t.Errorf("GetMany: got %v, want ok alone", got)
	}
	if _, ok := redisEntry(t, a.rdb, ns, "bad:1"); ok {
		t.Error("Redis holds bad:1")
	}
}

// A key's L1 lifetime applies to what is read from Redis, by GetOrCreate,
// Get and GetMany alike, on the instance that did not write it.
func TestPerKeyOnReads(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	p := &byPrefix{}
	ins := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns, PerKey: p.options})
	a, b := ins[0], ins[1]
	ctx := context.Background()
	reads := map[string]func(key string){
		"GetOrCreate": func(key string) { fill(t, b, key, "v") },
		"Get": func(key string) {
			if v, ok := getStr(t, b, key); !ok || v != "v" {
				t.Fatalf("Get(%s): got %q, %v", key, v, ok)
			}
		},
		"GetMany": func(key string) {
			if got, err := b.c.GetMany(ctx, []string{key, "hot:other"}); err != nil || got[key] != "v" {
				t.Fatalf("GetMany(%s): got %v, %v", key, got, err)
			}
		},
	}
	applied := uint64(0)
	for name, read := range reads {
		key := "hot:" + name
		setStr(t, a, key, "v")
		// Its message, which drops B's copy, must not come after B's read.
		applied++
		waitStat(t, b, "Invalidations.Applied", statReceived, applied)
		hits := b.c.Stats().L2.Hits
		read(key)
		if b.c.Stats().L2.Hits != hits+1 {
			t.Fatalf("%s: not read from Redis", name)
		}
		// L1 keeps it 300 ms, not LocalTTL's minute: B reads Redis again.
		waitFor(t, 5*time.Second, name+": "+key+" read from Redis again", func() bool {
			read(key)
			return b.c.Stats().L2.Hits > hits+1
		}, nil)
	}
}

func ExampleOptions_entryOptions() {
	c, err := hybrid.New[string](hybrid.Options{
		// Session keys live 30 s and are tagged, whatever the call site.
		PerKey: func(key string) []hybrid.EntryOption {
			if strings.HasPrefix(key, "session:") {
				return []hybrid.EntryOption{hybrid.WithLocalTTL(30 * time.Second), hybrid.WithTags("sessions")}
			}
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	_ = c.Set(ctx, "session:1", "ada")
	_ = c.Set(ctx, "config", "v1")
	_ = c.DeleteByTag(ctx, "sessions")
	_, s, _ := c.Get(ctx, "session:1")
	_, k, _ := c.Get(ctx, "config")
	fmt.Println(s, k)
	// Output:
	// false true
}

// A value swapped in from a message (Secret set) is kept in L1 as its key's
// defaults say, as one read from Redis is.
func TestPerKeyOnSwap(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	p := &byPrefix{}
	o := hybrid.Options{Namespace: ns, PerKey: p.options, Secret: []byte("secret")}
	ins := newInstances(t, 2, singleNode(nil), o)
	a, b := ins[0], ins[1]
	setStr(t, a, "hot:1", "v1")
	waitStat(t, b, "Invalidations.Applied", statReceived, 1)
	fill(t, b, "hot:1", "v1")
	time.Sleep(2 * time.Millisecond) // a swap needs a write in a later millisecond than the copy
	setStr(t, a, "hot:1", "v")
	waitStat(t, b, "Invalidations.Swapped", func(s hybrid.Stats) uint64 { return s.Invalidations.Swapped }, 1)
	hits := b.c.Stats().L2.Hits
	if v, ok := getStr(t, b, "hot:1"); !ok || v != "v" || b.c.Stats().L2.Hits != hits {
		t.Fatalf("B: got %q, %v, want v swapped in", v, ok)
	}
	waitFor(t, 5*time.Second, "hot:1 read from Redis again", func() bool {
		fill(t, b, "hot:1", "v")
		return b.c.Stats().L2.Hits > hits
	}, nil)
}

// SetMany writes each key under its own defaults, as Set does, and a key
// whose defaults are refused fails the whole batch before anything is
// written. A Get with a flag reads a key under its defaults too.
func TestPerKeySetMany(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	p := &byPrefix{}
	ins := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns, PerKey: p.options})
	a, b := ins[0], ins[1]
	ctx := context.Background()
	if err := a.c.SetMany(ctx, map[string]string{"short:m": "v", "long:m": "v"}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]struct {
		lo, hi time.Duration
		tags   []string
	}{
		"short:m": {20 * time.Second, 30 * time.Second, []string{"short"}},
		"long:m":  {9 * time.Minute, 10 * time.Minute, nil},
	} {
		s := waitStored(t, a.rdb, ns, key)
		within(t, key+"'s PTTL", s.pttl, want.lo, want.hi)
		if !slices.Equal(s.h.Tags, want.tags) {
			t.Errorf("%s's tags: got %q, want %q", key, s.h.Tags, want.tags)
		}
	}
	err := a.c.SetMany(ctx, map[string]string{"bad:m": "v", "long:n": "v"})
	if err == nil || !strings.Contains(err.Error(), "Options.PerKey") {
		t.Fatalf("SetMany with a refused key: got %v, want the provider's error", err)
	}
	if _, ok := redisValue(t, a.rdb, ns, "long:n"); ok {
		t.Error("SetMany refused for one key wrote another")
	}
	if v, ok, err := b.c.Get(ctx, "short:m", hybrid.WithSkip(hybrid.SkipL1Read)); v != "v" || !ok || err != nil {
		t.Errorf("B: Get(short:m) past L1: %q, %v, %v", v, ok, err)
	}
	if _, _, err := b.c.Get(ctx, "bad:m", hybrid.WithSkip(hybrid.SkipL1Read)); err == nil {
		t.Error("B: Get(bad:m): no error, want the provider's")
	}
}

// The provider may not give WithSkip: it is per call.
func TestPerKeyNoSkip(t *testing.T) {
	c := newTestCache[string](t, hybrid.Options{Namespace: "ns", PerKey: func(string) []hybrid.EntryOption {
		return []hybrid.EntryOption{hybrid.WithSkip(hybrid.SkipL1Write)}
	}})
	err := c.Set(context.Background(), "k", "v")
	if err == nil || !strings.Contains(err.Error(), "per-call") {
		t.Fatalf("Set: got %v, want WithSkip refused as a default", err)
	}
}
