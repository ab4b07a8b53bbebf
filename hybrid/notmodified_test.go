package hybrid_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// etagLoad is a load function that stores "v1" under the version
// "etag-1", and, called to replace a value of that version, answers
// ErrNotModified.
type etagLoad struct {
	t           *testing.T
	calls, nm   atomic.Int64
	staleValues chan string // receives the stale value of each refresh; may be nil
}

func (l *etagLoad) load(ctx context.Context, key string) (string, error) {
	l.calls.Add(1)
	if s, ok := hybrid.StaleFrom[string](ctx, key); ok {
		if l.staleValues != nil {
			l.staleValues <- s.Value
		}
		if s.Version == "etag-1" && !s.Written.IsZero() {
			l.nm.Add(1)
			return "", hybrid.ErrNotModified
		}
	}
	if err := hybrid.SetVersion(ctx, key, "etag-1"); err != nil {
		l.t.Errorf("SetVersion: %v", err)
	}
	return "v1", nil
}

// stored returns what Redis holds for key and its physical lifetime.
func (in *instance) stored(t *testing.T, ns, key string) ([]byte, time.Duration) {
	t.Helper()
	ctx := context.Background()
	b, err := in.rdb.Get(ctx, ns+":"+key).Bytes()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	ttl, err := in.rdb.PTTL(ctx, ns+":"+key).Result()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return b, ttl
}

// sameBut reports whether a and b are equal but for the logical expiry of
// their envelopes, and returns the expiries.
func sameBut(a, b []byte) (ok bool, expA, expB int64) {
	at, n := envelope.ExpiresAt, 8
	if len(a) != len(b) || len(a) < at+n {
		return false, 0, 0
	}
	ok = bytes.Equal(a[:at], b[:at]) && bytes.Equal(a[at+n:], b[at+n:])
	return ok, int64(binary.BigEndian.Uint64(a[at:])), int64(binary.BigEndian.Uint64(b[at:]))
}

// TestNotModifiedEagerRefresh: an eager refresh whose load answers
// ErrNotModified extends the value in L1, and in Redis by rewriting only
// its expiry (8 bytes sent, the rest of the value as it was), and the
// other instance that holds it extends its copy, without a read or a load.
func TestNotModifiedEagerRefresh(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	const ttl = time.Second
	o := hybrid.Options{Namespace: ns, TTL: ttl, LocalTTL: ttl, EagerRefresh: 0.3}
	p := newInstances(t, 2, singleNode(nil), o)
	a, b := p[0], p[1]
	l := &etagLoad{t: t, staleValues: make(chan string, 1)}
	if v, err := a.c.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
		t.Fatalf("A: GetOrCreate: got %q, %v", v, err)
	}
	waitStored(t, a.rdb, ns, "k")
	fill(t, b, "k", "v1")
	before, pttl := a.stored(t, ns, "k")
	gone := time.Now().Add(pttl) // when Redis would drop it
	eb, _, _ := b.c.GetEntry(ctx, "k")
	ebExpires := time.Now().Add(eb.RemoteTTL)
	sent, bGets := a.remote.valueBytes.Load(), b.remote.calls().Get

	time.Sleep(ttl * 4 / 10) // past the refresh point, within the lifetime
	if v, err := a.c.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
		t.Fatalf("A: GetOrCreate due for a refresh: got %q, %v", v, err)
	}
	waitStat(t, a, "Load.NotModified", func(s hybrid.Stats) uint64 { return s.Load.NotModified }, 1)
	// The refresh counts the extension before it touches Redis.
	waitFor(t, 5*time.Second, "A's touch of k in Redis", func() bool {
		now, _ := a.stored(t, ns, "k")
		return !bytes.Equal(now, before)
	}, nil)
	if got := <-l.staleValues; got != "v1" {
		t.Errorf("the refresh's load got stale value %q, want v1", got)
	}
	if l.calls.Load() != 2 || l.nm.Load() != 1 {
		t.Errorf("load called %d times, %d not modified; want 2 and 1", l.calls.Load(), l.nm.Load())
	}

	after, pttl2 := a.stored(t, ns, "k")
	gone2 := time.Now().Add(pttl2)
	same, exp, exp2 := sameBut(before, after)
	if !same {
		t.Errorf("Redis holds\n% x\nwant\n% x\nbut for the expiry", after, before)
	}
	if moved := gone2.Sub(gone); exp2-exp < int64(ttl/time.Millisecond)*3/10 || moved < ttl*3/10 {
		t.Errorf("Redis: logical expiry moved by %dms, physical by %v; want both moved by the time since the write", exp2-exp, moved)
	}
	if got := a.remote.valueBytes.Load() - sent; got != 8 {
		t.Errorf("A sent %d bytes of values since the first write, want 8 (the new expiry)", got)
	}
	if got := a.remote.touches.Load(); got != 1 {
		t.Errorf("A made %d touches, want 1", got)
	}

	waitStat(t, b, "Invalidations.Extended", func(s hybrid.Stats) uint64 { return s.Invalidations.Extended }, 1)
	eb2, ok, err := b.c.GetEntry(ctx, "k")
	if err != nil || !ok || eb2.Tier != hybrid.TierL1 || eb2.Value != "v1" || eb2.Version != "etag-1" {
		t.Fatalf("B: GetEntry: got %+v, %v, %v; want v1 from L1", eb2, ok, err)
	}
	if !eb2.Written.Equal(eb.Written) {
		t.Errorf("B: Written %v after the extension, %v before; want it unchanged", eb2.Written, eb.Written)
	}
	if moved := time.Now().Add(eb2.RemoteTTL).Sub(ebExpires); moved < ttl*3/10 {
		t.Errorf("B: shared-tier expiry moved by %v, want by the time since the write", moved)
	}
	if got := b.remote.calls().Get - bGets; got != 0 {
		t.Errorf("B read Redis %d times for the extension, want 0", got)
	}
	if st := a.c.Stats().Load; st.Errors != 0 {
		t.Errorf("A: Load.Errors %d, want 0: not modified is no error", st.Errors)
	}
}

