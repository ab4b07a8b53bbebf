package l2_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"github.com/hybridcache/hybridcache/l2"
)

var _ hybrid.Leaser = (*l2.Store)(nil)

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

func TestTakeLeases(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	const ttl = 10 * time.Second
	taken, left, err := s.TakeLeases(ctx, []string{"l"}, "a", ttl)
	if err != nil || !slices.Equal(taken, []bool{true}) || !slices.Equal(left, []time.Duration{0}) {
		t.Fatalf("TakeLeases(a) = %v, %v, %v; want [true], [0], nil", taken, left, err)
	}
	if got := holder(t, rdb, prefix+"l"); got != "a" {
		t.Errorf("lease holds %q, want the token \"a\"", got)
	}
	if d := pttl(t, rdb, prefix+"l"); d <= 0 || d > ttl {
		t.Errorf("PTTL after TakeLeases = %v, want in (0, %v]", d, ttl)
	}

	// Another token is told how long the lease has left.
	taken, left, err = s.TakeLeases(ctx, []string{"l"}, "b", time.Minute)
	if err != nil || !slices.Equal(taken, []bool{false}) || len(left) != 1 || left[0] <= 0 || left[0] > ttl {
		t.Fatalf("TakeLeases(b) = %v, %v, %v; want [false], [(0, %v]], nil", taken, left, err, ttl)
	}
	if got := holder(t, rdb, prefix+"l"); got != "a" {
		t.Errorf("after a failed take, lease holds %q, want \"a\"", got)
	}
	if d := pttl(t, rdb, prefix+"l"); d <= 0 || d > ttl {
		t.Errorf("PTTL after a failed take = %v, want in (0, %v]", d, ttl)
	}

	// SET NX: the holder itself does not take it again.
	taken, left, err = s.TakeLeases(ctx, []string{"l"}, "a", ttl)
	if err != nil || !slices.Equal(taken, []bool{false}) || len(left) != 1 || left[0] <= 0 || left[0] > ttl {
		t.Fatalf("TakeLeases(a) again = %v, %v, %v; want [false], [(0, %v]], nil", taken, left, err, ttl)
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
	if taken, _, err := s.TakeLeases(ctx, others, "other", 20*time.Second); err != nil || slices.Contains(taken, false) {
		t.Fatalf("TakeLeases(other) = %v, %v; want all taken", taken, err)
	}
	const ttl = 10 * time.Second
	taken, left, err := s.TakeLeases(ctx, append(slices.Clone(keys), keys[1]), "me", ttl)
	if err != nil {
		t.Fatalf("TakeLeases(me): %v", err)
	}
	if len(taken) != n+1 || len(left) != n+1 {
		t.Fatalf("TakeLeases(me): %d taken, %d left, want %d each", len(taken), len(left), n+1)
	}
	for i := range n {
		want, wantHolder := i%3 != 0, "me"
		if !want {
			wantHolder = "other"
		}
		if taken[i] != want {
			t.Errorf("taken[%d]: got %v, want %v", i, taken[i], want)
		}
		switch {
		case want && left[i] != 0:
			t.Errorf("left[%d] of a taken lease: got %v, want 0", i, left[i])
		case !want && (left[i] <= 15*time.Second || left[i] > 20*time.Second):
			t.Errorf("left[%d]: got %v, want in (15s, 20s] (the other lease's)", i, left[i])
		}
		if got := holder(t, rdb, prefix+keys[i]); got != wantHolder {
			t.Errorf("%q holds %q, want %q", keys[i], got, wantHolder)
		}
		if d := pttl(t, rdb, prefix+keys[i]); d <= 0 {
			t.Errorf("PTTL of %q = %v, want a lifetime", keys[i], d)
		}
	}
	if taken[n] || left[n] <= 0 || left[n] > ttl {
		t.Errorf("repeated key: got taken %v, left %v; want false, in (0, %v]", taken[n], left[n], ttl)
	}
}

func TestTakeLeaseWithoutExpiry(t *testing.T) {
	// A key that has no expiry (no Leaser wrote it) would hold its lease
	// for ever: a take gives it ttl.
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	if err := rdb.Set(ctx, prefix+"l", "stray", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const ttl = 10 * time.Second
	taken, left, err := s.TakeLeases(ctx, []string{"l"}, "a", ttl)
	if err != nil || !slices.Equal(taken, []bool{false}) || !slices.Equal(left, []time.Duration{ttl}) {
		t.Fatalf("TakeLeases over a key without expiry = %v, %v, %v; want [false], [%v], nil", taken, left, err, ttl)
	}
	if d := pttl(t, rdb, prefix+"l"); d <= 0 || d > ttl {
		t.Errorf("PTTL after the take = %v, want in (0, %v]", d, ttl)
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
			taken, left, err := s.TakeLeases(t.Context(), []string{"l"}, fmt.Sprint("t", i), time.Minute)
			if err != nil {
				t.Errorf("taker %d: %v", i, err)
				return
			}
			if !taken[0] && left[0] <= 0 {
				t.Errorf("taker %d: not taken, left %v; want > 0", i, left[0])
			}
			results <- taken[0]
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
	if _, _, err := s.TakeLeases(ctx, []string{"l1", "l2"}, "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.TakeLeases(ctx, []string{"l3"}, "b", time.Second); err != nil {
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
}

func TestReleaseLeases(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 3)
	if _, _, err := s.TakeLeases(ctx, []string{"l1", "l2"}, "a", time.Minute); err != nil {
		t.Fatal(err)
	}

	// A stranger releases nothing; its message goes out all the same.
	if err := s.ReleaseLeases(ctx, []string{"l1", "l2"}, "b", channel, []byte("m1")); err != nil {
		t.Fatalf("ReleaseLeases(b): %v", err)
	}
	for _, k := range []string{"l1", "l2"} {
		if got := holder(t, rdb, prefix+k); got != "a" {
			t.Errorf("after a stranger's release, %s holds %q, want \"a\"", k, got)
		}
	}
	if got := wait(t, msgs, 1); got[0] != "m1" {
		t.Errorf("message: got %q, want \"m1\"", got[0])
	}

	// The holder's release deletes, then publishes.
	if err := s.ReleaseLeases(ctx, []string{"l1", "missing"}, "a", channel, []byte("m2")); err != nil {
		t.Fatalf("ReleaseLeases(a): %v", err)
	}
	if got := wait(t, msgs, 1); got[0] != "m2" {
		t.Errorf("message: got %q, want \"m2\"", got[0])
	}
	if d := pttl(t, rdb, prefix+"l1"); d != -2 {
		t.Errorf("PTTL of l1 after its holder released it = %v, want -2 (missing)", d)
	}
	if got := holder(t, rdb, prefix+"l2"); got != "a" {
		t.Errorf("l2, not released, holds %q, want \"a\"", got)
	}

	// No channel: nothing published.
	if err := s.ReleaseLeases(ctx, []string{"l2"}, "a", "", []byte("not sent")); err != nil {
		t.Fatalf("ReleaseLeases without a channel: %v", err)
	}
	if d := pttl(t, rdb, prefix+"l2"); d != -2 {
		t.Errorf("PTTL of l2 after its holder released it = %v, want -2 (missing)", d)
	}
	if err := rdb.Publish(ctx, channel, "end").Err(); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, msgs, 1); got[0] != "end" {
		t.Errorf("message after a release without a channel: got %q, want \"end\"", got[0])
	}

	// Released, a lease can be taken by another.
	if taken, _, err := s.TakeLeases(ctx, []string{"l1"}, "b", time.Minute); err != nil || !taken[0] {
		t.Errorf("TakeLeases(b) after the release = %v, %v; want [true], nil", taken, err)
	}
}

func TestLeaseExpires(t *testing.T) {
	srv.NeedReal(t) // miniredis expires keys only when told to
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	if taken, _, err := s.TakeLeases(ctx, []string{"l"}, "a", 30*time.Millisecond); err != nil || !taken[0] {
		t.Fatalf("TakeLeases = %v, %v; want [true], nil", taken, err)
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
	if taken, _, err := s.TakeLeases(ctx, []string{"l"}, "b", time.Minute); err != nil || !taken[0] {
		t.Errorf("TakeLeases(b) after expiry = %v, %v; want [true], nil", taken, err)
	}
}

func TestLeasesBadTTL(t *testing.T) {
	s, rdb, _ := newStore(t)
	var c counter
	rdb.AddHook(&c)
	ctx := t.Context()
	for _, ttl := range []time.Duration{0, -time.Second, time.Millisecond - 1} {
		for _, keys := range [][]string{{"l"}, nil} {
			taken, left, err := s.TakeLeases(ctx, keys, "a", ttl)
			if err == nil || taken != nil || left != nil || !strings.HasPrefix(err.Error(), "l2: ") {
				t.Errorf("TakeLeases(%d keys, ttl %v) = %v, %v, %v; want an l2 error", len(keys), ttl, taken, left, err)
			}
			held, err := s.ExtendLeases(ctx, keys, "a", ttl)
			if err == nil || held != nil || !strings.HasPrefix(err.Error(), "l2: ") {
				t.Errorf("ExtendLeases(%d keys, ttl %v) = %v, %v; want an l2 error", len(keys), ttl, held, err)
			}
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
	if taken, left, err := s.TakeLeases(ctx, nil, "a", time.Second); err != nil || len(taken) != 0 || len(left) != 0 {
		t.Errorf("TakeLeases(nil) = %v, %v, %v; want none, nil", taken, left, err)
	}
	if held, err := s.ExtendLeases(ctx, []string{}, "a", time.Second); err != nil || len(held) != 0 {
		t.Errorf("ExtendLeases([]) = %v, %v; want none, nil", held, err)
	}
	if err := s.ReleaseLeases(ctx, nil, "a", "", nil); err != nil {
		t.Errorf("ReleaseLeases(nil, no channel): %v", err)
	}
	if c.String() != "commands [], pipelines []" {
		t.Errorf("sent %v; want nothing", &c)
	}

	// With a channel, the message still goes out.
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 1)
	if err := s.ReleaseLeases(ctx, nil, "a", channel, []byte("m")); err != nil {
		t.Errorf("ReleaseLeases(nil, channel): %v", err)
	}
	if got := wait(t, msgs, 1); got[0] != "m" {
		t.Errorf("message: got %q, want \"m\"", got[0])
	}
	if want := "commands [publish], pipelines []"; c.String() != want {
		t.Errorf("sent %v; want %s", &c, want)
	}
}

// TestLeasesOneRoundTrip: each call is one pipeline of one script per key,
// the PUBLISH of a release included; after SCRIPT FLUSH, a second pipeline
// sends them by EVAL.
func TestLeasesOneRoundTrip(t *testing.T) {
	s, rdb, prefix := newStore(t)
	var c counter
	rdb.AddHook(&c)
	ctx := t.Context()
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 4)
	keys := []string{"a", "b", "c"}
	calls := []struct {
		name string
		run  func() error
	}{
		{"TakeLeases", func() error { _, _, err := s.TakeLeases(ctx, keys, "tok", time.Minute); return err }},
		{"ExtendLeases", func() error { _, err := s.ExtendLeases(ctx, keys, "tok", time.Minute); return err }},
		{"ReleaseLeases", func() error { return s.ReleaseLeases(ctx, keys, "tok", channel, []byte("m")) }},
	}
	for _, flush := range []bool{false, true} {
		for _, call := range calls {
			if err := call.run(); err != nil { // loads the script
				t.Fatalf("%s: %v", call.name, err)
			}
			if flush {
				if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatalf("SCRIPT FLUSH: %v", err)
				}
			}
			c.reset()
			if err := call.run(); err != nil {
				t.Fatalf("%s (after SCRIPT FLUSH: %v): %v", call.name, flush, err)
			}
			want := "commands [], pipelines [[evalsha evalsha evalsha]]"
			if flush {
				want = "commands [], pipelines [[evalsha evalsha evalsha] [eval eval eval]]"
			}
			if got := c.String(); got != want {
				t.Errorf("%s (after SCRIPT FLUSH: %v): sent %s; want %s", call.name, flush, got, want)
			}
		}
	}
	if got, want := wait(t, msgs, 4), []string{"m", "m", "m", "m"}; !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
	// The scripts did their work after the flush too.
	if _, _, err := s.TakeLeases(ctx, keys, "tok", time.Minute); err != nil {
		t.Fatal(err)
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
}

func TestLeasesRing(t *testing.T) {
	// A Ring shards by key on the client side: each script goes to its
	// key's shard.
	m1, m2 := miniredis.RunT(t), miniredis.RunT(t)
	rdb := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m1.Addr(), "b": m2.Addr()}})
	t.Cleanup(func() { rdb.Close() })
	s := l2.New(rdb, l2.Options{Prefix: "p:"})
	ctx := t.Context()
	var keys []string
	for i := range 20 {
		keys = append(keys, fmt.Sprint("l", i))
	}
	taken, _, err := s.TakeLeases(ctx, keys, "a", time.Minute)
	if err != nil || slices.Contains(taken, false) {
		t.Fatalf("TakeLeases(a) = %v, %v; want all taken", taken, err)
	}
	if len(m1.Keys()) == 0 || len(m2.Keys()) == 0 {
		t.Fatalf("leases per shard: %d and %d; want both used", len(m1.Keys()), len(m2.Keys()))
	}
	taken, left, err := s.TakeLeases(ctx, keys, "b", time.Minute)
	if err != nil || slices.Contains(taken, true) || slices.ContainsFunc(left, func(d time.Duration) bool { return d <= 0 }) {
		t.Fatalf("TakeLeases(b) = %v, %v, %v; want none taken, all with time left", taken, left, err)
	}
	if held, err := s.ExtendLeases(ctx, keys, "a", time.Hour); err != nil || slices.Contains(held, false) {
		t.Fatalf("ExtendLeases(a) = %v, %v; want all held", held, err)
	}
	if err := s.ReleaseLeases(ctx, keys, "a", "", nil); err != nil {
		t.Fatalf("ReleaseLeases(a): %v", err)
	}
	if n := len(m1.Keys()) + len(m2.Keys()); n != 0 {
		t.Errorf("%d keys left after the release, want 0", n)
	}
}

