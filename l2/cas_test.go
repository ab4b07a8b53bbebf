package l2_test

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/tier"
)

// TestWriteIfEqual: a write IfEqual stores only where the key holds
// exactly Old.
func TestWriteIfEqual(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("old"), TTL: time.Minute}}, tier.Feed{}); err != nil {
		t.Fatal(err)
	}
	stored, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("new"), TTL: time.Minute, If: tier.IfEqual, Old: []byte("other")}}, tier.Feed{})
	if err != nil || stored[0] {
		t.Fatalf("Write IfEqual with a wrong Old: got %v %v, want [false] nil", stored, err)
	}
	if vs, err := s.Get(ctx, []string{"k"}); err != nil || string(vs[0]) != "old" {
		t.Fatalf("after a Write IfEqual that did not store: got %q, %v; want [old]", vs, err)
	}
	stored, err = s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("new"), TTL: time.Minute, If: tier.IfEqual, Old: []byte("old")}}, tier.Feed{})
	if err != nil || !stored[0] {
		t.Fatalf("Write IfEqual with the right Old: got %v %v, want [true] nil", stored, err)
	}
	if vs, err := s.Get(ctx, []string{"k"}); err != nil || string(vs[0]) != "new" {
		t.Fatalf("after a Write IfEqual: got %q, %v; want [new]", vs, err)
	}
	// A missing key holds nothing: no old matches it.
	stored, err = s.Write(ctx, []tier.Write{{Key: "missing", Value: []byte("x"), TTL: time.Minute, If: tier.IfEqual, Old: []byte("")}}, tier.Feed{})
	if err != nil || stored[0] {
		t.Fatalf("Write IfEqual on a missing key: got %v %v, want [false] nil", stored, err)
	}
}

// TestWriteKeepTTLAnnounced: a write IfEqual with KeepTTL replaces the value
// only where the key holds exactly Old, keeping its lifetime, and
// announces Msg or Else, the same message, either way.
func TestWriteKeepTTLAnnounced(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	channel := prefix + "ch"
	ps := subscribe(t, srv.Client(t), channel)
	msgs := receive(ps, 3)
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("old"), TTL: 10 * time.Second}}, tier.Feed{}); err != nil {
		t.Fatal(err)
	}
	// A wrong old: nothing replaced, the message goes out all the same.
	stored, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("new"), If: tier.IfEqual, Old: []byte("other"),
		KeepTTL: true, Msg: []byte("m1"), Else: []byte("m1")}}, tier.Feed{Channel: channel})
	if err != nil || stored[0] {
		t.Fatalf("Write IfEqual, KeepTTL with a wrong Old: got %v %v, want [false] nil", stored, err)
	}
	if vs, err := s.Get(ctx, []string{"k"}); err != nil || string(vs[0]) != "old" {
		t.Fatalf("after a Write IfEqual, KeepTTL that did not store: got %q, %v; want [old]", vs, err)
	}
	stored, err = s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("new"), If: tier.IfEqual, Old: []byte("old"),
		KeepTTL: true, Msg: []byte("m2"), Else: []byte("m2")}}, tier.Feed{Channel: channel})
	if err != nil || !stored[0] {
		t.Fatalf("Write IfEqual, KeepTTL with the right Old: got %v %v, want [true] nil", stored, err)
	}
	if vs, err := s.Get(ctx, []string{"k"}); err != nil || string(vs[0]) != "new" {
		t.Fatalf("after a Write IfEqual, KeepTTL: got %q, %v; want [new]", vs, err)
	}
	// The lifetime is kept, not reset or removed.
	if pttl, err := rdb.PTTL(ctx, prefix+"k").Result(); err != nil || pttl <= 8*time.Second || pttl > 10*time.Second {
		t.Errorf("PTTL after a Write IfEqual, KeepTTL = %v, %v; want the 10 s set before, in (8s, 10s]", pttl, err)
	}
	// A missing key holds nothing: no old matches it, and nothing is created.
	stored, err = s.Write(ctx, []tier.Write{{Key: "missing", Value: []byte("x"), If: tier.IfEqual, Old: []byte(""),
		KeepTTL: true, Msg: []byte("m3"), Else: []byte("m3")}}, tier.Feed{Channel: channel})
	if err != nil || stored[0] {
		t.Fatalf("Write IfEqual, KeepTTL on a missing key: got %v %v, want [false] nil", stored, err)
	}
	if vs, err := s.Get(ctx, []string{"missing"}); err != nil || vs[0] != nil {
		t.Errorf("Write IfEqual, KeepTTL created a missing key: Get = %q, %v", vs, err)
	}
	// An empty channel publishes nothing.
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("newer"), If: tier.IfEqual, Old: []byte("new"),
		KeepTTL: true, Msg: []byte("unseen"), Else: []byte("unseen")}}, tier.Feed{}); err != nil {
		t.Fatal(err)
	}
	if got, want := wait(t, msgs, 3), []string{"m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
}