// TestNotModifiedAfterExpiry: a value past its lifetime that fail-safe
// keeps is given to the load of the fill that replaces it; its not
// modified makes it live again on both instances, and in Redis.
func TestNotModifiedAfterExpiry(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	const ttl = 300 * time.Millisecond
	o := hybrid.Options{Namespace: ns, TTL: ttl, LocalTTL: ttl, FailSafeMaxAge: time.Minute}
	for _, secret := range [][]byte{nil, []byte("s")} {
		o.Secret = secret
		p := newInstances(t, 2, singleNode(nil), o)
		a, b := p[0], p[1]
		l := &etagLoad{t: t}
		if v, err := a.c.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Fatalf("A: GetOrCreate: got %q, %v", v, err)
		}
		waitStored(t, a.rdb, ns, "k")
		fill(t, b, "k", "v1")
		before, _ := a.stored(t, ns, "k")
		time.Sleep(ttl + 100*time.Millisecond)
		if _, ok, _ := b.c.GetEntry(ctx, "k"); ok {
			t.Fatal("B: GetEntry past the lifetime found a live value")
		}

		if v, err := a.c.GetOrCreate(ctx, "k", l.load); err != nil || v != "v1" {
			t.Fatalf("A: GetOrCreate past the lifetime: got %q, %v", v, err)
		}
		if l.nm.Load() != 1 || a.c.Stats().Load.NotModified != 1 {
			t.Fatalf("secret %q: %d not-modified loads, Stats.Load.NotModified %d; want 1 and 1", secret, l.nm.Load(), a.c.Stats().Load.NotModified)
		}
		ea, ok, err := a.c.GetEntry(ctx, "k")
		if err != nil || !ok || ea.Stale || ea.Tier != hybrid.TierL1 || ea.RemoteTTL <= 0 {
			t.Errorf("A: GetEntry: got %+v, %v, %v; want a live value from L1", ea, ok, err)
		}
		waitFor(t, 5*time.Second, "Redis to hold the extended value", func() bool {
			after, _ := a.stored(t, ns, "k")
			same, exp, exp2 := sameBut(before, after)
			return same && exp2 > exp
		}, nil)
		waitStat(t, b, "Invalidations.Extended", func(s hybrid.Stats) uint64 { return s.Invalidations.Extended }, 1)
		eb, ok, err := b.c.GetEntry(ctx, "k")
		if err != nil || !ok || eb.Stale || eb.Tier != hybrid.TierL1 || eb.Value != "v1" {
			t.Errorf("B: GetEntry: got %+v, %v, %v; want the live value from L1", eb, ok, err)
		}
		ns = redistest.Prefix(t)
		o.Namespace = ns
	}
}

