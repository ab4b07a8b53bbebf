package hybridtest_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"github.com/hybridcache/hybridcache/internal/message"
)

var (
	_ hybrid.Journal          = (*hybridtest.Remote)(nil)
	_ hybrid.CompareAndSetter = (*hybridtest.Remote)(nil)
)

// received collects what a Bus delivers on one channel.
type received struct {
	mu   sync.Mutex
	msgs [][]byte
}

func (r *received) add(msg []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, msg)
}

func (r *received) all() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

// newLogged returns a Remote on a new Bus and what the Bus delivers on
// channel "ch".
func newLogged(t *testing.T) (*hybridtest.Remote, *hybridtest.Bus, *received) {
	t.Helper()
	bus := new(hybridtest.Bus)
	t.Cleanup(func() { bus.Close() })
	var got received
	unsub, err := bus.Subscribe(t.Context(), "ch", got.add, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unsub)
	return &hybridtest.Remote{Bus: bus}, bus, &got
}

// write makes one SetPublishAndLog of key k with entry e and message m.
func write(t *testing.T, r *hybridtest.Remote, e, m string, maxLen int) {
	t.Helper()
	if err := r.SetPublishAndLog(t.Context(), "k", []byte(e), time.Minute, "ch", []byte(m), "log", []byte(e), maxLen); err != nil {
		t.Fatalf("SetPublishAndLog(%s): %v", e, err)
	}
}

func strs(bs [][]byte) []string {
	var s []string
	for _, b := range bs {
		s = append(s, string(b))
	}
	return s
}

func TestRemoteSetPublishAndLog(t *testing.T) {
	r, bus, got := newLogged(t)
	secret := []byte("s")
	var sent [][]byte
	for i := range 3 {
		msg := message.Encode(message.Message{Op: message.OpDelete, Namespace: "ns", Keys: []string{"k"}}, secret)
		sent = append(sent, msg)
		write(t, r, fmt.Sprint("e", i), string(msg), 10)
	}
	if v, ok := r.Peek("k"); !ok || string(v) != "e2" {
		t.Errorf("Peek(k) = %q, %v; want \"e2\", true", v, ok)
	}
	entries, positions := r.PeekLog("log")
	if want := []string{"e0", "e1", "e2"}; !slices.Equal(strs(entries), want) {
		t.Errorf("PeekLog entries: got %q, want %q", entries, want)
	}
	if want := []string{"1-0", "2-0", "3-0"}; !slices.Equal(positions, want) {
		t.Errorf("PeekLog positions: got %q, want %q", positions, want)
	}
	if err := bus.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	msgs := got.all()
	if len(msgs) != 3 {
		t.Fatalf("got %d messages, want 3", len(msgs))
	}
	for i, b := range msgs {
		if want := message.Positioned(positions[i], sent[i]); !bytes.Equal(b, want) {
			t.Errorf("message %d: got % x, want % x", i, b, want)
		}
		m, err := message.Decode(b, secret)
		if err != nil || m.Position != positions[i] || !m.Authentic {
			t.Errorf("message %d decodes to position %q, authentic %v, err %v; want %q, true, nil", i, m.Position, m.Authentic, err, positions[i])
		}
	}
	if c := r.Calls(); c.SetPublishAndLog != 3 || c.SetAndPublish != 0 {
		t.Errorf("Calls: got %+v, want 3 SetPublishAndLog and no SetAndPublish", c)
	}
}

func TestRemoteSetPublishAndLogTrims(t *testing.T) {
	r, _, _ := newLogged(t)
	for i := range 10 {
		write(t, r, fmt.Sprint("e", i), "m", 3)
	}
	entries, positions := r.PeekLog("log")
	if want := []string{"e7", "e8", "e9"}; !slices.Equal(strs(entries), want) {
		t.Errorf("PeekLog after 10 writes with maxLen 3: got %q, want %q", entries, want)
	}
	if want := []string{"8-0", "9-0", "10-0"}; !slices.Equal(positions, want) {
		t.Errorf("PeekLog positions: got %q, want %q", positions, want)
	}
}

