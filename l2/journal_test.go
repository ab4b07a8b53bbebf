package l2_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/message"
	"github.com/hybridcache/hybridcache/l2"
	"github.com/hybridcache/hybridcache/tier"
)

// newJournal is newStore for the tests of the log, which need a real
// redis-server (XINFO STREAM and exclusive ranges in a script).
func newJournal(t *testing.T) (*l2.Store, *redis.Client, string) {
	t.Helper()
	srv.NeedReal(t)
	return newStore(t)
}

// streamIDs returns the ids of the entries of the stream key, oldest
// first.
func streamIDs(t *testing.T, rdb *redis.Client, key string) []string {
	t.Helper()
	msgs, err := rdb.XRange(t.Context(), key, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", key, err)
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// appendLog makes n logged writes through s, of key k<i> with entry e<i>,
// and returns the positions of their entries.
func appendLog(t *testing.T, s *l2.Store, rdb *redis.Client, prefix, log string, n int) []string {
	t.Helper()
	for i := range n {
		e := fmt.Sprint("e", i)
		if _, err := s.Write(t.Context(), []tier.Write{{Key: fmt.Sprint("k", i), Value: []byte("v"), TTL: time.Minute,
			Msg: []byte("m"), Log: []byte(e)}}, tier.Feed{Channel: prefix + "ch", Log: log, LogLen: 1000}); err != nil {
			t.Fatalf("Write with Log: %v", err)
		}
	}
	return streamIDs(t, rdb, prefix+log)
}

func TestWriteAnnouncedLogged(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	channel := prefix + "ch" // not prefixed by the Store
	msgs := receive(subscribe(t, srv.Client(t), channel), 3)
	secret := []byte("s")

	var sent [][]byte
	for i, ttl := range []time.Duration{10 * time.Second, 0, time.Minute} {
		m := message.Message{Op: message.OpSet, Namespace: "ns", Keys: []string{"k"}}
		msg := message.Encode(m, secret)
		sent = append(sent, msg)
		entry := []byte(fmt.Sprint("entry", i))
		if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte(fmt.Sprint("v", i)), TTL: ttl, Msg: msg,
			Log: entry}}, tier.Feed{Channel: channel, Log: "log", LogLen: 100}); err != nil {
			t.Fatalf("Write with Log %d: %v", i, err)
		}
		pttl, err := rdb.PTTL(ctx, prefix+"k").Result()
		switch {
		case err != nil:
			t.Fatalf("PTTL: %v", err)
		case ttl == 0 && pttl != -1:
			t.Errorf("PTTL after a logged write with TTL 0 = %v; want -1", pttl)
		case ttl > 0 && (pttl <= ttl-2*time.Second || pttl > ttl):
			t.Errorf("PTTL after a logged write with TTL %v = %v; want about %v", ttl, pttl, ttl)
		}
	}
	if vs, err := s.Get(ctx, []string{"k"}); err != nil || string(vs[0]) != "v2" {
		t.Errorf("Get = %q, %v; want [\"v2\"], nil", vs, err)
	}

	// The log is a stream under the prefixed key, one entry per write,
	// field m holding the entry.
	log, err := rdb.XRange(ctx, prefix+"log", "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE: %v", err)
	}
	if len(log) != 3 {
		t.Fatalf("log has %d entries, want 3: %v", len(log), log)
	}
	for i, e := range log {
		if want := fmt.Sprint("entry", i); len(e.Values) != 1 || e.Values["m"] != want {
			t.Errorf("log entry %d: got %v, want m: %s", i, e.Values, want)
		}
	}

	// Each message is the one sent, positioned at its entry's id.
	for i, p := range wait(t, msgs, 3) {
		b := []byte(p)
		id := log[i].ID
		want := append(append([]byte{2, byte(len(id))}, id...), sent[i]...)
		if !bytes.Equal(b, want) {
			t.Errorf("message %d: got % x, want % x", i, b, want)
		}
		m, err := message.Decode(b, secret)
		if err != nil || m.Position != id || !m.Authentic {
			t.Errorf("message %d decodes to position %q, authentic %v, err %v; want %q, true, nil", i, m.Position, m.Authentic, err, id)
		}
	}
}

