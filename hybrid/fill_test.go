package hybrid_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

// TestStampede: 100 callers miss on one key at once; load runs once and
// every caller gets its value.
func TestStampede(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		l := newBlockingLoad("v")
		const n = 100
		results := make([]<-chan result, n)
		for i := range n {
			results[i] = goGetOrCreate(t.Context(), c, "k", l.load)
		}
		synctest.Wait() // every caller has joined and waits; load waits for release
		if got := l.calls.Load(); got != 1 {
			t.Fatalf("load started %d times with %d callers waiting, want 1", got, n)
		}
		close(l.release)
		for i, ch := range results {
			if r := <-ch; r.err != nil || r.v != "v" {
				t.Errorf("caller %d: got %q, %v, want \"v\", nil", i, r.v, r.err)
			}
		}
		synctest.Wait() // the fill has written the Remote
		if got := l.calls.Load(); got != 1 {
			t.Errorf("load ran %d times, want 1", got)
		}
		if c := s.remote.Calls(); c.Get != 3 || c.IfAbsent != 1 {
			t.Errorf("Remote calls: got %+v, want three Gets (the key, its sequence counter before the load, the clear record before the first write) and one IfAbsent write", c)
		}
		if st := c.Stats(); st.Load.Calls != 1 || st.L1.Misses != n || st.L2.Misses != 1 {
			t.Errorf("Stats: got Load.Calls %d, L1.Misses %d, L2.Misses %d, want 1, %d, 1", st.Load.Calls, st.L1.Misses, st.L2.Misses, n)
		}
	})
}

// TestLeaderCancel: the caller that started the fill leaves; it gets
// context.Canceled at once, the load goes on with a live ctx and the others
// get its value.
func TestLeaderCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		l := newBlockingLoad("v")
		leaderCtx, cancel := context.WithCancel(t.Context())
		leader := goGetOrCreate(leaderCtx, c, "k", l.load)
		synctest.Wait() // the leader's load is running
		var others []<-chan result
		for range 10 {
			others = append(others, goGetOrCreate(t.Context(), c, "k", l.load))
		}
		synctest.Wait()

		cancel()
		synctest.Wait()
		select {
		case r := <-leader:
			if !errors.Is(r.err, context.Canceled) {
				t.Errorf("leader: got %q, %v, want %v", r.v, r.err, context.Canceled)
			}
		default:
			t.Fatal("the cancelled leader is still waiting for the load")
		}

		close(l.release)
		for i, ch := range others {
			if r := <-ch; r.err != nil || r.v != "v" {
				t.Errorf("waiter %d: got %q, %v, want \"v\", nil", i, r.v, r.err)
			}
		}
		if err := l.loadCtxErr(); err != nil {
			t.Errorf("the load's ctx ended with the leader's: %v, want it alive", err)
		}
		if got := l.calls.Load(); got != 1 {
			t.Errorf("load ran %d times, want 1", got)
		}
		synctest.Wait()
		if v, ok := s.stored(t, "k"); !ok || v != "v" {
			t.Errorf("Remote holds %q (ok %v), want \"v\"", v, ok)
		}
	})
}

// TestWaiterDeadline: a waiter with a short deadline leaves with
// DeadlineExceeded when it passes; the load goes on for the others.
func TestWaiterDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		c := newTestCache[string](t, s.options())
		l := newBlockingLoad("v")
		leader := goGetOrCreate(t.Context(), c, "k", l.load)
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		short := goGetOrCreate(ctx, c, "k", l.load)

		r := <-short // time moves on only when everything else waits
		if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Errorf("waiter with a 1s deadline: got %q, %v, want %v", r.v, r.err, context.DeadlineExceeded)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("waiter returned after %v, want 1s", d)
		}
		synctest.Wait()
		select {
		case r := <-leader:
			t.Fatalf("leader returned %q, %v while the load was still running", r.v, r.err)
		default:
		}
		close(l.release)
		if r := <-leader; r.err != nil || r.v != "v" {
			t.Errorf("leader: got %q, %v, want \"v\", nil", r.v, r.err)
		}
		if err := l.loadCtxErr(); err != nil {
			t.Errorf("the load's ctx ended with the waiter's deadline: %v", err)
		}
		if got := l.calls.Load(); got != 1 {
			t.Errorf("load ran %d times, want 1", got)
		}
	})
}

