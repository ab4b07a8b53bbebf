package hybridtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"slices"
	"strconv"
	"sync"
	"time"
)

// This file holds the suite's checks of Info, Get and Write.

func checkInfo(e *env) {
	a, b := e.r.Info(), e.r.Info()
	if a.ReadBound < 0 {
		e.t.Errorf("Info().ReadBound is %v, want 0 (no bound) or more", a.ReadBound)
	}
	if a.Prefix != b.Prefix || a.Log != b.Log || a.ReadBound != b.ReadBound {
		e.t.Errorf("Info() changed between calls: %+v, then %+v", a, b)
	}
}

// checkGet: values in the order of the keys, nil for a miss, an empty
// value apart from a miss, a key named twice read twice.
func checkGet(e *env) {
	bin := []byte{0, 0xff, '\n', 0, 'x'}
	e.put("a", raw("1"), longTTL)
	e.put("b", raw("2"), longTTL)
	e.put("empty", []byte{}, longTTL)
	e.put("bin", bin, longTTL)
	keys := []string{"b", "missing", "a", "b", "empty", "bin", "missing"}
	want := [][]byte{raw("2"), nil, raw("1"), raw("2"), {}, bin, nil}
	got := e.get(keys...)
	for i := range want {
		if !same(got[i], want[i]) {
			e.t.Errorf("Get(%q) = %s, want %s", keys, showAll(got), showAll(want))
			break
		}
	}
}

// checkHeads: a Remote that is a tier.HeadReader returns the first n
// bytes of each value (all of a shorter one), nil for a missing key or an
// empty value, in order. A Remote without the capability has nothing to
// check.
func checkHeads(e *env) {
	hr, ok := e.r.(tier.HeadReader)
	if !ok {
		return
	}
	long := bytes.Repeat([]byte{0xff, 'x', 0}, 20)
	e.put("long", long, longTTL)
	e.put("short", raw("ab"), longTTL)
	e.put("empty", []byte{}, longTTL)
	keys := []string{"long", "missing", "short", "empty", "long"}
	want := [][]byte{long[:19], nil, raw("ab"), nil, long[:19]}
	got, err := hr.Heads(e.ctx, keys, 19)
	if err != nil {
		e.t.Fatalf("Heads(%q, 19): %v", keys, err)
	}
	if len(got) != len(want) {
		e.t.Fatalf("Heads(%q, 19) = %s, want %s", keys, showAll(got), showAll(want))
	}
	for i := range want {
		if !same(got[i], want[i]) {
			e.t.Errorf("Heads(%q, 19) = %s, want %s", keys, showAll(got), showAll(want))
			break
		}
	}
	for _, keys := range [][]string{nil, {}} {
		if vs, err := hr.Heads(e.ctx, keys, 19); err != nil || len(vs) != 0 {
			e.t.Errorf("Heads(%#v, 19) = %q, %v; want no values, nil", keys, vs, err)
		}
	}
}

// checkEmptyInput: a call with no keys or writes is no error.
func checkEmptyInput(e *env) {
	e.listen()
	for _, keys := range [][]string{nil, {}} {
		if vs, err := e.r.Get(e.ctx, keys); err != nil || len(vs) != 0 {
			e.t.Errorf("Get(%#v) = %q, %v; want no values, nil", keys, vs, err)
		}
		if held, err := e.r.ExtendLeases(e.ctx, keys, "tok", time.Second); err != nil || len(held) != 0 {
			e.t.Errorf("ExtendLeases(%#v) = %v, %v; want no results, nil", keys, held, err)
		}
		if ls, err := e.r.TakeLeases(e.ctx, keys, keys, "tok", time.Second); err != nil || len(ls) != 0 {
			e.t.Errorf("TakeLeases(%#v) = %+v, %v; want no results, nil", keys, ls, err)
		}
		if err := e.r.ReleaseLeases(e.ctx, keys, "tok", raw("released"), e.feed); err != nil {
			e.t.Errorf("ReleaseLeases(%#v): %v", keys, err)
		}
	}
	for _, ws := range [][]tier.Write{nil, {}} {
		if stored, err := e.r.Write(e.ctx, ws, e.feed); err != nil || len(stored) != 0 {
			e.t.Errorf("Write(%#v) = %v, %v; want no results, nil", ws, stored, err)
		}
	}
	e.expectMsgs("k", "ReleaseLeases of no leases")
}

func checkAlways(e *env) {
	st := e.write(
		tier.Write{Key: "k", Value: raw("1"), TTL: longTTL},
		tier.Write{Key: "nil", Value: nil, TTL: longTTL},
	)
	e.expectStored("Always over nothing", st, true, true)
	e.expect("k", raw("1"))
	e.expect("nil", []byte{})
	st = e.write(tier.Write{Key: "k", Value: raw("2"), TTL: longTTL, If: tier.Always})
	e.expectStored("Always over a value", st, true)
	e.expect("k", raw("2"))
}