// TestWriteIfEqualAnnouncedLogged: the value is replaced only if the key still
// holds old, keeping its lifetime; either way the entry is logged and the
// message published at its position.
func TestWriteIfEqualAnnouncedLogged(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 2)
	if err := rdb.Set(ctx, prefix+"k", "old", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for i, tt := range []struct {
		old, value string
		replaced   bool
	}{{"old", "new", true}, {"old", "newer", false}} {
		got, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte(tt.value), If: tier.IfEqual, Old: []byte(tt.old),
			KeepTTL: true, Msg: []byte(fmt.Sprint("msg", i)), Else: []byte(fmt.Sprint("msg", i)),
			Log: []byte(fmt.Sprint("entry", i))}}, tier.Feed{Channel: channel, Log: "log", LogLen: 100})
		if err != nil || got[0] != tt.replaced {
			t.Fatalf("Write %d IfEqual with Log = %v, %v; want [%v], nil", i, got, err, tt.replaced)
		}
	}
	if v, err := rdb.Get(ctx, prefix+"k").Result(); err != nil || v != "new" {
		t.Errorf("value: %q, %v; want \"new\"", v, err)
	}
	if pttl, err := rdb.PTTL(ctx, prefix+"k").Result(); err != nil || pttl <= 50*time.Second {
		t.Errorf("PTTL: %v, %v; want the minute kept", pttl, err)
	}
	log, err := rdb.XRange(ctx, prefix+"log", "-", "+").Result()
	if err != nil || len(log) != 2 {
		t.Fatalf("log: %v, %v; want 2 entries", log, err)
	}
	for i, p := range wait(t, msgs, 2) {
		id := log[i].ID
		want := append(append([]byte{2, byte(len(id))}, id...), fmt.Sprint("msg", i)...)
		if log[i].Values["m"] != fmt.Sprint("entry", i) || !bytes.Equal([]byte(p), want) {
			t.Errorf("entry %d: %v, message % x; want entry%d and % x", i, log[i].Values, p, i, want)
		}
	}
}

// TestWriteAnnouncedLoggedOrder: concurrent writers; messages, log entries and
// writes come in one order, and positions only grow.
func TestWriteAnnouncedLoggedOrder(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	channel := prefix + "ch"
	const writers, each = 8, 50
	msgs := receive(subscribe(t, srv.Client(t), channel), writers*each)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				v := fmt.Appendf(nil, "w%d-%03d", w, i)
				if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: v, TTL: time.Minute, Msg: v, Log: v}},
					tier.Feed{Channel: channel, Log: "log", LogLen: 10000}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := wait(t, msgs, writers*each)
	log, err := rdb.XRange(ctx, prefix+"log", "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE: %v", err)
	}
	if len(log) != len(got) {
		t.Fatalf("log has %d entries for %d messages", len(log), len(got))
	}
	prev := ""
	for i, p := range got {
		m := []byte(p)
		pos := string(m[2 : 2+int(m[1])])
		body := string(m[2+int(m[1]):])
		if pos != log[i].ID || body != log[i].Values["m"] {
			t.Fatalf("message %d is %q at %s; log entry %d is %q at %s", i, body, pos, i, log[i].Values["m"], log[i].ID)
		}
		if message.ComparePositions(prev, pos) >= 0 {
			t.Fatalf("position %s after %s", pos, prev)
		}
		prev = pos
	}
	if vs, err := s.Get(ctx, []string{"k"}); err != nil || string(vs[0]) != log[len(log)-1].Values["m"] {
		t.Errorf("Redis holds %q (err %v); the last log entry is %q", vs, err, log[len(log)-1].Values["m"])
	}
}

