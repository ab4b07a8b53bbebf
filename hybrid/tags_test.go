package hybrid_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

func setTagged(t testing.TB, c *hybrid.Cache[string], key, v string, tags ...string) {
	t.Helper()
	if err := c.Set(context.Background(), key, v, hybrid.WithTags(tags...)); err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
}

func TestDeleteByTagTwoInstances(t *testing.T) {
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			s := newSharedTier(t)
			o := s.options()
			o.Secret = m.secret
			a := newTestCache[string](t, o)
			b := newTestCache[string](t, o)
			ctx := context.Background()
			setTagged(t, a, "p1", "one", "products", "page:1")
			setTagged(t, a, "p2", "two", "products")
			setTagged(t, a, "u1", "user", "users")
			s.flush(t)
			for _, k := range []string{"p1", "p2", "u1"} {
				if _, ok := getString(t, b, k); !ok {
					t.Fatalf("b: %s missing before DeleteByTag", k)
				}
			}
			if err := a.DeleteByTag(ctx, "products"); err != nil {
				t.Fatal(err)
			}
			s.flush(t)
			for _, c := range []*hybrid.Cache[string]{a, b} {
				for _, k := range []string{"p1", "p2"} {
					if v, ok := getString(t, c, k); ok {
						t.Errorf("%s after DeleteByTag(products): got %q, want a miss", k, v)
					}
				}
				if v, ok := getString(t, c, "u1"); !ok || v != "user" {
					t.Errorf("u1 (other tag): got %q %v, want kept", v, ok)
				}
			}
			// A new instance, which never saw the message, reads the tag
			// record from the shared tier.
			fresh := newTestCache[string](t, o)
			if v, ok := getString(t, fresh, "p1"); ok {
				t.Errorf("new instance: p1 = %q, want a miss", v)
			}
			// GetOrCreate loads anew, and a value written after the delete
			// with the same tag stays.
			time.Sleep(2 * time.Millisecond) // the delete's millisecond has passed
			if v, err := b.GetOrCreate(ctx, "p1", (&counter{value: "one v2"}).load, hybrid.WithTags("products")); err != nil || v != "one v2" {
				t.Fatalf("reload: got %q %v", v, err)
			}
			waitFor(t, 5*time.Second, "the reload's write-back", func() bool { v, ok := s.stored(t, "p1"); return ok && v == "one v2" }, nil)
			if v, ok := getString(t, fresh, "p1"); !ok || v != "one v2" {
				t.Errorf("new instance after the reload: got %q %v, want one v2", v, ok)
			}
		})
	}
}

// A fill that read a tagged value before a DeleteByTag elsewhere does not
// keep it in L1.
func TestDeleteByTagDuringFill(t *testing.T) {
	s := newSharedTier(t)
	a := newTestCache[string](t, s.options())
	b := newTestCache[string](t, s.options())
	ctx := context.Background()
	setTagged(t, a, "k", "old", "t")
	s.flush(t)
	s.remote.SetAfterGet(func(key string) {
		if key == testNS+":k" {
			s.remote.SetAfterGet(nil)
			if err := a.DeleteByTag(ctx, "t"); err != nil {
				t.Error(err)
			}
			s.flush(t)
		}
	})
	// The fill may answer old (read before the delete) or load anew.
	if v, err := b.GetOrCreate(ctx, "k", (&counter{value: "new"}).load); err != nil || (v != "old" && v != "new") {
		t.Fatalf("fill: got %q %v", v, err)
	}
	if v, ok := getString(t, b, "k"); ok && v == "old" {
		t.Errorf("after the delete: b serves %q", v)
	}
}

// Without the bus, knowledge of tags could go stale: losing it drops what
// is known, and the record is read again.
func TestDeleteByTagAfterBusLoss(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.StrictLoss = true // the record is written behind the log's back: only a flush sees it
	a := newTestCache[string](t, o)
	b := newTestCache[string](t, o)
	setTagged(t, a, "k", "v", "t")
	if _, ok := getString(t, b, "k"); !ok { // b learns tag t: never deleted
		t.Fatal("b: k missing")
	}
	// A DeleteByTag whose message is lost: its record is written, no one
	// hears of it.
	record := binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixMilli()))
	s.remote.Put(testNS+":\x00tag:t", record, time.Hour)
	if v, ok := getString(t, b, "k"); !ok || v != "v" {
		t.Fatalf("b before the loss: got %q %v, want v from L1", v, ok)
	}
	s.bus.SimulateLoss()
	s.flush(t)
	if v, ok := getString(t, b, "k"); ok {
		t.Errorf("b after the bus loss: got %q, want a miss (the tag record was written)", v)
	}
}

