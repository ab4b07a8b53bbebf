package main

import (
	"bufio"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ulikunitz/xz"
)

// This file holds what scenario 10 replays, with no Redis and no cache:
// the traces, the value sizes and writes derived from them, the order in
// which a fleet's instances take the requests, and the optimal (Belady)
// hit ratio. Its tests are in trace_test.go.

// trace is a recorded request sequence: one key per request.
type trace struct {
	name  string
	reqs  []uint32 // request i asks for keys[reqs[i]]
	keys  []string // the distinct keys, in the order of their first request
	ids   []int32  // the trace's integer for each key
	sizes []uint32 // each key's value size (traceSize)
}

// readTrace reads the first limit requests (limit <= 0: all) of a trace
// file: xz-compressed 32-bit big-endian signed integers, one key per
// request (see traces/README.md). Its name is the file's, less
// ".trace.xz".
func readTrace(path string, limit int) (*trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := xz.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".xz"), ".trace")
	return parseTrace(name, bufio.NewReader(r), limit)
}

// parseTrace is readTrace on the decompressed stream.
func parseTrace(name string, r io.Reader, limit int) (*trace, error) {
	t := &trace{name: name}
	index := map[int32]uint32{}
	var b [4]byte
	for limit <= 0 || len(t.reqs) < limit {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			if err == io.EOF {
				break
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("trace %s: %d trailing bytes", name, len(t.reqs)%4)
			}
			return nil, fmt.Errorf("trace %s: %w", name, err)
		}
		id := int32(binary.BigEndian.Uint32(b[:]))
		k, ok := index[id]
		if !ok {
			k = uint32(len(t.keys))
			index[id] = k
			t.keys = append(t.keys, "k"+strconv.Itoa(int(id)))
			t.ids = append(t.ids, id)
			t.sizes = append(t.sizes, traceSize(id))
		}
		t.reqs = append(t.reqs, k)
	}
	if len(t.reqs) == 0 {
		return nil, fmt.Errorf("trace %s: no requests", name)
	}
	return t, nil
}

// traceSize is the value size of a trace key: 64 B to 16 KiB, the powers
// of two from 64 B to 8 KiB about equally often, each plus up to as much
// again. It is a hash of the key (SplitMix64's finaliser), so every run and
// every library replays the same sizes; l1's trace test derives them the
// same way.
func traceSize(key int32) uint32 {
	h := uint64(uint32(key)) + 0x9e3779b97f4a7c15
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	h ^= h >> 31
	s := uint32(64) << (h & 7)
	return s + uint32(h>>8)%s
}

// traceWrites returns which requests of n become writes: request i does
// if a hash of (seed, i) falls in the first rate of its range. The same
// seed picks the same requests in every run, for every library and every
// order.
func traceWrites(n int, rate float64, seed uint64) []bool {
	if rate <= 0 {
		return nil
	}
	w := make([]bool, n)
	limit := uint64(rate * (1 << 53))
	for i := range w {
		h := seed ^ (uint64(i) * 0x9e3779b97f4a7c15)
		h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
		h = (h ^ h>>27) * 0x94d049bb133111eb
		h ^= h >> 31
		w[i] = h>>11 < limit
	}
	return w
}

// event is one request of a replay: instance inst takes request i of the
// trace.
type event struct {
	inst int32
	i    int32
}

// traceOrder returns the requests of a trace of n requests as a fleet of
// insts instances takes them, in the order the replay issues them. Round
// robin: request i goes to instance i % insts, in the trace's order. Own
// order: instance j takes its own consecutive n/insts requests, from
// request j*n/insts (the last takes the remainder), and the instances take
// turns, one request each, so they advance together.
func traceOrder(n, insts int, own bool) []event {
	out := make([]event, 0, n)
	if !own || insts == 1 {
		for i := range n {
			out = append(out, event{int32(i % insts), int32(i)})
		}
		return out
	}
	starts := make([]int, insts+1)
	for j := range starts {
		starts[j] = j * n / insts
	}
	for step := 0; len(out) < n; step++ {
		for j := range insts {
			if i := starts[j] + step; i < starts[j+1] {
				out = append(out, event{int32(j), int32(i)})
			}
		}
	}
	return out
}