func TestWriteLogTrims(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	node := 100
	if cfg, err := rdb.ConfigGet(ctx, "stream-node-max-entries").Result(); err == nil {
		if n, err := strconv.Atoi(cfg["stream-node-max-entries"]); err == nil {
			node = n
		}
	}
	const logLen, writes = 10, 600
	for i := range writes {
		if _, err := s.Write(ctx, []tier.Write{{Key: "k", Msg: []byte{}, Log: []byte(fmt.Sprint(i))}},
			tier.Feed{Channel: prefix + "ch", Log: "log", LogLen: logLen}); err != nil {
			t.Fatalf("Write with Log: %v", err)
		}
	}
	n, err := rdb.XLen(ctx, prefix+"log").Result()
	if err != nil {
		t.Fatalf("XLEN: %v", err)
	}
	if n < logLen || n > int64(logLen+node) {
		t.Errorf("log of %d entries after %d writes with LogLen %d; want %d to %d", n, writes, logLen, logLen, logLen+node)
	}
	// What is left is the newest entries.
	page, err := s.ReadLog(ctx, "log", "0-0", writes)
	if err != nil || page.Complete {
		t.Fatalf("ReadLog from the start of a trimmed log: complete %v, err %v; want false, nil", page.Complete, err)
	}
	if es := page.Entries; len(es) != int(n) || string(es[len(es)-1]) != fmt.Sprint(writes-1) {
		t.Errorf("ReadLog: %d entries ending %q; want %d ending %q", len(es), es[len(es)-1], n, fmt.Sprint(writes-1))
	}
}

func TestWriteLogWrongType(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	if err := rdb.Set(ctx, prefix+"log", "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), Msg: []byte{}, Log: []byte{}}},
		tier.Feed{Channel: prefix + "ch", Log: "log", LogLen: 10}); err == nil {
		t.Error("Write with Log to a log key holding a string: got nil error, want one")
	}
	if vs, err := s.Get(ctx, []string{"k"}); err != nil || vs[0] != nil {
		t.Errorf("after the failed logged write, Get = %q, %v; want [nil], nil: nothing written", vs, err)
	}
	if _, err := s.ReadLog(ctx, "log", "", 0); err == nil {
		t.Error("ReadLog opening a string key: got nil error, want one")
	}
	if _, err := s.ReadLog(ctx, "log", "0-0", 10); err == nil {
		t.Error("ReadLog of a string key: got nil error, want one")
	}
}

