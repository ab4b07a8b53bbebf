package hybrid_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

// holdGet makes in's next Redis GET of key (after Redis answered, so the
// caller holds what Redis had then) signal reached and wait for release.
func holdGet(t *testing.T, in *instance, ns, key string) (reached chan struct{}, release func()) {
	reached = make(chan struct{})
	held, release := gate(t)
	var armed atomic.Bool
	armed.Store(true)
	in.remote.setAfterGet(func(k string) {
		if k == ns+":"+key && armed.CompareAndSwap(true, false) {
			close(reached)
			<-held
		}
	})
	return reached, release
}

type strResult struct {
	v   string
	err error
}

// goGet runs in's GetOrCreate of key in a goroutine and delivers its result.
func goGet(in *instance, key string, load func(context.Context, string) (string, error)) <-chan strResult {
	ch := make(chan strResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		v, err := in.c.GetOrCreate(ctx, key, load)
		ch <- strResult{v, err}
	}()
	return ch
}

// TestIntegrationNoStaleFill is promise 3 on real Redis: B's GET of k has
// returned the old value and is held there while A changes k and B
// receives A's message. Released, B's caller may get the old value, but B's
// L1 does not keep it: the next Get answers the new state.
func TestIntegrationNoStaleFill(t *testing.T) {
	tests := []struct {
		name   string
		secret []byte
		del    bool
	}{
		{"drop, set", nil, false},
		{"swap, set", []byte("integration-secret"), false},
		{"drop, delete", nil, true},
		{"swap, delete", []byte("integration-secret"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			ns := redistest.Prefix(t)
			p := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns, Secret: tt.secret})
			a, b := p[0], p[1]
			setStr(t, a, "k", "old")
			waitStat(t, b, "Received", statReceived, 1)

			reached, release := holdGet(t, b, ns, "k")
			res := goGet(b, "k", neverLoad(t))
			select {
			case <-reached:
			case <-time.After(5 * time.Second):
				t.Fatal("B's GET of k did not happen")
			}
			if tt.del {
				if err := a.c.Delete(ctx, "k"); err != nil {
					t.Fatal(err)
				}
			} else {
				setStr(t, a, "k", "new")
			}
			waitStat(t, b, "Received", statReceived, 2) // B has applied A's change
			release()
			var r strResult
			select {
			case r = <-res:
			case <-time.After(5 * time.Second):
				t.Fatal("B's GetOrCreate did not return after release")
			}
			if r.err != nil {
				t.Fatalf("B: held GetOrCreate: %v", r.err)
			}
			t.Logf("the held caller got %q", r.v)
			b.remote.setAfterGet(nil)
			if st := b.c.Stats(); st.FillsDiscarded < 1 {
				t.Errorf("B: Stats.FillsDiscarded got %d, want at least 1", st.FillsDiscarded)
			}
			v, ok := getStr(t, b, "k")
			switch {
			case tt.del && ok:
				t.Errorf("B: Get after A's Delete: got %q, want a miss (the held fill's old value must not be in L1)", v)
			case !tt.del && (!ok || v != "new"):
				t.Errorf("B: Get after A's Set: got %q, %v, want \"new\" (the held fill's old value must not be in L1)", v, ok)
			}
		})
	}
}

