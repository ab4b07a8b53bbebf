package hybridtest_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"go.uber.org/goleak"
)

var (
	_ hybrid.Remote           = (*hybridtest.Remote)(nil)
	_ hybrid.BatchRemote      = (*hybridtest.Remote)(nil)
	_ hybrid.Announcer        = (*hybridtest.Remote)(nil)
	_ hybrid.Replacer         = (*hybridtest.Remote)(nil)
	_ hybrid.NewerSetter      = (*hybridtest.Remote)(nil)
	_ hybrid.NewerJournal     = (*hybridtest.Remote)(nil)
	_ hybrid.CompareAndSetter = (*hybridtest.Remote)(nil)
	_ hybrid.Leaser           = (*hybridtest.Remote)(nil)
	_ hybrid.Bus              = (*hybridtest.Bus)(nil)
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable time source for Remote.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func mustGet(t *testing.T, r *hybridtest.Remote, key string) ([]byte, bool) {
	t.Helper()
	v, ok, err := r.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return v, ok
}

func TestRemoteGetSetDelete(t *testing.T) {
	ctx := t.Context()
	var r hybridtest.Remote
	if v, ok := mustGet(t, &r, "a"); ok {
		t.Fatalf("Get on an empty Remote: got %q, true, want a miss", v)
	}
	if err := r.Set(ctx, "a", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Set(ctx, "b", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Set(ctx, "c", []byte{}, 0); err != nil {
		t.Fatal(err)
	}
	if v, ok := mustGet(t, &r, "a"); !ok || string(v) != "1" {
		t.Errorf("Get(a): got %q, %v, want \"1\", true", v, ok)
	}
	if v, ok := mustGet(t, &r, "c"); !ok || len(v) != 0 {
		t.Errorf("Get(c): got %q, %v, want \"\", true", v, ok)
	}
	if got, want := r.Keys(), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("Keys: got %q, want %q", got, want)
	}
	if err := r.Delete(ctx, "a", "c", "missing"); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Keys(), []string{"b"}; !slices.Equal(got, want) {
		t.Errorf("Keys after Delete(a, c, missing): got %q, want %q", got, want)
	}
	if err := r.Delete(ctx); err != nil {
		t.Errorf("Delete of no keys: %v", err)
	}
}

func TestRemoteTTL(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	r := &hybridtest.Remote{Now: clk.Now}
	if err := r.Set(ctx, "short", []byte("s"), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := r.Set(ctx, "forever", []byte("f"), 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Set(ctx, "negative", []byte("n"), -time.Second); err != nil {
		t.Fatal(err)
	}
	clk.Advance(999 * time.Millisecond)
	if _, ok := mustGet(t, r, "short"); !ok {
		t.Error("Get(short) before its expiry: got a miss, want a hit")
	}
	clk.Advance(time.Millisecond)
	if v, ok := mustGet(t, r, "short"); ok {
		t.Errorf("Get(short) at its expiry: got %q, want a miss", v)
	}
	if slots, err := r.GetMany(ctx, []string{"short", "forever"}); err != nil || slots[0] != nil || string(slots[1]) != "f" {
		t.Errorf("GetMany after expiry: got %q, %v, want [nil \"f\"]", slots, err)
	}
	clk.Advance(24 * time.Hour)
	if got, want := r.Keys(), []string{"forever", "negative"}; !slices.Equal(got, want) {
		t.Errorf("Keys a day later: got %q, want %q (ttl <= 0 never expires)", got, want)
	}
}

func TestRemoteSetIfAbsent(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	r := &hybridtest.Remote{Now: clk.Now}
	steps := []struct {
		name    string
		advance time.Duration
		value   string
		stored  bool
		want    string
	}{
		{"absent", 0, "1", true, "1"},
		{"present", 0, "2", false, "1"},
		{"still present", 59 * time.Second, "3", false, "1"},
		{"expired", time.Second, "4", true, "4"},
	}
	for _, s := range steps {
		clk.Advance(s.advance)
		stored, err := r.SetIfAbsent(ctx, "k", []byte(s.value), time.Minute)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if stored != s.stored {
			t.Errorf("%s: SetIfAbsent(%q) stored %v, want %v", s.name, s.value, stored, s.stored)
		}
		if v, _ := r.Peek("k"); string(v) != s.want {
			t.Errorf("%s: k holds %q, want %q", s.name, v, s.want)
		}
	}
}

func TestRemoteGetManySetManyIfAbsent(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	r := &hybridtest.Remote{Now: clk.Now}
	r.Put("held", []byte("old"), 0)
	r.Put("expired", []byte("old"), time.Second)
	clk.Advance(time.Second)
	keys := []string{"a", "held", "e", "expired", "a"}
	values := [][]byte{[]byte("1"), []byte("2"), {}, []byte("4"), []byte("5")}
	stored, err := r.SetManyIfAbsent(ctx, keys, values, []time.Duration{0, 0, time.Minute, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, true, true, false}; !slices.Equal(stored, want) {
		t.Errorf("SetManyIfAbsent(%q): stored %v, want %v", keys, stored, want)
	}
	got, err := r.GetMany(ctx, []string{"held", "missing", "a", "e", "expired"})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]byte{[]byte("old"), nil, []byte("1"), {}, []byte("4")}
	if len(got) != len(want) {
		t.Fatalf("GetMany: got %d slots, want %d", len(got), len(want))
	}
	for i := range want {
		if (got[i] == nil) != (want[i] == nil) || !bytes.Equal(got[i], want[i]) {
			t.Errorf("GetMany slot %d: got %q (nil %v), want %q (nil %v)", i, got[i], got[i] == nil, want[i], want[i] == nil)
		}
	}
	clk.Advance(time.Minute)
	if _, ok := r.Peek("e"); ok {
		t.Error("e outlived the ttl SetManyIfAbsent gave it")
	}
	if got, err := r.GetMany(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("GetMany(nil): got %q, %v, want [], nil", got, err)
	}
	if _, err := r.SetManyIfAbsent(ctx, []string{"x"}, nil, nil); err == nil {
		t.Error("SetManyIfAbsent with lengths that differ: got nil error, want one")
	}
}

func TestRemoteCopies(t *testing.T) {
	ctx := t.Context()
	bus := new(hybridtest.Bus)
	defer bus.Close()
	r := &hybridtest.Remote{Bus: bus}
	in := []byte("abc")
	if err := r.Set(ctx, "set", in, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetIfAbsent(ctx, "nx", in, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetManyIfAbsent(ctx, []string{"many"}, [][]byte{in}, []time.Duration{0}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetAndPublish(ctx, "pub", in, 0, "ch", []byte("m")); err != nil {
		t.Fatal(err)
	}
	r.Put("put", in, 0)
	in[0] = 'X'
	for _, k := range []string{"set", "nx", "many", "pub", "put"} {
		v, _ := mustGet(t, r, k)
		if string(v) != "abc" {
			t.Errorf("%s: after the caller changed its buffer, got %q, want \"abc\"", k, v)
		}
		v[0] = 'Y'
		if v, _ := r.Peek(k); string(v) != "abc" {
			t.Errorf("%s: after the caller changed what Get returned, got %q, want \"abc\"", k, v)
		}
	}
	slots, err := r.GetMany(ctx, []string{"set"})
	if err != nil {
		t.Fatal(err)
	}
	slots[0][0] = 'Z'
	if v, _ := r.Peek("set"); string(v) != "abc" {
		t.Errorf("after the caller changed what GetMany returned, got %q, want \"abc\"", v)
	}
}

// calls runs every method of r once.
func calls(ctx context.Context, r *hybridtest.Remote) []error {
	_, _, e1 := r.Get(ctx, "k")
	e2 := r.Set(ctx, "k", []byte("v"), 0)
	_, e3 := r.SetIfAbsent(ctx, "k", []byte("v"), 0)
	e4 := r.Delete(ctx, "k")
	_, e5 := r.GetMany(ctx, []string{"k"})
	_, e6 := r.SetManyIfAbsent(ctx, []string{"k"}, [][]byte{[]byte("v")}, []time.Duration{0})
	e7 := r.SetAndPublish(ctx, "k", []byte("v"), 0, "ch", []byte("m"))
	e8 := r.DeleteAndPublish(ctx, "k", "ch", []byte("m"))
	e9 := r.SetPublishAndLog(ctx, "k", []byte("v"), 0, "ch", []byte("m"), "log", []byte("e"), 10)
	_, e10 := r.OpenLog(ctx, "log")
	_, _, _, e11 := r.ReadLog(ctx, "log", "", 10)
	_, _, _, _, e12 := r.TakeLeases(ctx, []string{"lease"}, []string{"g:lease"}, "tok", time.Minute)
	_, e13 := r.ExtendLeases(ctx, []string{"lease"}, "tok", time.Minute)
	e14 := r.ReleaseLeases(ctx, []string{"lease"}, "tok", "ch", []byte("m"))
	_, e15 := r.FillAndRelease(ctx, "k", nil, []byte("v"), time.Minute, "lease", "tok", "ch", []byte("s"), []byte("u"))
	return []error{e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12, e13, e14, e15}
}

var allOnce = hybridtest.Calls{Get: 1, GetMany: 1, Set: 1, SetIfAbsent: 1, SetManyIfAbsent: 1, Delete: 1, SetAndPublish: 1, DeleteAndPublish: 1,
	SetPublishAndLog: 1, OpenLog: 1, ReadLog: 1, TakeLeases: 1, ExtendLeases: 1, ReleaseLeases: 1, FillAndRelease: 1}

func TestRemoteFailWith(t *testing.T) {
	ctx := t.Context()
	bus := new(hybridtest.Bus)
	defer bus.Close()
	r := &hybridtest.Remote{Bus: bus}
	r.Put("k", []byte("old"), 0)
	down := errors.New("connection refused")
	r.FailWith(down)
	for i, err := range calls(ctx, r) {
		if !errors.Is(err, down) {
			t.Errorf("call %d: got %v, want %v", i, err, down)
		}
	}
	if got := r.Calls(); got != allOnce {
		t.Errorf("Calls: got %+v, want %+v", got, allOnce)
	}
	if got := bus.Stats().Published; got != 0 {
		t.Errorf("failed SetAndPublish, SetPublishAndLog, DeleteAndPublish, ReleaseLeases and FillAndRelease published %d messages, want 0", got)
	}
	if r.Len() != 1 {
		t.Errorf("failed calls left keys %q, want only k", r.Keys())
	}
	if es, _ := r.PeekLog("log"); es != nil {
		t.Errorf("failed calls logged %q, want nothing", es)
	}
	if v, _ := r.Peek("k"); string(v) != "old" {
		t.Errorf("failed writes changed k to %q, want \"old\"", v)
	}
	r.FailWith(nil)
	for i, err := range calls(ctx, r) {
		if err != nil {
			t.Errorf("call %d after FailWith(nil): %v", i, err)
		}
	}
	if got, want := r.Calls(), (hybridtest.Calls{Get: 2, GetMany: 2, Set: 2, SetIfAbsent: 2, SetManyIfAbsent: 2, Delete: 2, SetAndPublish: 2, DeleteAndPublish: 2,
		SetPublishAndLog: 2, OpenLog: 2, ReadLog: 2, TakeLeases: 2, ExtendLeases: 2, ReleaseLeases: 2, FillAndRelease: 2}); got != want {
		t.Errorf("Calls: got %+v, want %+v", got, want)
	}
	if got := r.Calls().Total(); got != 30 {
		t.Errorf("Calls().Total: got %d, want 30", got)
	}
}

func TestRemoteCancelledContext(t *testing.T) {
	bus := new(hybridtest.Bus)
	defer bus.Close()
	r := &hybridtest.Remote{Bus: bus}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for i, err := range calls(ctx, r) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("call %d with a cancelled ctx: got %v, want %v", i, err, context.Canceled)
		}
	}
}

func TestRemoteLatencyHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := new(hybridtest.Bus)
		defer bus.Close()
		r := &hybridtest.Remote{Bus: bus}
		r.SetLatency(time.Hour)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		for i, err := range calls(ctx, r) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("call %d with an hour of latency and a 10ms deadline: got %v, want %v", i, err, context.DeadlineExceeded)
			}
		}
		r.SetLatency(time.Second)
		start := time.Now()
		if err := r.Set(t.Context(), "k", []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("Set with 1s latency took %v, want 1s", d)
		}
	})
}

