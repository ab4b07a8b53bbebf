package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// Adaptive entries: what a load sets through hybrid.SettingsFrom, on real
// Redis, across two instances where the other instance sees the result.

// stored is what Redis holds under ns:key: the envelope's header, and the
// key's remaining lifetime (PTTL). ok is false when the key is missing.
type stored struct {
	h    envelope.Header
	raw  []byte
	pttl time.Duration
}

func redisEntry(t testing.TB, rdb redis.UniversalClient, ns, key string) (stored, bool) {
	t.Helper()
	ctx := context.Background()
	b, err := rdb.Get(ctx, ns+":"+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return stored{}, false
	}
	if err != nil {
		t.Fatalf("GET %s:%s: %v", ns, key, err)
	}
	h, _, err := envelope.Decode(b)
	if err != nil {
		t.Fatalf("GET %s:%s: %v", ns, key, err)
	}
	d, err := rdb.PTTL(ctx, ns+":"+key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return stored{h: h, raw: b, pttl: d}, true
}

// waitStored waits until Redis holds ns:key (a fill writes it back after
// its callers have their value) and returns it.
func waitStored(t testing.TB, rdb redis.UniversalClient, ns, key string) stored {
	t.Helper()
	var s stored
	waitFor(t, 5*time.Second, "Redis to hold "+key, func() bool {
		var ok bool
		s, ok = redisEntry(t, rdb, ns, key)
		return ok
	}, nil)
	return s
}

// settled makes a fill of key on in, with a load that returns "control",
// and waits until Redis holds it: a fill writes back after its callers
// have their value, so the fills in earlier calls on in have made their
// writes (if any) by then. It returns in's shared-tier calls.
func settled(t testing.TB, in *instance, ns, key string) remoteCalls {
	t.Helper()
	valueWrites := func() int64 {
		c := in.remote.calls()
		return c.WriteAlways + c.WriteIfAbsent + c.WriteBatch + c.WriteAnnounced + c.WriteIfEqual + c.WriteReleasing
	}
	writes := valueWrites()
	if _, err := in.c.GetOrCreate(context.Background(), key, func(context.Context, string) (string, error) { return "control", nil }); err != nil {
		t.Fatal(err)
	}
	waitStored(t, in.rdb, ns, key)
	// Redis may hold the value before the Write that made it has returned,
	// and a call is counted when it returns.
	waitFor(t, 5*time.Second, "the control write to be counted", func() bool { return valueWrites() > writes }, nil)
	return in.remote.calls()
}

// within fails t unless d is in (lo, hi].
func within(t testing.TB, what string, d, lo, hi time.Duration) {
	t.Helper()
	if d <= lo || d > hi {
		t.Errorf("%s: %v, want in (%v, %v]", what, d, lo, hi)
	}
}

// loadWith returns a load that hands its LoadSettings to set, then returns v.
func loadWith(v string, set func(e *hybrid.LoadSettings)) func(context.Context, string) (string, error) {
	return func(ctx context.Context, _ string) (string, error) {
		set(hybrid.SettingsFrom(ctx))
		return v, nil
	}
}

// A TTL the load sets is the value's lifetime in Redis, in L1 here, and on
// the instance that reads it from Redis.
func TestAdaptiveTTL(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	ins := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns})
	a, b := ins[0], ins[1]
	ctx := context.Background()
	v, err := a.c.GetOrCreate(ctx, "k", loadWith("v", func(e *hybrid.LoadSettings) { e.SetTTL(700 * time.Millisecond) }))
	if err != nil || v != "v" {
		t.Fatalf("A: got %q, %v", v, err)
	}
	s := waitStored(t, a.rdb, ns, "k")
	within(t, "PTTL", s.pttl, 0, 700*time.Millisecond)
	within(t, "envelope lifetime", s.h.Expires.Sub(s.h.Written), 690*time.Millisecond, 700*time.Millisecond)
	fill(t, b, "k", "v")
	// Past the TTL, neither instance has it: not L1 (1 minute by default),
	// not Redis (10 minutes by default).
	for _, in := range ins {
		waitFor(t, 5*time.Second, in.name+" to miss k", func() bool { _, ok := getStr(t, in, "k"); return !ok }, nil)
	}
}