func TestLoadErrorNotCached(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	ctx := context.Background()
	errDB := errors.New("db down")
	l := &counter{err: errDB}
	for i := range 2 {
		_, err := c.GetOrCreate(ctx, "k", l.load)
		if !errors.Is(err, errDB) {
			t.Fatalf("GetOrCreate #%d: got %v, want an error wrapping %v", i, err, errDB)
		}
	}
	if got := l.calls.Load(); got != 2 {
		t.Errorf("load ran %d times for two calls, want 2 (errors are not cached)", got)
	}
	if st := c.Stats(); st.Load.Errors != 2 || st.Load.Calls != 2 {
		t.Errorf("Stats: got Load.Calls %d, Load.Errors %d, want 2, 2", st.Load.Calls, st.Load.Errors)
	}
	if got := s.valueKeys(); len(got) != 0 {
		t.Errorf("Remote keys after failed loads: got %q, want none", got)
	}
	l.err, l.value = nil, "ok"
	if v, err := c.GetOrCreate(ctx, "k", l.load); err != nil || v != "ok" {
		t.Errorf("GetOrCreate after the error cleared: got %q, %v, want \"ok\", nil", v, err)
	}
}

func TestNegativeCaching(t *testing.T) {
	eachCtx(t, func(t *testing.T, ctx context.Context) {
		s := newSharedTier(t)
		o := s.options()
		o.NegativeTTL = time.Minute
		a := newTestCache[string](t, o)
		var m missingRow
		for i := range 3 {
			if _, err := a.GetOrCreate(ctx, "k", m.load); !errors.Is(err, hybrid.ErrNotFound) {
				t.Fatalf("call %d: got err %v, want ErrNotFound", i, err)
			}
		}
		if got := m.calls.Load(); got != 1 {
			t.Errorf("load calls: got %d, want 1 (the absence is remembered)", got)
		}
		if st := a.Stats(); st.Load.Errors != 0 {
			t.Errorf("Load.Errors: got %d, want 0 (not found is an answer, not an error)", st.Load.Errors)
		}
		if _, ok, err := a.Get(ctx, "k"); ok || err != nil {
			t.Errorf("Get of a remembered absence: got ok %v err %v, want false nil", ok, err)
		}
		// The shared tier remembers it too: a second instance does not load.
		s.waitStored(t, "k") // the fill writes back after its callers have their answer
		b, found := s.remote.Peek(testNS + ":k")
		if !found {
			t.Fatal("the shared tier holds no absence marker")
		}
		if h, _, err := envelope.Decode(b); err != nil || h.Flags&envelope.FlagAbsent == 0 {
			t.Fatalf("stored marker: flags %v err %v, want FlagAbsent", h.Flags, err)
		}
		other := newTestCache[string](t, o)
		if _, err := other.GetOrCreate(ctx, "k", m.load); !errors.Is(err, hybrid.ErrNotFound) {
			t.Errorf("second instance: got err %v, want ErrNotFound", err)
		}
		if got := m.calls.Load(); got != 1 {
			t.Errorf("load calls after the second instance: got %d, want 1", got)
		}
		// A Set replaces the absence everywhere.
		if err := a.Set(ctx, "k", "now it exists"); err != nil {
			t.Fatal(err)
		}
		s.flush(t)
		if v, err := other.GetOrCreate(ctx, "k", m.load); err != nil || v != "now it exists" {
			t.Errorf("after Set: got %q %v, want the set value", v, err)
		}
	})
}

func TestNotFoundWithoutNegativeTTLIsNotRemembered(t *testing.T) {
	s := newSharedTier(t)
	a := newTestCache[string](t, s.options())
	var m missingRow
	for range 2 {
		if _, err := a.GetOrCreate(context.Background(), "k", m.load); !errors.Is(err, hybrid.ErrNotFound) {
			t.Fatalf("got err %v, want ErrNotFound", err)
		}
	}
	if got := m.calls.Load(); got != 2 {
		t.Errorf("load calls: got %d, want 2", got)
	}
	if _, found := s.remote.Peek(testNS + ":k"); found {
		t.Error("an absence was stored with NegativeTTL 0")
	}
}