func TestRemoteReadLog(t *testing.T) {
	r, _, _ := newLogged(t)
	ctx := t.Context()
	for i := range 5 {
		write(t, r, fmt.Sprint("e", i), "m", 100)
	} // e0 at 1-0 ... e4 at 5-0
	type read struct {
		after     string
		max       int
		entries   []string
		positions []string
		complete  bool
	}
	check := func(t *testing.T, rs []read) {
		t.Helper()
		for _, rd := range rs {
			es, ps, complete, err := r.ReadLog(ctx, "log", rd.after, rd.max)
			if err != nil || !slices.Equal(strs(es), rd.entries) || !slices.Equal(ps, rd.positions) || complete != rd.complete {
				t.Errorf("ReadLog(%q, %d) = %q at %q, complete %v, %v; want %q at %q, %v", rd.after, rd.max, es, ps, complete, err, rd.entries, rd.positions, rd.complete)
			}
		}
	}
	t.Run("whole", func(t *testing.T) {
		check(t, []read{
			{"", 10, []string{"e0", "e1", "e2", "e3", "e4"}, []string{"1-0", "2-0", "3-0", "4-0", "5-0"}, true},
			{"0-0", 2, []string{"e0", "e1"}, []string{"1-0", "2-0"}, true},
			{"2-0", 2, []string{"e2", "e3"}, []string{"3-0", "4-0"}, true},
			{"5-0", 10, nil, nil, true},
			{"3-0", 0, nil, nil, true},
			{"6-0", 10, nil, nil, false}, // newer than the newest
		})
	})
	t.Run("trimmed", func(t *testing.T) {
		r.TrimLog("log", 2)
		check(t, []read{
			{"", 10, []string{"e3", "e4"}, []string{"4-0", "5-0"}, false},
			{"2-0", 10, []string{"e3", "e4"}, []string{"4-0", "5-0"}, false},
			{"3-0", 10, []string{"e3", "e4"}, []string{"4-0", "5-0"}, false}, // as l2.Store: cannot tell
			{"4-0", 10, []string{"e4"}, []string{"5-0"}, true},
		})
	})
	t.Run("emptied", func(t *testing.T) {
		r.TrimLog("log", 0)
		check(t, []read{
			{"4-0", 10, nil, nil, false},
			{"5-0", 10, nil, nil, true},
		})
	})
	t.Run("dropped", func(t *testing.T) {
		r.DropLog("log")
		check(t, []read{
			{"", 10, nil, nil, false},
			{"5-0", 10, nil, nil, false},
		})
	})
	t.Run("recreated", func(t *testing.T) {
		write(t, r, "new", "m", 100)
		check(t, []read{
			{"5-0", 10, []string{"new"}, []string{"6-0"}, false},
			{"", 10, []string{"new"}, []string{"6-0"}, true},
		})
	})
	t.Run("missing", func(t *testing.T) {
		if es, ps, complete, err := r.ReadLog(ctx, "other", "", 10); err != nil || es != nil || ps != nil || complete {
			t.Errorf("ReadLog of a missing log = %q, %q, %v, %v; want nothing, false, nil", es, ps, complete, err)
		}
	})
}

func TestRemoteOpenLog(t *testing.T) {
	r, _, _ := newLogged(t)
	ctx := t.Context()
	open := func(want string) {
		t.Helper()
		if got, err := r.OpenLog(ctx, "log"); err != nil || got != want {
			t.Errorf("OpenLog = %q, %v; want %q, nil", got, err, want)
		}
	}
	open("1-0") // a marker
	open("1-0") // no second one
	if es, ps, complete, err := r.ReadLog(ctx, "log", "", 10); err != nil || es != nil || ps != nil || !complete {
		t.Errorf("ReadLog of a new log = %q, %q, %v, %v; want nothing, complete", es, ps, complete, err)
	}
	write(t, r, "a", "m", 10)
	open("2-0")
	r.TrimLog("log", 0)
	open("3-0") // a new marker
	write(t, r, "b", "m", 10)
	if es, ps, complete, err := r.ReadLog(ctx, "log", "3-0", 10); err != nil || !slices.Equal(strs(es), []string{"b"}) || !slices.Equal(ps, []string{"4-0"}) || !complete {
		t.Errorf("ReadLog after the new marker = %q, %q, %v, %v; want [b] at [4-0], complete", es, ps, complete, err)
	}
	// 2-0 was trimmed: nothing after it is missing, but the log cannot
	// tell.
	if es, _, complete, err := r.ReadLog(ctx, "log", "2-0", 10); err != nil || !slices.Equal(strs(es), []string{"b"}) || complete {
		t.Errorf("ReadLog after 2-0 = %q, %v, %v; want [b], incomplete", es, complete, err)
	}
	if es, ps := r.PeekLog("log"); !slices.Equal(strs(es), []string{"b"}) || !slices.Equal(ps, []string{"4-0"}) {
		t.Errorf("PeekLog = %q at %q; want [b] at [4-0], no markers", es, ps)
	}
}

