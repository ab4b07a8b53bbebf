package hybrid_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"fmt"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/message"
)

// newPeers returns n instances of one logical cache sharing s, configured
// by o (Namespace, Remote, Bus and Logger filled in when empty).
func newPeers(t testing.TB, s *sharedTier, n int, o hybrid.Options) []*hybrid.Cache[string] {
	t.Helper()
	base := s.options()
	if o.Namespace == "" {
		o.Namespace = base.Namespace
	}
	if o.Remote == nil {
		o.Remote = base.Remote
	}
	if o.Bus == nil {
		o.Bus = base.Bus
	}
	peers := make([]*hybrid.Cache[string], n)
	for i := range peers {
		peers[i] = newTestCache[string](t, o)
	}
	return peers
}

func set(t testing.TB, c *hybrid.Cache[string], key, v string) {
	t.Helper()
	if err := c.Set(context.Background(), key, v); err != nil {
		t.Fatalf("Set(%q, %q): %v", key, v, err)
	}
}

// setOrDelete sets key to "new" on c, or deletes it if del.
func setOrDelete(t testing.TB, c *hybrid.Cache[string], key string, del bool) {
	t.Helper()
	if !del {
		set(t, c, key, "new")
		return
	}
	if err := c.Delete(context.Background(), key); err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}
}

// fillFromRemote makes c hold key, read from the shared tier.
func fillFromRemote(t testing.TB, c *hybrid.Cache[string], key, want string) {
	t.Helper()
	v, err := c.GetOrCreate(context.Background(), key, neverLoad(t))
	if err != nil || v != want {
		t.Fatalf("GetOrCreate(%q): got %q, %v, want %q from the shared tier", key, v, err, want)
	}
}

// TestInvalidationSet: a Set on A reaches B and C, which held the key. With
// a Secret and an Announcer they swap the new value in without reading the
// shared tier; otherwise they drop it and read it again when asked.
func TestInvalidationSet(t *testing.T) {
	tests := []struct {
		name      string
		secret    []byte
		announcer bool
		swap      bool
	}{
		{"secret and announcer swap", []byte("s3cret"), true, true},
		{"no secret drops", nil, true, false},
		{"no announcer drops", []byte("s3cret"), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSharedTier(t)
			o := hybrid.Options{Secret: tt.secret}
			if !tt.announcer {
				o.Remote = struct{ hybrid.Remote }{s.remote}
			}
			p := newPeers(t, s, 3, o)
			a, b, c := p[0], p[1], p[2]

			set(t, a, "k", "v1")
			s.flush(t)
			fillFromRemote(t, b, "k", "v1")
			fillFromRemote(t, c, "k", "v1")

			gets := s.remote.Calls().Get
			set(t, a, "k", "v2")
			s.flush(t)
			for name, peer := range map[string]*hybrid.Cache[string]{"A": a, "B": b, "C": c} {
				if v, ok := getString(t, peer, "k"); !ok || v != "v2" {
					t.Errorf("%s: Get after A's Set: got %q, %v, want \"v2\"", name, v, ok)
				}
			}
			wantSwapped, wantGets := uint64(0), 2
			if tt.swap {
				wantSwapped, wantGets = 1, 0
			}
			for name, peer := range map[string]*hybrid.Cache[string]{"B": b, "C": c} {
				st := peer.Stats()
				if st.Swapped != wantSwapped {
					t.Errorf("%s: Stats.Swapped got %d, want %d", name, st.Swapped, wantSwapped)
				}
				if st.Received != 2 {
					t.Errorf("%s: Stats.Received got %d, want 2", name, st.Received)
				}
				if st.Unauthentic != 0 || st.Invalid != 0 {
					t.Errorf("%s: Unauthentic %d, Invalid %d, want 0, 0", name, st.Unauthentic, st.Invalid)
				}
			}
			if got := s.remote.Calls().Get - gets; got != wantGets {
				t.Errorf("Remote Gets after the Set: got %d, want %d", got, wantGets)
			}
			if st := a.Stats(); st.OwnIgnored != 2 || st.Received != 0 || st.Published != 2 {
				t.Errorf("A: got OwnIgnored %d, Received %d, Published %d, want 2, 0, 2", st.OwnIgnored, st.Received, st.Published)
			}
		})
	}
}