// A LocalTTL the load sets bounds the value's life in L1; Redis keeps it
// for the TTL.
func TestAdaptiveLocalTTL(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns})[0]
	ctx := context.Background()
	if _, err := a.c.GetOrCreate(ctx, "k", loadWith("v", func(e *hybrid.LoadSettings) { e.SetLocalTTL(300 * time.Millisecond) })); err != nil {
		t.Fatal(err)
	}
	s := waitStored(t, a.rdb, ns, "k")
	within(t, "PTTL", s.pttl, 9*time.Minute, 10*time.Minute)
	waitFor(t, 5*time.Second, "k read again from Redis", func() bool {
		fill(t, a, "k", "v")
		return a.c.Stats().L2.Hits > 0
	}, nil)
}

// Fail-safe set by the load keeps the value in Redis past its TTL, on a
// cache without fail-safe.
func TestAdaptiveFailSafe(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns, TTL: time.Minute})[0]
	if _, err := a.c.GetOrCreate(context.Background(), "k", loadWith("v", func(e *hybrid.LoadSettings) { e.SetFailSafeMaxAge(time.Hour) })); err != nil {
		t.Fatal(err)
	}
	s := waitStored(t, a.rdb, ns, "k")
	within(t, "PTTL", s.pttl, time.Hour, time.Hour+time.Minute)
	within(t, "envelope lifetime", s.h.Expires.Sub(s.h.Written), 59*time.Second, time.Minute)
}

// Tags the load adds join the call's, in Redis; a DeleteByTag of one of
// them on another instance drops the value.
func TestAdaptiveTags(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	ins := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns})
	a, b := ins[0], ins[1]
	ctx := context.Background()
	var loads atomic.Int64
	load := func(ctx context.Context, _ string) (string, error) {
		loads.Add(1)
		hybrid.SettingsFrom(ctx).AddTags("sku:1")
		return "v", nil
	}
	if _, err := a.c.GetOrCreate(ctx, "k", load, hybrid.WithTags("catalog")); err != nil {
		t.Fatal(err)
	}
	s := waitStored(t, a.rdb, ns, "k")
	if want := []string{"catalog", "sku:1"}; !slices.Equal(s.h.Tags, want) {
		t.Errorf("tags in Redis: got %q, want %q", s.h.Tags, want)
	}
	if err := b.c.DeleteByTag(ctx, "sku:1"); err != nil {
		t.Fatal(err)
	}
	waitStat(t, a, "Invalidations.Applied", statReceived, 1)
	if _, err := a.c.GetOrCreate(ctx, "k", load, hybrid.WithTags("catalog")); err != nil {
		t.Fatal(err)
	}
	if n := loads.Load(); n != 2 {
		t.Errorf("%d loads, want 2: the DeleteByTag of a tag the load added drops the value", n)
	}
}

// An absence the load remembers (SetNegativeTTL), on a cache that remembers
// none, is what both instances find afterwards, without loading.
func TestAdaptiveNegativeTTL(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	ins := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns})
	a := ins[0]
	ctx := context.Background()
	gone := func(ctx context.Context, _ string) (string, error) {
		hybrid.SettingsFrom(ctx).SetNegativeTTL(time.Minute)
		return "", hybrid.ErrNotFound
	}
	if _, err := a.c.GetOrCreate(ctx, "gone", gone); !errors.Is(err, hybrid.ErrNotFound) {
		t.Fatalf("A: got %v, want ErrNotFound", err)
	}
	s := waitStored(t, a.rdb, ns, "gone")
	if s.h.Flags&envelope.FlagAbsent == 0 {
		t.Errorf("Redis holds flags %#x, want an absence", s.h.Flags)
	}
	within(t, "PTTL", s.pttl, 50*time.Second, time.Minute)
	for _, in := range ins {
		if _, err := in.c.GetOrCreate(ctx, "gone", neverLoad(t)); !errors.Is(err, hybrid.ErrNotFound) {
			t.Errorf("%s: got %v, want ErrNotFound without a load", in.name, err)
		}
	}
}