func TestRemoteNoBus(t *testing.T) {
	var r hybridtest.Remote
	ctx := t.Context()
	if err := r.SetAndPublish(ctx, "k", []byte("v"), 0, "ch", nil); !errors.Is(err, hybridtest.ErrNoBus) {
		t.Errorf("SetAndPublish without a Bus: got %v, want %v", err, hybridtest.ErrNoBus)
	}
	if err := r.DeleteAndPublish(ctx, "k", "ch", nil); !errors.Is(err, hybridtest.ErrNoBus) {
		t.Errorf("DeleteAndPublish without a Bus: got %v, want %v", err, hybridtest.ErrNoBus)
	}
	if _, err := r.ReplaceAndPublish(ctx, "k", nil, []byte("v"), "ch", nil); !errors.Is(err, hybridtest.ErrNoBus) {
		t.Errorf("ReplaceAndPublish without a Bus: got %v, want %v", err, hybridtest.ErrNoBus)
	}
	if ok, err := r.ReplaceAndPublish(ctx, "k", nil, []byte("v"), "", nil); err != nil || ok {
		t.Errorf("ReplaceAndPublish without a Bus or a channel: got %v, %v, want false, nil", ok, err)
	}
	if r.Len() != 0 {
		t.Errorf("got %d keys, want 0", r.Len())
	}
}