// TestNoStaleFill is the third promise: a fill that was reading the shared
// tier, or loading, when an invalidation of its key arrived may return its
// value but does not store it in L1.
func TestNoStaleFill(t *testing.T) {
	tests := []struct {
		name   string
		secret []byte
		load   bool // hold the load instead of the shared-tier read
		del    bool // A deletes instead of setting
	}{
		{"read held, set", nil, false, false},
		{"read held, set carrying the value", []byte("s3cret"), false, false},
		{"read held, delete", nil, false, true},
		{"load held, set", nil, true, false},
		{"load held, set carrying the value", []byte("s3cret"), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSharedTier(t)
			p := newPeers(t, s, 2, hybrid.Options{Secret: tt.secret})
			a, b := p[0], p[1]
			ctx := context.Background()
			reached, release := make(chan struct{}), make(chan struct{})
			load := neverLoad(t)
			if tt.load {
				load = func(context.Context, string) (string, error) {
					close(reached)
					<-release
					return "loaded", nil
				}
			} else {
				set(t, a, "k", "old")
				s.flush(t)
				var armed atomic.Bool
				armed.Store(true)
				s.remote.SetAfterGet(func(key string) {
					if key == "ns:k" && armed.CompareAndSwap(true, false) {
						close(reached)
						<-release
					}
				})
			}
			res := goGetOrCreate(ctx, b, "k", load)
			<-reached // b's read has returned the old state, or its load runs
			setOrDelete(t, a, "k", tt.del)
			s.flush(t) // b has applied A's message
			close(release)
			r := <-res
			if r.err != nil {
				t.Fatalf("b: GetOrCreate: %v", r.err)
			}
			if st := b.Stats(); st.L1.FillsDiscarded < 1 {
				t.Errorf("b: L1.FillsDiscarded got %d, want at least 1", st.L1.FillsDiscarded)
			}
			v, ok := getString(t, b, "k")
			switch {
			case tt.del && ok:
				t.Errorf("b: Get after A's Delete: got %q, want a miss", v)
			case !tt.del && (!ok || v != "new"):
				t.Errorf("b: Get after A's Set: got %q, %v, want \"new\" (GetOrCreate had returned %q)", v, ok, r.v)
			}
		})
	}
}

// TestNoStaleFillOnBusLoss: a fill that was reading when the bus reported a
// loss is not stored either.
func TestNoStaleFillOnBusLoss(t *testing.T) {
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	s.remote.Put("ns:k", envelopeOf(t, "v", time.Hour), time.Hour)
	reached, release := make(chan struct{}), make(chan struct{})
	s.remote.SetAfterGet(func(key string) {
		if key == "ns:k" { // not the key's sequence counter, read with it
			close(reached)
			<-release
		}
	})
	res := goGetOrCreate(context.Background(), c, "k", neverLoad(t))
	<-reached
	s.bus.SimulateLoss()
	s.flush(t)
	s.remote.SetAfterGet(nil)
	close(release)
	if r := <-res; r.err != nil || r.v != "v" {
		t.Fatalf("GetOrCreate: got %q, %v, want \"v\"", r.v, r.err)
	}
	// The loss is counted once its replay (on a worker) is done.
	waitFor(t, 5*time.Second, "the replay", func() bool { return c.Stats().Bus.Losses == 1 }, nil)
	if st := c.Stats(); st.L1.FillsDiscarded != 1 {
		t.Errorf("Stats: got L1.FillsDiscarded %d, want 1", st.L1.FillsDiscarded)
	}
	gets := s.remote.Calls().Get
	getString(t, c, "k")
	if got := s.remote.Calls().Get - gets; got != 1 {
		t.Errorf("Get after the discarded fill read the Remote %d times, want 1", got)
	}
}