// TestNotModifiedWithoutStale: ErrNotModified from a load with no value to
// keep is a load error, and a version that is not one is refused.
func TestNotModifiedWithoutStale(t *testing.T) {
	ctx := context.Background()
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	_, err := c.GetOrCreate(ctx, "k", func(ctx context.Context, key string) (string, error) {
		if _, ok := hybrid.StaleFrom[string](ctx, key); ok {
			t.Error("StaleFrom in a first load: ok")
		}
		for _, bad := range []struct{ key, version string }{{key, ""}, {key, string(make([]byte, 256))}, {"other", "v"}} {
			if err := hybrid.SetVersion(ctx, bad.key, bad.version); err == nil {
				t.Errorf("SetVersion(%q, %d bytes): no error", bad.key, len(bad.version))
			}
		}
		return "", hybrid.ErrNotModified
	})
	if !errors.Is(err, hybrid.ErrNotModified) {
		t.Errorf("GetOrCreate: got %v, want an error wrapping ErrNotModified", err)
	}
	if err := hybrid.SetVersion(ctx, "k", "v"); err == nil {
		t.Error("SetVersion outside a load: no error")
	}
	if st := c.Stats().Load; st.NotModified != 0 || st.Errors != 0 {
		t.Errorf("Stats.Load: NotModified %d, Errors %d; want 0 and 0", st.NotModified, st.Errors)
	}
}

// TestNotModifiedBatch: a batch refresh says not modified for a key by
// returning its stale value under the stale version; the other keys it
// returns are written as usual.
func TestNotModifiedBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := newSharedTier(t)
		o := s.options()
		o.TTL, o.LocalTTL, o.EagerRefresh = 10*time.Second, 10*time.Second, 0.5
		c := newTestCache[string](t, o)
		var round atomic.Int64
		load := func(ctx context.Context, keys []string) (map[string]string, error) {
			m := make(map[string]string)
			for _, k := range keys {
				v, version := k+"1", "v1"
				if st, ok := hybrid.StaleFrom[string](ctx, k); ok && k == "a" {
					v, version = st.Value, st.Version // not modified
				} else if ok {
					v, version = k+"2", "v2"
				}
				if err := hybrid.SetVersion(ctx, k, version); err != nil {
					t.Errorf("SetVersion: %v", err)
				}
				m[k] = v
			}
			round.Add(1)
			return m, nil
		}
		if _, err := c.GetOrCreateMany(ctx, []string{"a", "b"}, load); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		written := s.remote.Calls().Written
		time.Sleep(6 * time.Second) // past the refresh point
		if _, err := c.GetOrCreateMany(ctx, []string{"a", "b"}, load); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := c.Stats().Load.NotModified; n != 1 || round.Load() != 2 {
			t.Errorf("Stats.Load.NotModified %d after %d loads, want 1 after 2", n, round.Load())
		}
		calls := s.remote.Calls()
		if calls.Touches != 1 || calls.Written-written != 2 {
			t.Errorf("the refresh made %d touches and %d writes, want 1 touch (a) and 2 writes (a's touch, b's value)", calls.Touches, calls.Written-written)
		}
		for k, want := range map[string]string{"a": "a1", "b": "b2"} {
			e, ok, err := c.GetEntry(ctx, k)
			if err != nil || !ok || e.Value != want || e.RemoteTTL < 9*time.Second {
				t.Errorf("GetEntry(%q): got %+v, %v, %v; want %s with a new lifetime", k, e, ok, err, want)
			}
		}
	})
}