// beladyHits returns the hits of Belady's MIN on each instance of a
// replay: every instance holds at most budget bytes (key k weighs
// weight[k]), knows the future, evicts the entries needed furthest ahead
// and does not admit a value needed later than every entry it would
// displace. A write (writes[i] for request i) gives its instance the new
// value, admitted or not as a read's would be, and drops the key from the
// other instances. With values of unequal sizes this is the usual bound,
// not a proven optimum (which is NP-hard to compute).
func beladyHits(t *trace, order []event, writes []bool, insts int, weight []uint64, budget uint64) []int64 {
	const never = math.MaxInt64
	isWrite := func(i int32) bool { return writes != nil && writes[i] }
	// next[e]: the position in order of the next event of the same
	// instance and key, if no other instance writes the key before it.
	next := make([]int64, len(order))
	nextAt := make([][]int64, insts)
	for j := range nextAt {
		nextAt[j] = make([]int64, len(t.keys))
		for k := range nextAt[j] {
			nextAt[j][k] = never
		}
	}
	// The nearest write of each key ahead, its instance, and the nearest
	// one ahead by another instance than that one.
	wNear, wOther := make([]int64, len(t.keys)), make([]int64, len(t.keys))
	wInst := make([]int32, len(t.keys))
	for k := range wNear {
		wNear[k], wOther[k], wInst[k] = never, never, -1
	}
	for p := len(order) - 1; p >= 0; p-- {
		e := order[p]
		k := t.reqs[e.i]
		w := wNear[k]
		if wInst[k] == e.inst {
			w = wOther[k]
		}
		if n := nextAt[e.inst][k]; n < w {
			next[p] = n
		} else {
			next[p] = never
		}
		nextAt[e.inst][k] = int64(p)
		if isWrite(e.i) {
			if wInst[k] != e.inst {
				wOther[k] = wNear[k]
				wInst[k] = e.inst
			}
			wNear[k] = int64(p)
		}
	}

	type cache struct {
		held map[uint32]int64 // key -> its next use
		used uint64
		far  farHeap
	}
	cs := make([]*cache, insts)
	for j := range cs {
		cs[j] = &cache{held: map[uint32]int64{}}
	}
	hits := make([]int64, insts)
	for p, e := range order {
		k := t.reqs[e.i]
		c := cs[e.inst]
		if isWrite(e.i) {
			for j, o := range cs {
				if int32(j) != e.inst {
					if _, ok := o.held[k]; ok {
						delete(o.held, k)
						o.used -= weight[k]
					}
				}
			}
		}
		if _, ok := c.held[k]; ok {
			if !isWrite(e.i) {
				hits[e.inst]++
			}
			if next[p] == never {
				delete(c.held, k)
				c.used -= weight[k]
				continue
			}
			c.held[k] = next[p]
			heap.Push(&c.far, farEntry{next[p], k})
			continue
		}
		if next[p] == never || weight[k] > budget {
			continue
		}
		admit := true
		for c.used+weight[k] > budget {
			top := c.far[0]
			if n, ok := c.held[top.key]; !ok || n != top.next {
				heap.Pop(&c.far) // stale
				continue
			}
			if top.next < next[p] {
				admit = false
				break
			}
			heap.Pop(&c.far)
			delete(c.held, top.key)
			c.used -= weight[top.key]
		}
		if admit {
			c.held[k] = next[p]
			c.used += weight[k]
			heap.Push(&c.far, farEntry{next[p], k})
		}
	}
	return hits
}

// farEntry is an entry of a Belady cache and when it is next needed;
// farHeap keeps the furthest on top. Entries whose key has gone or been
// needed since are skipped when they come up.
type farEntry struct {
	next int64
	key  uint32
}

type farHeap []farEntry

func (h farHeap) Len() int           { return len(h) }
func (h farHeap) Less(i, j int) bool { return h[i].next > h[j].next }
func (h farHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *farHeap) Push(x any)        { *h = append(*h, x.(farEntry)) }
func (h *farHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// tracePayload is the bytes the values of scenario 10 carry: random, so
// that no codec or compressor shrinks them. A value of size s holds the s
// bytes from an offset that a hash of its key picks.
var tracePayload = func() []byte {
	b := make([]byte, 64<<10)
	r := rand.New(rand.NewPCG(22, 10))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}()

func payloadOf(id int32, size uint32) []byte {
	off := uint64(uint32(id)) * 0x9e3779b97f4a7c15 >> 40 % uint64(len(tracePayload)-16<<10)
	return tracePayload[off : off+uint64(size) : off+uint64(size)]
}