// A value the load says not to cache is returned and stored nowhere: the
// next call loads again, here and on the other instance, and Redis keeps
// what it held (a stale value kept for fail-safe, or nothing). So is an
// absence, on a cache that remembers absences.
func TestAdaptiveDoNotCache(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, FailSafeMaxAge: time.Hour, NegativeTTL: time.Minute}
	ins := newInstances(t, 2, singleNode(nil), o)
	a, b := ins[0], ins[1]
	ctx := context.Background()
	setStr(t, a, "old", "old")
	if err := a.c.Expire(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	before, ok := redisEntry(t, a.rdb, ns, "old")
	if !ok {
		t.Fatal("Redis does not hold the expired value")
	}
	var loads atomic.Int64
	volatile := func(ctx context.Context, key string) (string, error) {
		loads.Add(1)
		hybrid.SettingsFrom(ctx).DoNotCache()
		if key == "gone" {
			return "", hybrid.ErrNotFound
		}
		return "new", nil
	}
	for _, in := range []*instance{a, a, b} {
		for _, key := range []string{"old", "fresh"} {
			if v, err := in.c.GetOrCreate(ctx, key, volatile); err != nil || v != "new" {
				t.Fatalf("%s: %s: got %q, %v, want new", in.name, key, v, err)
			}
		}
		if _, err := in.c.GetOrCreate(ctx, "gone", volatile); !errors.Is(err, hybrid.ErrNotFound) {
			t.Fatalf("%s: gone: got %v, want ErrNotFound", in.name, err)
		}
	}
	if n := loads.Load(); n != 9 {
		t.Errorf("%d loads, want 9: every call loads", n)
	}
	for _, in := range ins {
		// The control fill is the one write-back.
		if rc := settled(t, in, ns, "control:"+in.name); rc.WriteIfAbsent+rc.WriteIfEqual != 1 {
			t.Errorf("%s: %d fill writes, want the control's alone", in.name, rc.WriteIfAbsent+rc.WriteIfEqual)
		}
	}
	if after, ok := redisEntry(t, a.rdb, ns, "old"); !ok || string(after.raw) != string(before.raw) {
		t.Errorf("Redis's stale value changed: %q, want %q", after.raw, before.raw)
	}
	for _, key := range []string{"fresh", "gone"} {
		if s, ok := redisEntry(t, a.rdb, ns, key); ok {
			t.Errorf("Redis holds %s: %+v, want nothing", key, s.h)
		}
	}
	if na, nb := a.c.Stats().Load.NotCached, b.c.Stats().Load.NotCached; na != 6 || nb != 3 {
		t.Errorf("Load.NotCached: A %d, B %d, want 6 and 3", na, nb)
	}
}