// TestIntegrationNoStaleJoin: a GetOrCreate that begins after a change of
// k is known on its instance (its own Delete returned, or a peer's message
// was applied) must not be answered with a value read before that change.
// It does not share the result of a fill that was already reading k: that
// fill's value "may be returned to its caller" (promise 3), not to callers
// who arrive after the invalidation (promises 1 and 4).
func TestIntegrationNoStaleJoin(t *testing.T) {
	tests := []struct {
		name string
		own  bool // B deletes k itself; else A sets it and B gets the message
	}{
		{"own delete", true},
		{"peer set", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			ns := redistest.Prefix(t)
			p := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns})
			a, b := p[0], p[1]
			setStr(t, a, "k", "old")
			waitStat(t, b, "Received", statReceived, 1)

			reached, release := holdGet(t, b, ns, "k")
			first := goGet(b, "k", neverLoad(t))
			<-reached // B's first fill holds "old", read from Redis
			want := "new"
			load := neverLoad(t)
			if tt.own {
				if err := b.c.Delete(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				want = "loaded"
				load = func(context.Context, string) (string, error) { return "loaded", nil }
			} else {
				setStr(t, a, "k", "new")
				waitStat(t, b, "Received", statReceived, 2)
			}
			// The change is known on B. A GetOrCreate starting now...
			misses := b.c.Stats().L1Misses
			second := goGet(b, "k", load)
			waitFor(t, 5*time.Second, "B's second GetOrCreate to miss L1", func() bool { return b.c.Stats().L1Misses > misses }, nil)
			release()
			r1, r2 := <-first, <-second
			b.remote.setAfterGet(nil)
			if r1.err != nil || r2.err != nil {
				t.Fatalf("B: GetOrCreate errors: %v, %v", r1.err, r2.err)
			}
			t.Logf("held caller got %q; caller that began after the change got %q", r1.v, r2.v)
			if r2.v != want {
				t.Errorf("B: GetOrCreate begun after the change got %q, want %q: it joined the fill that had read k before the change", r2.v, want)
			}
		})
	}
}

// gatedBus holds back the messages of its cache while held, as a slow
// network or a busy process would.
type gatedBus struct {
	hybrid.Bus
	mu   sync.Mutex
	gate chan struct{} // nil: messages pass
}

func (b *gatedBus) hold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gate = make(chan struct{})
}

func (b *gatedBus) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gate != nil {
		close(b.gate)
		b.gate = nil
	}
}

func (b *gatedBus) Subscribe(ctx context.Context, channel string, onMessage func([]byte), onLoss func()) (func(), error) {
	return b.Bus.Subscribe(ctx, channel, func(msg []byte) {
		b.mu.Lock()
		g := b.gate
		b.mu.Unlock()
		if g != nil {
			<-g
		}
		onMessage(msg)
	}, onLoss)
}

// TestIntegrationNoStaleWriteBack: a fill whose load read the source of
// truth before a change must not write that value to Redis after the
// change, even when the change's messages reach the filling instance late:
// otherwise every instance serves it, after every message has arrived,
// until its TTL ends (promise 4), although the newest write said otherwise.
//
// The scenario, in cache-aside terms: C misses k and loads v1 from the
// database, slowly. Meanwhile the database gets v2, A sets k = v2 in the
// cache, and then k is invalidated (A's Delete). C's messages are
// delayed, so its fill still trusts its token and writes v1 back with SET
// NX, which succeeds because the Delete left the key absent.
func TestIntegrationNoStaleWriteBack(t *testing.T) {
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := context.Background()
			ns := redistest.Prefix(t)
			o := hybrid.Options{Namespace: ns, Secret: m.secret}
			newClient := singleNode(nil)
			a := newInstance(t, "A", newClient, o, invalidate.Options{})
			slow := &gatedBus{}
			c := newInstanceWrapped(t, "C", newClient(t), o, invalidate.Options{}, func(b hybrid.Bus) hybrid.Bus { slow.Bus = b; return slow })
			t.Cleanup(slow.release)
			raw := newClient(t)

			var source atomic.Value // the database
			source.Store("v1")
			setStr(t, a, "k", "v1")
			if err := a.c.Delete(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			waitStat(t, c, "Received", statReceived, 2)

			reached := make(chan struct{})
			held, release := gate(t)
			res := goGet(c, "k", func(context.Context, string) (string, error) {
				v := source.Load().(string)
				close(reached)
				<-held
				return v, nil
			})
			<-reached // C's load has read v1 from the database
			slow.hold()
			source.Store("v2")
			setStr(t, a, "k", "v2")
			if err := a.c.Delete(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			release()
			if r := <-res; r.err != nil || r.v != "v1" {
				t.Fatalf("C: GetOrCreate: got %q, %v, want \"v1\" (its load began before the change)", r.v, r.err)
			}
			// Let C's write-back happen, if it is going to, before its
			// messages arrive.
			deadline := time.Now().Add(time.Second)
			for c.remote.calls().SetIfAbsent+c.remote.calls().CompareAndSet == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			slow.release()
			waitStat(t, c, "Received", statReceived, 4) // A's Set and Delete: every message is in

			if v, ok := redisValue(t, raw, ns, "k"); ok && v == "v1" {
				t.Errorf("Redis holds %q after A's Set of v2 and Delete: C's fill wrote back a value loaded before the change", v)
			}
			for _, in := range []*instance{a, c} {
				if v, ok := getStr(t, in, "k"); ok && v == "v1" {
					t.Errorf("%s: Get after every message arrived: got %q, a value older than the last Set (v2); want a miss or \"v2\"", in.name, v)
				}
			}
			t.Logf("C: SetIfAbsent calls %d, CompareAndSet calls %d, FillsDiscarded %d", c.remote.calls().SetIfAbsent, c.remote.calls().CompareAndSet, c.c.Stats().FillsDiscarded)
		})
	}
}