func checkIfAbsent(e *env) {
	st := e.write(tier.Write{Key: "k", Value: raw("1"), TTL: longTTL, If: tier.IfAbsent})
	e.expectStored("IfAbsent over nothing", st, true)
	e.expect("k", raw("1"))
	st = e.write(tier.Write{Key: "k", Value: raw("2"), TTL: longTTL, If: tier.IfAbsent})
	e.expectStored("IfAbsent over a value", st, false)
	e.expect("k", raw("1"))
	e.put("empty", []byte{}, longTTL)
	st = e.write(tier.Write{Key: "empty", Value: raw("3"), TTL: longTTL, If: tier.IfAbsent})
	e.expectStored("IfAbsent over an empty value", st, false)
	e.expect("empty", []byte{})
}

func checkIfEqual(e *env) {
	e.put("k", raw("old"), longTTL)
	e.put("empty", []byte{}, longTTL)
	e.put("empty2", []byte{}, longTTL)
	for _, c := range []struct {
		what, key string
		old       []byte
		stored    bool
		holds     []byte
	}{
		{"IfEqual with another Old", "k", raw("other"), false, raw("old")},
		{"IfEqual with a prefix of the value as Old", "k", raw("ol"), false, raw("old")},
		{"IfEqual with a longer Old", "k", raw("older"), false, raw("old")},
		{"IfEqual with the value as Old", "k", raw("old"), true, raw("new")},
		{"IfEqual over nothing, Old nil", "missing", nil, false, nil},
		{"IfEqual over nothing, Old empty", "missing", []byte{}, false, nil},
		{"IfEqual over an empty value, Old empty", "empty", []byte{}, true, raw("new")},
		{"IfEqual over an empty value, Old nil", "empty2", nil, true, raw("new")},
	} {
		st := e.write(tier.Write{Key: c.key, Value: raw("new"), TTL: longTTL, If: tier.IfEqual, Old: c.old})
		e.expectStored(c.what, st, c.stored)
		e.expect(c.key, c.holds)
	}
}