// Options the load sets are checked as entry options are: refused, the value
// is returned but not stored, counted and logged. Options the load sets
// over the call's are applied after them: a TTL shorter than the call's
// LocalTTL cuts it, as WithTTL's would (see TestLocalTTLCutToTTL).
func TestAdaptiveBadOptions(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	log, buf := captureLogger()
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns, Logger: log, LogEvery: time.Nanosecond})[0]
	ctx := context.Background()
	for key, set := range map[string]func(*hybrid.LoadSettings){
		"negative": func(e *hybrid.LoadSettings) { e.SetTTL(-time.Second) },
		"zero":     func(e *hybrid.LoadSettings) { e.SetLocalTTL(0) },
		"tag":      func(e *hybrid.LoadSettings) { e.AddTags("") },
		"per-key":  func(e *hybrid.LoadSettings) { e.For("per-key").SetFailSafeMaxAge(-1) },
	} {
		if v, err := a.c.GetOrCreate(ctx, key, loadWith("v", set)); err != nil || v != "v" {
			t.Errorf("%s: got %q, %v, want the value", key, v, err)
		}
	}
	// A good one: the load's TTL cuts the call's LocalTTL.
	if _, err := a.c.GetOrCreate(ctx, "good", loadWith("v", func(e *hybrid.LoadSettings) { e.SetTTL(5 * time.Second) }), hybrid.WithLocalTTL(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	s := waitStored(t, a.rdb, ns, "good")
	within(t, "good's PTTL", s.pttl, 0, 5*time.Second)
	if rc := a.remote.calls(); rc.WriteIfAbsent != 1 {
		t.Errorf("%d fill writes, want good's alone", rc.WriteIfAbsent)
	}
	for _, key := range []string{"negative", "zero", "tag", "per-key"} {
		if _, ok := redisEntry(t, a.rdb, ns, key); ok {
			t.Errorf("Redis holds %s, whose options were refused", key)
		}
	}
	if n := a.c.Stats().Load.BadOptions; n != 4 {
		t.Errorf("Load.BadOptions: got %d, want 4", n)
	}
	if !strings.Contains(buf.String(), "options set by the load refused") {
		t.Errorf("nothing logged: %s", buf.String())
	}
}

// A batch load sets options for all its keys and for each: each key is
// stored as its own say, and the other instance finds what was stored.
func TestAdaptiveMany(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	ins := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns})
	a, b := ins[0], ins[1]
	ctx := context.Background()
	keys := []string{"all", "long", "volatile", "gone", "bad", "tagged"}
	load := func(ctx context.Context, missing []string) (map[string]string, error) {
		e := hybrid.SettingsFrom(ctx)
		e.SetTTL(time.Minute)
		e.For("long").SetTTL(time.Hour)
		e.For("volatile").DoNotCache()
		e.For("gone").SetNegativeTTL(30 * time.Second)
		e.For("bad").SetLocalTTL(-1)
		e.For("tagged").AddTags("t")
		e.For("not asked").SetTTL(-1) // ignored
		out := make(map[string]string)
		for _, k := range missing {
			if k != "gone" {
				out[k] = "v:" + k
			}
		}
		return out, nil
	}
	got, err := a.c.GetOrCreateMany(ctx, keys, load)
	if err != nil || len(got) != 5 {
		t.Fatalf("A: got %v, %v, want 5 values", got, err)
	}
	waitFor(t, 5*time.Second, "the write-back", func() bool { return a.remote.calls().WriteBatch >= 1 }, nil)
	for key, want := range map[string]struct{ lo, hi time.Duration }{
		"all":    {50 * time.Second, time.Minute},
		"long":   {59 * time.Minute, time.Hour},
		"gone":   {20 * time.Second, 30 * time.Second},
		"tagged": {50 * time.Second, time.Minute},
	} {
		if s, ok := redisEntry(t, a.rdb, ns, key); !ok {
			t.Errorf("Redis does not hold %s", key)
		} else {
			within(t, key+"'s PTTL", s.pttl, want.lo, want.hi)
			if key == "tagged" && !slices.Equal(s.h.Tags, []string{"t"}) {
				t.Errorf("tagged's tags: %q", s.h.Tags)
			}
		}
	}
	for _, key := range []string{"volatile", "bad"} {
		if _, ok := redisEntry(t, a.rdb, ns, key); ok {
			t.Errorf("Redis holds %s", key)
		}
	}
	bl := &batchLoad{}
	if got, err := b.c.GetOrCreateMany(ctx, keys, bl.load); err != nil || len(got) != 5 {
		t.Fatalf("B: got %v, %v", got, err)
	}
	if calls := bl.snapshot(); len(calls) != 1 || !slices.Equal(calls[0], []string{"bad", "volatile"}) {
		t.Errorf("B's loads: %q, want one of [bad volatile]", calls)
	}
	if s := a.c.Stats().Load; s.NotCached != 1 || s.BadOptions != 1 {
		t.Errorf("A: NotCached %d, BadOptions %d, want 1 and 1", s.NotCached, s.BadOptions)
	}
}

