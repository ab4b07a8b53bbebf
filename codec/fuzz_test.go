package codec_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/vmihailenco/msgpack/v5"
)

func FuzzMsgpackUnmarshal(f *testing.F) {
	for _, tt := range msgpackFormats {
		f.Add([]byte(tt.in))
	}
	for _, v := range []any{testUser, []any{1, "a", nil, 2.5, []byte("b")}, map[string]any{"k": []int{1, 2}}} {
		data, err := codec.Msgpack{}.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, tt := range msgpackExtAsMap {
		f.Add([]byte(tt.in))
	}
	// The trap inputs are in testdata/fuzz/FuzzMsgpackUnmarshal.

	f.Fuzz(func(t *testing.T, data []byte) {
		c := codec.Msgpack{}

		// The validator accepts exactly what msgpack itself can skip over,
		// up to the depth limit: no false rejections, no false acceptances.
		var raw msgpack.RawMessage
		err := c.Unmarshal(data, &raw)
		if err == nil && !rawMatches(raw, data) {
			t.Fatalf("Unmarshal into RawMessage: got %q, want %q", raw, data)
		}
		if err != nil && !errors.Is(err, codec.ErrMalformed) && !errors.Is(err, codec.ErrTooDeep) {
			t.Fatalf("Unmarshal into RawMessage: got error %v, want nil, ErrMalformed or ErrTooDeep", err)
		}
		if !errors.Is(err, codec.ErrTooDeep) && len(data) <= 4096 {
			if got, want := err == nil, msgpackSkips(data); got != want {
				t.Fatalf("Unmarshal(%q) accepted: %t (error %v), but msgpack Skip accepts: %t", data, got, err, want)
			}
		}

		// Decoding may fail, but never panics, and allocates in proportion
		// to the input.
		before := heapAllocated()
		var a any
		_ = c.Unmarshal(data, &a)
		var u user
		_ = c.Unmarshal(data, &u)
		var m map[any]any
		_ = c.Unmarshal(data, &m)
		var ms map[string]any
		_ = c.Unmarshal(data, &ms)
		var us []user
		_ = c.Unmarshal(data, &us)
		var wm struct {
			M map[string][]int
			U map[string]user
		}
		_ = c.Unmarshal(data, &wm)
		if len(data) < 256 {
			// The same bytes as the payload of an ext, which msgpack v5
			// reads as a map where it expects one.
			ext := append([]byte{0xc7, byte(len(data)), 0x05}, data...)
			var em map[string]any
			_ = c.Unmarshal(ext, &em)
			var eam map[any]any
			_ = c.Unmarshal(ext, &eam)
			var ewm []map[string]string
			_ = c.Unmarshal(append([]byte{0x92}, append(ext, data...)...), &ewm)
		}
		if got, limit := heapAllocated()-before, 256*uint64(len(data))+4<<20; got > limit {
			t.Fatalf("decoding %d bytes allocated %d bytes, want at most %d", len(data), got, limit)
		}

		checkEncoderOutputAccepted(t, data)
	})
}

// heapAllocated returns the bytes allocated on the heap so far.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// msgpackSkips reports whether msgpack's own Skip reads data as exactly one
// value. It recurses without limit, so only call it with small inputs.
func msgpackSkips(data []byte) bool {
	r := bytes.NewReader(data)
	dec := msgpack.NewDecoder(r)
	return dec.Skip() == nil && r.Len() == 0
}

func FuzzJSONUnmarshal(f *testing.F) {
	for _, s := range []string{
		`{"ID":42,"Name":"Ada","Email":"ada@example.com","Score":97.5}`,
		`[1,"a",null,true,{"b":[]}]`, `"x"`, `1e400`, `{"ID":"x"}`, `[[[[`, `{"a":1}}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := codec.JSON{}
		var a any
		err := c.Unmarshal(data, &a)
		if valid := json.Valid(data); errors.Is(err, codec.ErrMalformed) == valid {
			t.Fatalf("json.Valid(%q) = %t, but Unmarshal gave error %v", data, valid, err)
		}
		var u user
		_ = c.Unmarshal(data, &u)
		var m map[string]any
		_ = c.Unmarshal(data, &m)

		checkEncoderOutputAccepted(t, data)
	})
}

// checkEncoderOutputAccepted builds a value from prog and checks that what
// each codec marshals from it, it unmarshals again.
func checkEncoderOutputAccepted(t *testing.T, prog []byte) {
	t.Helper()
	g := gen{p: prog}
	checkValueAccepted(t, g.value(0))
}

func checkValueAccepted(t *testing.T, v any) {
	t.Helper()
	data, err := codec.Msgpack{}.Marshal(v)
	if err != nil {
		t.Fatalf("Msgpack.Marshal(%#v): got error %v, want nil", v, err)
	}
	var raw msgpack.RawMessage
	if err := (codec.Msgpack{}).Unmarshal(data, &raw); err != nil {
		t.Fatalf("Msgpack.Unmarshal(%q) into RawMessage: got error %v, want nil", data, err)
	}
	if !rawMatches(raw, data) {
		t.Fatalf("Msgpack.Unmarshal into RawMessage: got %q, want %q", raw, data)
	}
	var a any
	if err := (codec.Msgpack{}).Unmarshal(data, &a); err != nil {
		t.Fatalf("Msgpack.Unmarshal(%q) into any: got error %v, want nil", data, err)
	}

	data, err = codec.JSON{}.Marshal(v)
	if err != nil {
		t.Fatalf("JSON.Marshal(%#v): got error %v, want nil", v, err)
	}
	if err := (codec.JSON{}).Unmarshal(data, &a); err != nil {
		t.Fatalf("JSON.Unmarshal(%q) into any: got error %v, want nil", data, err)
	}
}

// gen builds Go values from a byte program, so that the fuzzer explores the
// encoder's output as well as arbitrary bytes. Every value it builds can be
// encoded as both JSON and MessagePack.
type gen struct{ p []byte }

// maxGenDepth keeps generated values below DefaultMaxDepth.
const maxGenDepth = 8

func (g *gen) byte() byte {
	if len(g.p) == 0 {
		return 0
	}
	b := g.p[0]
	g.p = g.p[1:]
	return b
}

func (g *gen) uint64() uint64 {
	var x uint64
	for range 8 {
		x = x<<8 | uint64(g.byte())
	}
	return x
}

func (g *gen) take(n int) []byte {
	n = min(n, len(g.p))
	b := g.p[:n:n]
	g.p = g.p[n:]
	return b
}

func (g *gen) value(depth int) any {
	if len(g.p) == 0 {
		return nil
	}
	op := g.byte() % 17
	if depth >= maxGenDepth && op >= 9 {
		return nil
	}
	switch op {
	case 0:
		return nil
	case 1:
		return g.byte()&1 == 1
	case 2:
		return int64(g.uint64()) >> (g.byte() % 64)
	case 3:
		return g.uint64() >> (g.byte() % 64)
	case 4:
		f := math.Float64frombits(g.uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return 0.5
		}
		return f
	case 5:
		f := math.Float32frombits(uint32(g.uint64()))
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return float32(0.25)
		}
		return f
	case 6:
		return string(g.take(int(g.byte() % 40)))
	case 7:
		return string(bytes.Repeat([]byte{'a' + g.byte()%26}, 30+int(g.byte())*int(g.byte()%4)))
	case 8:
		return bytes.Clone(g.take(int(g.byte())))
	case 9:
		return []int8{int8(g.byte()), int8(g.byte())}
	case 10:
		return time.Unix(int64(g.uint64()%(1<<35))-1<<34, int64(g.uint64()%1e9)).UTC()
	case 11:
		n := int(g.byte() % 20)
		s := make([]any, n)
		for i := range s {
			s[i] = g.value(depth + 1)
		}
		return s
	case 12:
		n := int(g.byte() % 20)
		m := make(map[string]any, n)
		for range n {
			m[string(g.take(int(g.byte()%8)))] = g.value(depth + 1)
		}
		return m
	case 13:
		return user{
			ID:    int(int64(g.uint64())),
			Name:  string(g.take(int(g.byte() % 20))),
			Email: string(g.take(int(g.byte() % 20))),
			Score: float64(g.byte()) / 4,
		}
	case 14:
		s := make([]int, int(g.byte()))
		for i := range s {
			s[i] = int(int16(uint16(g.byte()) << (i % 9)))
		}
		return s
	case 15:
		n := int(g.byte() % 20)
		m := make(map[string]string, n)
		for range n {
			m[string(g.take(int(g.byte()%8)))] = string(g.take(int(g.byte() % 8)))
		}
		return m
	default:
		return []user{{ID: int(g.byte())}, {Name: string(g.take(3))}}
	}
}
