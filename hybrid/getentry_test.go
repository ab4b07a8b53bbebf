package hybrid_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// near reports whether d is within slack of want.
func near(d, want, slack time.Duration) bool { return d > want-slack && d <= want+slack }

// TestGetEntryTiers: GetEntry tells which tier answered and what the
// cache knows of the value, the same on the instance that wrote it (L1)
// and on another (the shared tier, then its L1).
func TestGetEntryTiers(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, TTL: time.Minute, LocalTTL: 30 * time.Second, FailSafeMaxAge: time.Hour}
	p := newInstances(t, 2, singleNode(nil), o)
	a, b := p[0], p[1]
	before := time.Now().Truncate(time.Millisecond)
	v, err := a.c.GetOrCreate(ctx, "k", func(ctx context.Context, key string) (string, error) {
		if err := hybrid.SetVersion(ctx, key, "etag-1"); err != nil {
			t.Errorf("SetVersion: %v", err)
		}
		return "v1", nil
	}, hybrid.WithTags("t1"))
	if err != nil || v != "v1" {
		t.Fatalf("A: GetOrCreate: got %q, %v", v, err)
	}
	after := time.Now()
	waitStored(t, a.rdb, ns, "k")

	check := func(who string, e hybrid.Entry[string], tier hybrid.Tier, local time.Duration) {
		t.Helper()
		if e.Value != "v1" || e.Tier != tier || e.Stale || e.Version != "etag-1" || !slices.Equal(e.Tags, []string{"t1"}) {
			t.Errorf("%s: got %+v, want v1 from %v, live, version etag-1, tags [t1]", who, e, tier)
		}
		if e.Written.Before(before) || e.Written.After(after) {
			t.Errorf("%s: Written %v, want between %v and %v", who, e.Written, before, after)
		}
		if !near(e.RemoteTTL, time.Minute, 2*time.Second) {
			t.Errorf("%s: RemoteTTL %v, want about a minute", who, e.RemoteTTL)
		}
		if !near(e.LocalTTL, local, 2*time.Second) {
			t.Errorf("%s: LocalTTL %v, want about %v", who, e.LocalTTL, local)
		}
	}
	ea, ok, err := a.c.GetEntry(ctx, "k")
	if err != nil || !ok {
		t.Fatalf("A: GetEntry: ok %v, %v", ok, err)
	}
	check("A", ea, hybrid.TierL1, 30*time.Second)

	eb, ok, err := b.c.GetEntry(ctx, "k")
	if err != nil || !ok {
		t.Fatalf("B: GetEntry: ok %v, %v", ok, err)
	}
	check("B, first read", eb, hybrid.TierL2, 30*time.Second)
	if !eb.Written.Equal(ea.Written) {
		t.Errorf("B: Written %v, A: %v; want one write time", eb.Written, ea.Written)
	}
	eb, ok, err = b.c.GetEntry(ctx, "k")
	if err != nil || !ok {
		t.Fatalf("B: second GetEntry: ok %v, %v", ok, err)
	}
	check("B, second read", eb, hybrid.TierL1, 30*time.Second)

	if _, ok, err := b.c.GetEntry(ctx, "missing"); ok || err != nil {
		t.Errorf("B: GetEntry of a missing key: ok %v, %v; want a miss", ok, err)
	}
}

// TestGetEntryPlain: an L1 entry without a schedule, tags or version
// keeps its value alone: its L1 lifetime is known, its write time and
// shared-tier lifetime are not; read from the shared tier, they are.
func TestGetEntryPlain(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	p := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns, TTL: time.Minute, LocalTTL: 20 * time.Second})
	a, b := p[0], p[1]
	setStr(t, a, "k", "v")
	e, ok, err := a.c.GetEntry(ctx, "k")
	if err != nil || !ok || e.Tier != hybrid.TierL1 || e.Value != "v" {
		t.Fatalf("A: GetEntry: got %+v, %v, %v; want v from L1", e, ok, err)
	}
	if !near(e.LocalTTL, 20*time.Second, 2*time.Second) || !e.Written.IsZero() || e.RemoteTTL != 0 {
		t.Errorf("A: got LocalTTL %v, Written %v, RemoteTTL %v; want about 20s, unknown, unknown", e.LocalTTL, e.Written, e.RemoteTTL)
	}
	e, ok, err = b.c.GetEntry(ctx, "k")
	if err != nil || !ok || e.Tier != hybrid.TierL2 {
		t.Fatalf("B: GetEntry: got %+v, %v, %v; want v from L2", e, ok, err)
	}
	if e.Written.IsZero() || !near(e.RemoteTTL, time.Minute, 2*time.Second) || !near(e.LocalTTL, 20*time.Second, 2*time.Second) {
		t.Errorf("B: got Written %v, RemoteTTL %v, LocalTTL %v; want known, about 1m, about 20s", e.Written, e.RemoteTTL, e.LocalTTL)
	}
}