func TestTagsInBatchesAndAbsences(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	ctx := context.Background()
	load := func(_ context.Context, keys []string) (map[string]string, error) {
		return map[string]string{"a": "A", "b": "B"}, nil
	}
	tags := []hybrid.EntryOption{hybrid.WithTags("page"), hybrid.WithNegativeTTL(time.Minute)}
	if m, err := c.GetOrCreateMany(ctx, []string{"a", "b", "none"}, load, tags...); err != nil || len(m) != 2 {
		t.Fatalf("batch: %v %v", m, err)
	}
	if _, err := c.GetOrCreate(ctx, "none", neverLoad(t)); !errors.Is(err, hybrid.ErrNotFound) {
		t.Fatalf("none: got %v, want the remembered absence", err)
	}
	if err := c.DeleteByTag(ctx, "page"); err != nil {
		t.Fatal(err)
	}
	l := &counter{value: "fresh"}
	for _, k := range []string{"a", "b", "none"} {
		if v, err := c.GetOrCreate(ctx, k, l.load); err != nil || v != "fresh" {
			t.Errorf("%s after DeleteByTag: got %q %v, want a fresh load", k, v, err)
		}
	}
	if got := l.calls.Load(); got != 3 {
		t.Errorf("loads: got %d, want 3", got)
	}
}

func TestTagErrors(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	ctx := context.Background()
	if err := c.DeleteByTag(ctx, ""); err == nil {
		t.Error("DeleteByTag(\"\"): no error")
	}
	if err := c.Set(ctx, "\x00tag:x", "v"); !errors.Is(err, hybrid.ErrReservedKey) {
		t.Errorf("Set of a NUL key: got %v, want ErrReservedKey", err)
	}
	if err := c.Set(ctx, "k", "v", hybrid.WithTags("t"), hybrid.WithTTL(30*24*time.Hour)); err == nil {
		t.Error("a tagged value living 30 days: no error")
	}
	if err := c.Set(ctx, "k", "v", hybrid.WithTags("t"), hybrid.WithTTL(time.Hour)); err != nil {
		t.Errorf("a tagged value living an hour: %v", err)
	}
	// A Remote that cannot read the tag record: the value is a miss.
	d := newTestCache[string](t, s.options())
	s.remote.SetBeforeGet(func(key string) {
		if key == testNS+":\x00tag:t" {
			s.remote.SetBeforeGet(nil)
			s.remote.FailWith(errors.New("down"))
		}
	})
	if v, ok := getString(t, d, "k"); ok {
		t.Errorf("tag record unreadable: got %q, want a miss", v)
	}
	s.remote.FailWith(nil)
	if v, ok := getString(t, d, "k"); !ok || v != "v" {
		t.Errorf("tag record readable again: got %q %v, want v", v, ok)
	}
}

// TestIntegrationDeleteByTag: DeleteByTag on real Redis and on the
// cluster.
func TestIntegrationDeleteByTag(t *testing.T) {
	for _, name := range []string{"single", "cluster"} {
		t.Run(name, func(t *testing.T) {
			newClient := singleNode(nil)
			if name == "cluster" {
				newClient = clusterNodes(t)
			}
			ns := redistest.Prefix(t)
			p := newInstances(t, 2, newClient, hybrid.Options{Namespace: ns, Secret: []byte("s")})
			a, b := p[0], p[1]
			ctx := context.Background()
			for _, k := range []string{"x", "y", "z"} {
				if err := a.c.Set(ctx, k, k, hybrid.WithTags("g")); err != nil {
					t.Fatal(err)
				}
			}
			waitStat(t, b, "Invalidations.Applied", statReceived, 3)
			fill(t, b, "x", "x")
			if err := a.c.DeleteByTag(ctx, "g"); err != nil {
				t.Fatal(err)
			}
			waitStat(t, b, "Invalidations.Applied", statReceived, 4)
			for _, in := range p {
				for _, k := range []string{"x", "y", "z"} {
					if v, ok := getStr(t, in, k); ok {
						t.Errorf("%s: %s = %q after DeleteByTag, want a miss", in.name, k, v)
					}
				}
			}
			fresh := newInstance(t, "C", newClient, hybrid.Options{Namespace: ns}, invalidate.Options{})
			if v, ok := getStr(t, fresh, "y"); ok {
				t.Errorf("new instance: y = %q, want a miss", v)
			}
		})
	}
}

