package hybrid_test

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/message"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// invalidationModes are the two ways peers learn of a Set: without a Secret
// they drop their copy; with one (and an Announcer, which l2.Store is) the
// message carries the value and peers holding the key swap it in.
var invalidationModes = []struct {
	name   string
	secret []byte
}{
	{"drop", nil},
	{"swap", []byte("integration-secret")},
}

// TestIntegrationInvalidation: three instances on one Redis; a Set on one
// is seen on the others, a Delete likewise, each instance ignores its own
// messages, and Clear on one drops L1 on all.
func TestIntegrationInvalidation(t *testing.T) {
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) { testThreeInstances(t, singleNode(nil), m.secret) })
	}
}

// TestIntegrationClusterInvalidation is TestIntegrationInvalidation on a
// Redis Cluster (HYBRID_REDIS_CLUSTER).
func TestIntegrationClusterInvalidation(t *testing.T) {
	newClient := clusterNodes(t)
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) { testThreeInstances(t, newClient, m.secret) })
	}
}

func testThreeInstances(t *testing.T, newClient clientFactory, secret []byte) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	p := newInstances(t, 3, newClient, hybrid.Options{Namespace: ns, Secret: secret})
	a, b, c := p[0], p[1], p[2]
	swap := secret != nil
	raw := newClient(t)

	// waitMsgs waits until A has ignored own messages and B and C have
	// received recv messages each.
	waitMsgs := func(own, recv uint64) {
		t.Helper()
		waitStat(t, a, "OwnIgnored", statOwnIgnored, own)
		waitStat(t, b, "Received", statReceived, recv)
		waitStat(t, c, "Received", statReceived, recv)
	}

	// A Set on A reaches B and C, which read it from Redis once.
	setStr(t, a, "k", "v1")
	waitMsgs(1, 1)
	fill(t, b, "k", "v1")
	fill(t, c, "k", "v1")
	if v, ok := getStr(t, a, "k"); !ok || v != "v1" {
		t.Fatalf("A: Get after its own Set: got %q, %v, want \"v1\"", v, ok)
	}
	if got := a.remote.calls().Get; got != 0 {
		t.Errorf("A: Redis GETs after its own Set: got %d, want 0 (read-your-writes from L1)", got)
	}

	// A second Set: B and C, holding k, swap or drop it.
	bGets, cGets := b.remote.calls().Get, c.remote.calls().Get
	setStr(t, a, "k", "v2")
	waitMsgs(2, 2)
	wantSwapped, wantGets := uint64(0), int64(1)
	if swap {
		wantSwapped, wantGets = 1, 0
	}
	for _, in := range []*instance{b, c} {
		if got := in.c.Stats().Swapped; got != wantSwapped {
			t.Errorf("%s: Stats.Swapped after A's Set: got %d, want %d", in.name, got, wantSwapped)
		}
	}
	for _, in := range p {
		if v, ok := getStr(t, in, "k"); !ok || v != "v2" {
			t.Errorf("%s: Get after A's Set: got %q, %v, want \"v2\"", in.name, v, ok)
		}
	}
	if got := b.remote.calls().Get - bGets; got != wantGets {
		t.Errorf("B: Redis GETs for the new value: got %d, want %d", got, wantGets)
	}
	if got := c.remote.calls().Get - cGets; got != wantGets {
		t.Errorf("C: Redis GETs for the new value: got %d, want %d", got, wantGets)
	}
	if v, ok := redisValue(t, raw, ns, "k"); !ok || v != "v2" {
		t.Errorf("Redis holds %q, %v, want \"v2\"", v, ok)
	}

	// A Delete on A: every instance misses.
	if err := a.c.Delete(ctx, "k"); err != nil {
		t.Fatalf("A: Delete: %v", err)
	}
	waitMsgs(3, 3)
	for _, in := range p {
		if v, ok := getStr(t, in, "k"); ok {
			t.Errorf("%s: Get after A's Delete: got %q, want a miss", in.name, v)
		}
	}
	if v, ok := redisValue(t, raw, ns, "k"); ok {
		t.Errorf("Redis holds %q after the Delete, want nothing", v)
	}

	// Each instance ignored its own messages and applied the others'.
	if st := a.c.Stats(); st.Published != 3 || st.OwnIgnored != 3 || st.Received != 0 {
		t.Errorf("A: Published %d, OwnIgnored %d, Received %d; want 3, 3, 0", st.Published, st.OwnIgnored, st.Received)
	}
	for _, in := range []*instance{b, c} {
		st := in.c.Stats()
		if st.Published != 0 || st.OwnIgnored != 0 || st.Received != 3 || st.Invalid != 0 || st.Unauthentic != 0 {
			t.Errorf("%s: Published %d, OwnIgnored %d, Received %d, Invalid %d, Unauthentic %d; want 0, 0, 3, 0, 0",
				in.name, st.Published, st.OwnIgnored, st.Received, st.Invalid, st.Unauthentic)
		}
	}
	t.Logf("A: %d published, %d own ignored; B and C: %d received, swapped %d/%d",
		a.c.Stats().Published, a.c.Stats().OwnIgnored, b.c.Stats().Received, b.c.Stats().Swapped, c.c.Stats().Swapped)

	// Clear on B drops L1 on A and C too: each must go to Redis again.
	setStr(t, a, "k2", "w")
	waitMsgs(4, 4)
	fill(t, b, "k2", "w")
	fill(t, c, "k2", "w")
	var gets [3]int64
	for i, in := range p {
		if v, ok := getStr(t, in, "k2"); !ok || v != "w" {
			t.Fatalf("%s: Get(k2) before Clear: got %q, %v", in.name, v, ok)
		}
		gets[i] = in.remote.calls().Get
	}
	if err := b.c.Clear(ctx); err != nil {
		t.Fatalf("B: Clear: %v", err)
	}
	waitStat(t, b, "OwnIgnored", statOwnIgnored, 1)
	waitStat(t, a, "Received", statReceived, 1)
	waitStat(t, c, "Received", statReceived, 5)
	for i, in := range p {
		if n := in.c.Stats().L1Entries; n != 0 {
			t.Errorf("%s: L1Entries after B's Clear: got %d, want 0", in.name, n)
		}
		if v, ok := getStr(t, in, "k2"); !ok || v != "w" {
			t.Errorf("%s: Get(k2) after Clear: got %q, %v, want \"w\" from Redis", in.name, v, ok)
		}
		if got := in.remote.calls().Get - gets[i]; got != 1 {
			t.Errorf("%s: Redis GETs for k2 after B's Clear: got %d, want 1 (L1 dropped)", in.name, got)
		}
	}
}