func TestInvalidationDelete(t *testing.T) {
	s := newSharedTier(t)
	p := newPeers(t, s, 3, hybrid.Options{Secret: []byte("s3cret")})
	a, b, c := p[0], p[1], p[2]
	set(t, a, "k", "v1")
	s.flush(t)
	fillFromRemote(t, b, "k", "v1")
	fillFromRemote(t, c, "k", "v1")
	if err := a.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	s.flush(t)
	for name, peer := range map[string]*hybrid.Cache[string]{"A": a, "B": b, "C": c} {
		if v, ok := getString(t, peer, "k"); ok {
			t.Errorf("%s: Get after A's Delete: got %q, want a miss", name, v)
		}
	}
	// A Delete leaves a tombstone, which reads as a miss.
	if b, ok := s.remote.Peek(testNS + ":k"); !ok {
		t.Error("Remote after Delete: no tombstone")
	} else if h, _, err := envelope.Decode(b); err != nil || h.Flags&envelope.FlagDeleted == 0 {
		t.Errorf("Remote after Delete: flags %v err %v, want a tombstone (FlagDeleted)", h.Flags, err)
	}
	if got := a.Stats().OwnIgnored; got != 2 {
		t.Errorf("A: OwnIgnored got %d, want 2", got)
	}
}