// TestRemoteReplaceAndPublish: a replace only where the old value is still
// there, the lifetime kept, the message sent either way.
func TestRemoteReplaceAndPublish(t *testing.T) {
	clk := newClock()
	bus := new(hybridtest.Bus)
	defer bus.Close()
	r := &hybridtest.Remote{Bus: bus, Now: clk.Now}
	var got []string
	var mu sync.Mutex
	unsub, err := bus.Subscribe(t.Context(), "ch", func(m []byte) { mu.Lock(); got = append(got, string(m)); mu.Unlock() }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	ctx := t.Context()
	r.Put("k", []byte("old"), 10*time.Second)
	if ok, err := r.ReplaceAndPublish(ctx, "k", []byte("other"), []byte("new"), "ch", []byte("m1")); err != nil || ok {
		t.Fatalf("wrong old: got %v, %v, want false, nil", ok, err)
	}
	if ok, err := r.ReplaceAndPublish(ctx, "k", []byte("old"), []byte("new"), "ch", []byte("m2")); err != nil || !ok {
		t.Fatalf("right old: got %v, %v, want true, nil", ok, err)
	}
	if v, _ := r.Peek("k"); string(v) != "new" {
		t.Errorf("after the replace: got %q, want new", v)
	}
	clk.Advance(10 * time.Second)
	if v, ok := r.Peek("k"); ok {
		t.Errorf("10 s after the first write: got %q, want the key expired (lifetime kept)", v)
	}
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"m1", "m2"}; !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
	if c := r.Calls(); c.ReplaceAndPublish != 2 || c.Total() != 2 {
		t.Errorf("Calls: got %+v, want 2 ReplaceAndPublish", c)
	}
}