// TestIntegrationMessagesPerSet: each Set sends exactly one message, and
// costs no Redis read on an instance that does not hold the key (nor, on
// one that does, until it is asked).
func TestIntegrationMessagesPerSet(t *testing.T) {
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := context.Background()
			ns := redistest.Prefix(t)
			p := newInstances(t, 3, singleNode(nil), hybrid.Options{Namespace: ns, Secret: m.secret})
			a, b, c := p[0], p[1], p[2] // A writes; B holds nothing; C holds every key
			const n = 50
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%02d", i)
				setStr(t, a, keys[i], "v0")
			}
			waitStat(t, b, "Received", statReceived, n)
			waitStat(t, c, "Received", statReceived, n)
			for _, k := range keys {
				fill(t, c, k, "v0")
			}

			// A subscriber of our own counts what goes over the channel.
			raw := srv.Client(t)
			ps := raw.Subscribe(ctx, "hybridcache:"+ns)
			defer ps.Close()
			if _, err := ps.Receive(ctx); err != nil { // the confirmation
				t.Fatal(err)
			}

			aSt, aCalls, bCalls, cCalls := a.c.Stats(), a.remote.calls(), b.remote.calls(), c.remote.calls()
			bRecv, cRecv := b.c.Stats().Received, c.c.Stats().Received
			for _, k := range keys {
				setStr(t, a, k, "v1")
			}
			// A barrier: its message comes after every Set's.
			if err := a.c.Delete(ctx, "zz-barrier"); err != nil {
				t.Fatal(err)
			}
			seen := 0
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			for {
				msg, err := ps.ReceiveMessage(rctx)
				if err != nil {
					t.Fatalf("raw subscriber after %d messages: %v", seen, err)
				}
				dm, err := message.Decode([]byte(msg.Payload), m.secret)
				if err != nil {
					t.Fatalf("message %d does not decode: %v", seen, err)
				}
				if dm.Op == message.OpDelete && slices.Equal(dm.Keys, []string{"zz-barrier"}) {
					break
				}
				seen++
			}
			waitStat(t, b, "Received", statReceived, bRecv+n+1)
			waitStat(t, c, "Received", statReceived, cRecv+n+1)

			published := a.c.Stats().Published - aSt.Published - 1
			aDelta := a.remote.calls()
			bDelta, cDelta := b.remote.calls().total()-bCalls.total(), c.remote.calls().total()-cCalls.total()
			t.Logf("%d Sets: %d messages on the channel (%.2f per Set), Stats.Published %d; SetAndPublish %d; Redis calls by B (holds none) %d, by C (holds all, not asked) %d",
				n, seen, float64(seen)/n, published, aDelta.SetAndPublish-aCalls.SetAndPublish, bDelta, cDelta)
			if seen != n || published != n {
				t.Errorf("messages for %d Sets: %d on the channel, %d in Stats.Published; want %d, %d", n, seen, published, n, n)
			}
			// A Delete is a SetAndPublish of a tombstone: the barrier adds one.
			if got := aDelta.SetAndPublish - aCalls.SetAndPublish; got != n+1 {
				t.Errorf("A: SetAndPublish calls: got %d, want %d (%d Sets and the barrier's Delete)", got, n+1, n)
			}
			if got := aDelta.total() - aCalls.total(); got != n+1 { // + the barrier's Delete
				t.Errorf("A: Redis calls for %d Sets and a Delete: got %d, want %d", n, got, n+1)
			}
			if bDelta != 0 {
				t.Errorf("B (holds none of the keys): Redis calls after the Sets: got %d, want 0", bDelta)
			}
			if cDelta != 0 {
				t.Errorf("C (holds the keys, not asked): Redis calls after the Sets: got %d, want 0", cDelta)
			}

			// When asked, C answers v1: swapped (no read) or dropped (one read each).
			before := c.remote.calls().Get
			for _, k := range keys {
				if v, ok := getStr(t, c, k); !ok || v != "v1" {
					t.Errorf("C: Get(%s): got %q, %v, want \"v1\"", k, v, ok)
				}
			}
			wantGets := int64(n)
			if m.secret != nil {
				wantGets = 0
			}
			if got := c.remote.calls().Get - before; got != wantGets {
				t.Errorf("C: Redis GETs to answer %d changed keys: got %d, want %d", n, got, wantGets)
			}
			t.Logf("C: %d Redis GETs to answer %d changed keys it held (swapped %d)", c.remote.calls().Get-before, n, c.c.Stats().Swapped)
		})
	}
}