// TestOpenLog: ReadLog with no position opens the log: it makes a marker
// entry where the log is missing or empty, and returns, as Last, the
// newest position.
func TestOpenLog(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	page, err := s.ReadLog(ctx, "log", "", 10)
	if err != nil || page.Last == "" || !page.Complete || page.Entries != nil || page.Positions != nil {
		t.Fatalf("ReadLog(missing, \"\") = %+v, %v; want only Last, and Complete", page, err)
	}
	pos := page.Last
	if ids := streamIDs(t, rdb, prefix+"log"); !slices.Equal(ids, []string{pos}) {
		t.Fatalf("ReadLog opening the log created %v, returned %q; want one marker entry at the position returned", ids, pos)
	}
	if again, err := s.ReadLog(ctx, "log", "", 0); err != nil || again.Last != pos {
		t.Errorf("ReadLog opening the log again: Last %q, %v; want %q, nil (no second marker)", again.Last, err, pos)
	}
	ids := appendLog(t, s, rdb, prefix, "log", 2)
	if got, err := s.ReadLog(ctx, "log", "", 0); err != nil || got.Last != ids[len(ids)-1] {
		t.Errorf("ReadLog opening the log after writes: Last %q, %v; want the newest, %q", got.Last, err, ids[len(ids)-1])
	}
	// An emptied log gets a new marker, newer than all before.
	if err := rdb.XTrimMaxLen(ctx, prefix+"log", 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadLog(ctx, "log", "", 0)
	if err != nil || message.ComparePositions(got.Last, ids[len(ids)-1]) <= 0 {
		t.Errorf("ReadLog opening an emptied log: Last %q, %v; want a position after %q", got.Last, err, ids[len(ids)-1])
	}
}

func TestReadLog(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	ids := appendLog(t, s, rdb, prefix, "log", 5)
	entries := func(from, to int) []string {
		var e []string
		for i := from; i < to; i++ {
			e = append(e, fmt.Sprint("e", i))
		}
		return e
	}
	future := fmt.Sprint(msOf(t, ids[4])+1000, "-0")

	type read struct {
		after    string
		max      int
		entries  []string // and their positions are the ids of the entries
		complete bool
	}
	check := func(t *testing.T, rs []read) {
		t.Helper()
		for _, r := range rs {
			page, err := s.ReadLog(ctx, "log", r.after, r.max)
			if err != nil {
				t.Errorf("ReadLog(%q, %d): %v", r.after, r.max, err)
				continue
			}
			es, ps := page.Entries, page.Positions
			if got := strs(es); !slices.Equal(got, r.entries) || page.Complete != r.complete {
				t.Errorf("ReadLog(%q, %d) = %q, complete %v; want %q, %v", r.after, r.max, got, page.Complete, r.entries, r.complete)
			}
			if len(ps) != len(es) {
				t.Errorf("ReadLog(%q, %d): %d positions for %d entries", r.after, r.max, len(ps), len(es))
				continue
			}
			for i, p := range ps {
				n, err := strconv.Atoi(string(es[i][1:]))
				if err != nil || n >= len(ids) || p != ids[n] {
					t.Errorf("ReadLog(%q, %d): entry %q at %q; want at %q", r.after, r.max, es[i], p, ids[min(n, len(ids)-1)])
				}
			}
		}
	}

	// Last is the newest position given out, whatever the page holds, also
	// once the log is emptied (below).
	last := func(t *testing.T) {
		t.Helper()
		if page, err := s.ReadLog(ctx, "log", ids[1], 1); err != nil || page.Last != ids[4] {
			t.Errorf("ReadLog(%q, 1): Last %q, %v; want %q", ids[1], page.Last, err, ids[4])
		}
	}
	last(t)
	t.Run("whole", func(t *testing.T) {
		check(t, []read{
			{"0-0", 10, entries(0, 5), true},
			{"0-0", 2, entries(0, 2), true},
			{ids[0], 10, entries(1, 5), true},
			{ids[1], 2, entries(2, 4), true},
			{ids[4], 10, nil, true},
			{ids[2], 0, nil, true},
			{future, 10, nil, false}, // newer than the newest: the log lost entries
		})
	})
	t.Run("trimmed", func(t *testing.T) {
		if err := rdb.XTrimMaxLen(ctx, prefix+"log", 2).Err(); err != nil {
			t.Fatal(err)
		}
		check(t, []read{
			{"0-0", 10, entries(3, 5), false},
			{ids[1], 10, entries(3, 5), false}, // e2 is gone
			{ids[2], 10, entries(3, 5), false}, // nothing after ids[2] is gone, but the log cannot tell
			{ids[3], 10, entries(4, 5), true},
			{ids[4], 10, nil, true},
		})
	})
	t.Run("emptied", func(t *testing.T) {
		if err := rdb.XTrimMaxLen(ctx, prefix+"log", 0).Err(); err != nil {
			t.Fatal(err)
		}
		check(t, []read{
			{ids[3], 10, nil, false},
			{ids[4], 10, nil, true}, // the last id given out: nothing came after it
		})
		last(t)
	})
	t.Run("deleted", func(t *testing.T) {
		if err := rdb.Del(ctx, prefix+"log").Err(); err != nil {
			t.Fatal(err)
		}
		check(t, []read{
			{"0-0", 10, nil, false},
			{ids[4], 10, nil, false},
		})
	})
	t.Run("recreated", func(t *testing.T) {
		// A new log, as after a restart: its entries are newer, but those
		// before it are gone.
		newer := appendLog(t, s, rdb, prefix, "log", 1)
		if message.ComparePositions(newer[0], ids[4]) <= 0 {
			t.Fatalf("new entry at %s, not after %s", newer[0], ids[4])
		}
		page, err := s.ReadLog(ctx, "log", ids[4], 10)
		if err != nil || page.Complete || len(page.Entries) != 1 || page.Positions[0] != newer[0] {
			t.Errorf("ReadLog of a recreated log = %q at %q, complete %v, %v; want [e0] at %s, false", page.Entries, page.Positions, page.Complete, err, newer[0])
		}
		if page, err := s.ReadLog(ctx, "log", "0-0", 10); err != nil || !page.Complete {
			t.Errorf("ReadLog of a recreated log from the start: complete %v, %v; want true", page.Complete, err)
		}
	})
}

// msOf returns the milliseconds of a stream id.
func msOf(t *testing.T, id string) uint64 {
	t.Helper()
	var ms, seq uint64
	if _, err := fmt.Sscanf(id, "%d-%d", &ms, &seq); err != nil {
		t.Fatalf("stream id %q: %v", id, err)
	}
	return ms
}

func TestReadLogMissing(t *testing.T) {
	s, _, _ := newJournal(t)
	for _, after := range []string{"0-0", "1-0", "99999999999999-0"} {
		page, err := s.ReadLog(t.Context(), "nolog", after, 10)
		if err != nil || page.Complete || page.Entries != nil || page.Positions != nil || page.Last != "" {
			t.Errorf("ReadLog(missing, %q) = %+v, %v; want nothing, not complete", after, page, err)
		}
	}
}

// TestReadLogSkipsMarkers: markers are not entries and do not count
// towards max, wherever they are.
func TestReadLogSkipsMarkers(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	page, err := s.ReadLog(ctx, "log", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	open := page.Last
	if page, err := s.ReadLog(ctx, "log", "0-0", 10); err != nil || len(page.Entries) != 0 || !page.Complete {
		t.Errorf("ReadLog of a new log = %q, %v, %v; want nothing, complete", page.Entries, page.Complete, err)
	}
	if page, err := s.ReadLog(ctx, "log", open, 10); err != nil || len(page.Entries) != 0 || !page.Complete {
		t.Errorf("ReadLog after its marker = %q, %v, %v; want nothing, complete", page.Entries, page.Complete, err)
	}
	write := func(e string) {
		t.Helper()
		if _, err := s.Write(ctx, []tier.Write{{Key: "k", Msg: []byte{}, Log: []byte(e)}},
			tier.Feed{Channel: prefix + "ch", Log: "log", LogLen: 100}); err != nil {
			t.Fatal(err)
		}
	}
	marker := func() {
		t.Helper()
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: prefix + "log", Values: []string{"open", ""}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	write("a")
	marker()
	marker()
	marker()
	write("b")
	marker()
	write("c")
	all := streamIDs(t, rdb, prefix+"log") // a, 3 markers, b, marker, c
	if len(all) != 8 {
		t.Fatalf("log holds %d entries, want 8", len(all))
	}
	all = all[1:] // without the marker of the opening
	tests := []struct {
		after string
		max   int
		want  []string
	}{
		{"0-0", 10, []string{"a", "b", "c"}},
		{"0-0", 1, []string{"a"}},
		{"0-0", 2, []string{"a", "b"}},
		{open, 2, []string{"a", "b"}},
		{all[0], 1, []string{"b"}}, // after a come three markers, then b
		{all[2], 1, []string{"b"}}, // from within the markers
		{all[0], 2, []string{"b", "c"}},
		{all[4], 1, []string{"c"}},
		{all[5], 1, []string{"c"}},
		{all[6], 1, nil},
	}
	for _, tt := range tests {
		page, err := s.ReadLog(ctx, "log", tt.after, tt.max)
		got := strs(page.Entries)
		if err != nil || !slices.Equal(got, tt.want) || !page.Complete || len(page.Positions) != len(page.Entries) {
			t.Errorf("ReadLog(%q, %d) = %q at %q, %v, %v; want %q, complete", tt.after, tt.max, got, page.Positions, page.Complete, err, tt.want)
		}
	}
}

func TestLogBadArguments(t *testing.T) {
	s, _, _ := newStore(t) // no round trip: any server
	ctx := t.Context()
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Msg: []byte{}, Log: []byte{}}}, tier.Feed{Channel: "ch", Log: "log"}); err == nil {
		t.Error("Write with Log, LogLen 0: got nil error, want one")
	}
	if _, err := s.ReadLog(ctx, "log", "0-0", -1); err == nil {
		t.Error("ReadLog with max -1: got nil error, want one")
	}
	for _, after := range []string{"x", "1", "01-0", "1-0)", "(1-0"} {
		if _, err := s.ReadLog(ctx, "log", after, 1); err == nil {
			t.Errorf("ReadLog after %q: got nil error, want one", after)
		}
	}
}

