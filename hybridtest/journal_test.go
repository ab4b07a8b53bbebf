package hybridtest_test

import (
	"bytes"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"slices"
	"sync"
	"testing"

	"github.com/hybridcache/hybridcache/hybridtest"
	"github.com/hybridcache/hybridcache/internal/message"
)

// This file tests the double's logs where TestRemote cannot: its
// positions, trimming, markers, and the helpers that look at a log or
// damage it.

// logged makes one logged write of entry e with message m, keeping maxLen
// entries.
func logged(t *testing.T, r *hybridtest.Remote, e string, maxLen int) {
	t.Helper()
	f := tier.Feed{Channel: "ch", Log: "log", LogLen: maxLen}
	if _, err := r.Write(t.Context(), []tier.Write{{Key: "k", Value: []byte(e), Msg: []byte("m"), Log: []byte(e)}}, f); err != nil {
		t.Fatalf("Write of %s: %v", e, err)
	}
}

func strs(bs [][]byte) []string {
	var s []string
	for _, b := range bs {
		s = append(s, string(b))
	}
	return s
}

func TestRemoteReadLog(t *testing.T) {
	r, _, _ := newRemote(t)
	for i := range 5 {
		logged(t, r, fmt.Sprint("e", i), 100)
	} // e0 at 1-0 ... e4 at 5-0
	type read struct {
		after     string
		max       int
		entries   []string
		positions []string
		complete  bool
		last      string
	}
	check := func(t *testing.T, rs []read) {
		t.Helper()
		for _, rd := range rs {
			p, err := r.ReadLog(t.Context(), "log", rd.after, rd.max)
			if err != nil || !slices.Equal(strs(p.Entries), rd.entries) || !slices.Equal(p.Positions, rd.positions) || p.Complete != rd.complete || p.Last != rd.last {
				t.Errorf("ReadLog(%q, %d) = %q at %q, complete %v, last %q, %v; want %q at %q, %v, %q",
					rd.after, rd.max, p.Entries, p.Positions, p.Complete, p.Last, err, rd.entries, rd.positions, rd.complete, rd.last)
			}
		}
	}
	t.Run("whole", func(t *testing.T) {
		check(t, []read{
			{"0-0", 10, []string{"e0", "e1", "e2", "e3", "e4"}, []string{"1-0", "2-0", "3-0", "4-0", "5-0"}, true, "5-0"},
			{"0-0", 2, []string{"e0", "e1"}, []string{"1-0", "2-0"}, true, "5-0"},
			{"2-0", 2, []string{"e2", "e3"}, []string{"3-0", "4-0"}, true, "5-0"},
			{"5-0", 10, nil, nil, true, "5-0"},
			{"3-0", 0, nil, nil, true, "5-0"},
			{"6-0", 10, nil, nil, false, "5-0"}, // newer than the newest
		})
	})
	t.Run("trimmed", func(t *testing.T) {
		r.TrimLog("log", 2)
		check(t, []read{
			{"0-0", 10, []string{"e3", "e4"}, []string{"4-0", "5-0"}, false, "5-0"},
			{"2-0", 10, []string{"e3", "e4"}, []string{"4-0", "5-0"}, false, "5-0"},
			{"3-0", 10, []string{"e3", "e4"}, []string{"4-0", "5-0"}, false, "5-0"}, // as l2.Store: cannot tell
			{"4-0", 10, []string{"e4"}, []string{"5-0"}, true, "5-0"},
		})
	})
	t.Run("emptied", func(t *testing.T) {
		r.TrimLog("log", 0)
		check(t, []read{
			{"4-0", 10, nil, nil, false, "5-0"},
			{"5-0", 10, nil, nil, true, "5-0"},
		})
	})
	t.Run("dropped", func(t *testing.T) {
		r.DropLog("log")
		check(t, []read{
			{"0-0", 10, nil, nil, false, ""},
			{"5-0", 10, nil, nil, false, ""},
		})
	})
	t.Run("recreated", func(t *testing.T) {
		logged(t, r, "new", 100)
		check(t, []read{
			{"5-0", 10, []string{"new"}, []string{"6-0"}, false, "6-0"},
			{"0-0", 10, []string{"new"}, []string{"6-0"}, true, "6-0"},
		})
	})
}

