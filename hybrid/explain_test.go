package hybrid_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
)

// explain calls in's Explain with a 5 s deadline and fails t on an error.
func explain(t testing.TB, in *instance, key string) hybrid.Explanation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	x, err := in.c.Explain(ctx, key)
	if err != nil {
		t.Fatalf("%s: Explain(%q): %v", in.name, key, err)
	}
	return x
}

// wantAgreement fails t unless x says agreement, with the states given
// ("" for L1: not present).
func wantAgreement(t testing.TB, who string, x hybrid.Explanation, agreement hybrid.Agreement, l1State, remoteState string) {
	t.Helper()
	if x.Agreement != agreement || x.L1.State != l1State || x.L1.Present != (l1State != "") || x.Remote.State != remoteState || !x.Remote.Checked {
		t.Errorf("%s: got agreement %q (%s), L1 %q present %v, Redis %q checked %v; want %q, L1 %q, Redis %q",
			who, x.Agreement, x.Detail, x.L1.State, x.L1.Present, x.Remote.State, x.Remote.Checked, agreement, l1State, remoteState)
	}
}

// writeNewer writes key's value v straight to Redis, as another instance
// would, written 5ms after written, and sends no message.
func writeNewer(t testing.TB, rdb redis.UniversalClient, ns, key, v string, written time.Time) time.Time {
	t.Helper()
	payload, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	w := written.Add(5 * time.Millisecond).Truncate(time.Millisecond)
	b := envelope.Append(nil, envelope.Header{Codec: codec.IDJSON, Written: w, Expires: w.Add(time.Minute)}, payload)
	if err := rdb.Set(context.Background(), ns+":"+key, b, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestExplainAcrossInstances: a key in L1 and Redis agreeing (by write
// time), on the writer and on a reader; one written by another instance
// whose message was missed (Redis written directly), as L1 older; a
// deleted key and one never written, as nowhere.
func TestExplainAcrossInstances(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, TTL: time.Minute, LocalTTL: 30 * time.Second, FailSafeMaxAge: time.Hour}
	p := newInstances(t, 2, singleNode(nil), o)
	a, b := p[0], p[1]
	if err := a.c.Set(ctx, "k", "v1", hybrid.WithTags("t1")); err != nil {
		t.Fatal(err)
	}
	xa := explain(t, a, "k")
	wantAgreement(t, "A after its Set", xa, hybrid.AgreementSame, "live", "value")
	if !xa.L1.Written.Equal(xa.Remote.Written) || xa.L1.Written.IsZero() {
		t.Errorf("A: L1 written %v, Redis written %v; want one write time", xa.L1.Written, xa.Remote.Written)
	}
	if !slices.Equal(xa.L1.Tags, []string{"t1"}) || !slices.Equal(xa.Remote.Tags, []string{"t1"}) || !slices.Contains(xa.Remote.Flags, "tagged") {
		t.Errorf("A: tags %v in L1, %v and flags %v in Redis; want [t1], [t1] and tagged", xa.L1.Tags, xa.Remote.Tags, xa.Remote.Flags)
	}
	if !near(xa.L1.TTL, 30*time.Second, 2*time.Second) || !near(xa.Remote.TTL, time.Minute, 2*time.Second) || xa.Remote.Size == 0 {
		t.Errorf("A: L1 TTL %v, Redis TTL %v, size %d; want about 30s, about 1m, > 0", xa.L1.TTL, xa.Remote.TTL, xa.Remote.Size)
	}

	wantAgreement(t, "B before a read", explain(t, b, "k"), hybrid.AgreementL1Missing, "", "value")
	fill(t, b, "k", "v1")
	wantAgreement(t, "B after a read", explain(t, b, "k"), hybrid.AgreementSame, "live", "value")

	// Another instance writes Redis, and B misses its message.
	w := writeNewer(t, b.rdb, ns, "k", "v2", xa.Remote.Written)
	xb := explain(t, b, "k")
	wantAgreement(t, "B after a missed write", xb, hybrid.AgreementL1Older, "live", "value")
	if !xb.Remote.Written.Equal(w) || !xb.L1.Written.Equal(xa.Remote.Written) {
		t.Errorf("B: Redis written %v, L1 written %v; want %v and %v", xb.Remote.Written, xb.L1.Written, w, xa.Remote.Written)
	}
	if v, _ := getStr(t, b, "k"); v != "v1" {
		t.Errorf("B: Get after Explain: got %q, want v1 still in L1 (Explain changes nothing)", v)
	}

	if err := a.c.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	xa = explain(t, a, "k")
	wantAgreement(t, "A after its Delete", xa, hybrid.AgreementNowhere, "", "deleted")
	if !slices.Contains(xa.Remote.Flags, "deleted") || !xa.Remote.Present {
		t.Errorf("A: after Delete, Redis flags %v present %v; want a tombstone", xa.Remote.Flags, xa.Remote.Present)
	}
	waitFor(t, 5*time.Second, "B to drop k", func() bool { return !explain(t, b, "k").L1.Present }, nil)
	wantAgreement(t, "B after A's Delete", explain(t, b, "k"), hybrid.AgreementNowhere, "", "deleted")

	xn := explain(t, b, "never")
	wantAgreement(t, "a key never written", xn, hybrid.AgreementNowhere, "", "missing")
	if xn.Remote.Present || xn.Key != "never" || xn.Namespace != ns {
		t.Errorf("a key never written: got %+v", xn)
	}
}

// TestExplainByValue: an L1 entry that keeps no write time (no fail-safe,
// tags or version) is compared with Redis by its encoded value.
func TestExplainByValue(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	p := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns, TTL: time.Minute})
	a := p[0]
	setStr(t, a, "k", "v1")
	x := explain(t, a, "k")
	wantAgreement(t, "after Set", x, hybrid.AgreementSame, "live", "value")
	if !x.L1.Written.IsZero() || !strings.Contains(x.Detail, "encoding") {
		t.Errorf("after Set: L1 written %v, detail %q; want no write time, compared by encoding", x.L1.Written, x.Detail)
	}
	writeNewer(t, a.rdb, ns, "k", "v2", x.Remote.Written)
	wantAgreement(t, "after a missed write", explain(t, a, "k"), hybrid.AgreementDiffer, "live", "value")
	if err := a.rdb.Del(context.Background(), ns+":k").Err(); err != nil {
		t.Fatal(err)
	}
	wantAgreement(t, "after Redis lost it", explain(t, a, "k"), hybrid.AgreementRemoteMissing, "live", "missing")
}