// TestIntegrationPropagationDelay measures how long after A's Set returns
// B has applied its message (the bounded staleness promise, target p99 <=
// 5 ms on loopback). It logs the figures and fails only past a second.
func TestIntegrationPropagationDelay(t *testing.T) {
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			ns := redistest.Prefix(t)
			p := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns, Secret: m.secret})
			a, b := p[0], p[1]
			setStr(t, a, "k", "v0")
			waitStat(t, b, "Received", statReceived, 1)
			fill(t, b, "k", "v0")
			const rounds = 200
			fromStart := make([]time.Duration, 0, rounds)
			fromReturn := make([]time.Duration, 0, rounds)
			for i := range rounds {
				want := b.c.Stats().Received + 1
				start := time.Now()
				setStr(t, a, "k", fmt.Sprint("v", i+1))
				returned := time.Now()
				for b.c.Stats().Received < want {
					if time.Since(start) > time.Second {
						t.Fatalf("round %d: B did not receive A's message within 1s", i)
					}
					runtime.Gosched()
				}
				done := time.Now()
				fromStart = append(fromStart, done.Sub(start))
				fromReturn = append(fromReturn, max(done.Sub(returned), 0))
			}
			if v, ok := getStr(t, b, "k"); !ok || v != fmt.Sprint("v", rounds) {
				t.Errorf("B: Get after %d Sets: got %q, %v, want \"v%d\"", rounds, v, ok, rounds)
			}
			slices.Sort(fromStart)
			slices.Sort(fromReturn)
			t.Logf("propagation A->B over %d Sets (%s): after Set returned p50 %v p99 %v max %v; from Set start p50 %v p99 %v max %v (target p99 <= 5ms)",
				rounds, m.name, percentile(fromReturn, .5), percentile(fromReturn, .99), fromReturn[len(fromReturn)-1],
				percentile(fromStart, .5), percentile(fromStart, .99), fromStart[len(fromStart)-1])
		})
	}
}