// TestInvalidationClear: Clear drops L1 on every instance and leaves the
// shared tier.
func TestInvalidationClear(t *testing.T) {
	s := newSharedTier(t)
	p := newPeers(t, s, 3, hybrid.Options{})
	a, b, c := p[0], p[1], p[2]
	keys := []string{"k1", "k2", "k3"}
	for _, k := range keys {
		set(t, a, k, "v-"+k)
	}
	s.flush(t)
	for _, k := range keys {
		fillFromRemote(t, b, k, "v-"+k)
		fillFromRemote(t, c, k, "v-"+k)
	}
	if err := a.Clear(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.flush(t)
	gets := s.remote.Calls().Get
	for name, peer := range map[string]*hybrid.Cache[string]{"A": a, "B": b, "C": c} {
		for _, k := range keys {
			if v, ok := getString(t, peer, k); !ok || v != "v-"+k {
				t.Errorf("%s: Get(%q) after Clear: got %q, %v, want %q from the shared tier", name, k, v, ok, "v-"+k)
			}
		}
	}
	if got, want := s.remote.Calls().Get-gets, 3*len(keys); got != want {
		t.Errorf("Remote Gets after Clear: got %d, want %d (no L1 entry survived)", got, want)
	}
	if got := a.Stats().OwnIgnored; got != uint64(len(keys))+1 {
		t.Errorf("A: OwnIgnored got %d, want %d", got, len(keys)+1)
	}
}

// TestForgedMessages: what arrives on the channel without coming from a
// peer holding the Secret can at most evict.
func TestForgedMessages(t *testing.T) {
	secret := []byte("s3cret")
	s := newSharedTier(t)
	p := newPeers(t, s, 2, hybrid.Options{Secret: secret})
	a, b := p[0], p[1]
	ctx := context.Background()
	set(t, a, "k", "v1")
	s.flush(t)
	fillFromRemote(t, b, "k", "v1")

	var stranger message.Origin
	crand.Read(stranger[:])
	evil := envelopeOf(t, "evil", time.Hour)
	publish := func(msg []byte) {
		t.Helper()
		if err := s.bus.Publish(ctx, testChannel, msg); err != nil {
			t.Fatal(err)
		}
		s.flush(t)
	}
	// holds reports whether b still answers k from L1 with v1.
	holds := func() bool {
		t.Helper()
		gets := s.remote.Calls().Get
		v, ok := getString(t, b, "k")
		if !ok || v != "v1" {
			t.Fatalf("b: Get(k) got %q, %v, want \"v1\" (never the forged value)", v, ok)
		}
		return s.remote.Calls().Get == gets
	}

	steps := []struct {
		name            string
		msg             []byte
		invalid, unauth uint64
		evicts          bool
	}{
		{"random bytes", []byte("\x01\x01\x02 this is not a message"), 1, 0, false},
		{"empty", []byte{}, 1, 0, false},
		{"other namespace", message.Encode(message.Message{Op: message.OpDelete, Origin: stranger, Namespace: "other", Keys: []string{"k"}}, secret), 1, 0, false},
		{"value signed with another secret", message.Encode(message.Message{Op: message.OpSet, Origin: stranger, Namespace: testNS, Keys: []string{"k"}, Value: evil}, []byte("guess")), 0, 1, true},
		{"unsigned delete", message.Encode(message.Message{Op: message.OpDelete, Origin: stranger, Namespace: testNS, Keys: []string{"k"}}, nil), 0, 1, true},
		// Unsigned, a message may only drop the keys it names: a clear or a
		// tag delete names none, so it is ignored.
		{"unsigned clear", message.Encode(message.Message{Op: message.OpClear, Origin: stranger, Namespace: testNS}, nil), 0, 1, false},
		{"clear signed with another secret", message.Encode(message.Message{Op: message.OpClear, Origin: stranger, Namespace: testNS}, []byte("guess")), 0, 1, false},
		{"unsigned tag delete", message.Encode(message.Message{Op: message.OpTag, Origin: stranger, Namespace: testNS, Keys: []string{"t"}}, nil), 0, 1, false},
	}
	for _, st := range steps {
		before := b.Stats()
		publish(st.msg)
		after := b.Stats()
		if got := after.Invalid - before.Invalid; got != st.invalid {
			t.Errorf("%s: Invalid grew by %d, want %d", st.name, got, st.invalid)
		}
		if got := after.Unauthentic - before.Unauthentic; got != st.unauth {
			t.Errorf("%s: Unauthentic grew by %d, want %d", st.name, got, st.unauth)
		}
		if after.Swapped != before.Swapped {
			t.Errorf("%s: Swapped grew by %d, want 0", st.name, after.Swapped-before.Swapped)
		}
		if held := holds(); held == st.evicts {
			t.Errorf("%s: b kept k in L1: %v, want %v", st.name, held, !st.evicts)
		}
	}

	// A genuine message of A's, with its value changed in transit.
	var captured []byte
	unsub, err := s.bus.Subscribe(ctx, testChannel, func(m []byte) { captured = m }, nil)
	if err != nil {
		t.Fatal(err)
	}
	set(t, a, "k", "v1") // same value: b's copy stays right either way
	s.flush(t)
	unsub()
	tampered := bytes.Replace(captured, []byte(`"v1"`), []byte(`"ev"`), 1)
	if bytes.Equal(tampered, captured) {
		t.Fatal("the captured message does not carry the value")
	}
	fillFromRemote(t, b, "k", "v1")
	before := b.Stats()
	publish(tampered)
	after := b.Stats()
	if after.Unauthentic-before.Unauthentic != 1 || after.Swapped != before.Swapped {
		t.Errorf("tampered message: Unauthentic grew by %d, Swapped by %d, want 1, 0", after.Unauthentic-before.Unauthentic, after.Swapped-before.Swapped)
	}
	if holds() {
		t.Error("tampered message: b kept k in L1, want it dropped")
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
			if st := b.Stats(); st.FillsDiscarded < 1 {
				t.Errorf("b: FillsDiscarded got %d, want at least 1", st.FillsDiscarded)
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
	s.remote.SetAfterGet(func(string) {
		close(reached)
		<-release
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
	if st := c.Stats(); st.FillsDiscarded != 1 || st.BusLosses != 1 {
		t.Errorf("Stats: got FillsDiscarded %d, BusLosses %d, want 1, 1", st.FillsDiscarded, st.BusLosses)
	}
	gets := s.remote.Calls().Get
	getString(t, c, "k")
	if got := s.remote.Calls().Get - gets; got != 1 {
		t.Errorf("Get after the discarded fill read the Remote %d times, want 1", got)
	}
}

// TestBusLossFlushesL1: when the bus reports that messages may have been
// lost, nothing filled before is served from L1 after.
func TestBusLossFlushesL1(t *testing.T) {
	s := newSharedTier(t)
	p := newPeers(t, s, 2, hybrid.Options{})
	a, b := p[0], p[1]
	set(t, a, "k", "v")
	s.flush(t)
	fillFromRemote(t, b, "k", "v")
	gets := s.remote.Calls().Get
	fillFromRemote(t, b, "k", "v") // L1
	if got := s.remote.Calls().Get; got != gets {
		t.Fatalf("an L1 hit read the Remote")
	}
	s.bus.SimulateLoss()
	s.flush(t)
	for name, c := range map[string]*hybrid.Cache[string]{"A": a, "B": b} {
		if got := c.Stats().BusLosses; got != 1 {
			t.Errorf("%s: BusLosses got %d, want 1", name, got)
		}
		gets := s.remote.Calls().Get
		fillFromRemote(t, c, "k", "v")
		if got := s.remote.Calls().Get - gets; got != 1 {
			t.Errorf("%s: GetOrCreate after the loss read the Remote %d times, want 1", name, got)
		}
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

// TestWithLocalTTLOnRemoteHit: WithLocalTTL "sets the L1 lifetime of the
// value stored by this call", including a value the call found in the shared
// tier.
func TestWithLocalTTLOnRemoteHit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSharedTier(t)
		p := newPeers(t, s, 2, hybrid.Options{})
		a, b := p[0], p[1]
		set(t, a, "k", "v")
		s.flush(t)
		short := hybrid.WithLocalTTL(5 * time.Second)
		if _, err := b.GetOrCreate(t.Context(), "k", neverLoad(t), short); err != nil {
			t.Fatal(err)
		}
		time.Sleep(6 * time.Second)
		gets := s.remote.Calls().Get
		if _, err := b.GetOrCreate(t.Context(), "k", neverLoad(t), short); err != nil {
			t.Fatal(err)
		}
		if got := s.remote.Calls().Get - gets; got != 1 {
			t.Errorf("6s after an L2 hit stored with WithLocalTTL(5s): %d Remote reads, want 1 (the L1 copy expired)", got)
		}
	})
}

// TestConvergence is the second promise: once concurrent writers on every
// instance stop, every instance serves what the shared tier holds.
func TestConvergence(t *testing.T) {
	tests := []struct {
		name      string
		secret    []byte
		announcer bool
	}{
		{"drop", nil, true},
		{"swap", []byte("s3cret"), true},
		{"write then publish", []byte("s3cret"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSharedTier(t)
				o := hybrid.Options{Secret: tt.secret}
				if !tt.announcer {
					o.Remote = struct{ hybrid.Remote }{s.remote}
				}
				p := newPeers(t, s, 3, o)
				keys := []string{"a", "b", "c"}
				var wg sync.WaitGroup
				for i, c := range p {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(uint64(i), 1))
						for n := range 300 {
							key := keys[r.IntN(len(keys))]
							switch r.IntN(4) {
							case 0:
								_ = c.Set(t.Context(), key, fmt.Sprintf("%d-%d", i, n))
							case 1:
								_ = c.Delete(t.Context(), key)
							default:
								_, _ = c.GetOrCreate(t.Context(), key, func(context.Context, string) (string, error) {
									return fmt.Sprintf("load-%d-%d", i, n), nil
								})
							}
						}
					})
				}
				wg.Wait()
				synctest.Wait() // fills have finished
				s.flush(t)
				for _, key := range keys {
					want, wantOK := s.stored(t, key)
					for i, c := range p {
						if v, ok := getString(t, c, key); v != want || ok != wantOK {
							t.Errorf("instance %d serves %s = %q (%v), the shared tier holds %q (%v)", i, key, v, ok, want, wantOK)
						}
					}
				}
			})
		})
	}
}