// TestLogUnsupportedOnRing: a Ring keeps no log, and says so without a
// round trip.
func TestLogUnsupportedOnRing(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m.Addr()}})
	t.Cleanup(func() { rdb.Close() })
	checkLogUnsupported(t, l2.New(rdb, l2.Options{}), nil)
}

// checkLogUnsupported checks that each log call of s fails with
// errors.ErrUnsupported, sending nothing (to nodes, if not nil).
func checkLogUnsupported(t *testing.T, s *l2.Store, nodes *counter) {
	t.Helper()
	ctx := t.Context()
	if s.Info().Log {
		t.Error("Info().Log: true, want false")
	}
	// Info's first call reads Redis's eviction settings; the log calls
	// below send nothing.
	if nodes != nil {
		nodes.reset()
	}
	if _, err := s.ReadLog(ctx, "log", "", 0); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ReadLog opening the log: got %v, want an error wrapping errors.ErrUnsupported", err)
	}
	if _, err := s.ReadLog(ctx, "log", "0-0", 10); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ReadLog: got %v, want an error wrapping errors.ErrUnsupported", err)
	}
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Msg: []byte{}, Log: []byte{}}},
		tier.Feed{Channel: "ch", Log: "log", LogLen: 10}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Write with Log: got %v, want an error wrapping errors.ErrUnsupported", err)
	}
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", If: tier.IfNewer, Msg: []byte{}, Log: []byte{}}},
		tier.Feed{Channel: "ch", Log: "log", LogLen: 10}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Write IfNewer with Log: got %v, want an error wrapping errors.ErrUnsupported", err)
	}
	// One logged write refuses its whole batch.
	ws := []tier.Write{{Key: "a", Value: []byte("v")}, {Key: "b", Msg: []byte("m"), Log: []byte("e")}}
	if stored, err := s.Write(ctx, ws, tier.Feed{Channel: "ch", Log: "log", LogLen: 10}); !errors.Is(err, errors.ErrUnsupported) || stored != nil {
		t.Errorf("Write of a batch with a logged write: got %v, %v; want nil and an error wrapping errors.ErrUnsupported", stored, err)
	}
	if nodes != nil {
		if cmds, pipelines := nodes.counts(); cmds+pipelines != 0 {
			t.Errorf("unsupported log calls sent %v", nodes)
		}
	}
}

