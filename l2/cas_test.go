package l2_test

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"time"
)

func TestCompareAndSet(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	if err := set(ctx, s, "k", []byte("old"), time.Minute); err != nil {
		t.Fatal(err)
	}
	ok, err := compareAndSet(ctx, s, "k", []byte("other"), []byte("new"), time.Minute)
	if err != nil || ok {
		t.Fatalf("CompareAndSet with a wrong old: got %v %v, want false nil", ok, err)
	}
	if v, _, _ := get(ctx, s, "k"); string(v) != "old" {
		t.Fatalf("after a failed CompareAndSet: got %q, want old", v)
	}
	ok, err = compareAndSet(ctx, s, "k", []byte("old"), []byte("new"), time.Minute)
	if err != nil || !ok {
		t.Fatalf("CompareAndSet with the right old: got %v %v, want true nil", ok, err)
	}
	if v, _, _ := get(ctx, s, "k"); string(v) != "new" {
		t.Fatalf("after CompareAndSet: got %q, want new", v)
	}
	// A missing key holds nothing: no old matches it.
	ok, err = compareAndSet(ctx, s, "missing", []byte(""), []byte("x"), time.Minute)
	if err != nil || ok {
		t.Fatalf("CompareAndSet on a missing key: got %v %v, want false nil", ok, err)
	}
}

func TestReplaceAndPublish(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	channel := prefix + "ch"
	ps := subscribe(t, srv.Client(t), channel)
	msgs := receive(ps, 3)
	if err := set(ctx, s, "k", []byte("old"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// A wrong old: nothing replaced, the message goes out all the same.
	ok, err := replaceAndPublish(ctx, s, "k", []byte("other"), []byte("new"), channel, []byte("m1"))
	if err != nil || ok {
		t.Fatalf("ReplaceAndPublish with a wrong old: got %v %v, want false nil", ok, err)
	}
	if v, _, _ := get(ctx, s, "k"); string(v) != "old" {
		t.Fatalf("after a failed ReplaceAndPublish: got %q, want old", v)
	}
	ok, err = replaceAndPublish(ctx, s, "k", []byte("old"), []byte("new"), channel, []byte("m2"))
	if err != nil || !ok {
		t.Fatalf("ReplaceAndPublish with the right old: got %v %v, want true nil", ok, err)
	}
	if v, _, _ := get(ctx, s, "k"); string(v) != "new" {
		t.Fatalf("after ReplaceAndPublish: got %q, want new", v)
	}
	// The lifetime is kept, not reset or removed.
	if pttl, err := rdb.PTTL(ctx, prefix+"k").Result(); err != nil || pttl <= 8*time.Second || pttl > 10*time.Second {
		t.Errorf("PTTL after ReplaceAndPublish = %v, %v; want the 10 s set before, in (8s, 10s]", pttl, err)
	}
	// A missing key holds nothing: no old matches it, and nothing is created.
	ok, err = replaceAndPublish(ctx, s, "missing", []byte(""), []byte("x"), channel, []byte("m3"))
	if err != nil || ok {
		t.Fatalf("ReplaceAndPublish on a missing key: got %v %v, want false nil", ok, err)
	}
	if _, found, _ := get(ctx, s, "missing"); found {
		t.Error("ReplaceAndPublish created a missing key")
	}
	// An empty channel publishes nothing.
	if _, err := replaceAndPublish(ctx, s, "k", []byte("new"), []byte("newer"), "", []byte("unseen")); err != nil {
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

func TestSetIfNewerAndPublish(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	channel := prefix + "ch"
	ps := subscribe(t, srv.Client(t), channel)
	msgs := receive(ps, 4)
	get := func(key string) string {
		t.Helper()
		v, _, err := get(ctx, s, key)
		if err != nil {
			t.Fatal(err)
		}
		return string(v)
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
		stored, err := setIfNewerAndPublish(ctx, s, "k", c.value, 10*time.Second, channel, []byte(c.msg), 3)
		if err != nil || stored != c.wantStored {
			t.Fatalf("%s: got %v, %v; want %v, nil", c.name, stored, err, c.wantStored)
		}
		if got := get("k"); got != string(c.want) {
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
	if err := set(ctx, s, "r", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	rec := binary.BigEndian.AppendUint64(nil, 5000)
	if stored, err := setIfNewerAndPublish(ctx, s, "r", rec, 0, "", nil, 0); err != nil || !stored {
		t.Fatalf("over a short value: got %v, %v; want true, nil", stored, err)
	}
	if stored, err := setIfNewerAndPublish(ctx, s, "r", binary.BigEndian.AppendUint64(nil, 4999), 0, "", nil, 0); err != nil || stored {
		t.Fatalf("older record: got %v, %v; want false, nil", stored, err)
	}
	if got := get("r"); got != string(rec) {
		t.Fatalf("record holds %x, want %x", got, rec)
	}
	if pttl, err := rdb.PTTL(ctx, prefix+"r").Result(); err != nil || pttl != -1 {
		t.Errorf("PTTL of a record stored without expiry = %v, %v; want -1", pttl, err)
	}
	if _, err := setIfNewerAndPublish(ctx, s, "r", rec, 0, "", nil, -1); err == nil {
		t.Error("a negative offset: got nil error")
	}
}