// An eager refresh writes its value as its load says: a new TTL, or, when
// the load says DoNotCache, nothing (the current value stays).
func TestAdaptiveRefresh(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, TTL: 10 * time.Second, EagerRefresh: 0.05}
	ins := newInstances(t, 1, singleNode(nil), o)
	a := ins[0]
	ctx := context.Background()
	for _, tt := range []struct {
		key     string
		set     func(*hybrid.LoadSettings)
		want    string
		lo, hi  time.Duration
		refresh string // the value the load returns on refresh
	}{
		{"ttl", func(e *hybrid.LoadSettings) { e.SetTTL(time.Hour) }, "v2", 59 * time.Minute, time.Hour, "v2"},
		{"volatile", (*hybrid.LoadSettings).DoNotCache, "v1", 0, 10 * time.Second, "v2"},
	} {
		var loads atomic.Int64
		load := func(ctx context.Context, _ string) (string, error) {
			if loads.Add(1) == 1 {
				return "v1", nil
			}
			tt.set(hybrid.SettingsFrom(ctx))
			return tt.refresh, nil
		}
		if v, err := a.c.GetOrCreate(ctx, tt.key, load); err != nil || v != "v1" {
			t.Fatalf("%s: got %q, %v", tt.key, v, err)
		}
		waitStored(t, a.rdb, ns, tt.key)
		waitFor(t, 5*time.Second, tt.key+" refreshed", func() bool {
			if _, err := a.c.GetOrCreate(ctx, tt.key, load); err != nil {
				t.Fatal(err)
			}
			return loads.Load() >= 2
		}, nil)
		waitFor(t, 5*time.Second, tt.key+" in Redis", func() bool {
			v, ok := redisValue(t, a.rdb, ns, tt.key)
			return ok && v == tt.want
		}, nil)
		if tt.want == "v1" {
			// Nothing to wait for but the refresh's end: it changes nothing.
			waitFor(t, 5*time.Second, "the refresh to end", func() bool { return a.c.Stats().Load.NotCached == 1 }, nil)
		}
		s, _ := redisEntry(t, a.rdb, ns, tt.key)
		within(t, tt.key+"'s PTTL", s.pttl, tt.lo, tt.hi)
		if v, ok := getStr(t, a, tt.key); !ok || v != tt.want {
			t.Errorf("%s: A serves %q, %v, want %q", tt.key, v, ok, tt.want)
		}
	}
}

// Under a load lease, the instance that waits for the holder gets the
// value the holder stored as its load said; a value the holder's load says
// not to cache is not written, and the waiter, told so, loads by itself.
func TestAdaptiveLease(t *testing.T) {
	srv.NeedReal(t)
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			for _, tt := range []struct {
				name  string
				set   func(*hybrid.LoadSettings)
				loadB int64 // loads on B
				want  string
			}{
				{"ttl", func(e *hybrid.LoadSettings) { e.SetTTL(90 * time.Second) }, 0, "a"},
				{"volatile", (*hybrid.LoadSettings).DoNotCache, 1, "b"},
			} {
				t.Run(tt.name, func(t *testing.T) {
					ns := redistest.Prefix(t)
					ins := newInstances(t, 2, singleNode(nil), leaseOptions(ns, m.secret))
					a, b := ins[0], ins[1]
					g, release := gate(t)
					started := make(chan struct{})
					resA := goGet(a, "k", func(ctx context.Context, _ string) (string, error) {
						close(started)
						<-g
						tt.set(hybrid.SettingsFrom(ctx))
						return "a", nil
					})
					<-started
					var loadsB atomic.Int64
					resB := goGet(b, "k", func(ctx context.Context, _ string) (string, error) {
						loadsB.Add(1)
						hybrid.SettingsFrom(ctx).DoNotCache()
						return "b", nil
					})
					waitStat(t, b, "Leases.Waited", func(s hybrid.Stats) uint64 { return s.Leases.Waited }, 1)
					release()
					if r := <-resA; r.err != nil || r.v != "a" {
						t.Fatalf("A: got %q, %v", r.v, r.err)
					}
					if r := <-resB; r.err != nil || r.v != tt.want {
						t.Fatalf("B: got %q, %v, want %q", r.v, r.err, tt.want)
					}
					if n := loadsB.Load(); n != tt.loadB {
						t.Errorf("%d loads on B, want %d", n, tt.loadB)
					}
					if tt.want == "a" {
						s := waitStored(t, a.rdb, ns, "k")
						within(t, "PTTL", s.pttl, 80*time.Second, 90*time.Second)
					} else {
						// A released its lease, not_stored, before B heard.
						settled(t, b, ns, "control")
						if s, ok := redisEntry(t, a.rdb, ns, "k"); ok {
							t.Errorf("Redis holds k: %+v", s.h)
						}
					}
					noLeaseLeft(t, a.rdb, ns, true)
				})
			}
		})
	}
}