// TestExplainStale: a value past its lifetime, kept by fail-safe, is
// stale in both tiers, and the same write.
func TestExplainStale(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, TTL: time.Minute, FailSafeMaxAge: time.Hour}
	a := newInstances(t, 1, singleNode(nil), o)[0]
	if err := a.c.Set(context.Background(), "k", "v1", hybrid.WithTTL(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var x hybrid.Explanation
	waitFor(t, 5*time.Second, "k to go stale", func() bool {
		x = explain(t, a, "k")
		return x.L1.State == "stale" && x.Remote.State == "stale"
	}, func() string { return x.Detail })
	wantAgreement(t, "stale", x, hybrid.AgreementSame, "stale", "stale")
	if x.L1.TTL > 0 || x.Remote.TTL > 0 || x.L1.L1TTL < 30*time.Minute {
		t.Errorf("stale: TTL %v in L1 (kept %v), %v in Redis; want <= 0, kept for about the fail-safe hour", x.L1.TTL, x.L1.L1TTL, x.Remote.TTL)
	}
}

// TestExplainChangesNothing: Explain counts no hit or miss, stores
// nothing in L1 (a key found only in Redis stays out of it) and loads
// nothing.
func TestExplainChangesNothing(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, TTL: time.Minute, FailSafeMaxAge: time.Hour}
	p := newInstances(t, 2, singleNode(nil), o)
	a, b := p[0], p[1]
	setStr(t, a, "both", "v")
	setStr(t, a, "remote-only", "v")
	waitStat(t, b, "Invalidations.Applied", statReceived, 2) // A's messages land before, not during, the explains
	fill(t, b, "both", "v")
	before := b.c.Stats()
	calls := b.remote.calls()
	for _, key := range []string{"both", "remote-only", "nowhere", "both"} {
		explain(t, b, key)
	}
	if after := b.c.Stats(); !reflect.DeepEqual(after, before) {
		t.Errorf("Stats changed by Explain:\nbefore %+v\nafter  %+v", before, after)
	}
	got := b.remote.calls()
	for _, c := range []*remoteCalls{&got, &calls} { // reads aside
		c.Get, c.GetBatch, c.GetBatchKeys, c.GetRecord = 0, 0, 0, 0
	}
	if got != calls {
		t.Errorf("Explain wrote to Redis: calls %+v, want %+v", got, calls)
	}
	if x := explain(t, b, "remote-only"); x.L1.Present {
		t.Errorf("remote-only: in L1 after Explain: %+v", x.L1)
	}
}