// TestLeasesMatchDouble runs one history of lease calls on a Store and on
// hybridtest.Remote and checks that they answer alike.
func TestLeasesMatchDouble(t *testing.T) {
	s, _, _ := newStore(t)
	bus := new(hybridtest.Bus)
	t.Cleanup(func() { bus.Close() })
	double := &hybridtest.Remote{Bus: bus}
	const ttl = time.Minute
	run := func(l hybrid.Leaser, exists func(key string) bool) []string {
		ctx := t.Context()
		var out []string
		take := func(token string, keys ...string) {
			taken, left, err := l.TakeLeases(ctx, keys, token, ttl)
			var leftOK []bool
			for _, d := range left {
				leftOK = append(leftOK, d > 0 && d <= ttl)
			}
			out = append(out, fmt.Sprintf("take %s %q: %v, left in (0, ttl] %v, %v", token, keys, taken, leftOK, err))
		}
		extend := func(token string, keys ...string) {
			held, err := l.ExtendLeases(ctx, keys, token, ttl)
			out = append(out, fmt.Sprintf("extend %s %q: %v, %v", token, keys, held, err))
		}
		release := func(token string, keys ...string) {
			err := l.ReleaseLeases(ctx, keys, token, "", nil)
			out = append(out, fmt.Sprintf("release %s %q: %v", token, keys, err))
		}
		state := func() {
			var live []string
			for _, k := range []string{"a", "b", "c", "d", "e"} {
				if exists(k) {
					live = append(live, k)
				}
			}
			out = append(out, fmt.Sprintf("live %q", live))
		}
		take("t1", "a", "b", "c")
		take("t2", "b", "d")
		take("t1", "a", "e", "a")
		state()
		extend("t1", "a", "d", "missing", "c")
		extend("t2", "d")
		release("t1", "a", "d", "missing")
		state()
		take("t3", "a", "d")
		release("t2", "b", "d")
		state()
		return out
	}
	want := run(double, func(k string) bool { _, ok := double.Peek(k); return ok })
	got := run(s, func(k string) bool {
		_, ok, err := s.Get(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d: Store: %s; hybridtest.Remote: %s", i, got[i], want[i])
		}
	}
}
