package l2_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/l2"
	"github.com/hybridcache/hybridcache/tier"
)

// pttl returns the PTTL of the Redis key key (-2: missing, -1: no expiry).
func pttl(t *testing.T, rdb redis.UniversalClient, key string) time.Duration {
	t.Helper()
	d, err := rdb.PTTL(t.Context(), key).Result()
	if err != nil {
		t.Fatalf("PTTL %q: %v", key, err)
	}
	return d
}

// holder returns the token that the Redis key key holds, "" if it is missing.
func holder(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	v, err := rdb.Get(t.Context(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %q: %v", key, err)
	}
	return v
}

// askFor makes each lease of leases asked for, as another instance that
// wants it does: a TakeLeases under the token "waiter", which must find
// every one held (and so marks it), with time left.
func askFor(t *testing.T, s *l2.Store, leases ...string) {
	t.Helper()
	ls, err := s.TakeLeases(t.Context(), leases, guards(leases), "waiter", time.Hour)
	if err != nil || slices.ContainsFunc(ls, func(l tier.Lease) bool { return l.Taken || l.Left == 0 || l.Value != nil }) {
		t.Fatalf("TakeLeases(waiter, %q) = %+v, %v; want none taken, all with time left", leases, ls, err)
	}
}

// quiet checks that nothing was published on channel since the messages
// msgs received last: it publishes a message of its own, "end " and what,
// and checks that it is the next one. In Redis Cluster it publishes from
// the master of near, whose messages cross the cluster bus in order, so
// that it follows one that node published before; on one server, or when
// near is empty, it publishes through rdb.
func quiet(t *testing.T, rdb redis.UniversalClient, near, channel string, msgs *messages, what string) {
	t.Helper()
	ctx := t.Context()
	pub := rdb
	switch rdb.(type) {
	case *redis.ClusterClient, embedded:
		if near != "" {
			m, err := clusterOf(rdb).MasterForKey(ctx, near)
			if err != nil {
				t.Fatalf("MasterForKey(%q): %v", near, err)
			}
			pub = m
		}
	}
	end := "end " + what
	if err := pub.Publish(ctx, channel, end).Err(); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, msgs, 1); got[0] != end {
		t.Errorf("%s: message %q, want none (the next one heard should be %q)", what, got[0], end)
	}
}

// guards returns a key for each lease of keys to guard: "g:" and the lease's
// key.
func guards(keys []string) []string {
	if keys == nil {
		return nil
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = "g:" + k
	}
	return out
}

// takenOf returns whether each lease of ls was taken.
func takenOf(ls []tier.Lease) []bool {
	var taken []bool
	for _, l := range ls {
		taken = append(taken, l.Taken)
	}
	return taken
}

func TestTakeLeases(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	const ttl = 10 * time.Second
	ls, err := s.TakeLeases(ctx, []string{"l"}, []string{"g:l"}, "a", ttl)
	if err != nil || len(ls) != 1 || !ls[0].Taken || ls[0].Left != 0 || ls[0].Value != nil || ls[0].Holder != "" {
		t.Fatalf("TakeLeases(a) = %+v, %v; want [{Taken:true Value:[] Left:0s Holder:}], nil", ls, err)
	}
	if got := holder(t, rdb, prefix+"l"); got != "a" {
		t.Errorf("lease holds %q, want the token \"a\"", got)
	}
	if d := pttl(t, rdb, prefix+"l"); d <= 0 || d > ttl {
		t.Errorf("PTTL after TakeLeases = %v, want in (0, %v]", d, ttl)
	}

	// Another token is told how long the lease has left, and marks it as
	// asked for: the holder's token and a '*', with the lifetime it had
	// (not the taker's ttl). A second taker leaves it so.
	for _, token := range []string{"b", "c"} {
		ls, err := s.TakeLeases(ctx, []string{"l"}, []string{"g:l"}, token, time.Minute)
		if err != nil || len(ls) != 1 || ls[0].Taken || ls[0].Left <= 0 || ls[0].Left > ttl {
			t.Fatalf("TakeLeases(%s) = %+v, %v; want not taken, Left in (0, %v], nil", token, ls, err, ttl)
		}
		if ls[0].Holder != "a" {
			t.Errorf("TakeLeases(%s): Holder %q, want a (the token, without the mark)", token, ls[0].Holder)
		}
		if got := holder(t, rdb, prefix+"l"); got != "a*" {
			t.Errorf("after %s's failed take, lease holds %q, want \"a*\" (marked)", token, got)
		}
		if d := pttl(t, rdb, prefix+"l"); d <= 0 || d > ttl {
			t.Errorf("PTTL after %s's failed take = %v, want in (0, %v]", token, d, ttl)
		}
	}

	// SET NX: the holder itself does not take it again.
	ls, err = s.TakeLeases(ctx, []string{"l"}, []string{"g:l"}, "a", ttl)
	if err != nil || len(ls) != 1 || ls[0].Taken || ls[0].Left <= 0 || ls[0].Left > ttl {
		t.Fatalf("TakeLeases(a) again = %+v, %v; want not taken, Left in (0, %v], nil", ls, err, ttl)
	}
	if got := holder(t, rdb, prefix+"l"); got != "a*" {
		t.Errorf("after its holder's take, lease holds %q, want \"a*\"", got)
	}
}

// TestTakeLeasesMarks: a failed take marks the lease it found held, and
// only that one: a lease taken, or one held without being asked for, is
// the bare token.
func TestTakeLeasesMarks(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	const ttl = 10 * time.Second
	if ls, err := s.TakeLeases(ctx, []string{"asked", "quiet"}, guards([]string{"asked", "quiet"}), "a", ttl); err != nil || slices.Contains(takenOf(ls), false) {
		t.Fatalf("TakeLeases(a) = %v, %v; want all taken", takenOf(ls), err)
	}
	ls, err := s.TakeLeases(ctx, []string{"asked", "free"}, guards([]string{"asked", "free"}), "b", ttl)
	if want := []bool{false, true}; err != nil || !slices.Equal(takenOf(ls), want) {
		t.Fatalf("TakeLeases(b) = %v, %v; want %v, nil", takenOf(ls), err, want)
	}
	for k, want := range map[string]string{"asked": "a*", "quiet": "a", "free": "b"} {
		if got := holder(t, rdb, prefix+k); got != want {
			t.Errorf("%s holds %q, want %q", k, got, want)
		}
		if d := pttl(t, rdb, prefix+k); d <= 0 || d > ttl {
			t.Errorf("PTTL of %s = %v, want in (0, %v]", k, d, ttl)
		}
	}
}

// TestTakeLeasesMany: one call over many keys, some held by another token,
// one repeated; results in the order of the keys.
func TestTakeLeasesMany(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	const n = 30
	var keys, others []string
	for i := range n {
		keys = append(keys, fmt.Sprint("\x00lease:k", i))
		if i%3 == 0 {
			others = append(others, keys[i])
		}
	}
	if ls, err := s.TakeLeases(ctx, others, guards(others), "other", 20*time.Second); err != nil || slices.Contains(takenOf(ls), false) {
		t.Fatalf("TakeLeases(other) = %v, %v; want all taken", takenOf(ls), err)
	}
	const ttl = 10 * time.Second
	mine := append(slices.Clone(keys), keys[1])
	ls, err := s.TakeLeases(ctx, mine, guards(mine), "me", ttl)
	if err != nil {
		t.Fatalf("TakeLeases(me): %v", err)
	}
	if len(ls) != n+1 {
		t.Fatalf("TakeLeases(me): %d results, want %d", len(ls), n+1)
	}
	if i := slices.IndexFunc(ls, func(l tier.Lease) bool { return l.Value != nil }); i >= 0 {
		t.Errorf("[%d].Value: got %q, want nil (nothing guarded)", i, ls[i].Value)
	}
	for i := range n {
		// The others' leases were asked for; so was keys[1], repeated:
		// its second take found it held.
		want, wantHolder := i%3 != 0, "me"
		switch {
		case !want:
			wantHolder = "other*"
		case i == 1:
			wantHolder = "me*"
		}
		if ls[i].Taken != want {
			t.Errorf("[%d].Taken: got %v, want %v", i, ls[i].Taken, want)
		}
		switch {
		case want && ls[i].Left != 0:
			t.Errorf("[%d].Left of a taken lease: got %v, want 0", i, ls[i].Left)
		case !want && (ls[i].Left <= 15*time.Second || ls[i].Left > 20*time.Second):
			t.Errorf("[%d].Left: got %v, want in (15s, 20s] (the other lease's)", i, ls[i].Left)
		}
		if got := holder(t, rdb, prefix+keys[i]); got != wantHolder {
			t.Errorf("%q holds %q, want %q", keys[i], got, wantHolder)
		}
		if d := pttl(t, rdb, prefix+keys[i]); d <= 0 {
			t.Errorf("PTTL of %q = %v, want a lifetime", keys[i], d)
		}
	}
	if ls[n].Taken || ls[n].Left <= 0 || ls[n].Left > ttl {
		t.Errorf("repeated key: got taken %v, left %v; want false, in (0, %v]", ls[n].Taken, ls[n].Left, ttl)
	}
}

