package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// TestIntegrationBatch: GetOrCreateMany on one Redis costs one round trip
// for the reads, one load for the misses and one for the write back.
func TestIntegrationBatch(t *testing.T) { testBatch(t, singleNode(nil)) }

// TestIntegrationClusterBatch is TestIntegrationBatch on a Redis Cluster
// (HYBRID_REDIS_CLUSTER): the keys spread over slots, and nothing fails with
// CROSSSLOT.
func TestIntegrationClusterBatch(t *testing.T) { testBatch(t, clusterNodes(t)) }

func keysOf(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return keys
}

func testBatch(t *testing.T, newClient clientFactory) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	p := newInstances(t, 2, newClient, hybrid.Options{Namespace: ns})
	a, b := p[0], p[1]
	raw := newClient(t)

	// call runs a.GetOrCreateMany and checks the result against want.
	call := func(t *testing.T, keys []string, l *batchLoad, want map[string]string) {
		t.Helper()
		got, err := a.c.GetOrCreateMany(ctx, keys, l.load)
		if err != nil {
			t.Fatalf("GetOrCreateMany: %v", err)
		}
		if len(got) != len(want) {
			t.Errorf("GetOrCreateMany returned %d values, want %d", len(got), len(want))
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("GetOrCreateMany: [%s] = %q, want %q", k, got[k], w)
			}
		}
	}
	// waitWriteBack waits for the write back that a fill makes after its
	// callers have their values, and checks it was one SetManyIfAbsent of n keys.
	waitWriteBack := func(t *testing.T, before remoteCalls, n int64) {
		t.Helper()
		waitFor(t, 5*time.Second, "the batch write back", func() bool { return a.remote.calls().SetManyIfAbsent > before.SetManyIfAbsent }, nil)
		c := a.remote.calls()
		if c.SetManyIfAbsent-before.SetManyIfAbsent != 1 || c.SetManyIfAbsentKey-before.SetManyIfAbsentKey != n || c.SetIfAbsent != before.SetIfAbsent || c.Set != before.Set {
			t.Errorf("write back: %d SetManyIfAbsent of %d keys, %d SetIfAbsent, %d Set; want 1 of %d, 0, 0",
				c.SetManyIfAbsent-before.SetManyIfAbsent, c.SetManyIfAbsentKey-before.SetManyIfAbsentKey, c.SetIfAbsent-before.SetIfAbsent, c.Set-before.Set, n)
		}
	}
	wantLoads := func(t *testing.T, l *batchLoad, want ...[]string) {
		t.Helper()
		got := l.snapshot()
		for _, w := range want {
			slices.Sort(w)
		}
		if !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("load calls: got %q, want %q", got, want)
		}
	}
	loaded := func(keys ...string) map[string]string {
		m := make(map[string]string, len(keys))
		for _, k := range keys {
			m[k] = "loaded:" + k
		}
		return m
	}

	cold := keysOf("c", 50)
	if cc, ok := raw.(*redis.ClusterClient); ok {
		masters := map[string]bool{}
		for _, k := range cold {
			m, err := cc.MasterForKey(ctx, ns+":"+k)
			if err != nil {
				t.Fatalf("MasterForKey: %v", err)
			}
			masters[m.Options().Addr] = true
		}
		t.Logf("the page's 50 keys live on %d masters", len(masters))
		if len(masters) < 2 {
			t.Fatalf("the page's keys all live on one master: the test does not cross slots")
		}
	}
	t.Run("cold", func(t *testing.T) {
		l := &batchLoad{}
		before := a.remote.calls()
		call(t, cold, l, loaded(cold...))
		wantLoads(t, l, slices.Clone(cold))
		c := a.remote.calls()
		if c.GetMany-before.GetMany != 1 || c.GetManyKeys-before.GetManyKeys != 50 || c.Get != before.Get {
			t.Errorf("reads: %d GetMany of %d keys, %d Get; want 1 of 50, 0", c.GetMany-before.GetMany, c.GetManyKeys-before.GetManyKeys, c.Get-before.Get)
		}
		waitWriteBack(t, before, 50)
		for _, k := range cold {
			if v, ok := redisValue(t, raw, ns, k); !ok || v != "loaded:"+k {
				t.Errorf("Redis holds %q, %v for %s, want %q", v, ok, k, "loaded:"+k)
			}
		}
	})

	t.Run("warm", func(t *testing.T) {
		l := &batchLoad{}
		before := a.remote.calls()
		call(t, cold, l, loaded(cold...))
		wantLoads(t, l)
		if got := a.remote.calls().total() - before.total(); got != 0 {
			t.Errorf("Redis calls for a warm page: got %d, want 0", got)
		}
	})

	t.Run("half in Redis", func(t *testing.T) {
		keys := keysOf("h", 50)
		want := loaded(keys[25:]...)
		recv := a.c.Stats().Received
		for _, k := range keys[:25] {
			setStr(t, b, k, "b:"+k)
			want[k] = "b:" + k
		}
		waitStat(t, a, "Received", statReceived, recv+25)
		l := &batchLoad{}
		before := a.remote.calls()
		call(t, keys, l, want)
		wantLoads(t, l, slices.Clone(keys[25:]))
		c := a.remote.calls()
		if c.GetMany-before.GetMany != 1 || c.GetManyKeys-before.GetManyKeys != 50 || c.Get != before.Get {
			t.Errorf("reads: %d GetMany of %d keys, %d Get; want 1 of 50, 0", c.GetMany-before.GetMany, c.GetManyKeys-before.GetManyKeys, c.Get-before.Get)
		}
		waitWriteBack(t, before, 25)
		for _, k := range keys {
			if v, ok := redisValue(t, raw, ns, k); !ok || v != want[k] {
				t.Errorf("Redis holds %q, %v for %s, want %q", v, ok, k, want[k])
			}
		}
	})

	t.Run("duplicates and an empty key", func(t *testing.T) {
		l := &batchLoad{}
		before := a.remote.calls()
		got, err := a.c.GetOrCreateMany(ctx, []string{"d0", "d1", "d0", "", "d2", "d1"}, l.load)
		if !errors.Is(err, hybrid.ErrEmptyKey) {
			t.Errorf("GetOrCreateMany with an empty key: got error %v, want one wrapping ErrEmptyKey", err)
		}
		want := loaded("d0", "d1", "d2")
		if len(got) != len(want) {
			t.Errorf("got %d values %v, want %v", len(got), got, want)
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("[%s] = %q, want %q", k, got[k], w)
			}
		}
		wantLoads(t, l, []string{"d0", "d1", "d2"})
		c := a.remote.calls()
		if c.GetMany-before.GetMany != 1 || c.GetManyKeys-before.GetManyKeys != 3 {
			t.Errorf("reads: %d GetMany of %d keys, want 1 of 3", c.GetMany-before.GetMany, c.GetManyKeys-before.GetManyKeys)
		}
		waitWriteBack(t, before, 3)
	})

	t.Run("GetOrCreate joins the batch", func(t *testing.T) {
		keys := keysOf("j", 10)
		block, unblock := gate(t)
		l := &batchLoad{block: block, reached: make(chan struct{})}
		batch := make(chan error, 1)
		var page map[string]string
		go func() {
			var err error
			page, err = a.c.GetOrCreateMany(ctx, keys, l.load)
			batch <- err
		}()
		<-l.reached
		var singles atomic.Int64
		misses, gets := a.c.Stats().L1Misses, a.remote.calls().Get
		single := goGet(a, "j03", func(context.Context, string) (string, error) {
			singles.Add(1)
			return "single", nil
		})
		waitFor(t, 5*time.Second, "the GetOrCreate to miss L1", func() bool { return a.c.Stats().L1Misses > misses }, nil)
		select {
		case r := <-single:
			t.Fatalf("GetOrCreate(j03) returned %q, %v while the batch load was still running: it did not join", r.v, r.err)
		default:
		}
		unblock()
		if err := <-batch; err != nil {
			t.Fatalf("GetOrCreateMany: %v", err)
		}
		r := <-single
		if r.err != nil || r.v != "loaded:j03" {
			t.Errorf("GetOrCreate(j03): got %q, %v, want the batch's \"loaded:j03\"", r.v, r.err)
		}
		if n := singles.Load(); n != 0 {
			t.Errorf("GetOrCreate(j03)'s own load ran %d time(s), want 0", n)
		}
		if got := a.remote.calls().Get - gets; got != 0 {
			t.Errorf("GetOrCreate(j03) read Redis %d time(s), want 0", got)
		}
		wantLoads(t, l, slices.Clone(keys))
		if len(page) != len(keys) {
			t.Errorf("GetOrCreateMany returned %d values, want %d", len(page), len(keys))
		}
	})

	t.Run("the batch joins a GetOrCreate", func(t *testing.T) {
		reached := make(chan struct{})
		held, release := gate(t)
		single := goGet(a, "x", func(context.Context, string) (string, error) {
			close(reached)
			<-held
			return "single:x", nil
		})
		<-reached
		l := &batchLoad{}
		batch := make(chan map[string]string, 1)
		go func() {
			page, err := a.c.GetOrCreateMany(ctx, []string{"x", "y"}, l.load)
			if err != nil {
				t.Errorf("GetOrCreateMany: %v", err)
			}
			batch <- page
		}()
		waitFor(t, 5*time.Second, "the batch load", func() bool { return len(l.snapshot()) > 0 }, nil)
		release()
		page := <-batch
		if r := <-single; r.err != nil || r.v != "single:x" {
			t.Errorf("GetOrCreate(x): got %q, %v", r.v, r.err)
		}
		wantLoads(t, l, []string{"y"})
		if page["x"] != "single:x" || page["y"] != "loaded:y" || len(page) != 2 {
			t.Errorf("GetOrCreateMany(x, y): got %v, want x from the GetOrCreate it joined, y loaded", page)
		}
	})

	for _, in := range p {
		if st := in.c.Stats(); st.L2Errors != 0 || st.DecodeErrors != 0 {
			t.Errorf("%s: L2Errors %d, DecodeErrors %d; want 0, 0", in.name, st.L2Errors, st.DecodeErrors)
		}
	}
}