// msgOf returns s as a message, nil for "".
func msgOf(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// stamped returns head, then at as 8 bytes big-endian, then tail.
func stamped(head string, at uint64, tail string) []byte {
	return append(binary.BigEndian.AppendUint64([]byte(head), at), tail...)
}

func checkIfNewer(e *env) {
	e.listen()
	newer := func(key string, value []byte, at int, msg, els string) bool {
		e.t.Helper()
		w := tier.Write{Key: key, Value: value, TTL: longTTL, If: tier.IfNewer, StampAt: at, Msg: msgOf(msg), Else: msgOf(els)}
		return e.write(w)[0]
	}
	for _, c := range []struct {
		what   string
		value  []byte
		stored bool
		holds  []byte
	}{
		{"over nothing", stamped("hdr", 10, "a"), true, stamped("hdr", 10, "a")},
		{"over an older value", stamped("hdr", 20, "b"), true, stamped("hdr", 20, "b")},
		{"over a newer value", stamped("hdr", 15, "c"), false, stamped("hdr", 20, "b")},
		{"over the same value", stamped("hdr", 20, "b"), true, stamped("hdr", 20, "b")},
		{"over a value of the same write time", stamped("hdr", 20, "d"), true, stamped("hdr", 20, "d")},
		{"over a value older by its high bytes", stamped("hdr", 0x100, "e"), true, stamped("hdr", 0x100, "e")},
		{"over a value newer by its high bytes", stamped("hdr", 0xff, "f"), false, stamped("hdr", 0x100, "e")},
	} {
		if got := newer("k", c.value, 3, "stored "+c.what, "unstored "+c.what); got != c.stored {
			e.t.Errorf("IfNewer %s: stored %v, want %v", c.what, got, c.stored)
		}
		e.expect("k", c.holds)
	}
	e.expectMsgs("k", "IfNewer", "stored over nothing", "stored over an older value", "unstored over a newer value",
		"stored over a value of the same write time", "stored over a value older by its high bytes",
		"unstored over a value newer by its high bytes")

	e.put("short", raw("hdr1234"), longTTL)
	if !newer("short", stamped("hdr", 1, ""), 3, "", "") {
		e.t.Error("IfNewer over a value too short to hold a write time: not stored")
	}
	e.expect("short", stamped("hdr", 1, ""))
	e.put("z", stamped("", 5, ""), longTTL)
	if newer("z", stamped("", 4, ""), 0, "", "") {
		e.t.Error("IfNewer at offset 0 over a newer value: stored")
	}
	if !newer("z", stamped("", 6, "x"), 0, "", "") {
		e.t.Error("IfNewer at offset 0 over an older value: not stored")
	}
	e.expect("z", stamped("", 6, "x"))
}

// checkIfSeq: a write with Seq bumps its counter when it stores, and only
// then; IfSeq stores only where the key holds nothing and the counter
// holds what was read, and bumps nothing; a lost counter never matches,
// and is made anew at a value it never held.
func checkIfSeq(e *env) {
	const seq = "{q}seq"
	counter := func() (int64, []byte) {
		e.t.Helper()
		b := e.get(seq)[0]
		n, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			e.t.Fatalf("the counter holds %s, want a decimal integer", show(b))
		}
		return n, b
	}
	ifSeq := func(key, value string, was []byte) bool {
		e.t.Helper()
		return e.write(tier.Write{Key: key, Value: raw(value), TTL: longTTL, If: tier.IfSeq, Seq: seq, SeqWas: was})[0]
	}
	if ifSeq("{q}a", "x", []byte("1")) {
		e.t.Error("IfSeq with no counter: stored")
	}
	e.expectStored("a first write with Seq", e.write(tier.Write{Key: "{q}w", Value: raw("1"), TTL: longTTL, Seq: seq}), true)
	first, firstB := counter()
	if ifSeq("{q}a", "x", nil) {
		e.t.Error("IfSeq with an empty SeqWas: stored")
	}
	if !ifSeq("{q}a", "a", firstB) {
		e.t.Error("IfSeq over nothing, counter as read: not stored")
	}
	if ifSeq("{q}a", "b", firstB) {
		e.t.Error("IfSeq over a value, counter as read: stored")
	}
	e.expect("{q}a", raw("a"))
	if n, _ := counter(); n != first {
		e.t.Errorf("counter after IfSeq writes: %d, want %d (unchanged)", n, first)
	}
	e.expectStored("IfAbsent with Seq over a value", e.write(tier.Write{Key: "{q}w", Value: raw("2"), TTL: longTTL, If: tier.IfAbsent, Seq: seq}), false)
	if n, _ := counter(); n != first {
		e.t.Errorf("counter after a write that did not store: %d, want %d (unchanged)", n, first)
	}
	e.expectStored("Always with Seq", e.write(tier.Write{Key: "{q}w", Value: raw("3"), TTL: longTTL, Seq: seq}), true)
	second, secondB := counter()
	if second != first+1 {
		e.t.Errorf("counter after a write with Seq: %d, want %d", second, first+1)
	}
	if ifSeq("{q}b", "x", firstB) {
		e.t.Error("IfSeq over nothing, counter bumped since it was read: stored")
	}
	// The counter is lost (here it expires; in Redis it may be evicted).
	start := time.Now()
	e.put(seq, secondB, shortTTL)
	e.expires(seq, start, shortTTL)
	if ifSeq("{q}b", "x", secondB) {
		e.t.Error("IfSeq over nothing, counter lost since it was read: stored")
	}
	e.expect("{q}b", nil)
	e.expectStored("a write with Seq after the counter was lost", e.write(tier.Write{Key: "{q}w", Value: raw("4"), TTL: longTTL, Seq: seq}), true)
	if n, _ := counter(); n <= second {
		e.t.Errorf("counter made anew: %d, want more than %d, the last value it held", n, second)
	}
}

// checkTTL: a lifetime expires, none (0 or less) does not.
func checkTTL(e *env) {
	start := time.Now()
	st := e.write(
		tier.Write{Key: "short", Value: raw("s"), TTL: shortTTL},
		tier.Write{Key: "zero", Value: raw("z"), TTL: 0},
		tier.Write{Key: "negative", Value: raw("n"), TTL: -time.Second},
	)
	e.expectStored("writes with lifetimes", st, true, true, true)
	e.expires("short", start, shortTTL)
	e.expect("zero", raw("z"))
	e.expect("negative", raw("n"))
}