func TestRemoteSetIfNewerAndPublish(t *testing.T) {
	bus := new(hybridtest.Bus)
	defer bus.Close()
	r := &hybridtest.Remote{Bus: bus}
	var got []string
	var mu sync.Mutex
	unsub, err := bus.Subscribe(t.Context(), "ch", func(m []byte) { mu.Lock(); got = append(got, string(m)); mu.Unlock() }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	ctx := t.Context()
	at := func(t uint64, tail string) []byte {
		return append(binary.BigEndian.AppendUint64([]byte{9}, t), tail...)
	}
	for _, c := range []struct {
		name       string
		value      []byte
		msg        string
		wantStored bool
		want       []byte
	}{
		{"missing", at(10, "a"), "m1", true, at(10, "a")},
		{"older stored", at(20, "b"), "m2", true, at(20, "b")},
		{"newer stored", at(15, "c"), "x1", false, at(20, "b")},
		{"the same value again", at(20, "b"), "x2", true, at(20, "b")},
		{"same write time, another value", at(20, "d"), "m3", true, at(20, "d")},
	} {
		stored, err := r.SetIfNewerAndPublish(ctx, "k", c.value, time.Minute, "ch", []byte(c.msg), 1)
		if err != nil || stored != c.wantStored {
			t.Fatalf("%s: got %v, %v; want %v, nil", c.name, stored, err, c.wantStored)
		}
		if v, _ := r.Peek("k"); !bytes.Equal(v, c.want) {
			t.Fatalf("%s: key holds %x, want %x", c.name, v, c.want)
		}
	}
	r.Put("short", []byte("x"), 0)
	if stored, err := r.SetIfNewerAndPublish(ctx, "short", at(1, ""), 0, "", nil, 1); err != nil || !stored {
		t.Fatalf("over a value too short for a write time: got %v, %v; want true, nil", stored, err)
	}
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q (only writes that stored publish)", got, want)
	}
	if c := r.Calls(); c.SetIfNewerAndPublish != 6 || c.Total() != 6 {
		t.Errorf("Calls: got %+v, want 6 SetIfNewerAndPublish", c)
	}
}