func TestTakeLeaseWithoutExpiry(t *testing.T) {
	// A key that has no expiry (not one a take wrote) would hold its lease
	// for ever: a take gives it ttl.
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	if err := rdb.Set(ctx, prefix+"l", "stray", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const ttl = 10 * time.Second
	ls, err := s.TakeLeases(ctx, []string{"l"}, []string{"g:l"}, "a", ttl)
	if err != nil || len(ls) != 1 || ls[0].Taken || ls[0].Left != ttl {
		t.Fatalf("TakeLeases over a key without expiry = %+v, %v; want not taken, Left %v, nil", ls, err, ttl)
	}
	if d := pttl(t, rdb, prefix+"l"); d <= 0 || d > ttl {
		t.Errorf("PTTL after the take = %v, want in (0, %v]", d, ttl)
	}
	if got := holder(t, rdb, prefix+"l"); got != "stray*" {
		t.Errorf("after the take, the key holds %q, want \"stray*\" (marked)", got)
	}
}

func TestTakeLeasesConcurrent(t *testing.T) {
	s, rdb, prefix := newStore(t)
	const takers = 16
	start := make(chan struct{})
	results := make(chan bool, takers)
	var wg sync.WaitGroup
	for i := range takers {
		wg.Go(func() {
			<-start
			ls, err := s.TakeLeases(t.Context(), []string{"l"}, []string{"g:l"}, fmt.Sprint("t", i), time.Minute)
			if err != nil {
				t.Errorf("taker %d: %v", i, err)
				return
			}
			if !ls[0].Taken && ls[0].Left <= 0 {
				t.Errorf("taker %d: not taken, left %v; want > 0", i, ls[0].Left)
			}
			results <- ls[0].Taken
		})
	}
	close(start)
	wg.Wait()
	close(results)
	n := 0
	for taken := range results {
		if taken {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d of %d takers took the lease, want 1", n, takers)
	}
	if got := holder(t, rdb, prefix+"l"); !strings.HasPrefix(got, "t") {
		t.Errorf("lease holds %q, want a taker's token", got)
	}
}

func TestExtendLeases(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	if _, err := s.TakeLeases(ctx, []string{"l1", "l2"}, []string{"g:l1", "g:l2"}, "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TakeLeases(ctx, []string{"l3"}, []string{"g:l3"}, "b", time.Second); err != nil {
		t.Fatal(err)
	}
	held, err := s.ExtendLeases(ctx, []string{"l1", "l3", "missing", "l2"}, "a", time.Minute)
	if want := []bool{true, false, false, true}; err != nil || !slices.Equal(held, want) {
		t.Fatalf("ExtendLeases(a) = %v, %v; want %v, nil", held, err, want)
	}
	for _, k := range []string{"l1", "l2"} {
		if d := pttl(t, rdb, prefix+k); d <= 50*time.Second || d > time.Minute {
			t.Errorf("PTTL of %s after its holder extended it = %v, want in (50s, 1m]", k, d)
		}
	}
	// A stranger's lease is left as it was, and no lease is made.
	if d := pttl(t, rdb, prefix+"l3"); d <= 0 || d > time.Second {
		t.Errorf("PTTL of l3 after a stranger's extend = %v, want in (0, 1s]", d)
	}
	if got := holder(t, rdb, prefix+"l3"); got != "b" {
		t.Errorf("l3 holds %q, want \"b\"", got)
	}
	if d := pttl(t, rdb, prefix+"missing"); d != -2 {
		t.Errorf("PTTL of missing after an extend = %v, want -2 (missing)", d)
	}
	// Shorter is allowed too: the lifetime is set, not added to.
	if held, err := s.ExtendLeases(ctx, []string{"l1"}, "a", 2*time.Second); err != nil || !held[0] {
		t.Fatalf("ExtendLeases(a, 2s) = %v, %v; want [true], nil", held, err)
	}
	if d := pttl(t, rdb, prefix+"l1"); d <= 0 || d > 2*time.Second {
		t.Errorf("PTTL of l1 after an extend to 2s = %v, want in (0, 2s]", d)
	}
	// A lease asked for is still its holder's: extended, and still marked.
	askFor(t, s, "l2")
	if held, err := s.ExtendLeases(ctx, []string{"l2"}, "a", 2*time.Minute); err != nil || !held[0] {
		t.Fatalf("ExtendLeases(a) of a marked lease = %v, %v; want [true], nil", held, err)
	}
	if got := holder(t, rdb, prefix+"l2"); got != "a*" {
		t.Errorf("l2 after its holder extended it holds %q, want \"a*\"", got)
	}
	if d := pttl(t, rdb, prefix+"l2"); d <= 110*time.Second || d > 2*time.Minute {
		t.Errorf("PTTL of the marked l2 after an extend to 2m = %v, want in (110s, 2m]", d)
	}
}

func TestReleaseLeases(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 20)
	const ttl = time.Minute
	take := func(token string, leases ...string) {
		t.Helper()
		if ls, err := s.TakeLeases(ctx, leases, guards(leases), token, ttl); err != nil || slices.Contains(takenOf(ls), false) {
			t.Fatalf("TakeLeases(%s, %q) = %v, %v; want all taken", token, leases, takenOf(ls), err)
		}
	}
	release := func(token string, leases []string, channel, msg string) {
		t.Helper()
		if err := s.ReleaseLeases(ctx, leases, token, []byte(msg), tier.Feed{Channel: channel}); err != nil {
			t.Fatalf("ReleaseLeases(%s, %q): %v", token, leases, err)
		}
	}
	heard := func(want string) {
		t.Helper()
		if got := wait(t, msgs, 1); got[0] != want {
			t.Errorf("message: got %q, want %q", got[0], want)
		}
	}
	holds := func(lease, want string) {
		t.Helper()
		if got := holder(t, rdb, prefix+lease); got != want {
			t.Errorf("%s holds %q, want %q", lease, got, want)
		}
	}
	take("a", "l1", "l2", "l3", "l4", "l5", "l6")

	// A stranger releases nothing and marks nothing; as its leases are not
	// held under its token, someone may wait: its message goes out.
	release("b", []string{"l1", "l2"}, channel, "m1")
	heard("m1")
	holds("l1", "a")
	holds("l2", "a")

	// The holder's release of leases no one asked for deletes them and
	// publishes nothing.
	release("a", []string{"l1", "l2"}, channel, "not sent")
	quiet(t, rdb, "", channel, msgs, "release of leases not asked for")
	for _, k := range []string{"l1", "l2"} {
		if d := pttl(t, rdb, prefix+k); d != -2 {
			t.Errorf("PTTL of %s after its holder released it = %v, want -2 (missing)", k, d)
		}
	}

	// A lease named twice is released once: the second name finds it gone
	// by the first, not released by someone else.
	release("a", []string{"l6", "l6"}, channel, "not sent")
	quiet(t, rdb, "", channel, msgs, "release of a lease named twice")
	holds("l6", "")

	// Asked for, a lease is marked and still its holder's; its release,
	// with others not asked for, deletes them all and publishes once.
	askFor(t, s, "l3")
	holds("l3", "a*")
	if d := pttl(t, rdb, prefix+"l3"); d <= 0 || d > ttl {
		t.Errorf("PTTL of the marked l3 = %v, want in (0, %v] (its own)", d, ttl)
	}
	release("a", []string{"l4", "l3"}, channel, "m2")
	heard("m2")
	quiet(t, rdb, "", channel, msgs, "one message for a release of many leases")
	holds("l3", "")
	holds("l4", "")

	// A lease no longer held under the token (expired, or another's since)
	// may be waited for: its holder's release announces, and leaves
	// another's lease as it is, unmarked.
	release("a", []string{"gone"}, channel, "m3")
	heard("m3")
	take("c", "l1")
	release("a", []string{"l1"}, channel, "m4")
	heard("m4")
	holds("l1", "c")

	// No channel: nothing published, even for a lease asked for.
	askFor(t, s, "l5")
	release("a", []string{"l5"}, "", "not sent")
	holds("l5", "")
	quiet(t, rdb, "", channel, msgs, "release without a channel")

	// Released, a lease can be taken by another.
	take("b", "l2", "l3", "l5")
}

func TestLeaseExpires(t *testing.T) {
	srv.NeedReal(t) // miniredis expires keys only when told to
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	if ls, err := s.TakeLeases(ctx, []string{"l"}, []string{"g:l"}, "a", 30*time.Millisecond); err != nil || !ls[0].Taken {
		t.Fatalf("TakeLeases = %v, %v; want [true], nil", takenOf(ls), err)
	}
	// Redis expires it by itself; wait for that.
	deadline := time.Now().Add(5 * time.Second)
	for pttl(t, rdb, prefix+"l") != -2 {
		if time.Now().After(deadline) {
			t.Fatal("lease with a 30ms ttl still there after 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if held, err := s.ExtendLeases(ctx, []string{"l"}, "a", time.Minute); err != nil || held[0] {
		t.Errorf("ExtendLeases of an expired lease = %v, %v; want [false], nil", held, err)
	}
	// Someone may have waited for it and seen it expire: its holder's
	// release, never asked for, announces all the same.
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 1)
	if err := s.ReleaseLeases(ctx, []string{"l"}, "a", []byte("expired"), tier.Feed{Channel: channel}); err != nil {
		t.Fatalf("ReleaseLeases of an expired lease: %v", err)
	}
	if got := wait(t, msgs, 1); got[0] != "expired" {
		t.Errorf("message: got %q, want \"expired\"", got[0])
	}
	if ls, err := s.TakeLeases(ctx, []string{"l"}, []string{"g:l"}, "b", time.Minute); err != nil || !ls[0].Taken {
		t.Errorf("TakeLeases(b) after expiry = %v, %v; want [true], nil", takenOf(ls), err)
	}
}

// TestLeasesBadArguments: a lease ttl under a millisecond, or guards that
// do not match the keys, fail without a round trip. (A write that releases
// a lease takes any TTL, as every write does: zero or less is no expiry.)
func TestLeasesBadArguments(t *testing.T) {
	s, rdb, _ := newStore(t)
	var c counter
	rdb.AddHook(&c)
	ctx := t.Context()
	for _, ttl := range []time.Duration{0, -time.Second, time.Millisecond - 1} {
		for _, keys := range [][]string{{"l"}, nil} {
			ls, err := s.TakeLeases(ctx, keys, guards(keys), "a", ttl)
			if err == nil || ls != nil || !strings.HasPrefix(err.Error(), "l2: ") {
				t.Errorf("TakeLeases(%d keys, ttl %v) = %+v, %v; want nil and an l2 error", len(keys), ttl, ls, err)
			}
			held, err := s.ExtendLeases(ctx, keys, "a", ttl)
			if err == nil || held != nil || !strings.HasPrefix(err.Error(), "l2: ") {
				t.Errorf("ExtendLeases(%d keys, ttl %v) = %v, %v; want an l2 error", len(keys), ttl, held, err)
			}
		}
	}
	// One guard per key.
	for _, g := range [][]string{nil, {"g:1"}, {"g:1", "g:2", "g:3"}} {
		keys := []string{"l1", "l2"}
		if len(g) == 1 {
			keys = nil
		}
		ls, err := s.TakeLeases(ctx, keys, g, "a", time.Second)
		if err == nil || ls != nil || !strings.HasPrefix(err.Error(), "l2: ") {
			t.Errorf("TakeLeases(%d keys, %d guards) = %+v, %v; want nil and an l2 error", len(keys), len(g), ls, err)
		}
	}
	if c.String() != "commands [], pipelines []" {
		t.Errorf("sent %v; want nothing", &c)
	}
}

func TestLeasesNoKeys(t *testing.T) {
	s, rdb, prefix := newStore(t)
	var c counter
	rdb.AddHook(&c)
	ctx := t.Context()
	if ls, err := s.TakeLeases(ctx, nil, nil, "a", time.Second); err != nil || len(ls) != 0 {
		t.Errorf("TakeLeases(nil) = %+v, %v; want none, nil", ls, err)
	}
	if held, err := s.ExtendLeases(ctx, []string{}, "a", time.Second); err != nil || len(held) != 0 {
		t.Errorf("ExtendLeases([]) = %v, %v; want none, nil", held, err)
	}
	if err := s.ReleaseLeases(ctx, nil, "a", nil, tier.Feed{}); err != nil {
		t.Errorf("ReleaseLeases(nil, no channel): %v", err)
	}
	if c.String() != "commands [], pipelines []" {
		t.Errorf("sent %v; want nothing", &c)
	}

	// With a channel too: no lease, so no one waits for its release.
	if err := s.ReleaseLeases(ctx, nil, "a", []byte("m"), tier.Feed{Channel: prefix + "ch"}); err != nil {
		t.Errorf("ReleaseLeases(nil, channel): %v", err)
	}
	if c.String() != "commands [], pipelines []" {
		t.Errorf("sent %v; want nothing", &c)
	}
}

// TestLeasesOneRoundTrip: each call is one round trip on one server: one
// pipeline of one script per key for a take (the read of its guarded key
// included) or an extend, one script over every lease for ReleaseLeases
// and for a write with Lease, each publishing within, only when a lease
// was asked for; after SCRIPT FLUSH, the scripts go again by EVAL.
func TestLeasesOneRoundTrip(t *testing.T) {
	s, rdb, prefix := newStore(t)
	var c counter
	rdb.AddHook(&c)
	ctx := t.Context()
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 9)
	keys := []string{"a", "b", "c"}
	for _, k := range guards(keys) {
		if _, err := s.Write(ctx, []tier.Write{{Key: k, Value: []byte("v" + k), TTL: time.Minute}}, tier.Feed{}); err != nil {
			t.Fatal(err)
		}
	}
	// hold makes "tok" hold every lease of keys afresh, and asked asked
	// for.
	hold := func(asked ...string) func() {
		return func() {
			if err := s.ReleaseLeases(ctx, keys, "tok", nil, tier.Feed{}); err != nil {
				t.Fatal(err)
			}
			if ls, err := s.TakeLeases(ctx, keys, guards(keys), "tok", time.Minute); err != nil || slices.Contains(takenOf(ls), false) {
				t.Fatalf("TakeLeases(tok) = %v, %v; want all taken", takenOf(ls), err)
			}
			if len(asked) > 0 {
				askFor(t, s, asked...)
			}
		}
	}
	const (
		pipeline = "commands [], pipelines [[evalsha evalsha evalsha]]"
		reloaded = "commands [], pipelines [[evalsha evalsha evalsha] [eval eval eval]]"
		script   = "commands [evalsha], pipelines []"
		again    = "commands [evalsha eval], pipelines []"
	)
	release := func() error { return s.ReleaseLeases(ctx, keys, "tok", []byte("m"), tier.Feed{Channel: channel}) }
	fill := func() error {
		_, err := s.Write(ctx, []tier.Write{{Key: "v", Value: []byte("v"), TTL: time.Minute, If: tier.IfAbsent,
			Lease: "a", Token: "tok", Msg: []byte("m"), Else: []byte("m")}}, tier.Feed{Channel: channel})
		return err
	}
	calls := []struct {
		name           string
		prep           func() // before the call, not counted
		run            func() error
		want, reloaded string
		released       []string // leases the call releases
	}{
		{"TakeLeases", func() {
			if err := s.ReleaseLeases(ctx, keys, "tok", nil, tier.Feed{}); err != nil {
				t.Fatal(err)
			}
		}, func() error {
			ls, err := s.TakeLeases(ctx, keys, guards(keys), "tok", time.Minute)
			if err == nil && (slices.Contains(takenOf(ls), false) || len(ls) != 3 || string(ls[0].Value) != "vg:a") {
				err = fmt.Errorf("TakeLeases = %+v; want all taken, \"vg:a\" first", ls)
			}
			return err
		}, pipeline, reloaded, nil},
		{"ExtendLeases", hold("b"), func() error { _, err := s.ExtendLeases(ctx, keys, "tok", time.Minute); return err }, pipeline, reloaded, nil},
		{"ReleaseLeases, none asked for", hold(), release, script, again, keys},
		{"ReleaseLeases, one asked for", hold("b"), release, script, again, keys},
		{"Write with Lease, not asked for", hold(), fill, script, again, []string{"a"}},
		{"Write with Lease, asked for", hold("a"), fill, script, again, []string{"a"}},
	}
	for _, flush := range []bool{false, true} {
		for _, call := range calls {
			call.prep()
			if err := call.run(); err != nil { // loads the script
				t.Fatalf("%s: %v", call.name, err)
			}
			call.prep()
			if flush {
				if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatalf("SCRIPT FLUSH: %v", err)
				}
			}
			c.reset()
			if err := call.run(); err != nil {
				t.Fatalf("%s (after SCRIPT FLUSH: %v): %v", call.name, flush, err)
			}
			want := call.want
			if flush {
				want = call.reloaded
			}
			if got := c.String(); got != want {
				t.Errorf("%s (after SCRIPT FLUSH: %v): sent %s; want %s", call.name, flush, got, want)
			}
			for _, k := range call.released {
				if got := holder(t, rdb, prefix+k); got != "" {
					t.Errorf("%s (after SCRIPT FLUSH: %v): lease %s holds %q, want it released", call.name, flush, k, got)
				}
			}
		}
	}
	// A message for each call of a lease asked for, none for the others.
	if got, want := wait(t, msgs, 8), slices.Repeat([]string{"m"}, 8); !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
	quiet(t, rdb, "", channel, msgs, "calls with leases not asked for")
	if err := s.ReleaseLeases(ctx, keys, "tok", nil, tier.Feed{}); err != nil {
		t.Fatal(err)
	}
	// The scripts did their work after the flush too.
	ls, err := s.TakeLeases(ctx, keys, guards(keys), "tok", time.Minute)
	if err != nil || slices.Contains(takenOf(ls), false) {
		t.Fatalf("TakeLeases = %v, %v; want all taken", takenOf(ls), err)
	}
	for i, k := range guards(keys) {
		if string(ls[i].Value) != "v"+k {
			t.Errorf("[%d].Value: got %q, want %q", i, ls[i].Value, "v"+k)
		}
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
	if held, err := s.ExtendLeases(ctx, keys, "tok", time.Hour); err != nil || slices.Contains(held, false) {
		t.Errorf("ExtendLeases after SCRIPT FLUSH = %v, %v; want all held", held, err)
	}
	if d := pttl(t, rdb, prefix+"a"); d <= time.Minute {
		t.Errorf("PTTL after ExtendLeases(1h) = %v, want over a minute", d)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
	if wrote, err := s.Write(ctx, []tier.Write{{Key: "w", Value: []byte("w"), TTL: time.Minute, If: tier.IfAbsent,
		Lease: "a", Token: "tok"}}, tier.Feed{}); err != nil || !wrote[0] {
		t.Errorf("Write with Lease after SCRIPT FLUSH = %v, %v; want [true], nil", wrote, err)
	}
	if got := holder(t, rdb, prefix+"a"); got != "" {
		t.Errorf("after the write with Lease, the lease holds %q, want it released", got)
	}
}

func TestLeasesRing(t *testing.T) {
	// A Ring shards by key on the client side: each script goes to its
	// key's shard, the guarded keys are read after the takes, and a write
	// with Lease writes, then releases, then publishes on the
	// channel's shard, where the Ring's subscribers listen.
	m1, m2 := miniredis.RunT(t), miniredis.RunT(t)
	// A Ring sends PUBLISH to its shard's client past its own hooks: the
	// shards' hook counts them.
	var shards counter
	rdb := redis.NewRing(&redis.RingOptions{
		Addrs: map[string]string{"a": m1.Addr(), "b": m2.Addr()},
		NewClient: func(opt *redis.Options) *redis.Client {
			c := redis.NewClient(opt)
			c.AddHook(&shards)
			return c
		},
	})
	publishes := func() int {
		shards.mu.Lock()
		defer shards.mu.Unlock()
		n := 0
		for _, name := range shards.cmds {
			if name == "publish" {
				n++
			}
		}
		return n
	}
	t.Cleanup(func() { rdb.Close() })
	s := l2.New(rdb, l2.Options{Prefix: "p:"})
	ctx := t.Context()
	var keys []string
	for i := range 20 {
		keys = append(keys, fmt.Sprint("l", i))
	}
	gs := guards(keys)
	for _, g := range gs[:10] {
		if _, err := s.Write(ctx, []tier.Write{{Key: g, Value: []byte("v" + g), TTL: time.Minute}}, tier.Feed{}); err != nil {
			t.Fatal(err)
		}
	}
	// Load the script on both shards.
	if _, err := s.TakeLeases(ctx, keys, gs, "warm", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLeases(ctx, keys, "warm", nil, tier.Feed{}); err != nil {
		t.Fatal(err)
	}
	var c counter
	rdb.AddHook(&c)
	ls, err := s.TakeLeases(ctx, keys, gs, "a", time.Minute)
	if err != nil || slices.Contains(takenOf(ls), false) {
		t.Fatalf("TakeLeases(a) = %v, %v; want all taken", takenOf(ls), err)
	}
	for i, g := range gs {
		want := []byte("v" + g)
		if i >= 10 {
			want = nil
		}
		if !bytes.Equal(ls[i].Value, want) || (ls[i].Value == nil) != (want == nil) {
			t.Errorf("[%d].Value: got %q, want %q", i, ls[i].Value, want)
		}
	}
	if _, pipes := c.counts(); pipes != 2 {
		t.Errorf("TakeLeases sent %v; want 2 pipelines, the takes and the reads", &c)
	}
	if len(m1.Keys()) == 0 || len(m2.Keys()) == 0 {
		t.Fatalf("leases per shard: %d and %d; want both used", len(m1.Keys()), len(m2.Keys()))
	}
	c.reset()
	ls, err = s.TakeLeases(ctx, keys, gs, "b", time.Minute)
	if err != nil || slices.ContainsFunc(ls, func(l tier.Lease) bool { return l.Taken || l.Left <= 0 }) {
		t.Fatalf("TakeLeases(b) = %+v, %v; want none taken, all with time left", ls, err)
	}
	if slices.ContainsFunc(ls, func(l tier.Lease) bool { return l.Value != nil }) {
		t.Errorf("TakeLeases(b) = %+v; want no Value for leases not taken", ls)
	}
	if _, pipes := c.counts(); pipes != 1 {
		t.Errorf("TakeLeases taking nothing sent %v; want 1 pipeline, no reads", &c)
	}
	for _, k := range keys {
		if got := holder(t, rdb, "p:"+k); got != "a*" {
			t.Errorf("after b's failed take, %s holds %q, want \"a*\"", k, got)
		}
	}
	if held, err := s.ExtendLeases(ctx, keys, "a", time.Hour); err != nil || slices.Contains(held, false) {
		t.Fatalf("ExtendLeases(a) = %v, %v; want all held", held, err)
	}

	// Writes with Lease, with a subscriber of the Ring, which listens on the
	// channel's shard: the fills' leases are on the other shard.
	shard := func(key string) string {
		c, err := rdb.GetShardClientForKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr
	}
	var away []int // leases of values not set, then of values set
	for _, from := range []int{10, 0} {
		for i := from; i < from+10; i++ {
			if shard("p:"+keys[i]) != shard("fills") {
				away = append(away, i)
				break
			}
		}
	}
	if len(away) != 2 {
		t.Fatalf("leases on another shard than the channel's: %v; want one of l0-l9 and one of l10-l19", away)
	}
	fresh, set := away[0], away[1]
	ps := rdb.Subscribe(ctx, "fills")
	t.Cleanup(func() { ps.Close() })
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	msgs := receive(ps, 10)
	shards.reset()
	if wrote, err := s.Write(ctx, []tier.Write{{Key: gs[fresh], Value: []byte("new"), TTL: time.Minute,
		If: tier.IfAbsent, Lease: keys[fresh], Token: "a", Msg: []byte("stored"), Else: []byte("unstored")}},
		tier.Feed{Channel: "fills"}); err != nil || !wrote[0] {
		t.Fatalf("Write IfAbsent with Lease = %v, %v; want [true], nil", wrote, err)
	}
	if wrote, err := s.Write(ctx, []tier.Write{{Key: gs[set], Value: []byte("new"), TTL: time.Minute, If: tier.IfEqual,
		Old: []byte("old"), Lease: keys[set], Token: "a", Msg: []byte("stored"), Else: []byte("unstored")}},
		tier.Feed{Channel: "fills"}); err != nil || wrote[0] {
		t.Fatalf("Write IfEqual with Lease, a wrong Old = %v, %v; want [false], nil", wrote, err)
	}
	if got, want := wait(t, msgs, 2), []string{"stored", "unstored"}; !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
	if n := publishes(); n != 2 {
		t.Errorf("two writes with Lease, of leases asked for, sent %d PUBLISH, want 2", n)
	}
	if vs, err := s.Get(ctx, []string{gs[fresh]}); err != nil || string(vs[0]) != "new" {
		t.Errorf("Get(%s) = %q, %v; want [\"new\"]", gs[fresh], vs, err)
	}
	if vs, err := s.Get(ctx, []string{gs[set]}); err != nil || string(vs[0]) != "v"+gs[set] {
		t.Errorf("Get(%s) = %q, %v; want [%q]", gs[set], vs, err, "v"+gs[set])
	}
	for _, i := range []int{fresh, set} {
		if vs, err := s.Get(ctx, []string{keys[i]}); err != nil || vs[0] != nil {
			t.Errorf("lease %s after the holder's write: Get = %q, %v; want [nil]: released", keys[i], vs, err)
		}
	}

	// Leases no one asked for: released, and no PUBLISH.
	var quietKeys []string
	for i := range 10 {
		quietKeys = append(quietKeys, fmt.Sprint("q", i))
	}
	if ls, err := s.TakeLeases(ctx, quietKeys, guards(quietKeys), "q", time.Minute); err != nil || slices.Contains(takenOf(ls), false) {
		t.Fatalf("TakeLeases(q) = %v, %v; want all taken", takenOf(ls), err)
	}
	shards.reset()
	if err := s.ReleaseLeases(ctx, quietKeys[:9], "q", []byte("not sent"), tier.Feed{Channel: "fills"}); err != nil {
		t.Fatalf("ReleaseLeases(q): %v", err)
	}
	if n := publishes(); n != 0 {
		t.Errorf("ReleaseLeases of leases not asked for sent %d PUBLISH, want none", n)
	}
	c.reset()
	if wrote, err := s.Write(ctx, []tier.Write{{Key: "g:q9", Value: []byte("q"), TTL: time.Minute, If: tier.IfAbsent,
		Lease: quietKeys[9], Token: "q", Msg: []byte("stored"), Else: []byte("unstored")}}, tier.Feed{Channel: "fills"}); err != nil || !wrote[0] {
		t.Fatalf("Write of g:q9 with Lease = %v, %v; want [true], nil", wrote, err)
	}
	if want := "commands [set evalsha], pipelines []"; c.String() != want {
		t.Errorf("Write with Lease, not asked for, sent %v; want %s", &c, want)
	}
	if n := publishes(); n != 0 {
		t.Errorf("Write with Lease, not asked for, sent %d PUBLISH, want none", n)
	}
	quiet(t, rdb, "", "fills", msgs, "Ring: leases not asked for")
	for _, k := range quietKeys {
		if got := holder(t, rdb, "p:"+k); got != "" {
			t.Errorf("%s holds %q, want it released", k, got)
		}
	}

	// The leases asked for: one PUBLISH, after the scripts.
	shards.reset()
	if err := s.ReleaseLeases(ctx, keys, "a", []byte("released"), tier.Feed{Channel: "fills"}); err != nil {
		t.Fatalf("ReleaseLeases(a): %v", err)
	}
	if n := publishes(); n != 1 {
		t.Errorf("ReleaseLeases of leases asked for sent %d PUBLISH, want 1", n)
	}
	if got := wait(t, msgs, 1); got[0] != "released" {
		t.Errorf("message: got %q, want \"released\"", got[0])
	}
	if n := len(m1.Keys()) + len(m2.Keys()); n != 12 {
		t.Errorf("%d keys left after the release, want 12 (the values)", n)
	}
}

// TestLeasesHistory runs one history of lease calls on a Store and checks
// what it answers, marks, publishes (and leaves unpublished) and leaves
// against testdata/leases.golden: the history of hybridtest.Remote, the
// test double of package hybrid, recorded while the Store was checked
// against it.
func TestLeasesHistory(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	const ttl = time.Minute
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 100)
	// heard publishes "end" and returns the messages on channel before it.
	heard := func() []string {
		if err := rdb.Publish(ctx, channel, "end").Err(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			m := wait(t, msgs, 1)[0]
			if m == "end" {
				return got
			}
			got = append(got, m)
		}
	}
	var out []string
	show := func(vs [][]byte) string {
		var ss []string
		for _, v := range vs {
			if v == nil {
				ss = append(ss, "nil")
			} else {
				ss = append(ss, fmt.Sprintf("%q", v))
			}
		}
		return "[" + strings.Join(ss, " ") + "]"
	}
	take := func(token string, keys ...string) {
		gs := make([]string, len(keys))
		for i, k := range keys {
			gs[i] = "v:" + k
		}
		ls, err := s.TakeLeases(ctx, keys, gs, token, ttl)
		var leftOK []bool
		var values [][]byte
		for _, l := range ls {
			leftOK = append(leftOK, l.Left > 0 && l.Left <= ttl)
			values = append(values, l.Value)
		}
		out = append(out, fmt.Sprintf("take %s %q: %v, left in (0, ttl] %v, values %s, %v", token, keys, takenOf(ls), leftOK, show(values), err))
	}
	extend := func(token string, keys ...string) {
		held, err := s.ExtendLeases(ctx, keys, token, ttl)
		out = append(out, fmt.Sprintf("extend %s %q: %v, %v", token, keys, held, err))
	}
	release := func(token string, announce bool, keys ...string) {
		ch := ""
		if announce {
			ch = channel
		}
		err := s.ReleaseLeases(ctx, keys, token, []byte(fmt.Sprintf("released by %s %q", token, keys)), tier.Feed{Channel: ch})
		out = append(out, fmt.Sprintf("release %s %q (announce %v): %v", token, keys, announce, err))
		out = append(out, fmt.Sprintf("heard %q", heard()))
	}
	fill := func(token, key string, old []byte, value string, announce bool) {
		ch := ""
		if announce {
			ch = channel
		}
		w := tier.Write{Key: "v:" + key, Value: []byte(value), TTL: ttl, If: tier.IfAbsent, Lease: key, Token: token,
			Msg: []byte("stored " + value), Else: []byte("unstored " + value)}
		if old != nil {
			w.If, w.Old = tier.IfEqual, old
		}
		stored, err := s.Write(ctx, []tier.Write{w}, tier.Feed{Channel: ch})
		out = append(out, fmt.Sprintf("fill %s %s old %s with %q (announce %v): %v, %v", token, key, show([][]byte{old}), value, announce, slices.Contains(stored, true), err))
		out = append(out, fmt.Sprintf("heard %q", heard()))
	}
	state := func() {
		var live []string
		for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
			for _, k := range []string{k, "v:" + k} {
				if vs, err := s.Get(ctx, []string{k}); err != nil {
					t.Fatal(err)
				} else if vs[0] != nil {
					live = append(live, k+"="+string(vs[0]))
				}
			}
		}
		out = append(out, fmt.Sprintf("live %q", live))
	}
	for k, v := range map[string]string{"v:b": "B", "v:e": ""} {
		if _, err := s.Write(ctx, []tier.Write{{Key: k, Value: []byte(v), TTL: ttl}}, tier.Feed{}); err != nil {
			t.Fatal(err)
		}
	}
	take("t1", "a", "b", "c", "f", "g", "h")
	take("t2", "b", "d")      // b asked for; d taken
	take("t1", "a", "e", "a") // a found held, if by its own holder; e taken; a repeated
	take("t3", "b")           // asked for again: still one mark
	state()
	extend("t1", "a", "b", "d", "missing", "c") // marked or not, t1's
	extend("t2", "d")
	state()
	fill("t1", "a", nil, "A1", true)          // absent: written; asked for: announced
	fill("t1", "b", nil, "B1", true)          // present: not written; asked for: announced
	fill("t1", "c", []byte("X"), "C1", true)  // missing, old given: not written; not asked for: silent
	fill("t2", "e", []byte{}, "E1", true)     // empty, old empty: written; another's lease stays: announced
	fill("t1", "b", []byte("B"), "B2", true)  // old matches; lease gone already: announced
	fill("t1", "b", []byte("B"), "B3", false) // no channel
	fill("t1", "f", nil, "F1", true)          // absent: written; not asked for: silent
	state()
	take("t3", "a", "b", "d", "e", "g") // a, b taken; d, e, g asked for
	state()
	release("t1", true, "a", "d", "missing", "e") // none t1's but e (marked): announced once
	state()
	release("t3", true, "a", "a") // named twice, not asked for: silent
	release("t1", true, "g", "h") // g asked for: announced
	release("t2", false, "d")     // asked for, no channel: silent
	take("t4", "h")
	release("t4", true, "h") // not asked for: silent
	release("t4", true)      // no keys: silent, no round trip
	state()
	checkGolden(t, "testdata/leases.golden", out)
}

// checkTakeLeasesValues checks the values TakeLeases returns through s
// (whose keys have prefix in rdb): what each guarded key held when its
// lease was taken, nil for nothing, and nil for every lease not taken.
func checkTakeLeasesValues(t *testing.T, s *l2.Store, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := t.Context()
	keys := []string{"l:0", "l:1", "l:2", "l:3", "l:4", "l:4", "l:5"}
	gs := []string{"v:0", "v:1", "v:2", "v:3", "v:4", "v:4", "v:5"}
	for k, v := range map[string]string{"v:0": "zero", "v:1": "", "v:3": "three", "v:4": "four", "v:5": "five"} {
		if _, err := s.Write(ctx, []tier.Write{{Key: k, Value: []byte(v), TTL: time.Minute}}, tier.Feed{}); err != nil {
			t.Fatal(err)
		}
	}
	// l:3 is held by another; l:5 is a lease this token holds already.
	if ls, err := s.TakeLeases(ctx, []string{"l:3"}, []string{"v:3"}, "other", time.Minute); err != nil || !ls[0].Taken {
		t.Fatalf("TakeLeases(other) = %v, %v; want [true], nil", takenOf(ls), err)
	}
	if ls, err := s.TakeLeases(ctx, []string{"l:5"}, []string{"v:5"}, "me", time.Minute); err != nil || !ls[0].Taken || string(ls[0].Value) != "five" {
		t.Fatalf("TakeLeases(me, l:5) = %+v, %v; want taken, Value \"five\", nil", ls, err)
	}
	ls, err := s.TakeLeases(ctx, keys, gs, "me", time.Minute)
	if err != nil {
		t.Fatalf("TakeLeases(me): %v", err)
	}
	if want := []bool{true, true, true, false, true, false, false}; !slices.Equal(takenOf(ls), want) {
		t.Errorf("taken: got %v, want %v", takenOf(ls), want)
	}
	want := [][]byte{[]byte("zero"), {}, nil, nil, []byte("four"), nil, nil}
	if len(ls) != len(want) {
		t.Fatalf("got %d results, want %d", len(ls), len(want))
	}
	for i := range want {
		if v := ls[i].Value; !bytes.Equal(v, want[i]) || (v == nil) != (want[i] == nil) {
			t.Errorf("[%d].Value (%s, guarding %s): got %q (nil: %v), want %q (nil: %v)",
				i, keys[i], gs[i], v, v == nil, want[i], want[i] == nil)
		}
		if ls[i].Taken == (ls[i].Left != 0) {
			t.Errorf("[%d].Left: got %v with Taken %v", i, ls[i].Left, ls[i].Taken)
		}
	}
	// The leases are the tokens, marked where a take found them held (l:4
	// repeated, l:5 already held); the guarded keys are unchanged.
	for i, k := range keys {
		wantHolder := "me"
		switch k {
		case "l:3":
			wantHolder = "other*"
		case "l:4", "l:5":
			wantHolder = "me*"
		}
		if got := holder(t, rdb, prefix+k); got != wantHolder {
			t.Errorf("lease %s holds %q, want %q", k, got, wantHolder)
		}
		if vs, err := s.Get(ctx, []string{gs[i]}); err != nil || (gs[i] != "v:2" && vs[0] == nil) || (gs[i] == "v:2" && vs[0] != nil) {
			t.Errorf("Get(%s) after the takes = %q, %v", gs[i], vs, err)
		}
	}
}

func TestTakeLeasesValues(t *testing.T) {
	s, rdb, prefix := newStore(t)
	checkTakeLeasesValues(t, s, rdb, prefix)
}

// checkTakeSeesFill checks that a guarded key is read after its lease is
// taken. In each round a holder takes a lease, then fills its key and
// releases it with one write with Lease, while a taker tries to take the
// lease until it does: it must find the holder's value every time it takes it
// (the fill writes before it releases). A read made before the take, or
// alongside it on another node, would sometimes find nothing.
func checkTakeSeesFill(t *testing.T, s *l2.Store, rounds int) {
	t.Helper()
	ctx := t.Context()
	for round := range rounds {
		key, lease := fmt.Sprint("user:", round), fmt.Sprint("ns:\x00lease:user:", round)
		value := []byte(fmt.Sprint("value ", round))
		ls, err := s.TakeLeases(ctx, []string{lease}, []string{key}, "holder", time.Minute)
		if err != nil || !ls[0].Taken || ls[0].Value != nil {
			t.Fatalf("round %d: holder's TakeLeases = %+v, %v; want taken, no Value, nil", round, ls, err)
		}
		start := make(chan struct{})
		filled := make(chan error, 1)
		go func() {
			<-start
			wrote, err := s.Write(ctx, []tier.Write{{Key: key, Value: value, TTL: time.Minute, If: tier.IfAbsent,
				Lease: lease, Token: "holder"}}, tier.Feed{})
			if err == nil && !wrote[0] {
				err = errors.New("not written")
			}
			filled <- err
		}()
		close(start)
		deadline := time.Now().Add(10 * time.Second)
		for {
			ls, err := s.TakeLeases(ctx, []string{lease}, []string{key}, "taker", time.Minute)
			if err != nil {
				t.Fatalf("round %d: taker's TakeLeases: %v", round, err)
			}
			if ls[0].Taken {
				if !bytes.Equal(ls[0].Value, value) {
					t.Errorf("round %d: the taker took the released lease and found %q, want %q", round, ls[0].Value, value)
				}
				break
			}
			if ls[0].Value != nil {
				t.Errorf("round %d: a lease not taken came with value %q, want nil", round, ls[0].Value)
			}
			select {
			case err := <-filled: // the fill ended without releasing: say why
				if err != nil {
					t.Fatalf("round %d: Write with Lease: %v", round, err)
				}
				filled <- nil
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: lease not released after 10s", round)
			}
			time.Sleep(100 * time.Microsecond) // not a busy loop on a loaded machine
		}
		if err := <-filled; err != nil {
			t.Fatalf("round %d: Write with Lease: %v", round, err)
		}
	}
}

func TestTakeLeasesSeesFill(t *testing.T) {
	s, _, _ := newStore(t)
	checkTakeSeesFill(t, s, 50)
}

// checkWriteWithLease checks a holder's write with Lease through s (whose
// keys have prefix in rdb): which writes it makes, which leases it
// releases, and that it publishes exactly one of its two messages (Msg or
// Else) on channel, which msgs receives (rdb publishes on it too), when
// someone may wait for the lease (a taker asked for it, or it is no longer
// held under the token), and none otherwise.
func checkWriteWithLease(t *testing.T, s *l2.Store, rdb redis.UniversalClient, prefix, channel string, msgs *messages) {
	t.Helper()
	ctx := t.Context()
	const ttl = 10 * time.Second
	take := func(token string, leases ...string) {
		t.Helper()
		ls, err := s.TakeLeases(ctx, leases, guards(leases), token, 20*time.Second)
		if err != nil || slices.Contains(takenOf(ls), false) {
			t.Fatalf("TakeLeases(%s, %q) = %v, %v; want all taken", token, leases, takenOf(ls), err)
		}
	}
	set := func(key, value string) {
		t.Helper()
		if _, err := s.Write(ctx, []tier.Write{{Key: key, Value: []byte(value), TTL: time.Minute}}, tier.Feed{}); err != nil {
			t.Fatal(err)
		}
	}
	asked := []string{"lease:a", "lease:b", "lease:c", "lease:e", "lease:f", "lease:q"}
	take("me", asked...)
	take("me", "lease:u", "lease:v", "lease:w")
	take("other", "lease:s", "lease:t")
	askFor(t, s, append(asked, "lease:t")...)
	// Marked, each lease keeps its holder's lifetime.
	for _, k := range append(asked, "lease:t") {
		want := "me*"
		if k == "lease:t" {
			want = "other*"
		}
		if got := holder(t, rdb, prefix+k); got != want {
			t.Errorf("asked for, %s holds %q, want %q", k, got, want)
		}
		if d := pttl(t, rdb, prefix+k); d <= 0 || d > 20*time.Second {
			t.Errorf("asked for, PTTL of %s = %v, want in (0, 20s]", k, d)
		}
	}
	set("b", "other's")
	set("e", "")
	set("v", "there")
	set("w", "old")
	tests := []struct {
		name       string
		key        string
		old        []byte
		lease      string
		wrote      bool
		want       string // what key holds after
		wantLease  string // what lease holds after
		noChannel  bool
		silent     bool          // no one may wait: no message
		leaseAfter time.Duration // when wantLease is not empty: at most this long left
	}{
		{name: "absent", key: "a", lease: "lease:a", wrote: true, want: "a1"},
		{name: "present, old nil", key: "b", lease: "lease:b", want: "other's"},
		{name: "old matches, lease gone", key: "b", old: []byte("other's"), lease: "lease:b", wrote: true, want: "b2"},
		{name: "old does not match, lease gone", key: "b", old: []byte("other's"), lease: "lease:b", want: "b2"},
		{name: "missing, old given", key: "c", old: []byte("x"), lease: "lease:c"},
		{name: "missing, old empty, lease gone", key: "c", old: []byte{}, lease: "lease:c"},
		{name: "empty, old empty", key: "e", old: []byte{}, lease: "lease:e", wrote: true, want: "e1"},
		{name: "present, old empty", key: "e", old: []byte{}, lease: "lease:f", want: "e1"},
		{name: "a stranger's lease stays", key: "s", lease: "lease:s", wrote: true, want: "s1", wantLease: "other", leaseAfter: 20 * time.Second},
		{name: "a stranger's lease asked for stays", key: "t", lease: "lease:t", wrote: true, want: "t1", wantLease: "other*", leaseAfter: 20 * time.Second},
		{name: "no lease", key: "n", lease: "lease:none", wrote: true, want: "n1"},
		{name: "no channel", key: "q", lease: "lease:q", wrote: true, want: "q1", noChannel: true},
		{name: "not asked for, absent", key: "u", lease: "lease:u", wrote: true, want: "u1", silent: true},
		{name: "not asked for, present", key: "v", lease: "lease:v", want: "there", silent: true},
		{name: "not asked for, old matches", key: "w", old: []byte("old"), lease: "lease:w", wrote: true, want: "w1", silent: true},
	}
	for i, tt := range tests {
		value := []byte(fmt.Sprint(tt.key, i))
		if tt.wrote {
			value = []byte(tt.want)
		}
		ch := channel
		if tt.noChannel {
			ch = ""
		}
		stored, unstored := []byte("stored "+tt.name), []byte("unstored "+tt.name)
		w := tier.Write{Key: tt.key, Value: value, TTL: ttl, If: tier.IfAbsent, Lease: tt.lease, Token: "me", Msg: stored, Else: unstored}
		if tt.old != nil {
			w.If, w.Old = tier.IfEqual, tt.old
		}
		wrote, err := s.Write(ctx, []tier.Write{w}, tier.Feed{Channel: ch})
		if err != nil || wrote[0] != tt.wrote {
			t.Errorf("%s: Write = %v, %v; want [%v], nil", tt.name, wrote, err, tt.wrote)
		}
		vs, err := s.Get(ctx, []string{tt.key})
		if err != nil || (vs[0] != nil) != (tt.want != "") || string(vs[0]) != tt.want {
			t.Errorf("%s: Get(%s) = %q (nil: %v), %v; want [%q]", tt.name, tt.key, vs, vs == nil || vs[0] == nil, err, tt.want)
		}
		if tt.wrote {
			if d := pttl(t, rdb, prefix+tt.key); d <= 0 || d > ttl {
				t.Errorf("%s: PTTL of the written key = %v, want in (0, %v]", tt.name, d, ttl)
			}
		}
		if got := holder(t, rdb, prefix+tt.lease); got != tt.wantLease {
			t.Errorf("%s: lease holds %q, want %q", tt.name, got, tt.wantLease)
		}
		if tt.wantLease != "" {
			if d := pttl(t, rdb, prefix+tt.lease); d <= 0 || d > tt.leaseAfter {
				t.Errorf("%s: PTTL of the lease = %v, want in (0, %v]", tt.name, d, tt.leaseAfter)
			}
		}
		if tt.noChannel || tt.silent {
			quiet(t, rdb, prefix+tt.lease, channel, msgs, tt.name)
			continue
		}
		want := unstored
		if tt.wrote {
			want = stored
		}
		if got := wait(t, msgs, 1); got[0] != string(want) {
			t.Errorf("%s: message %q, want %q", tt.name, got[0], want)
		}
	}
	// Exactly one message each: the next is one sent now.
	quiet(t, rdb, "", channel, msgs, "after the last write with Lease")
}

// TestWriteReleasing runs checkWriteWithLease on one server.
func TestWriteReleasing(t *testing.T) {
	s, rdb, prefix := newStore(t)
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 32)
	checkWriteWithLease(t, s, rdb, prefix, channel, msgs)
}

