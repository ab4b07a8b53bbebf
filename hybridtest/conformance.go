package hybridtest

import (
	"bytes"
	"context"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
)

// This file holds TestRemote, the conformance suite of the shared tier's
// contract, and the helpers of its checks, which the files conformance_*.go
// hold.

// TestRemote checks that a shared tier keeps its contract (tier.Remote):
// each promise is a subtest, which a store's own test runs with
//
//	func TestConformance(t *testing.T) {
//		hybridtest.TestRemote(t, func(t *testing.T) (tier.Remote, hybrid.Bus) {
//			store := ... // a fresh, empty store, say with a prefix of its own
//			return store, bus
//		})
//	}
//
// open is called once per subtest, and must return a Remote whose keys
// are apart from those of every other Remote it returned (a fresh key
// prefix will do, or a fresh server), and the bus that the Remote's
// messages reach. It closes them, and may delete what the subtest wrote,
// in t.Cleanup. The suite writes plain keys, and leases with the keys they
// guard under a shared hash tag ("{a}l", "{a}l/v"), so that on Redis
// Cluster the two are on one node; logs and channels have random names
// (the Remote may prefix a log's name as it does keys; it publishes on
// Feed.Channel as given). Subtests are named group/promise, such as
// Write/IfNewer or Lease/Release, for go test -run. It
// subscribes to the bus (and waits until a message of its own comes back,
// so a bus that subscribes asynchronously works) to see what the Remote
// publishes; to see that nothing was published, it writes a last message
// through the Remote, on the key concerned, and checks that nothing came
// before it.
//
// Expiry is checked in real time, with lifetimes of a few hundred
// milliseconds; the whole suite takes one to two seconds. When the Remote's
// Info().Log is false (as for l2.Store on Redis Cluster), the log
// subtests check only that every use of a log fails with an error
// wrapping errors.ErrUnsupported.
func TestRemote(t *testing.T, open func(t *testing.T) (tier.Remote, hybrid.Bus)) {
	t.Helper()
	for _, g := range conformance() {
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.checks {
				t.Run(c.name, func(t *testing.T) { c.run(newEnv(t, open)) })
			}
		})
	}
}

// group is a group of the suite's checks.
type group struct {
	name   string
	checks []check
}

// check is one subtest of the suite.
type check struct {
	name string
	run  func(e *env)
}

// conformance returns the suite.
func conformance() []group {
	return []group{
		{"Read", []check{
			{"Info", checkInfo},
			{"Get", checkGet},
			{"Heads", checkHeads},
			{"EmptyInput", checkEmptyInput},
		}},
		{"Write", []check{
			{"Always", checkAlways},
			{"IfAbsent", checkIfAbsent},
			{"IfEqual", checkIfEqual},
			{"IfNewer", checkIfNewer},
			{"IfSeq", checkIfSeq},
			{"TTL", checkTTL},
			{"KeepTTL", checkKeepTTL},
			{"MsgElse", checkMsgElse},
			{"Order", checkOrder},
			{"Batch", checkBatch},
			{"BatchMsg", checkBatchMsg},
			{"BatchLog", checkBatchLog},
			{"BatchAtomic", checkBatchAtomic},
			{"Touch", checkTouch},
		}},
		{"Log", []check{
			{"Open", checkLogOpen},
			{"Entries", checkLogEntries},
			{"Incomplete", checkLogIncomplete},
			{"Unsupported", checkLogUnsupported},
		}},
		{"Lease", []check{
			{"Take", checkTake},
			{"Extend", checkExtend},
			{"Release", checkRelease},
			{"Expiry", checkLeaseExpiry},
			{"Write", checkLeaseWrite},
			{"TTL", checkLeaseTTL},
			{"MismatchedLengths", checkMismatchedLengths},
		}},
	}
}

// patience is the longest the suite waits for a message or an expiry past
// its due time. (A var so that hybridtest's own tests of the suite can
// shorten it.)
var patience = 5 * time.Second

