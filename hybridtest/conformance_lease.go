package hybridtest

import (
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"time"
)

// This file holds the suite's checks of leases: TakeLeases, ExtendLeases,
// ReleaseLeases and Write.Lease. The lease "{x}l" guards the key "{x}l/v";
// the suite drains the messages about both by writing "{x}l/s", all three
// on one node of a Redis Cluster.

// guard returns the key that lease guards.
func guard(lease string) string { return lease + "/v" }

// near returns a key on the node of lease, to drain its messages.
func near(lease string) string { return lease + "/s" }

// take takes leases under token for ttl, failing the test on an error.
func (e *env) take(token string, ttl time.Duration, leases ...string) []tier.Lease {
	e.t.Helper()
	guards := make([]string, len(leases))
	for i, l := range leases {
		guards[i] = guard(l)
	}
	ls, err := e.r.TakeLeases(e.ctx, leases, guards, token, ttl)
	if err != nil {
		e.t.Fatalf("TakeLeases(%q, %q): %v", leases, token, err)
	}
	if len(ls) != len(leases) {
		e.t.Fatalf("TakeLeases(%q, %q): %d results", leases, token, len(ls))
	}
	return ls
}

// taken checks that token takes lease, and what its guard held then.
func (e *env) taken(token, lease string, value []byte) {
	e.t.Helper()
	if l := e.take(token, longTTL, lease)[0]; !l.Taken || !same(l.Value, value) {
		e.t.Errorf("TakeLeases(%q, %q): %s, want taken, the guarded key holding %s", lease, token, showLease(l), show(value))
	}
}

// held checks that a taker finds lease held under holder, with at most
// ttl left, and more than least, and returns what it found.
func (e *env) held(lease, holder string, least, ttl time.Duration) tier.Lease {
	e.t.Helper()
	l := e.take("taker", longTTL, lease)[0]
	if l.Taken || l.Holder != holder || l.Left <= least || l.Left > ttl {
		e.t.Errorf("TakeLeases(%q) of a lease %q holds: %s, want not taken, Holder %q, Left in (%v, %v]", lease, holder, showLease(l), holder, least, ttl)
	}
	return l
}

// showLease formats l for a message.
func showLease(l tier.Lease) string {
	return fmt.Sprintf("{Taken:%v Value:%s Left:%v Holder:%q}", l.Taken, show(l.Value), l.Left, l.Holder)
}

// release releases leases under token with msg, failing the test on an
// error.
func (e *env) release(token, msg string, leases ...string) {
	e.t.Helper()
	if err := e.r.ReleaseLeases(e.ctx, leases, token, raw(msg), e.feed); err != nil {
		e.t.Fatalf("ReleaseLeases(%q, %q): %v", leases, token, err)
	}
}

// checkTake: a lease no one holds is taken, with what its guard holds; one
// held is not, and tells its holder and how long it has left.
func checkTake(e *env) {
	e.put(guard("{a}l"), raw("va"), longTTL)
	ls := e.take("A", longTTL, "{a}l", "{b}l")
	if !ls[0].Taken || !same(ls[0].Value, raw("va")) || !ls[1].Taken || ls[1].Value != nil {
		e.t.Errorf("TakeLeases of two free leases: %s, %s; want both taken, the first guarding \"va\", the second nothing", showLease(ls[0]), showLease(ls[1]))
	}
	e.held("{a}l", "A", longTTL-10*time.Second, longTTL)
	if l := e.take("A", longTTL, "{a}l")[0]; l.Taken || l.Holder != "A" {
		e.t.Errorf("TakeLeases by the holder of the lease: %s, want not taken, Holder A", showLease(l))
	}
	// A holder stores and releases between another's read and take: the
	// taker sees the value.
	e.put(guard("{b}l"), raw("vb"), longTTL)
	e.release("A", "released", "{b}l")
	e.taken("C", "{b}l", raw("vb"))
}

// checkExtend: only the holder's token extends a lease.
func checkExtend(e *env) {
	e.take("A", 5*time.Second, "{a}l")
	held, err := e.r.ExtendLeases(e.ctx, []string{"{a}l", "{b}l"}, "A", longTTL)
	if err != nil || len(held) != 2 || !held[0] || held[1] {
		e.t.Errorf("ExtendLeases of a held lease and a free one: %v, %v; want [true false], nil", held, err)
	}
	held, err = e.r.ExtendLeases(e.ctx, []string{"{a}l"}, "B", 2*longTTL)
	if err != nil || len(held) != 1 || held[0] {
		e.t.Errorf("ExtendLeases of another's lease: %v, %v; want [false], nil", held, err)
	}
	e.held("{a}l", "A", 5*time.Second, longTTL)
}

// checkRelease: a release deletes its holder's leases, and announces only
// if someone may wait: a taker found one held, or one is not held under
// the token.
func checkRelease(e *env) {
	e.listen()
	e.take("A", longTTL, "{q}l")
	e.release("A", "released q", "{q}l")
	e.expectMsgs(near("{q}l"), "a release of a lease no one asked for")
	e.taken("B", "{q}l", nil)

	e.take("A", longTTL, "{w}l1", "{w}l2")
	e.held("{w}l2", "A", 0, longTTL)
	e.release("A", "released w", "{w}l1", "{w}l2")
	e.expectMsgs(near("{w}l1"), "a release of two leases, one asked for", "released w")
	e.taken("B", "{w}l1", nil)
	e.taken("B", "{w}l2", nil)

	e.take("A", longTTL, "{o}l")
	e.release("B", "released o", "{o}l")
	e.expectMsgs(near("{o}l"), "a release of another's lease", "released o")
	e.held("{o}l", "A", 0, longTTL)
}