func TestRemoteBeforeGetHoldsRead(t *testing.T) {
	ctx := t.Context()
	var r hybridtest.Remote
	r.Put("k", []byte("old"), 0)
	reached, release := make(chan string), make(chan struct{})
	r.SetBeforeGet(func(key string) {
		reached <- key
		<-release
	})
	got := make(chan string)
	go func() {
		v, _, _ := r.Get(ctx, "k")
		got <- string(v)
	}()
	if k := <-reached; k != "k" {
		t.Errorf("hook got key %q, want \"k\"", k)
	}
	// The read is held: a write now lands before it.
	r.Put("k", []byte("new"), 0)
	close(release)
	if v := <-got; v != "new" {
		t.Errorf("held Get returned %q, want \"new\"", v)
	}

	r.SetBeforeGet(nil)
	var seen []string
	r.SetBeforeGet(func(key string) { seen = append(seen, key) })
	if _, err := r.GetMany(ctx, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b"}; !slices.Equal(seen, want) {
		t.Errorf("GetMany ran the hook for %q, want %q", seen, want)
	}
}

func TestRemoteWaitCalls(t *testing.T) {
	var r hybridtest.Remote
	done := make(chan error)
	go func() {
		done <- r.WaitCalls(t.Context(), func(c hybridtest.Calls) bool { return c.SetIfAbsent >= 2 })
	}()
	for range 2 {
		if _, err := r.SetIfAbsent(t.Context(), "k", []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Errorf("WaitCalls: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.WaitCalls(ctx, func(c hybridtest.Calls) bool { return c.Get > 0 }); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitCalls for a call that never comes: got %v, want %v", err, context.Canceled)
	}
}

// TestRemoteAnnouncerOrder checks that the message order equals the write
// order: whatever the interleaving of writers, the last message delivered
// names the value the Remote holds.
func TestRemoteAnnouncerOrder(t *testing.T) {
	ctx := t.Context()
	bus := new(hybridtest.Bus)
	defer bus.Close()
	r := &hybridtest.Remote{Bus: bus}
	var (
		mu   sync.Mutex
		last string
		n    int
	)
	unsub, err := bus.Subscribe(ctx, "ch", func(msg []byte) {
		mu.Lock()
		defer mu.Unlock()
		last = string(msg)
		n++
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	const writers, writes = 8, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range writes {
				v := []byte(fmt.Sprintf("%d-%d", w, i))
				var err error
				if i%10 == 9 {
					err = r.DeleteAndPublish(ctx, "k", "ch", []byte("deleted"))
				} else {
					err = r.SetAndPublish(ctx, "k", v, 0, "ch", v)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != writers*writes {
		t.Errorf("got %d messages, want %d", n, writers*writes)
	}
	v, ok := r.Peek("k")
	if !ok {
		v = []byte("deleted")
	}
	if string(v) != last {
		t.Errorf("the Remote holds %q but the last message says %q", v, last)
	}
	if got := r.Calls().SetAndPublish + r.Calls().DeleteAndPublish; got != writers*writes {
		t.Errorf("got %d announced writes, want %d", got, writers*writes)
	}
}

func TestRemoteConcurrentUse(t *testing.T) {
	ctx := t.Context()
	var r hybridtest.Remote
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				k := strconv.Itoa(i % 10)
				switch (g + i) % 5 {
				case 0:
					_ = r.Set(ctx, k, []byte(k), time.Minute)
				case 1:
					_, _, _ = r.Get(ctx, k)
				case 2:
					_, _ = r.SetIfAbsent(ctx, k, []byte(k), 0)
				case 3:
					_, _ = r.GetMany(ctx, []string{k, "x"})
				case 4:
					_ = r.Delete(ctx, k)
				}
			}
		})
	}
	wg.Wait()
	if got := r.Calls().Total(); got != 800 {
		t.Errorf("got %d calls, want 800", got)
	}
}

func TestRemoteAfterGetHoldsOldValue(t *testing.T) {
	ctx := t.Context()
	var r hybridtest.Remote
	r.Put("k", []byte("old"), 0)
	reached, release := make(chan string), make(chan struct{})
	r.SetAfterGet(func(key string) {
		reached <- key
		<-release
	})
	got := make(chan string)
	go func() {
		v, _, _ := r.Get(ctx, "k")
		got <- string(v)
	}()
	if k := <-reached; k != "k" {
		t.Errorf("hook got key %q, want \"k\"", k)
	}
	// The read has happened: a write now does not change what it returns.
	r.Put("k", []byte("new"), 0)
	close(release)
	if v := <-got; v != "old" {
		t.Errorf("held Get returned %q, want \"old\"", v)
	}
	if got := r.Calls().Get; got != 1 {
		t.Errorf("Calls().Get: got %d, want 1", got)
	}
}