const (
	// shortTTL is the lifetime of what the suite waits to see expire.
	shortTTL = 300 * time.Millisecond
	// longTTL is a lifetime that outlives a subtest.
	longTTL = time.Minute
)

// env is one subtest's Remote, bus, and fresh channel and log.
type env struct {
	t    *testing.T
	ctx  context.Context
	r    tier.Remote
	bus  hybrid.Bus
	id   string
	feed tier.Feed
	in   *inbox // nil until listen
	sent int    // sentinels written
}

func newEnv(t *testing.T, open func(t *testing.T) (tier.Remote, hybrid.Bus)) *env {
	r, bus := open(t)
	if r == nil || bus == nil {
		t.Fatalf("open returned Remote %v and Bus %v, want both", r, bus)
	}
	id := fmt.Sprintf("%016x", rand.Uint64())
	return &env{
		t: t, ctx: t.Context(), r: r, bus: bus, id: id,
		feed: tier.Feed{Channel: "hybridtest:" + id, Log: "hybridtest-log:" + id, LogLen: 1000},
	}
}

// inbox collects the messages of one channel.
type inbox struct {
	mu    sync.Mutex
	probe []byte
	ready bool // the probe came back: what follows is the Remote's
	msgs  [][]byte
	wake  chan struct{} // closed and replaced when a message arrives
}

func (in *inbox) add(msg []byte) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if bytes.Equal(msg, in.probe) {
		in.ready = true
	} else if in.ready {
		in.msgs = append(in.msgs, bytes.Clone(msg))
	}
	close(in.wake)
	in.wake = make(chan struct{})
}

// listen subscribes to e.feed.Channel, and returns once the bus delivers.
func (e *env) listen() {
	e.t.Helper()
	in := &inbox{probe: []byte("hybridtest probe " + e.id), wake: make(chan struct{})}
	unsub, err := e.bus.Subscribe(e.ctx, e.feed.Channel, in.add, func(bool) {})
	if err != nil {
		e.t.Fatalf("Subscribe(%q): %v", e.feed.Channel, err)
	}
	e.t.Cleanup(unsub)
	e.in = in
	deadline := time.Now().Add(patience)
	for {
		if err := e.bus.Publish(e.ctx, e.feed.Channel, in.probe); err != nil {
			e.t.Fatalf("Publish(%q): %v", e.feed.Channel, err)
		}
		if e.await(200*time.Millisecond, func([][]byte) bool { return in.ready }) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the bus delivered nothing on %q within %v", e.feed.Channel, patience)
		}
	}
}

// await waits up to d for done to report true of the messages received,
// and reports whether it did.
func (e *env) await(d time.Duration, done func([][]byte) bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		e.in.mu.Lock()
		ok, wake := done(e.in.msgs), e.in.wake
		e.in.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-wake:
		case <-t.C:
			return false
		case <-e.ctx.Done():
			return false
		}
	}
}

// receive waits for n messages and returns them, and forgets them.
func (e *env) receive(n int) []string {
	e.t.Helper()
	if !e.await(patience, func(ms [][]byte) bool { return len(ms) >= n }) {
		e.t.Fatalf("got %q within %v, want %d messages", e.collected(), patience, n)
	}
	return e.collected()
}

// collected returns the messages received so far, and forgets them.
func (e *env) collected() []string {
	e.in.mu.Lock()
	defer e.in.mu.Unlock()
	out := make([]string, len(e.in.msgs))
	for i, m := range e.in.msgs {
		out[i] = string(m)
	}
	e.in.msgs = nil
	return out
}

// drain returns the messages received before a sentinel that it writes,
// with a message, to key: every message published on key's node before
// the sentinel. key holds the sentinel afterwards.
func (e *env) drain(key string) []string {
	e.t.Helper()
	e.sent++
	s := fmt.Sprintf("hybridtest sentinel %s %d", e.id, e.sent)
	e.write(tier.Write{Key: key, Value: []byte(s), TTL: longTTL, Msg: []byte(s)})
	if !e.await(patience, func(ms [][]byte) bool { return slices.ContainsFunc(ms, func(m []byte) bool { return string(m) == s }) }) {
		e.t.Fatalf("a write of %q with a message: got %q within %v, not its message", key, e.collected(), patience)
	}
	got := e.collected()
	i := slices.Index(got, s)
	e.in.mu.Lock()
	for _, m := range got[i+1:] {
		e.in.msgs = append(e.in.msgs, []byte(m))
	}
	e.in.mu.Unlock()
	return got[:i]
}