// checkLeaseExpiry: a lease expires; then its holder's token extends,
// releases and writes nothing of it, and its release and write announce.
func checkLeaseExpiry(e *env) {
	e.listen()
	start := time.Now()
	if l := e.take("A", shortTTL, "{e}l")[0]; !l.Taken {
		e.t.Fatalf("TakeLeases of a free lease: %s, want taken", showLease(l))
	}
	for wrong := false; ; {
		l := e.take("B", longTTL, "{e}l")[0]
		since := time.Since(start) // the take was before
		if l.Taken {
			if since < shortTTL {
				e.t.Errorf("a lease taken for %v was taken again %v after", shortTTL, since)
			}
			break
		}
		if !wrong && (l.Holder != "A" || l.Left <= 0 || l.Left > shortTTL) {
			e.t.Errorf("TakeLeases of a lease A took for %v: %s, want not taken, Holder \"A\", Left in (0, %v]", shortTTL, showLease(l), shortTTL)
			wrong = true
		}
		if since > shortTTL+patience {
			e.t.Fatalf("a lease taken for %v is still held %v after: %s", shortTTL, since, showLease(l))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if held, err := e.r.ExtendLeases(e.ctx, []string{"{e}l"}, "A", longTTL); err != nil || len(held) != 1 || held[0] {
		e.t.Errorf("ExtendLeases of an expired lease, taken again by another: %v, %v; want [false], nil", held, err)
	}
	w := tier.Write{Key: guard("{e}l"), Value: raw("va"), TTL: longTTL, If: tier.IfAbsent, Msg: raw("filled"), Else: raw("unfilled"), Lease: "{e}l", Token: "A"}
	e.expectStored("a write releasing an expired lease", e.write(w), true)
	e.release("A", "released", "{e}l")
	e.expect(guard("{e}l"), raw("va"))
	e.held("{e}l", "B", longTTL-10*time.Second, longTTL)
	e.expectMsgs(near("{e}l"), "a write and a release of a lease taken over", "filled", "released")
}

// checkLeaseWrite: a write with a lease releases it, and announces Msg or
// Else only if someone may wait for it.
func checkLeaseWrite(e *env) {
	e.listen()
	fill := func(lease, msg string) bool {
		e.t.Helper()
		w := tier.Write{Key: guard(lease), Value: raw("v " + lease), TTL: longTTL, If: tier.IfAbsent,
			Msg: raw("stored " + msg), Else: raw("unstored " + msg), Lease: lease, Token: "A"}
		return e.write(w)[0]
	}
	e.take("A", longTTL, "{q}l")
	e.expectStored("a fill under a lease no one asked for", []bool{fill("{q}l", "q")}, true)
	e.taken("B", "{q}l", raw("v {q}l"))
	e.expectMsgs(near("{q}l"), "a fill under a lease no one asked for")

	e.take("A", longTTL, "{s}l")
	e.held("{s}l", "A", 0, longTTL)
	e.expectStored("a fill under a lease asked for", []bool{fill("{s}l", "s")}, true)
	e.taken("B", "{s}l", raw("v {s}l"))
	e.expectMsgs(near("{s}l"), "a fill under a lease asked for", "stored s")

	e.put(guard("{u}l"), raw("x"), longTTL)
	e.take("A", longTTL, "{u}l")
	e.held("{u}l", "A", 0, longTTL)
	e.expectStored("a fill under a lease asked for, over a value", []bool{fill("{u}l", "u")}, false)
	e.taken("B", "{u}l", raw("x"))
	e.expectMsgs(near("{u}l"), "a fill under a lease asked for, over a value", "unstored u")
}

// checkLeaseTTL: a lease always has a lifetime of at least a millisecond.
func checkLeaseTTL(e *env) {
	e.take("A", longTTL, "{t}l")
	for _, ttl := range []time.Duration{0, time.Millisecond - 1, -time.Second} {
		if _, err := e.r.TakeLeases(e.ctx, []string{"{t}l2"}, []string{guard("{t}l2")}, "A", ttl); err == nil {
			e.t.Errorf("TakeLeases for %v: got nil error, want one", ttl)
		}
		if _, err := e.r.ExtendLeases(e.ctx, []string{"{t}l"}, "A", ttl); err == nil {
			e.t.Errorf("ExtendLeases for %v: got nil error, want one", ttl)
		}
	}
	if _, err := e.r.TakeLeases(e.ctx, []string{"{t}l3"}, []string{guard("{t}l3")}, "A", time.Millisecond); err != nil {
		e.t.Errorf("TakeLeases for 1ms: %v", err)
	}
}

// checkMismatchedLengths: keys and guards of different lengths are an
// error, not a panic.
func checkMismatchedLengths(e *env) {
	for _, c := range []struct{ keys, guards []string }{
		{[]string{"{m}l1", "{m}l2"}, []string{"{m}l1/v"}},
		{[]string{"{m}l1"}, []string{"{m}l1/v", "{m}l2/v"}},
		{[]string{"{m}l1"}, nil},
		{nil, []string{"{m}l1/v"}},
	} {
		err, p := func() (err error, p any) {
			defer func() { p = recover() }()
			_, err = e.r.TakeLeases(e.ctx, c.keys, c.guards, "A", longTTL)
			return err, nil
		}()
		if p != nil || err == nil {
			e.t.Errorf("TakeLeases of %d keys with %d guards: error %v, panic %v; want an error", len(c.keys), len(c.guards), err, p)
		}
	}
}