// checkKeepTTL: IfEqual with KeepTTL keeps the lifetime the key had left,
// whatever TTL says; without, it sets TTL.
func checkKeepTTL(e *env) {
	start := time.Now()
	e.put("kept", raw("v1"), shortTTL)
	e.put("forever", raw("f1"), 0)
	e.put("reset", raw("r1"), shortTTL)
	st := e.write(
		tier.Write{Key: "kept", If: tier.IfEqual, Old: raw("v1"), Value: raw("v2"), KeepTTL: true},
		tier.Write{Key: "forever", If: tier.IfEqual, Old: raw("f1"), Value: raw("f2"), KeepTTL: true, TTL: shortTTL / 3},
		tier.Write{Key: "reset", If: tier.IfEqual, Old: raw("r1"), Value: raw("r2")},
	)
	if since := time.Since(start); since >= shortTTL && !st[0] {
		e.t.Skipf("the writes took %v, longer than the lifetime %v of what they replace", since, shortTTL)
	}
	e.expectStored("IfEqual with and without KeepTTL", st, true, true, true)
	// "kept" may be gone already on a slow machine: it kept its lifetime.
	if got := e.get("kept")[0]; !same(got, raw("v2")) && (got != nil || time.Since(start) < shortTTL) {
		e.t.Errorf("%q holds %s, want %s", "kept", show(got), show(raw("v2")))
	}
	e.expires("kept", start, shortTTL)
	e.expect("forever", raw("f2"))
	e.expect("reset", raw("r2"))
}

// checkMsgElse: Msg goes out if the write stored, Else if not, nothing for
// nil, in the order of the writes.
func checkMsgElse(e *env) {
	e.listen()
	st := e.write(
		tier.Write{Key: "k", Value: raw("v1"), If: tier.IfAbsent, Msg: raw("m1"), Else: raw("e1")},
		tier.Write{Key: "k", Value: raw("v2"), If: tier.IfAbsent, Msg: raw("m2"), Else: raw("e2")},
		tier.Write{Key: "k", Value: raw("v3"), If: tier.IfAbsent, Msg: raw("m3")},
		tier.Write{Key: "k", Value: raw("v4"), Else: raw("e4")},
		tier.Write{Key: "k", Value: raw("v5"), If: tier.IfEqual, Old: raw("v4"), Msg: raw("m5"), Else: raw("e5")},
		tier.Write{Key: "k", Value: raw("v6"), If: tier.IfEqual, Old: raw("v4"), Msg: raw("m6"), Else: raw("e6")},
	)
	e.expectStored("writes with messages", st, true, false, false, true, true, false)
	e.expect("k", raw("v5"))
	e.expectMsgs("k", "writes with messages", "m1", "e2", "m5", "e6")
}

// checkOrder: whatever the interleaving of writers of one key, its
// messages come in the order of its writes, so the last one names what it
// holds.
func checkOrder(e *env) {
	e.listen()
	const writers, writes = 4, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range writes {
				v := raw(fmt.Sprintf("%d-%d", w, i))
				if _, err := e.r.Write(e.ctx, []tier.Write{{Key: "k", Value: v, TTL: longTTL, Msg: v}}, e.feed); err != nil {
					e.t.Errorf("Write: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if e.t.Failed() {
		return
	}
	msgs := e.receive(writers * writes)
	e.expect("k", raw(msgs[len(msgs)-1]))
	e.expectMsgs("k", "after the writes") // and none more
}

// checkBatch: a batch of mixed writes, over several keys, reports each
// write's result, and each write announces as it would alone.
func checkBatch(e *env) {
	e.listen()
	e.put("b", raw("old"), longTTL)
	e.put("d", raw("old"), longTTL)
	e.put("e", stamped("", 20, ""), longTTL)
	ws := []tier.Write{
		{Key: "a", Value: raw("1")},
		{Key: "b", Value: raw("2"), If: tier.IfAbsent},
		{Key: "c", Value: raw("3"), If: tier.IfAbsent},
		{Key: "d", Value: raw("4"), If: tier.IfEqual, Old: raw("wrong")},
		{Key: "d", Value: raw("5"), If: tier.IfEqual, Old: raw("old")},
		{Key: "e", Value: stamped("", 10, ""), If: tier.IfNewer},
		{Key: "f", Value: stamped("", 30, ""), If: tier.IfNewer},
	}
	for i := range ws {
		ws[i].TTL = longTTL
		ws[i].Msg, ws[i].Else = raw(fmt.Sprint("stored ", i)), raw(fmt.Sprint("unstored ", i))
	}
	st := e.write(ws...)
	e.expectStored("a batch of mixed writes", st, true, false, true, false, true, false, true)
	want := map[string][]byte{"a": raw("1"), "b": raw("old"), "c": raw("3"), "d": raw("5"), "e": stamped("", 20, ""), "f": stamped("", 30, "")}
	for k, v := range want {
		e.expect(k, v)
	}
	got := e.receive(len(ws)) // keys on several nodes: in any order
	slices.Sort(got)
	if w := []string{"stored 0", "stored 2", "stored 4", "stored 6", "unstored 1", "unstored 3", "unstored 5"}; !slices.Equal(got, w) {
		e.t.Errorf("a batch of mixed writes published %q, want %q", got, w)
	}
}