// TestRemoteOpenLog: opening an empty or missing log adds a marker, which
// gives it a newest position and which reads skip.
func TestRemoteOpenLog(t *testing.T) {
	r, _, _ := newRemote(t)
	ctx := t.Context()
	open := func(want string) {
		t.Helper()
		if p, err := r.ReadLog(ctx, "log", "", 10); err != nil || p.Last != want || p.Entries != nil || p.Complete {
			t.Errorf("opening the log: %+v, %v; want only Last %q", p, err, want)
		}
	}
	open("1-0") // a marker
	open("1-0") // no second one
	logged(t, r, "a", 10)
	open("2-0")
	r.TrimLog("log", 0)
	open("3-0") // a new marker
	logged(t, r, "b", 10)
	if p, err := r.ReadLog(ctx, "log", "3-0", 10); err != nil || !slices.Equal(strs(p.Entries), []string{"b"}) || !slices.Equal(p.Positions, []string{"4-0"}) || !p.Complete {
		t.Errorf("ReadLog after the new marker = %+v, %v; want [b] at [4-0], complete", p, err)
	}
	if es, ps := r.PeekLog("log"); !slices.Equal(strs(es), []string{"b"}) || !slices.Equal(ps, []string{"4-0"}) {
		t.Errorf("PeekLog = %q at %q; want [b] at [4-0], no markers", es, ps)
	}
	if c := r.Calls(); c.ReadLog != 5 || c.OpenLog != 4 {
		t.Errorf("Calls: got %+v, want 5 ReadLog, 4 of them OpenLog", c)
	}
}

func TestRemoteLogTrims(t *testing.T) {
	r, _, _ := newRemote(t)
	for i := range 10 {
		logged(t, r, fmt.Sprint("e", i), 3)
	}
	es, ps := r.PeekLog("log")
	if !slices.Equal(strs(es), []string{"e7", "e8", "e9"}) || !slices.Equal(ps, []string{"8-0", "9-0", "10-0"}) {
		t.Errorf("PeekLog after 10 writes with LogLen 3: %q at %q, want [e7 e8 e9] at [8-0 9-0 10-0]", es, ps)
	}
}

func TestRemoteLogBadArguments(t *testing.T) {
	r, _, _ := newRemote(t)
	ctx := t.Context()
	if _, err := r.ReadLog(ctx, "log", "0-0", -1); err == nil {
		t.Error("ReadLog with max -1: got nil error, want one")
	}
	for _, after := range []string{"x", "1", "01-0"} {
		if _, err := r.ReadLog(ctx, "log", after, 1); err == nil {
			t.Errorf("ReadLog after %q: got nil error, want one", after)
		}
	}
}

// TestRemoteLogOrder: whatever the interleaving of writers, messages, log
// entries and writes come in one order.
func TestRemoteLogOrder(t *testing.T) {
	r, bus, got := newRemote(t)
	ctx := t.Context()
	const writers, writes = 8, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range writes {
				v := []byte(fmt.Sprintf("%d-%d", w, i))
				f := tier.Feed{Channel: "ch", Log: "log", LogLen: writers * writes}
				if _, err := r.Write(ctx, []tier.Write{{Key: "k", Value: v, Msg: v, Log: v}}, f); err != nil {
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
		if want := message.Positioned(positions[i], entries[i]); !bytes.Equal([]byte(b), want) {
			t.Fatalf("message %d is % x; the log's entry %d makes % x", i, b, i, want)
		}
	}
	if v, _ := r.Peek("k"); !bytes.Equal(v, entries[len(entries)-1]) {
		t.Errorf("the Remote holds %q but the last entry is %q", v, entries[len(entries)-1])
	}
}