func TestRemoteLogBadArguments(t *testing.T) {
	r, bus, _ := newLogged(t)
	ctx := t.Context()
	if err := r.SetPublishAndLog(ctx, "k", nil, 0, "ch", nil, "log", nil, 0); err == nil {
		t.Error("SetPublishAndLog with maxLen 0: got nil error, want one")
	}
	if _, _, _, err := r.ReadLog(ctx, "log", "", -1); err == nil {
		t.Error("ReadLog with max -1: got nil error, want one")
	}
	for _, after := range []string{"x", "1", "01-0"} {
		if _, _, _, err := r.ReadLog(ctx, "log", after, 1); err == nil {
			t.Errorf("ReadLog after %q: got nil error, want one", after)
		}
	}
	var nobus hybridtest.Remote
	if err := nobus.SetPublishAndLog(ctx, "k", nil, 0, "ch", nil, "log", nil, 10); !errors.Is(err, hybridtest.ErrNoBus) {
		t.Errorf("SetPublishAndLog without a Bus: got %v, want %v", err, hybridtest.ErrNoBus)
	}
	// A failed publish writes nothing.
	down := errors.New("bus down")
	bus.FailWith(down)
	if err := r.SetPublishAndLog(ctx, "k", []byte("v"), 0, "ch", nil, "log", []byte("e"), 10); !errors.Is(err, down) {
		t.Errorf("SetPublishAndLog with the bus failing: got %v, want %v", err, down)
	}
	bus.FailWith(nil)
	if _, ok := r.Peek("k"); ok {
		t.Error("a failed SetPublishAndLog wrote its value")
	}
	if es, _ := r.PeekLog("log"); es != nil {
		t.Errorf("a failed SetPublishAndLog logged %q", es)
	}
	write(t, r, "e", "m", 10)
	if _, ps := r.PeekLog("log"); !slices.Equal(ps, []string{"1-0"}) {
		t.Errorf("after a failed SetPublishAndLog, the next entry is at %q, want [1-0]", ps)
	}
}

// TestRemoteLogOrder: whatever the interleaving of writers, messages, log
// entries and writes come in one order.
func TestRemoteLogOrder(t *testing.T) {
	r, bus, got := newLogged(t)
	ctx := t.Context()
	const writers, writes = 8, 100
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range writes {
				v := fmt.Sprintf("%d-%d", w, i)
				if err := r.SetPublishAndLog(ctx, "k", []byte(v), 0, "ch", []byte(v), "log", []byte(v), writers*writes); err != nil {
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
	entries, positions := r.PeekLog("log")
	msgs := got.all()
	if len(msgs) != writers*writes || len(entries) != len(msgs) {
		t.Fatalf("got %d messages and %d log entries, want %d", len(msgs), len(entries), writers*writes)
	}
	for i, b := range msgs {
		if want := message.Positioned(positions[i], entries[i]); !bytes.Equal(b, want) {
			t.Fatalf("message %d is % x; the log's entry %d makes % x", i, b, i, want)
		}
	}
	if v, _ := r.Peek("k"); !bytes.Equal(v, entries[len(entries)-1]) {
		t.Errorf("the Remote holds %q but the last entry is %q", v, entries[len(entries)-1])
	}
}

func TestRemoteSetIfNewerPublishAndLog(t *testing.T) {
	bus := new(hybridtest.Bus)
	defer bus.Close()
	r := &hybridtest.Remote{Bus: bus}
	var got received
	unsub, err := bus.Subscribe(t.Context(), "ch", got.add, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	ctx := t.Context()
	at := func(ms uint64) []byte { return binary.BigEndian.AppendUint64(nil, ms) }
	for _, c := range []struct {
		value      []byte
		wantStored bool
	}{
		{at(10), true}, // missing
		{at(5), false}, // older than what is stored
		{at(10), true}, // the same value: found, not written again
		{at(20), true}, // newer
	} {
		stored, err := r.SetIfNewerPublishAndLog(ctx, "k", c.value, 0, "ch", []byte("m"), 0, "log", c.value, 10)
		if err != nil || stored != c.wantStored {
			t.Fatalf("value %x: got %v, %v; want %v, nil", c.value, stored, err, c.wantStored)
		}
	}
	if v, _ := r.Peek("k"); !bytes.Equal(v, at(20)) {
		t.Errorf("key holds %x, want %x", v, at(20))
	}
	entries, positions := r.PeekLog("log")
	if len(entries) != 2 || !bytes.Equal(entries[0], at(10)) || !bytes.Equal(entries[1], at(20)) {
		t.Fatalf("log: got %x, want the two writes that stored", entries)
	}
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := got.all()
	if len(msgs) != 2 {
		t.Fatalf("got %d messages, want 2", len(msgs))
	}
	for i, msg := range msgs {
		if want := message.Positioned(positions[i], []byte("m")); !bytes.Equal(msg, want) {
			t.Errorf("message %d: got %q, want %q", i, msg, want)
		}
	}
	if _, err := r.SetIfNewerPublishAndLog(ctx, "k", at(30), 0, "ch", nil, 0, "log", nil, 0); err == nil {
		t.Error("maxLen 0: got nil error")
	}
}