// TestJournalHistory runs one history of writes, opens, trims and losses
// on a Store, and checks after every step what ReadLog answers from every
// position seen (and from the start, and from after the newest) against
// testdata/journal.golden: the answers of hybridtest.Remote, the test
// double of package hybrid, to the same history, recorded while the Store
// was checked against it.
func TestJournalHistory(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	clearMsg := message.Encode(message.Message{Op: message.OpClear, Namespace: "ns"}, nil)
	msgs := receive(subscribe(t, srv.Client(t), prefix+"ch"), 100)
	var seen, got []string
	write := func(e string) {
		if _, err := s.Write(ctx, []tier.Write{{Key: "k", Msg: clearMsg, Log: []byte(e)}},
			tier.Feed{Channel: prefix + "ch", Log: "log", LogLen: 100}); err != nil {
			t.Fatal(err)
		}
		p, err := msgs.next()
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, positionOf(t, []byte(p)))
	}
	trim := func(keep int) {
		if err := rdb.XTrimMaxLen(ctx, prefix+"log", int64(keep)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	open := func() {
		page, err := s.ReadLog(ctx, "log", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if p := page.Last; !slices.Contains(seen, p) {
			seen = append(seen, p)
		}
	}
	// step records, for every position seen and a few more, what ReadLog
	// answers, with positions given as their index in seen.
	steps := 0
	step := func() {
		later := fmt.Sprint(msOf(t, seen[len(seen)-1])+1000, "-0")
		for _, after := range append([]string{"0-0", later}, seen...) {
			for _, n := range []int{0, 1, 2, 10} {
				page, err := s.ReadLog(ctx, "log", after, n)
				if err != nil {
					t.Fatalf("ReadLog(%q, %d): %v", after, n, err)
				}
				var at []int
				for _, p := range page.Positions {
					at = append(at, slices.Index(seen, p))
				}
				got = append(got, fmt.Sprintf("%d\tafter %d, max %d: %q at %v, complete %v",
					steps, slices.Index(seen, after), n, strs(page.Entries), at, page.Complete))
			}
		}
		steps++
	}
	open()
	step()
	for i := range 4 {
		write(fmt.Sprint("e", i))
		step()
	}
	open()
	trim(2)
	step()
	trim(0)
	step()
	open()
	write("e4")
	step()
	if err := rdb.Del(ctx, prefix+"log").Err(); err != nil {
		t.Fatal(err)
	}
	step()
	write("e5")
	step()
	open()
	step()
	checkGolden(t, "testdata/journal.golden", got)
}

// checkGolden checks got, line by line, against the file golden.
func checkGolden(t *testing.T, golden string, got []string) {
	t.Helper()
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("line %d: got %s; want %s", i+1, g, w)
		}
	}
}