// TestIntegrationForgedMessages: whoever can PUBLISH on the channel can at
// most make instances drop keys. Garbage is ignored (Stats.Invalid) and
// changes nothing; a well-formed message carrying a value but signed with
// the wrong key is counted (Stats.Unauthentic), its value never served.
func TestIntegrationForgedMessages(t *testing.T) {
	ctx := context.Background()
	secret := []byte("integration-secret")
	ns := redistest.Prefix(t)
	p := newInstances(t, 3, singleNode(nil), hybrid.Options{Namespace: ns, Secret: secret})
	a, b, c := p[0], p[1], p[2] // A wrote k, B holds it, C does not
	raw := srv.Client(t)
	channel := "hybridcache:" + ns
	publish := func(msg []byte) {
		t.Helper()
		if err := raw.Publish(ctx, channel, msg).Err(); err != nil {
			t.Fatalf("PUBLISH: %v", err)
		}
	}
	setStr(t, a, "k", "v1")
	waitStat(t, b, "Received", statReceived, 1)
	waitStat(t, c, "Received", statReceived, 1)
	fill(t, b, "k", "v1")

	// Garbage.
	random := make([]byte, 64)
	crand.Read(random)
	random[0] = 0x7f // not version 1: never a valid message
	var stranger message.Origin
	crand.Read(stranger[:])
	// A value in an unsigned message: the format forbids it.
	unsigned := message.Encode(message.Message{Op: message.OpSet, Origin: stranger, Namespace: ns, Keys: []string{"k"}}, nil)
	unsigned[2] = 1 // "carries a value", not signed
	evil := envelopeOf(t, "evil", time.Hour)
	unsigned = append(append(unsigned, byte(len(evil))), evil...)
	garbage := [][]byte{random, []byte("hello"), {}, {1, 1}, unsigned}
	for _, g := range garbage {
		publish(g)
	}
	bGets := b.remote.calls().Get
	for _, in := range p {
		waitStat(t, in, "Invalid", statInvalid, uint64(len(garbage)))
	}
	if v, ok := getStr(t, b, "k"); !ok || v != "v1" {
		t.Errorf("B: Get after garbage: got %q, %v, want \"v1\"", v, ok)
	}
	if got := b.remote.calls().Get - bGets; got != 0 {
		t.Errorf("B: Redis GETs after garbage: got %d, want 0 (k still in L1)", got)
	}
	for _, in := range p {
		st := in.c.Stats()
		wantRecv := uint64(1)
		if in == a {
			wantRecv = 0
		}
		if st.Invalid != uint64(len(garbage)) || st.Received != wantRecv || st.Swapped != 0 || st.Unauthentic != 0 {
			t.Errorf("%s after garbage: Invalid %d, Received %d, Swapped %d, Unauthentic %d; want %d, %d, 0, 0",
				in.name, st.Invalid, st.Received, st.Swapped, st.Unauthentic, len(garbage), wantRecv)
		}
	}

	// A well-formed set carrying a value, signed with the wrong key: on k,
	// which B holds and C does not, and on a key nobody has.
	for _, key := range []string{"k", "planted"} {
		publish(message.Encode(message.Message{Op: message.OpSet, Origin: stranger, Namespace: ns, Keys: []string{key}, Value: evil}, []byte("not the secret")))
	}
	for _, in := range p {
		waitStat(t, in, "Unauthentic", statUnauth, 2)
	}
	bGets = b.remote.calls().Get
	for _, in := range p {
		if v, ok := getStr(t, in, "k"); !ok || v != "v1" {
			t.Errorf("%s: Get(k) after the forged set: got %q, %v, want \"v1\" (never the planted value)", in.name, v, ok)
		}
		if v, ok := getStr(t, in, "planted"); ok {
			t.Errorf("%s: Get(planted) after the forged set: got %q, want a miss", in.name, v)
		}
		if st := in.c.Stats(); st.Swapped != 0 || st.Invalid != uint64(len(garbage)) {
			t.Errorf("%s: Swapped %d, Invalid %d after the forged sets; want 0, %d", in.name, st.Swapped, st.Invalid, len(garbage))
		}
	}
	t.Logf("B: %d Redis GET(s) for k after the forged set (1: dropped, 0: kept)", b.remote.calls().Get-bGets-1)
	if v, ok := redisValue(t, raw, ns, "k"); !ok || v != "v1" {
		t.Errorf("Redis holds %q, %v for k, want \"v1\"", v, ok)
	}
	if n, err := raw.Exists(ctx, ns+":planted").Result(); err != nil || n != 0 {
		t.Errorf("Redis EXISTS planted: %d, %v; want 0", n, err)
	}

	// An unsigned clear, and a clear signed with the wrong key, name no
	// keys: ignored, so B keeps k (and every other entry) in L1.
	fill(t, b, "k", "v1")
	for i := range 100 {
		setStr(t, a, fmt.Sprint("many", i), "x")
	}
	for _, in := range []*instance{b, c} {
		waitStat(t, in, "Received", statReceived, 1+2+100) // k, the two forged sets, many*
	}
	for i := range 100 {
		fill(t, b, fmt.Sprint("many", i), "x")
	}
	held := b.c.Stats().L1Entries
	publish(message.Encode(message.Message{Op: message.OpClear, Origin: stranger, Namespace: ns}, nil))
	publish(message.Encode(message.Message{Op: message.OpClear, Origin: stranger, Namespace: ns}, []byte("not the secret")))
	for _, in := range p {
		waitStat(t, in, "Unauthentic", statUnauth, 4)
	}
	bGets = b.remote.calls().Get
	if v, ok := getStr(t, b, "k"); !ok || v != "v1" {
		t.Errorf("B: Get(k) after forged clears: got %q, %v, want \"v1\"", v, ok)
	}
	if got := b.remote.calls().Get - bGets; got != 0 {
		t.Errorf("B: Redis GETs after forged clears: got %d, want 0 (L1 kept)", got)
	}
	if st := b.c.Stats(); st.L1Entries < held {
		t.Errorf("B: L1 holds %d entries after forged clears, want %d (none dropped)", st.L1Entries, held)
	}
}
