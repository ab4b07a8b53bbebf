package main

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

func encodeTrace(ids ...int32) []byte {
	var b bytes.Buffer
	for _, id := range ids {
		binary.Write(&b, binary.BigEndian, id)
	}
	return b.Bytes()
}

func TestParseTrace(t *testing.T) {
	tr, err := parseTrace("x", bytes.NewReader(encodeTrace(7, -1, 7, 300)), 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint32{0, 1, 0, 2}; !slices.Equal(tr.reqs, want) {
		t.Errorf("reqs %v, want %v", tr.reqs, want)
	}
	if want := []string{"k7", "k-1", "k300"}; !slices.Equal(tr.keys, want) {
		t.Errorf("keys %v, want %v", tr.keys, want)
	}
	if want := []int32{7, -1, 300}; !slices.Equal(tr.ids, want) {
		t.Errorf("ids %v, want %v", tr.ids, want)
	}
	if tr.sizes[2] != traceSize(300) {
		t.Errorf("size of k300: got %d, want %d", tr.sizes[2], traceSize(300))
	}
	if tr, err := parseTrace("x", bytes.NewReader(encodeTrace(1, 2, 3)), 2); err != nil || len(tr.reqs) != 2 {
		t.Errorf("limit 2: got %d requests, err %v; want 2", len(tr.reqs), err)
	}
	if _, err := parseTrace("x", bytes.NewReader(append(encodeTrace(1), 0, 0)), 0); err == nil {
		t.Error("trailing bytes: no error")
	}
	if _, err := parseTrace("x", bytes.NewReader(nil), 0); err == nil {
		t.Error("empty trace: no error")
	}
}

// TestTraceFiles reads the traces of traces/ as scenario 10 does.
func TestTraceFiles(t *testing.T) {
	orm, err := readTrace("traces/orm-busy.trace.xz", 100_000)
	if err != nil {
		t.Fatal(err)
	}
	if orm.name != "orm-busy" || len(orm.reqs) != 100_000 {
		t.Errorf("orm-busy: name %q, %d requests; want 100,000 (the limit)", orm.name, len(orm.reqs))
	}
	web, err := readTrace("traces/web07.trace.xz", 0)
	if err != nil {
		t.Fatal(err)
	}
	if web.name != "web07" || len(web.reqs) != 76_118 || len(web.keys) != 20_484 {
		t.Errorf("web07: name %q, %d requests, %d keys; want 76,118 and 20,484 (traces/README.md)", web.name, len(web.reqs), len(web.keys))
	}
}

func TestTraceSize(t *testing.T) {
	seen := map[uint32]int{}
	for id := int32(-5000); id < 5000; id++ {
		s := traceSize(id)
		if s < 64 || s >= 16<<10 {
			t.Fatalf("traceSize(%d) = %d, want 64 B to 16 KiB", id, s)
		}
		if s != traceSize(id) {
			t.Fatalf("traceSize(%d) differs between calls", id)
		}
		p := uint32(64)
		for p*2 <= s {
			p *= 2
		}
		seen[p]++
	}
	for p := uint32(64); p <= 8192; p *= 2 {
		if n := seen[p]; n < 1000 || n > 1500 {
			t.Errorf("%d of 10,000 sizes in [%d, %d), want about 1,250", n, p, 2*p)
		}
	}
	if v := payloadOf(12345, traceSize(12345)); len(v) != int(traceSize(12345)) || cap(v) != len(v) {
		t.Errorf("payload: len %d, cap %d; want %d, capped", len(v), cap(v), traceSize(12345))
	}
}

func TestTraceOrder(t *testing.T) {
	rr := traceOrder(7, 3, false)
	want := []event{{0, 0}, {1, 1}, {2, 2}, {0, 3}, {1, 4}, {2, 5}, {0, 6}}
	if !slices.Equal(rr, want) {
		t.Errorf("round robin: %v, want %v", rr, want)
	}
	own := traceOrder(7, 3, true)
	// parts [0,2) [2,4) [4,7), in turns
	want = []event{{0, 0}, {1, 2}, {2, 4}, {0, 1}, {1, 3}, {2, 5}, {2, 6}}
	if !slices.Equal(own, want) {
		t.Errorf("own order: %v, want %v", own, want)
	}
	if one := traceOrder(3, 1, true); !slices.Equal(one, []event{{0, 0}, {0, 1}, {0, 2}}) {
		t.Errorf("one instance: %v", one)
	}
}

func TestTraceWrites(t *testing.T) {
	if w := traceWrites(10, 0, 1); w != nil {
		t.Errorf("rate 0: %v, want nil", w)
	}
	a, b := traceWrites(1_000_000, 0.01, traceSeed), traceWrites(1_000_000, 0.01, traceSeed)
	if !slices.Equal(a, b) {
		t.Error("the same seed picked different writes")
	}
	n := 0
	for _, w := range a {
		if w {
			n++
		}
	}
	if n < 9_500 || n > 10_500 {
		t.Errorf("rate 1%%: %d writes of 1,000,000", n)
	}
	if slices.Equal(a, traceWrites(1_000_000, 0.01, traceSeed+1)) {
		t.Error("another seed picked the same writes")
	}
}

// unitTrace is a trace of the given key indexes, every key weighing 1.
func unitTrace(reqs []uint32) (*trace, []uint64) {
	t := &trace{reqs: reqs}
	n := int(slices.Max(reqs)) + 1
	for k := range n {
		t.keys = append(t.keys, string(rune('a'+k)))
	}
	w := make([]uint64, n)
	for i := range w {
		w[i] = 1
	}
	return t, w
}

func TestBeladyHits(t *testing.T) {
	// 1 2 3 1 2 4 1 2 with room for 2: MIN keeps 1 and 2 (4 hits); LRU
	// would hit none.
	tr, w := unitTrace([]uint32{1, 2, 3, 1, 2, 4, 1, 2})
	if h := beladyHits(tr, traceOrder(8, 1, false), nil, 1, w, 2); h[0] != 4 {
		t.Errorf("hits %d, want 4", h[0])
	}
	// Two instances, round robin: a b | a b | a b. Instance 0 reads a,
	// instance 1 reads b ... every key is held on its instance.
	tr, w = unitTrace([]uint32{0, 1, 0, 1, 0, 1})
	if h := beladyHits(tr, traceOrder(6, 2, false), nil, 2, w, 1); h[0] != 2 || h[1] != 2 {
		t.Errorf("two instances: hits %v, want [2 2]", h)
	}
	// a six times on two instances, round robin. Without writes each
	// instance misses once and hits twice. Request 2 (instance 0) writes
	// a: the copy instance 1 read at 1 is dropped, so its read at 3
	// misses; instance 0's write is not a hit.
	tr, w = unitTrace([]uint32{0, 0, 0, 0, 0, 0})
	if h := beladyHits(tr, traceOrder(6, 2, false), nil, 2, w, 1); h[0] != 2 || h[1] != 2 {
		t.Errorf("no write: hits %v, want [2 2]", h)
	}
	writes := []bool{false, false, true, false, false, false}
	if h := beladyHits(tr, traceOrder(6, 2, false), writes, 2, w, 1); h[0] != 1 || h[1] != 1 {
		t.Errorf("with a write: hits %v, want [1 1]", h)
	}
	// A value larger than the budget is never held.
	tr, _ = unitTrace([]uint32{0, 0, 0})
	if h := beladyHits(tr, traceOrder(3, 1, false), nil, 1, []uint64{5}, 4); h[0] != 0 {
		t.Errorf("oversized: hits %d, want 0", h[0])
	}
}

// TestBeladyOptimal: with equal weights MIN is optimal; compare it with an
// exhaustive search over every admission and eviction on short random
// sequences.
func TestBeladyOptimal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		n, keys, room := 4+r.IntN(9), 2+r.IntN(4), 1+r.IntN(3)
		reqs := make([]uint32, n)
		for i := range reqs {
			reqs[i] = uint32(r.IntN(keys))
		}
		tr, w := unitTrace(reqs)
		got := beladyHits(tr, traceOrder(n, 1, false), nil, 1, w, uint64(room))[0]
		if want := bestHits(reqs, 0, nil, room); got != want {
			t.Fatalf("%v with room for %d: MIN hits %d, best %d", reqs, room, got, want)
		}
	}
}