// TestWriteReleasingAnnouncesAfter: a subscriber that hears the message of
// a write with Lease finds the value written and the lease released;
// a lease no one asked for is released without a message.
func TestWriteReleasingAnnouncesAfter(t *testing.T) {
	s, rdb, prefix := newStore(t)
	channel := prefix + "ch"
	checkFillAnnouncesAfter(t, s, rdb, subscribe(t, srv.Client(t), channel), prefix, channel, 50)
}

// publishEverywhere publishes msg on channel from every master of rdb (the
// one server, or each master of a Redis Cluster), so that a subscriber
// hears each copy after any message that master published before, and
// returns how many copies it sent.
func publishEverywhere(t *testing.T, rdb redis.UniversalClient, channel, msg string) int {
	t.Helper()
	ctx := t.Context()
	switch rdb.(type) {
	case *redis.ClusterClient, embedded:
		var n atomic.Int64
		err := clusterOf(rdb).ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			n.Add(1)
			return m.Publish(ctx, channel, msg).Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		return int(n.Load())
	}
	if err := rdb.Publish(ctx, channel, msg).Err(); err != nil {
		t.Fatal(err)
	}
	return 1
}

// checkFillAnnouncesAfter makes rounds writes with Lease through s,
// every other one of a lease first asked for by another token, and checks
// that when ps receives each of their messages, the value is already
// written and the lease released, as a second client, rdb, reads them; and
// that the others publish nothing.
func checkFillAnnouncesAfter(t *testing.T, s *l2.Store, rdb redis.UniversalClient, ps *redis.PubSub, prefix, channel string, rounds int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type heard struct {
		payload string
		err     error
	}
	// Buffered for every message expected and more, so that each is
	// checked as it arrives.
	results := make(chan heard, 2*rounds+16)
	go func() {
		for {
			m, err := ps.ReceiveMessage(ctx)
			if err != nil {
				select {
				case results <- heard{err: err}:
				case <-ctx.Done():
				}
				return
			}
			h := heard{payload: m.Payload}
			what, rest, _ := strings.Cut(m.Payload, " ")
			key, lease, _ := strings.Cut(rest, " ")
			switch what {
			case "end":
			case "quiet":
				h.err = fmt.Errorf("heard %q, for a lease no one asked for", m.Payload)
			default:
				v, err := rdb.Get(ctx, prefix+key).Result()
				switch {
				case err != nil:
					h.err = fmt.Errorf("on hearing %q, GET %s: %w", m.Payload, key, err)
				case v != "v "+key:
					h.err = fmt.Errorf("on hearing %q, %s holds %q, want %q", m.Payload, key, v, "v "+key)
				default:
					if n, xerr := rdb.Exists(ctx, prefix+lease).Result(); xerr != nil || n != 0 {
						h.err = fmt.Errorf("on hearing %q, the lease %q is there (%v, %v)", m.Payload, lease, n, xerr)
					}
				}
			}
			select {
			case results <- h:
			case <-ctx.Done():
				return
			}
		}
	}()
	want := make(map[string]bool) // the messages to hear
	for round := range rounds {
		key, lease := fmt.Sprint("user:", round), fmt.Sprint("ns:\x00lease:user:", round)
		if ls, err := s.TakeLeases(ctx, []string{lease}, []string{key}, "me", time.Minute); err != nil || !ls[0].Taken {
			t.Fatalf("round %d: TakeLeases = %v, %v; want [true], nil", round, takenOf(ls), err)
		}
		msg := "quiet " + key + " " + lease
		if round%2 == 0 {
			askFor(t, s, lease)
			msg = "filled " + key + " " + lease
			want[msg] = true
		}
		if wrote, err := s.Write(ctx, []tier.Write{{Key: key, Value: []byte("v " + key), TTL: time.Minute,
			If: tier.IfAbsent, Lease: lease, Token: "me", Msg: []byte(msg), Else: []byte("unstored")}},
			tier.Feed{Channel: channel}); err != nil || !wrote[0] {
			t.Fatalf("round %d: Write with Lease = %v, %v; want [true], nil", round, wrote, err)
		}
	}
	// Every master's "end" comes after what it published before.
	ends := publishEverywhere(t, rdb, channel, "end")
	for ends > 0 {
		select {
		case h := <-results:
			switch {
			case h.err != nil:
				t.Error(h.err)
				if h.payload == "" {
					return
				}
			case h.payload == "end":
				ends--
			case !want[h.payload]:
				t.Errorf("heard %q, unexpected or twice", h.payload)
			default:
				delete(want, h.payload)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no message within 10s; still to hear %d ends and %q", ends, slices.Sorted(maps.Keys(want)))
		}
	}
	if len(want) > 0 {
		t.Errorf("never heard %q", slices.Sorted(maps.Keys(want)))
	}
}

// TestRingWriteBatch: with a Ring, the leases of a batch of writes are
// released once the writes are done, and their messages published, in
// order, on the channel's shard, where the Ring's subscribers listen.
func TestRingWriteBatch(t *testing.T) {
	m1, m2 := miniredis.RunT(t), miniredis.RunT(t)
	rdb := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m1.Addr(), "b": m2.Addr()}})
	t.Cleanup(func() { rdb.Close() })
	s := l2.New(rdb, l2.Options{Prefix: "p:"})
	ctx := t.Context()
	ps := rdb.Subscribe(ctx, "fills")
	t.Cleanup(func() { ps.Close() })
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	msgs := receive(ps, 20)
	const n = 10
	var leases []string
	var ws []tier.Write
	var want []string
	for i := range n {
		leases = append(leases, fmt.Sprint("l", i))
		ws = append(ws, tier.Write{Key: fmt.Sprint("k", i), Value: []byte("v"), TTL: time.Minute, If: tier.IfAbsent,
			Lease: leases[i], Token: "a", Msg: []byte(fmt.Sprint("stored ", i)), Else: []byte(fmt.Sprint("unstored ", i))})
		if i == 3 {
			want = append(want, "unstored 3")
		} else if i%2 == 0 {
			want = append(want, fmt.Sprint("stored ", i))
		}
	}
	if _, err := s.Write(ctx, []tier.Write{{Key: "k3", Value: []byte("there"), TTL: time.Minute}}, tier.Feed{}); err != nil {
		t.Fatal(err)
	}
	if ls, err := s.TakeLeases(ctx, leases, guards(leases), "a", time.Minute); err != nil || slices.Contains(takenOf(ls), false) {
		t.Fatalf("TakeLeases(a) = %v, %v; want all taken", takenOf(ls), err)
	}
	var asked []string
	for i, l := range leases {
		if i%2 == 0 || i == 3 {
			asked = append(asked, l)
		}
	}
	askFor(t, s, asked...)
	stored, err := s.Write(ctx, ws, tier.Feed{Channel: "fills"})
	if err != nil || slices.Contains(stored[:3], false) || stored[3] || slices.Contains(stored[4:], false) {
		t.Fatalf("Write = %v, %v; want all stored but k3", stored, err)
	}
	if got := wait(t, msgs, len(want)); !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
	quiet(t, rdb, "", "fills", msgs, "Ring: leases not asked for")
	for _, l := range leases {
		if got := holder(t, rdb, "p:"+l); got != "" {
			t.Errorf("%s holds %q, want it released", l, got)
		}
	}
	if len(m1.Keys()) == 0 || len(m2.Keys()) == 0 {
		t.Errorf("keys per shard: %d and %d; want both used", len(m1.Keys()), len(m2.Keys()))
	}
}