// Outside a load, SettingsFrom gives an LoadSettings that does nothing; an LoadSettings kept
// past its load does nothing either; a load that starts a fill of another
// key (or cache) with its ctx does not share its LoadSettings with that fill.
func TestEntryScope(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns})[0]
	ctx := context.Background()

	e := hybrid.SettingsFrom(ctx)
	e.SetTTL(time.Second)
	e.For("k").DoNotCache()
	var nilEntry *hybrid.LoadSettings
	nilEntry.SetTTL(time.Second)
	nilEntry.For("k").DoNotCache()

	var kept *hybrid.LoadSettings
	var wg sync.WaitGroup
	returned := make(chan struct{})
	outer := func(ctx context.Context, _ string) (string, error) {
		kept = hybrid.SettingsFrom(ctx)
		kept.SetTTL(time.Hour)
		// A fill of another key, started with the load's ctx, has its own.
		inner, err := a.c.GetOrCreate(ctx, "inner", loadWith("i", (*hybrid.LoadSettings).DoNotCache))
		if err != nil {
			return "", err
		}
		wg.Add(1)
		go func() { // once the load returned: no effect
			defer wg.Done()
			<-returned
			kept.DoNotCache()
			kept.For("outer").SetTTL(-1)
		}()
		return "o+" + inner, nil
	}
	v, err := a.c.GetOrCreate(ctx, "outer", outer)
	close(returned)
	if err != nil || v != "o+i" {
		t.Fatalf("got %q, %v", v, err)
	}
	wg.Wait()
	s := waitStored(t, a.rdb, ns, "outer")
	within(t, "outer's PTTL", s.pttl, 59*time.Minute, time.Hour)
	if _, ok := redisEntry(t, a.rdb, ns, "inner"); ok {
		t.Error("Redis holds inner, whose load said DoNotCache")
	}
	if n := a.c.Stats().Load.NotCached; n != 1 {
		t.Errorf("Load.NotCached: got %d, want 1 (inner)", n)
	}
}

// A GetOrCreate miss whose load does not ask for its LoadSettings allocates no
// more than one whose load does, less the LoadSettings: the LoadSettings costs nothing
// unless used.
func TestEntryCostsNothingUnused(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	c := newTestCache[string](t, hybrid.Options{})
	ctx := context.Background()
	i := 0
	miss := func(load func(context.Context, string) (string, error)) float64 {
		return testing.AllocsPerRun(200, func() {
			i++
			if _, err := c.GetOrCreate(ctx, fmt.Sprint("k", i), load); err != nil {
				t.Fatal(err)
			}
		})
	}
	plain := miss(loadTop)
	asks := miss(func(ctx context.Context, _ string) (string, error) {
		hybrid.SettingsFrom(ctx)
		return "v", nil
	})
	if asks <= plain {
		t.Errorf("a load asking for its LoadSettings: %v allocations, one that does not: %v; want more", asks, plain)
	}
	t.Logf("allocations per miss: %v plain, %v with SettingsFrom", plain, asks)
}

func ExampleSettingsFrom() {
	users, err := hybrid.New[User](hybrid.Options{}) // L1 only
	if err != nil {
		panic(err)
	}
	defer users.Close()

	load := func(ctx context.Context, id string) (User, error) {
		fmt.Println("loading", id)
		if id == "guest" {
			hybrid.SettingsFrom(ctx).DoNotCache() // returned, stored nowhere
		} else {
			hybrid.SettingsFrom(ctx).SetLocalTTL(5 * time.Minute)
		}
		return User{ID: id}, nil
	}
	ctx := context.Background()
	for _, id := range []string{"42", "guest", "42", "guest"} {
		if _, err := users.GetOrCreate(ctx, id, load); err != nil {
			panic(err)
		}
	}
	fmt.Println("not cached:", users.Stats().Load.NotCached)
	// Output:
	// loading 42
	// loading guest
	// loading guest
	// not cached: 2
}