// bestHits is the most hits any policy gets on reqs[i:] from the cache
// held.
func bestHits(reqs []uint32, i int, held []uint32, room int) int64 {
	if i == len(reqs) {
		return 0
	}
	k := reqs[i]
	if slices.Contains(held, k) {
		return 1 + bestHits(reqs, i+1, held, room)
	}
	best := bestHits(reqs, i+1, held, room) // not admitted
	if len(held) < room {
		best = max(best, bestHits(reqs, i+1, append(slices.Clone(held), k), room))
	} else {
		for j := range held {
			next := slices.Clone(held)
			next[j] = k
			best = max(best, bestHits(reqs, i+1, next, room))
		}
	}
	return best
}

func TestBeladyDeterministic(t *testing.T) {
	tr, err := readTrace("traces/web07.trace.xz", 20_000)
	if err != nil {
		t.Fatal(err)
	}
	w := make([]uint64, len(tr.keys))
	for k, key := range tr.keys {
		w[k] = traceWeight(key, tr.sizes[k], 100)
	}
	order := traceOrder(len(tr.reqs), 3, false)
	writes := traceWrites(len(tr.reqs), 0.01, traceSeed)
	a := beladyHits(tr, order, writes, 3, w, workingSet(tr, 100)/10)
	b := beladyHits(tr, order, writes, 3, w, workingSet(tr, 100)/10)
	if !slices.Equal(a, b) {
		t.Errorf("two computations: %v and %v", a, b)
	}
}