// gatedCodec is codec.JSON that, while armed, holds the first Unmarshal of
// the payload it was armed with until released.
type gatedCodec struct {
	codec.JSON
	mu      sync.Mutex
	payload string
	reached chan struct{}
	release chan struct{}
}

func (c *gatedCodec) arm(t *testing.T, payload string) (reached chan struct{}, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.payload = payload
	c.reached = make(chan struct{})
	c.release, release = gate(t)
	return c.reached, release
}

func (c *gatedCodec) Unmarshal(data []byte, v any) error {
	c.mu.Lock()
	var reached, release chan struct{}
	if c.reached != nil && string(data) == c.payload {
		reached, release = c.reached, c.release
		c.reached = nil
	}
	c.mu.Unlock()
	if reached != nil {
		close(reached)
		<-release
	}
	return c.JSON.Unmarshal(data, v)
}

// TestIntegrationSwapAfterOwnSet: a value carried by a peer's message must
// not replace a newer value that this instance's own Set stored meanwhile.
// B is swapping in A's v2 (its message arrived before B's own write began,
// so no write of B's was pending) when B's Set of v3 runs to completion;
// the swap then lands on top of v3. B keeps serving v2 although its Set of
// v3 returned nil (promise 1) and Redis holds v3 with no message left to
// correct it (promise 2), until LocalTTL.
func TestIntegrationSwapAfterOwnSet(t *testing.T) {
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, Secret: []byte("integration-secret")}
	newClient := singleNode(nil)
	a := newInstance(t, "A", newClient, o, invalidate.Options{})
	gc := &gatedCodec{}
	ob := o
	ob.Codec = gc
	b := newInstance(t, "B", newClient, ob, invalidate.Options{})
	raw := newClient(t)

	setStr(t, a, "k", "v1")
	waitStat(t, b, "Received", statReceived, 1)
	fill(t, b, "k", "v1")

	reached, release := gc.arm(t, `"v2"`)
	setStr(t, a, "k", "v2")
	select {
	case <-reached: // B's bus goroutine is in the swap of v2, past mayReplace
	case <-time.After(5 * time.Second):
		t.Fatal("B did not start swapping in v2")
	}
	setStr(t, b, "k", "v3") // returns nil: B's L1 holds v3
	release()
	waitStat(t, b, "OwnIgnored", statOwnIgnored, 1) // B's own v3 message is back: nothing else will come
	waitStat(t, a, "Received", statReceived, 1)

	if v, ok := redisValue(t, raw, ns, "k"); !ok || v != "v3" {
		t.Fatalf("Redis holds %q, %v, want \"v3\"", v, ok)
	}
	if v, ok := getStr(t, a, "k"); !ok || v != "v3" {
		t.Errorf("A: Get: got %q, %v, want \"v3\"", v, ok)
	}
	if v, ok := getStr(t, b, "k"); !ok || v != "v3" {
		t.Errorf("B: Get after its own Set of v3 returned and every message arrived: got %q, %v, want \"v3\" (Redis holds v3; Swapped %d)", v, ok, b.c.Stats().Swapped)
	}
}