// TestInlineMaxBytes: a message carries the value only up to
// InlineMaxBytes of stored bytes; a larger one makes peers drop the key.
func TestInlineMaxBytes(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct {
		name   string
		inline int
		value  string
		swap   bool
	}{
		{"default carries 200 bytes", 0, long, true},
		{"limit 100 does not", 100, long, false},
		{"limit 100 carries a short value", 100, "short", true},
		{"negative never carries", -1, "short", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSharedTier(t)
			p := newPeers(t, s, 2, hybrid.Options{Secret: []byte("s3cret"), InlineMaxBytes: tt.inline})
			a, b := p[0], p[1]
			set(t, a, "k", "v1")
			s.flush(t)
			fillFromRemote(t, b, "k", "v1")
			set(t, a, "k", tt.value)
			s.flush(t)
			gets := s.remote.Calls().Get
			if v, ok := getString(t, b, "k"); !ok || v != tt.value {
				t.Errorf("b: Get got %d bytes, %v, want %d bytes", len(v), ok, len(tt.value))
			}
			swapped := b.Stats().Swapped == 1
			reads := s.remote.Calls().Get - gets
			if swapped != tt.swap || (reads == 0) != tt.swap {
				t.Errorf("b: swapped %v with %d Remote reads, want swapped %v", swapped, reads, tt.swap)
			}
		})
	}
}