// TestGetEntrySkipL1Write: a value read from the shared tier with
// SkipL1Write is not stored in L1, and GetEntry reports its LocalTTL as 0,
// as for any entry L1 does not hold; without the flag, the lifetime L1
// gave it.
func TestGetEntrySkipL1Write(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	p := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns, TTL: time.Minute, LocalTTL: 30 * time.Second})
	a, b := p[0], p[1]
	setStr(t, a, "k", "v")
	e, ok, err := b.c.GetEntry(ctx, "k", hybrid.WithSkip(hybrid.SkipL1Write))
	if err != nil || !ok || e.Tier != hybrid.TierL2 || e.Value != "v" {
		t.Fatalf("B: GetEntry with SkipL1Write: got %+v, %v, %v; want v from L2", e, ok, err)
	}
	if e.LocalTTL != 0 || !near(e.RemoteTTL, time.Minute, 2*time.Second) {
		t.Errorf("B: GetEntry with SkipL1Write: got LocalTTL %v, RemoteTTL %v; want 0 (not in L1), about 1m", e.LocalTTL, e.RemoteTTL)
	}
	if v, ok, err := b.c.Get(ctx, "k", hybrid.WithSkip(hybrid.SkipRemoteRead)); ok || err != nil {
		t.Errorf("B: L1 holds %q, %v, %v after a read with SkipL1Write; want nothing", v, ok, err)
	}
	e, ok, err = b.c.GetEntry(ctx, "k")
	if err != nil || !ok || e.Tier != hybrid.TierL2 || !near(e.LocalTTL, 30*time.Second, 2*time.Second) {
		t.Errorf("B: GetEntry: got %+v, %v, %v; want v from L2, LocalTTL about 30s", e, ok, err)
	}
}

// TestGetAllowStale: past a value's lifetime, a read without a load
// misses, unless WithAllowStale: then it returns the value fail-safe keeps,
// marked stale, from L1 on the instance that holds it and from the shared
// tier on another. A live value is returned as live.
func TestGetAllowStale(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	const ttl = 300 * time.Millisecond
	p := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns, TTL: ttl, LocalTTL: ttl, FailSafeMaxAge: time.Minute})
	a, b := p[0], p[1]
	setStr(t, a, "k", "old")
	time.Sleep(ttl + 100*time.Millisecond)

	for _, in := range p {
		if v, ok, err := in.c.Get(ctx, "k"); ok || err != nil {
			t.Errorf("%s: Get past the lifetime: got %q, %v, %v; want a miss", in.name, v, ok, err)
		}
		if e, ok, err := in.c.GetEntry(ctx, "k"); ok || err != nil {
			t.Errorf("%s: GetEntry past the lifetime: got %+v, %v, %v; want a miss", in.name, e, ok, err)
		}
	}
	for _, c := range []struct {
		in   *instance
		tier hybrid.Tier
	}{{a, hybrid.TierL1}, {b, hybrid.TierL2}} {
		e, ok, err := c.in.c.GetEntry(ctx, "k", hybrid.WithAllowStale())
		if err != nil || !ok || e.Value != "old" || !e.Stale || e.Tier != c.tier || e.RemoteTTL >= 0 {
			t.Errorf("%s: GetEntry with WithAllowStale: got %+v, %v, %v; want old, stale, from %v, RemoteTTL negative", c.in.name, e, ok, err, c.tier)
		}
		if c.tier == hybrid.TierL1 && e.LocalTTL >= 0 {
			t.Errorf("%s: LocalTTL %v of a stale L1 entry, want negative", c.in.name, e.LocalTTL)
		}
		if v, ok, err := c.in.c.Get(ctx, "k", hybrid.WithAllowStale()); err != nil || !ok || v != "old" {
			t.Errorf("%s: Get with WithAllowStale: got %q, %v, %v; want old", c.in.name, v, ok, err)
		}
		if n := c.in.c.Stats().Load.StaleReads; n != 2 {
			t.Errorf("%s: Stats.Load.StaleReads %d, want 2", c.in.name, n)
		}
	}

	setStr(t, a, "k", "new")
	waitStat(t, b, "Invalidations.Applied", statReceived, 1)
	for _, in := range p {
		if e, ok, err := in.c.GetEntry(ctx, "k", hybrid.WithAllowStale()); err != nil || !ok || e.Value != "new" || e.Stale {
			t.Errorf("%s: GetEntry with WithAllowStale over a live value: got %+v, %v, %v; want new, live", in.name, e, ok, err)
		}
	}
}