// stamped returns 3 bytes, the write time t big-endian in 8 bytes (at
// offset 3, as in package hybrid's envelopes), then tail.
func stamped(t uint64, tail string) []byte {
	b := []byte{1, 2, 0}
	b = binary.BigEndian.AppendUint64(b, t)
	return append(b, tail...)
}

// TestWriteIfNewerAnnounced: a write IfNewer stores over a missing key, an
// older value or one too short to hold a write time, reports stored for
// its own value, and announces only what it stored.
func TestWriteIfNewerAnnounced(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	channel := prefix + "ch"
	ps := subscribe(t, srv.Client(t), channel)
	msgs := receive(ps, 4)
	holds := func(key string) string {
		t.Helper()
		vs, err := s.Get(ctx, []string{key})
		if err != nil {
			t.Fatal(err)
		}
		return string(vs[0])
	}
	for _, c := range []struct {
		name       string
		value      []byte
		msg        string
		wantStored bool
		want       []byte // what the key holds afterwards
	}{
		{"missing key", stamped(1000, "a"), "m1", true, stamped(1000, "a")},
		{"older stored", stamped(2000, "b"), "m2", true, stamped(2000, "b")},
		{"newer stored", stamped(1500, "c"), "unseen1", false, stamped(2000, "b")},
		{"the same value (a retry that landed)", stamped(2000, "b"), "unseen2", true, stamped(2000, "b")},
		{"same write time, another value", stamped(2000, "d"), "m3", true, stamped(2000, "d")},
		{"far future", stamped(1<<50, "e"), "m4", true, stamped(1<<50, "e")},
	} {
		stored, err := s.Write(ctx, []tier.Write{{Key: "k", Value: c.value, TTL: 10 * time.Second, If: tier.IfNewer,
			StampAt: 3, Msg: []byte(c.msg)}}, tier.Feed{Channel: channel})
		if err != nil || stored[0] != c.wantStored {
			t.Fatalf("%s: got %v, %v; want [%v], nil", c.name, stored, err, c.wantStored)
		}
		if got := holds("k"); got != string(c.want) {
			t.Fatalf("%s: key holds %q, want %q", c.name, got, c.want)
		}
	}
	if pttl, err := rdb.PTTL(ctx, prefix+"k").Result(); err != nil || pttl <= 8*time.Second || pttl > 10*time.Second {
		t.Errorf("PTTL = %v, %v; want (8s, 10s]", pttl, err)
	}
	if got, want := wait(t, msgs, 4), []string{"m1", "m2", "m3", "m4"}; !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q (only writes that stored publish)", got, want)
	}

	// Offset 0, 8-byte records, no expiry, no channel; a stored value too
	// short to hold a write time counts as older.
	if _, err := s.Write(ctx, []tier.Write{{Key: "r", Value: []byte("x")}}, tier.Feed{}); err != nil {
		t.Fatal(err)
	}
	rec := binary.BigEndian.AppendUint64(nil, 5000)
	if stored, err := s.Write(ctx, []tier.Write{{Key: "r", Value: rec, If: tier.IfNewer}}, tier.Feed{}); err != nil || !stored[0] {
		t.Fatalf("over a short value: got %v, %v; want [true], nil", stored, err)
	}
	if stored, err := s.Write(ctx, []tier.Write{{Key: "r", Value: binary.BigEndian.AppendUint64(nil, 4999),
		If: tier.IfNewer}}, tier.Feed{}); err != nil || stored[0] {
		t.Fatalf("older record: got %v, %v; want [false], nil", stored, err)
	}
	if got := holds("r"); got != string(rec) {
		t.Fatalf("record holds %x, want %x", got, rec)
	}
	if pttl, err := rdb.PTTL(ctx, prefix+"r").Result(); err != nil || pttl != -1 {
		t.Errorf("PTTL of a record stored without expiry = %v, %v; want -1", pttl, err)
	}
	if _, err := s.Write(ctx, []tier.Write{{Key: "r", Value: rec, If: tier.IfNewer, StampAt: -1}}, tier.Feed{}); err == nil {
		t.Error("a negative offset: got nil error")
	}
}