// TestCorruptReplaceKeepsConcurrentWrite: a fill that found a value that
// does not decode replaces it; a Set by another instance between the fill's
// read and its write must not be overwritten (a fill "never overwrites
// another instance's write"), or that instance serves a value the shared
// tier no longer holds (the convergence promise).
func TestCorruptReplaceKeepsConcurrentWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		p := newPeers(t, s, 2, hybrid.Options{})
		a, b := p[0], p[1]
		s.remote.Put("ns:k", []byte("garbage"), time.Hour)
		l := newBlockingLoad("loaded")
		l.started = make(chan struct{})
		res := goGetOrCreate(context.Background(), b, "k", l.load)
		<-l.started // b read the garbage and is loading
		set(t, a, "k", "new")
		s.flush(t)
		close(l.release)
		if r := <-res; r.err != nil {
			t.Fatal(r.err)
		}
		synctest.Wait() // b's fill has finished, whatever it wrote
		stored, _ := s.stored(t, "k")
		if stored != "new" {
			t.Errorf("the shared tier holds %q, want A's concurrent write \"new\"", stored)
		}
		for name, c := range map[string]*hybrid.Cache[string]{"A": a, "B": b} {
			if v, _ := getString(t, c, "k"); v != stored {
				t.Errorf("%s serves %q while the shared tier holds %q", name, v, stored)
			}
		}
	})
}

// TestDeleteDuringFill: Delete returns while a fill of the same key, started
// before it, is loading. Afterwards the key must stay deleted: the fill's
// value, read before the Delete, must not reappear in the shared tier.
func TestDeleteDuringFill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		p := newPeers(t, s, 2, hybrid.Options{})
		a, b := p[0], p[1]
		ctx := context.Background()
		l := newBlockingLoad("before-delete")
		l.started = make(chan struct{})
		res := goGetOrCreate(ctx, a, "k", l.load)
		<-l.started
		if err := a.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		s.flush(t)
		close(l.release)
		<-res           // may return the loaded value: it was asked for before the Delete
		synctest.Wait() // the fill has finished, whatever it wrote
		if v, ok := s.stored(t, "k"); ok {
			t.Errorf("the shared tier holds %q after Delete returned, want nothing", v)
		}
		for name, c := range map[string]*hybrid.Cache[string]{"A": a, "B": b} {
			if v, ok := getString(t, c, "k"); ok {
				t.Errorf("%s: Get after Delete: got %q, want a miss", name, v)
			}
		}
	})
}

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
			waitStat(t, b, "Invalidations.Applied", statReceived, 1)

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
			waitStat(t, b, "Invalidations.Applied", statReceived, 2) // B has applied A's change
			release()
			var r result
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
			if st := b.c.Stats(); st.L1.FillsDiscarded < 1 {
				t.Errorf("B: Stats.L1.FillsDiscarded got %d, want at least 1", st.L1.FillsDiscarded)
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
			waitStat(t, b, "Invalidations.Applied", statReceived, 1)

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
				waitStat(t, b, "Invalidations.Applied", statReceived, 2)
			}
			// The change is known on B. A GetOrCreate starting now...
			misses := b.c.Stats().L1.Misses
			second := goGet(b, "k", load)
			waitFor(t, 5*time.Second, "B's second GetOrCreate to miss L1", func() bool { return b.c.Stats().L1.Misses > misses }, nil)
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

func (b *gatedBus) Subscribe(ctx context.Context, channel string, onMessage func([]byte), onLoss func(bool)) (func(), error) {
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
			waitStat(t, c, "Invalidations.Applied", statReceived, 2)

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
			for c.remote.calls().WriteIfAbsent+c.remote.calls().WriteIfEqual == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			slow.release()
			waitStat(t, c, "Invalidations.Applied", statReceived, 4) // A's Set and Delete: every message is in

			if v, ok := redisValue(t, raw, ns, "k"); ok && v == "v1" {
				t.Errorf("Redis holds %q after A's Set of v2 and Delete: C's fill wrote back a value loaded before the change", v)
			}
			for _, in := range []*instance{a, c} {
				if v, ok := getStr(t, in, "k"); ok && v == "v1" {
					t.Errorf("%s: Get after every message arrived: got %q, a value older than the last Set (v2); want a miss or \"v2\"", in.name, v)
				}
			}
			t.Logf("C: WriteIfAbsent calls %d, WriteIfEqual calls %d, L1.FillsDiscarded %d", c.remote.calls().WriteIfAbsent, c.remote.calls().WriteIfEqual, c.c.Stats().L1.FillsDiscarded)
		})
	}
}