// TestExplainLease: a load lease held by another instance's running load
// is reported.
func TestExplainLease(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, TTL: time.Minute, LoadLease: 5 * time.Second}
	p := newInstances(t, 2, singleNode(nil), o)
	a, b := p[0], p[1]
	l := newBlockingLoad("v")
	l.started = make(chan struct{}, 1)
	res := goGetOrCreate(context.Background(), a.c, "k", l.load)
	<-l.started
	x := explain(t, b, "k")
	close(l.release)
	if r := <-res; r.err != nil {
		t.Fatal(r.err)
	}
	if !x.Remote.LeaseHeld || x.Agreement != hybrid.AgreementNowhere {
		t.Errorf("during A's load: lease held %v, agreement %q; want true, nowhere", x.Remote.LeaseHeld, x.Agreement)
	}
	waitStored(t, a.rdb, ns, "k")
	if x := explain(t, b, "k"); x.Remote.LeaseHeld {
		t.Errorf("after A's load: lease still held")
	}
}

// TestExplainDeletedByTag: a value in Redis that a DeleteByTag since its
// write deletes is reported as cleared, naming the tag.
func TestExplainDeletedByTag(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	ns := redistest.Prefix(t)
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns, TTL: time.Minute})[0]
	if err := a.c.Set(ctx, "k", "v", hybrid.WithTags("t1", "t2")); err != nil {
		t.Fatal(err)
	}
	if err := a.c.DeleteByTag(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	x := explain(t, a, "k")
	wantAgreement(t, "after DeleteByTag", x, hybrid.AgreementNowhere, "", "cleared")
	if x.Remote.DeletedBy != "tag:t2" || !x.Remote.Present {
		t.Errorf("after DeleteByTag: deleted by %q, present %v; want tag:t2, true", x.Remote.DeletedBy, x.Remote.Present)
	}
}

// TestExplainBadInput: a bad key gets the error every call gives it, a
// closed cache ErrClosed, and a shared tier that cannot be reached an
// error, with what L1 holds.
func TestExplainBadInput(t *testing.T) {
	ctx := context.Background()
	c := newTestCache[string](t, hybrid.Options{Namespace: "explain", MaxKeyBytes: 16})
	for _, tc := range []struct {
		key  string
		want error
	}{{"", hybrid.ErrEmptyKey}, {strings.Repeat("k", 17), hybrid.ErrKeyTooLong}, {"\x00log", hybrid.ErrReservedKey}} {
		if _, err := c.Explain(ctx, tc.key); !errors.Is(err, tc.want) {
			t.Errorf("Explain(%q): got %v, want %v", tc.key, err, tc.want)
		}
	}
	if err := c.Set(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	x, err := c.Explain(ctx, "k")
	if err != nil || x.Agreement != hybrid.AgreementUnknown || x.Remote.Checked || x.L1.State != "live" {
		t.Errorf("without a Remote: got %+v, %v; want L1 live, Redis not checked, unknown", x, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Explain(cancelled, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Explain with a cancelled ctx: got %v, want context.Canceled", err)
	}
	c.Close()
	if _, err := c.Explain(ctx, "k"); !errors.Is(err, hybrid.ErrClosed) {
		t.Errorf("Explain after Close: got %v, want ErrClosed", err)
	}

	ro := &redis.Options{Addr: deadAddr(t)}
	shortTimeouts(ro)
	rdb := redis.NewClient(ro)
	t.Cleanup(func() { rdb.Close() })
	down := newTestCache[string](t, hybrid.Options{Namespace: "explain", Remote: l2.New(rdb, l2.Options{})})
	x, err = down.Explain(ctx, "k")
	if err == nil || x.Remote.Checked || x.Remote.Error == "" || x.Agreement != hybrid.AgreementUnknown {
		t.Errorf("Redis down: got %+v, %v; want an error, Redis not checked, unknown", x, err)
	}
}