// expectMsgs drains key and checks the messages, in order. It first waits
// for as many messages as it wants: on Redis Cluster a message published
// from another node than key's may reach the bus after the sentinel.
func (e *env) expectMsgs(key, what string, want ...string) {
	e.t.Helper()
	if len(want) > 0 {
		e.await(patience, func(ms [][]byte) bool { return len(ms) >= len(want) })
	}
	if got := e.drain(key); !slices.Equal(got, want) {
		e.t.Errorf("%s: published %q, want %q", what, got, want)
	}
}

// write makes ws on e.feed, failing the test on an error.
func (e *env) write(ws ...tier.Write) []bool {
	e.t.Helper()
	return e.writeFeed(e.feed, ws...)
}

func (e *env) writeFeed(f tier.Feed, ws ...tier.Write) []bool {
	e.t.Helper()
	stored, err := e.r.Write(e.ctx, ws, f)
	if err != nil {
		e.t.Fatalf("Write of %d: %v", len(ws), err)
	}
	if len(stored) != len(ws) {
		e.t.Fatalf("Write of %d: %d results", len(ws), len(stored))
	}
	return stored
}

// put stores value under key for ttl, announcing nothing.
func (e *env) put(key string, value []byte, ttl time.Duration) {
	e.t.Helper()
	if stored := e.write(tier.Write{Key: key, Value: value, TTL: ttl}); !stored[0] {
		e.t.Fatalf("Write of %q with Always: not stored", key)
	}
}

// get reads keys, failing the test on an error.
func (e *env) get(keys ...string) [][]byte {
	e.t.Helper()
	vs, err := e.r.Get(e.ctx, keys)
	if err != nil {
		e.t.Fatalf("Get(%q): %v", keys, err)
	}
	if len(vs) != len(keys) {
		e.t.Fatalf("Get(%q): %d values, want %d", keys, len(vs), len(keys))
	}
	return vs
}

// expect checks what key holds (nil: nothing).
func (e *env) expect(key string, want []byte) {
	e.t.Helper()
	if got := e.get(key)[0]; !same(got, want) {
		e.t.Errorf("%q holds %s, want %s", key, show(got), show(want))
	}
}

// expectStored checks what a Write reported.
func (e *env) expectStored(what string, got []bool, want ...bool) {
	e.t.Helper()
	if !slices.Equal(got, want) {
		e.t.Errorf("%s: stored %v, want %v", what, got, want)
	}
}

// expires checks that key, written after start for ttl, is there until
// then, and gone within patience after.
func (e *env) expires(key string, start time.Time, ttl time.Duration) {
	e.t.Helper()
	for {
		v := e.get(key)[0]
		since := time.Since(start) // the read was before
		switch {
		case v == nil && since < ttl:
			e.t.Errorf("%q, written for %v, was gone %v after", key, ttl, since)
			return
		case v == nil:
			return
		case since > ttl+patience:
			e.t.Errorf("%q, written for %v, is still there %v after", key, ttl, since)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// same reports whether a and b are equal bytes, both nil or both not.
func same(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

// show formats b for a message: nil apart from empty.
func show(b []byte) string {
	if b == nil {
		return "nothing"
	}
	return fmt.Sprintf("%q", b)
}

// raw returns s as bytes.
func raw(s string) []byte { return []byte(s) }

// showAll formats bs.
func showAll(bs [][]byte) string {
	s := make([]string, len(bs))
	for i, v := range bs {
		s[i] = show(v)
	}
	return "[" + strings.Join(s, " ") + "]"
}