// TestClearRecordReadOncePerInstance: the clear record is the built-in
// tag every value carries. An instance reads it at its first shared-tier
// hit and then knows it: from a signed Clear's message, or by reading it
// again after an unsigned one or a bus loss. Peers see a Clear as
// invalidation "clear", and an Expire as "expire".
func TestClearRecordReadOncePerInstance(t *testing.T) {
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			s := newSharedTier(t)
			var reads atomic.Int64
			s.remote.SetBeforeGet(func(key string) {
				if key == testNS+":\x00clear" {
					reads.Add(1)
				}
			})
			var mu sync.Mutex
			var events []string
			o := s.options()
			o.Secret = m.secret
			a := newTestCache[string](t, o)
			o.Events.Invalidated = func(op hybrid.Op, keys []string) {
				mu.Lock()
				defer mu.Unlock()
				events = append(events, fmt.Sprint(op, " ", keys))
			}
			b := newTestCache[string](t, o)
			ctx := context.Background()
			wantReads := func(when string, want int64) {
				t.Helper()
				if got := reads.Load(); got != want {
					t.Errorf("%s: clear record read %d times, want %d", when, got, want)
				}
			}

			set(t, a, "k1", "v")
			set(t, a, "k2", "v")
			s.flush(t)
			fillFromRemote(t, b, "k1", "v")
			fillFromRemote(t, b, "k2", "v")
			wantReads("two hits on B", 2) // and A's first write, which makes sure the record exists

			if err := a.Clear(ctx); err != nil {
				t.Fatal(err)
			}
			set(t, a, "k1", "w")
			s.flush(t)
			fillFromRemote(t, b, "k1", "w")
			if _, ok := getString(t, b, "k2"); ok {
				t.Error("B: k2 after Clear: got a hit, want a miss")
			}
			signed := int64(0)
			if m.secret == nil {
				signed = 1 // an unsigned message carries no record: read again
			}
			wantReads("after a Clear", 2+signed)

			s.bus.SimulateLoss()
			s.flush(t)
			b.DropLocal("k1") // a loss keeps L1 (replayed): read k1 from the Remote
			fillFromRemote(t, b, "k1", "w")
			wantReads("after a bus loss", 3+signed)

			if err := a.Expire(ctx, "k1"); err != nil {
				t.Fatal(err)
			}
			s.flush(t)
			mu.Lock()
			defer mu.Unlock()
			if want := []string{"set [k1]", "set [k2]", "clear []", "set [k1]", "expire [k1]"}; !slices.Equal(events, want) {
				t.Errorf("B's invalidation events: %q, want %q", events, want)
			}
		})
	}
}

// TestClearRecordUnreadable: a value whose clear record cannot be read is
// a miss, as with a tag record: a stale value is never risked.
func TestClearRecordUnreadable(t *testing.T) {
	s := newSharedTier(t)
	a := newTestCache[string](t, s.options())
	set(t, a, "k", "v")
	b := newTestCache[string](t, s.options())
	s.remote.SetBeforeGet(func(key string) {
		if key == testNS+":\x00clear" {
			s.remote.SetBeforeGet(nil)
			s.remote.FailWith(errors.New("down"))
		}
	})
	if v, ok := getString(t, b, "k"); ok {
		t.Errorf("clear record unreadable: got %q, want a miss", v)
	}
	s.remote.FailWith(nil)
	if v, ok := getString(t, b, "k"); !ok || v != "v" {
		t.Errorf("clear record readable again: got %q %v, want v", v, ok)
	}
}

// clearFailRemote is an l2.Store whose reads of the Clear record fail
// while fail is set.
type clearFailRemote struct {
	*l2.Store
	fail atomic.Bool
}

func (r *clearFailRemote) Get(ctx context.Context, keys []string) ([][]byte, error) {
	if r.fail.Load() && slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, ":\x00clear") }) {
		return nil, errors.New("clearFailRemote: injected read failure")
	}
	return r.Store.Get(ctx, keys)
}

// TestSetUnknownClearRecord: a Set whose Clear record the instance does
// not know and cannot read writes nothing and returns an error. Written
// anyway, the value would count as deleted for good once another instance
// found the record missing and made it (as after a restart that came back
// empty): a Set that returned nil, read by no one. Once the record can be
// read, the Set is written and read everywhere.
func TestSetUnknownClearRecord(t *testing.T) {
	ns := redistest.Prefix(t)
	newClient := singleNode(nil)
	rdb := newClient(t)
	r := &clearFailRemote{Store: l2.New(rdb, l2.Options{})}
	a := newTestCache[string](t, hybrid.Options{Namespace: ns, Remote: r})
	b := newTestCache[string](t, hybrid.Options{Namespace: ns, Remote: l2.New(newClient(t), l2.Options{})})
	ctx := context.Background()
	r.fail.Store(true)
	err := a.Set(ctx, "k", "v1")
	if err == nil || !strings.Contains(err.Error(), "Clear record") {
		t.Fatalf("Set with the Clear record unreadable: %v, want an error naming the Clear record", err)
	}
	if n, err := rdb.Exists(ctx, ns+":k").Result(); err != nil || n != 0 {
		t.Fatalf("after the refused Set, Redis holds the key: %d, %v; want nothing written", n, err)
	}
	if _, ok, err := a.Get(ctx, "k"); err != nil || ok {
		t.Errorf("A: Get after the refused Set: %v, %v; want a miss (L1 does not keep what was not written)", ok, err)
	}
	r.fail.Store(false)
	if err := a.Set(ctx, "k", "v2"); err != nil {
		t.Fatalf("Set with the Clear record readable: %v", err)
	}
	if v, ok, err := b.Get(ctx, "k"); err != nil || !ok || v != "v2" {
		t.Errorf("B: Get = %q, %v, %v; want %q", v, ok, err, "v2")
	}
}