func strs(bs [][]byte) []string {
	var s []string
	for _, b := range bs {
		s = append(s, string(b))
	}
	return s
}

// positionOf returns the position of a positioned message.
func positionOf(t *testing.T, b []byte) string {
	t.Helper()
	m, err := message.Decode(b, nil)
	if err != nil || m.Position == "" {
		t.Fatalf("Decode(% x) = position %q, %v; want a position", b, m.Position, err)
	}
	return m.Position
}

// TestWriteIfNewerAnnouncedLogged: a write that stores is logged and published
// positioned at its entry; one that finds its value, or a newer one, writes,
// logs and publishes nothing.
func TestWriteIfNewerAnnouncedLogged(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 2)
	at := func(ms uint64, tail string) []byte {
		return append(binary.BigEndian.AppendUint64([]byte{1, 2, 0}, ms), tail...)
	}
	for _, c := range []struct {
		name       string
		value      []byte
		wantStored bool
		want       []byte
	}{
		{"missing", at(10, "a"), true, at(10, "a")},
		{"newer stored", at(5, "b"), false, at(10, "a")},
		{"the same value", at(10, "a"), true, at(10, "a")},
		{"older stored", at(20, "c"), true, at(20, "c")},
	} {
		stored, err := s.Write(ctx, []tier.Write{{Key: "k", Value: c.value, TTL: time.Minute, If: tier.IfNewer,
			StampAt: 3, Msg: []byte("msg-" + c.name), Log: []byte("entry-" + c.name)}}, tier.Feed{Channel: channel, Log: "log", LogLen: 100})
		if err != nil || stored[0] != c.wantStored {
			t.Fatalf("%s: got %v, %v; want [%v], nil", c.name, stored, err, c.wantStored)
		}
		if vs, err := s.Get(ctx, []string{"k"}); err != nil || !bytes.Equal(vs[0], c.want) {
			t.Fatalf("%s: key holds %x, %v; want %x", c.name, vs, err, c.want)
		}
	}
	log, err := rdb.XRange(ctx, prefix+"log", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	for _, e := range log {
		entries = append(entries, fmt.Sprint(e.Values["m"]))
	}
	if want := []string{"entry-missing", "entry-older stored"}; !slices.Equal(entries, want) {
		t.Fatalf("log: got %q, want %q", entries, want)
	}
	for i, p := range wait(t, msgs, 2) {
		id := log[i].ID
		if want := string(append([]byte{2, byte(len(id))}, id...)); !strings.HasPrefix(p, want) {
			t.Errorf("message %d: got %q, want it positioned at %s", i, p, id)
		}
	}
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: at(30, ""), If: tier.IfNewer, StampAt: 3, Msg: []byte{},
		Log: []byte{}}}, tier.Feed{Channel: channel, Log: "log"}); err == nil {
		t.Error("LogLen 0: got nil error")
	}
}
