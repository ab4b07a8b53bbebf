package codec_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/vmihailenco/msgpack/v5"
)

// user is the small struct of the round-trip tests and benchmarks.
type user struct {
	ID    int
	Name  string
	Email string
	Score float64
}

var testUser = user{ID: 42, Name: "Ada Lovelace", Email: "ada@example.com", Score: 97.5}

// codecIface is hybrid.Codec, restated so that this leaf package's tests do
// not depend on package hybrid.
type codecIface interface {
	ID() byte
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

var (
	_ codecIface = codec.JSON{}
	_ codecIface = codec.Msgpack{}
	_ codecIface = codec.Raw{}
)

func TestIDs(t *testing.T) {
	tests := []struct {
		c    codecIface
		want byte
	}{
		{codec.JSON{}, 1},
		{codec.Msgpack{}, 2},
		{codec.Msgpack{MaxDepth: 3}, 2},
		{codec.Raw{}, 3},
	}
	for _, tt := range tests {
		if got := tt.c.ID(); got != tt.want {
			t.Errorf("%T.ID() = %d, want %d", tt.c, got, tt.want)
		}
	}
	if codec.IDJSON != 1 || codec.IDMsgpack != 2 || codec.IDRaw != 3 {
		t.Errorf("got IDs %d, %d, %d, want 1, 2, 3", codec.IDJSON, codec.IDMsgpack, codec.IDRaw)
	}
}

// structured are the codecs that encode any Go value.
var structured = []struct {
	name string
	c    codecIface
}{
	{"json", codec.JSON{}},
	{"msgpack", codec.Msgpack{}},
}

func TestRoundTrip(t *testing.T) {
	for _, cc := range structured {
		t.Run(cc.name, func(t *testing.T) {
			roundTrip(t, cc.c, testUser)
			roundTrip(t, cc.c, user{})
			roundTrip(t, cc.c, &testUser)
			roundTrip(t, cc.c, []user{testUser, {ID: -1, Name: "ü ✓"}})
			roundTrip(t, cc.c, map[string]int{"a": 1, "b": -2, "c": 1 << 40})
			roundTrip(t, cc.c, map[string][]string{"x": {"1", "2"}, "y": {}})
			roundTrip(t, cc.c, []string{"", "a", strings.Repeat("long ", 20000)})
			roundTrip(t, cc.c, []int{})
			roundTrip(t, cc.c, []float64{0.5, -1e300})
			roundTrip(t, cc.c, "plain string")
			roundTrip(t, cc.c, int64(-7))
			roundTrip(t, cc.c, true)

			// msgpack decodes times in time.Local, so compare instants.
			want := time.Date(2024, 2, 29, 12, 30, 0, 123456789, time.UTC)
			data, err := cc.c.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			var got time.Time
			if err := cc.c.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			if !got.Equal(want) {
				t.Errorf("round trip of time.Time: got %v, want %v", got, want)
			}
		})
	}
}

// roundTrip marshals want with c, unmarshals into a new value of the same
// type and compares.
func roundTrip[V any](t *testing.T, c codecIface, want V) {
	t.Helper()
	data, err := c.Marshal(want)
	if err != nil {
		t.Fatalf("Marshal(%T): got error %v, want nil", want, err)
	}
	var got V
	if err := c.Unmarshal(data, &got); err != nil {
		t.Fatalf("Unmarshal into %T: got error %v, want nil", &got, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip of %T: got %v, want %v", want, got, want)
	}
}

func TestRoundTripAny(t *testing.T) {
	// Decoding into any gives each format's own types: JSON numbers become
	// float64, small msgpack integers int8.
	in := map[string]any{"id": 7, "tags": []any{"a", "b"}, "ok": true, "nothing": nil}
	tests := []struct {
		c    codecIface
		want any
	}{
		{codec.JSON{}, map[string]any{"id": float64(7), "tags": []any{"a", "b"}, "ok": true, "nothing": nil}},
		{codec.Msgpack{}, map[string]any{"id": int8(7), "tags": []any{"a", "b"}, "ok": true, "nothing": nil}},
	}
	for _, tt := range tests {
		data, err := tt.c.Marshal(in)
		if err != nil {
			t.Fatalf("%T.Marshal: got error %v, want nil", tt.c, err)
		}
		var got any
		if err := tt.c.Unmarshal(data, &got); err != nil {
			t.Fatalf("%T.Unmarshal: got error %v, want nil", tt.c, err)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%T: got %#v, want %#v", tt.c, got, tt.want)
		}
	}
}

func TestMarshalReturnsFreshSlice(t *testing.T) {
	for _, cc := range structured {
		first, err := cc.c.Marshal(testUser)
		if err != nil {
			t.Fatal(err)
		}
		keep := bytes.Clone(first)
		// Another Marshal must not write into the slice we hold.
		if _, err := cc.c.Marshal(user{ID: 1, Name: strings.Repeat("x", 100)}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, keep) {
			t.Errorf("%s: a second Marshal changed the first result: got %q, want %q", cc.name, first, keep)
		}
		second, err := cc.c.Marshal(testUser)
		if err != nil {
			t.Fatal(err)
		}
		first[0] ^= 0xff
		if second[0] == first[0] {
			t.Errorf("%s: two Marshal results share memory", cc.name)
		}
	}
}

func TestMarshalError(t *testing.T) {
	for _, cc := range structured {
		if _, err := cc.c.Marshal(make(chan int)); err == nil {
			t.Errorf("%s: Marshal(chan int): got nil error, want one", cc.name)
		}
	}
}

func TestUnmarshalNonPointer(t *testing.T) {
	for _, cc := range structured {
		data, err := cc.c.Marshal(testUser)
		if err != nil {
			t.Fatal(err)
		}
		var u user
		if err := cc.c.Unmarshal(data, u); err == nil {
			t.Errorf("%s: Unmarshal into a non-pointer: got nil error, want one", cc.name)
		}
		if err := cc.c.Unmarshal(data, nil); err == nil {
			t.Errorf("%s: Unmarshal into nil: got nil error, want one", cc.name)
		}
	}
}

func TestRaw(t *testing.T) {
	b := []byte("bytes \x00\xff")
	s := "string ✓"
	var nilBytes []byte
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"[]byte", b, string(b)},
		{"string", s, s},
		{"*[]byte", &b, string(b)},
		{"*string", &s, s},
		{"empty", "", ""},
		{"nil []byte", nilBytes, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := codec.Raw{}.Marshal(tt.in)
			if err != nil {
				t.Fatalf("Marshal: got error %v, want nil", err)
			}
			if data == nil {
				t.Errorf("Marshal: got nil slice, want non-nil")
			}
			if string(data) != tt.want {
				t.Errorf("Marshal: got %q, want %q", data, tt.want)
			}
			var gotB []byte
			if err := (codec.Raw{}).Unmarshal(data, &gotB); err != nil {
				t.Fatalf("Unmarshal into *[]byte: got error %v, want nil", err)
			}
			if gotB == nil || string(gotB) != tt.want {
				t.Errorf("Unmarshal into *[]byte: got %q (nil: %t), want %q", gotB, gotB == nil, tt.want)
			}
			var gotS string
			if err := (codec.Raw{}).Unmarshal(data, &gotS); err != nil {
				t.Fatalf("Unmarshal into *string: got error %v, want nil", err)
			}
			if gotS != tt.want {
				t.Errorf("Unmarshal into *string: got %q, want %q", gotS, tt.want)
			}
		})
	}
}

func TestRawCopies(t *testing.T) {
	in := []byte("original")
	data, err := codec.Raw{}.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	in[0] = 'X'
	if string(data) != "original" {
		t.Errorf("Marshal result changed with its input: got %q, want %q", data, "original")
	}

	buf := []byte("from redis")
	var got []byte
	if err := (codec.Raw{}).Unmarshal(buf, &got); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXXXXXX") // the caller reuses its read buffer
	if string(got) != "from redis" {
		t.Errorf("Unmarshal result changed with its input: got %q, want %q", got, "from redis")
	}
}

func TestRawUnsupportedType(t *testing.T) {
	type myBytes []byte
	for _, in := range []any{42, nil, myBytes("x"), json.RawMessage("{}"), []rune("r"), user{}} {
		_, err := codec.Raw{}.Marshal(in)
		if !errors.Is(err, codec.ErrUnsupportedType) {
			t.Errorf("Marshal(%T): got error %v, want ErrUnsupportedType", in, err)
		}
		if in != nil && err != nil && !strings.Contains(err.Error(), reflect.TypeOf(in).String()) {
			t.Errorf("Marshal(%T): got error %q, want it to name the type", in, err)
		}
	}
	var (
		i   int
		u   user
		a   any
		s   []byte
		str string
	)
	for _, target := range []any{&i, &u, &a, s, str, nil} {
		err := codec.Raw{}.Unmarshal([]byte("x"), target)
		if !errors.Is(err, codec.ErrUnsupportedType) {
			t.Errorf("Unmarshal into %T: got error %v, want ErrUnsupportedType", target, err)
		}
	}
	if err := (codec.Raw{}).Unmarshal([]byte("x"), &i); err == nil || !strings.Contains(err.Error(), "*int") {
		t.Errorf("Unmarshal into *int: got error %v, want one naming *int", err)
	}
}

func TestRawNilPointer(t *testing.T) {
	for _, in := range []any{(*[]byte)(nil), (*string)(nil)} {
		if _, err := (codec.Raw{}).Marshal(in); err == nil {
			t.Errorf("Marshal(%T(nil)): got nil error, want one", in)
		}
		if err := (codec.Raw{}).Unmarshal([]byte("x"), in); err == nil {
			t.Errorf("Unmarshal into %T(nil): got nil error, want one", in)
		}
	}
}

func TestJSONErrors(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		malformed bool
	}{
		{"truncated", `{"ID":1,"Na`, true},
		{"empty", ``, true},
		{"trailing", `{"ID":1} x`, true},
		{"garbage", "\xdd\xff\xff\xff\xff", true},
		{"too deep", strings.Repeat("[", 100000), true},
		{"wrong type", `{"ID":"not a number"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var u user
			err := codec.JSON{}.Unmarshal([]byte(tt.in), &u)
			if err == nil {
				t.Fatalf("got nil error, want one")
			}
			if got := errors.Is(err, codec.ErrMalformed); got != tt.malformed {
				t.Errorf("errors.Is(%v, ErrMalformed) = %t, want %t", err, got, tt.malformed)
			}
			var syntax *json.SyntaxError
			var typ *json.UnmarshalTypeError
			if !errors.As(err, &syntax) && !errors.As(err, &typ) {
				t.Errorf("got error %v, want it to wrap the encoding/json error", err)
			}
		})
	}
}

// msgpackTraps are inputs on which the bare msgpack decoder allocates
// hundreds of MiB or overflows the stack.
var msgpackTraps = []struct {
	name string
	in   []byte
	want error
}{
	{"array32 huge", []byte("\xdd\xff\xff\xff\xff"), codec.ErrMalformed},
	{"map32 huge", []byte("\xdf\xff\xff\xff\xff"), codec.ErrMalformed},
	{"str32 huge", []byte("\xdb\xff\xff\xff\xff"), codec.ErrMalformed},
	{"bin32 huge", []byte("\xc6\xff\xff\xff\xff"), codec.ErrMalformed},
	{"ext32 huge", []byte("\xc9\xff\xff\xff\xff\x01"), codec.ErrMalformed},
	{"array16 huge", []byte("\xdc\xff\xff"), codec.ErrMalformed},
	{"map16 huge", []byte("\xde\xff\xff"), codec.ErrMalformed},
	{"array32 huge in map", []byte("\x81\xa1a\xdd\x7f\xff\xff\xff\xc0"), codec.ErrMalformed},
	{"struct field str32 huge", []byte("\x81\xa4Name\xdb\xff\xff\xff\xff"), codec.ErrMalformed},
	{"nested 100000", bytes.Repeat([]byte{0x91}, 100000), codec.ErrTooDeep},
	{"nested maps 100000", bytes.Repeat([]byte{0x81, 0xc0}, 100000), codec.ErrTooDeep},
}

func TestMsgpackTraps(t *testing.T) {
	targets := []struct {
		name string
		new  func() any
	}{
		{"any", func() any { return new(any) }},
		{"user", func() any { return new(user) }},
		{"[]any", func() any { return new([]any) }},
		{"map[string]any", func() any { return new(map[string]any) }},
		{"RawMessage", func() any { return new(msgpack.RawMessage) }},
	}
	for _, trap := range msgpackTraps {
		for _, target := range targets {
			t.Run(trap.name+"/"+target.name, func(t *testing.T) {
				err := codec.Msgpack{}.Unmarshal(trap.in, target.new())
				if !errors.Is(err, trap.want) {
					t.Fatalf("got error %v, want %v", err, trap.want)
				}
				const runs = 10
				if got := bytesAllocated(func() {
					for range runs {
						_ = codec.Msgpack{}.Unmarshal(trap.in, target.new())
					}
				}) / runs; got > 1<<20 {
					t.Errorf("a decode allocated %d bytes, want at most 1 MiB", got)
				}
			})
		}
	}
}

// bytesAllocated returns the bytes of heap that f allocates.
func bytesAllocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// msgpackFormats has a well-formed value for every MessagePack format
// byte.
var msgpackFormats = []struct {
	name string
	in   string
}{
	{"positive fixint", "\x00"},
	{"positive fixint max", "\x7f"},
	{"fixmap empty", "\x80"},
	{"fixmap", "\x82\xa1a\x01\xa1b\xc0"},
	{"fixmap 15", "\x8f" + strings.Repeat("\xa0\xc0", 15)},
	{"fixarray empty", "\x90"},
	{"fixarray", "\x93\x01\xa1x\xc3"},
	{"fixarray 15", "\x9f" + strings.Repeat("\xc0", 15)},
	{"fixstr empty", "\xa0"},
	{"fixstr", "\xa3abc"},
	{"fixstr 31", "\xbf" + strings.Repeat("s", 31)},
	{"nil", "\xc0"},
	{"false", "\xc2"},
	{"true", "\xc3"},
	{"bin8", "\xc4\x03\x00\x01\x02"},
	{"bin8 empty", "\xc4\x00"},
	{"bin16", "\xc5\x00\x02ab"},
	{"bin32", "\xc6\x00\x00\x00\x01z"},
	{"ext8", "\xc7\x03\x05abc"},
	{"ext8 empty", "\xc7\x00\x05"},
	{"ext16", "\xc8\x00\x01\x05a"},
	{"ext32", "\xc9\x00\x00\x00\x02\x05ab"},
	{"float32", "\xca\x3f\x80\x00\x00"},
	{"float64", "\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00"},
	{"uint8", "\xcc\xff"},
	{"uint16", "\xcd\xff\xff"},
	{"uint32", "\xce\xff\xff\xff\xff"},
	{"uint64", "\xcf\xff\xff\xff\xff\xff\xff\xff\xff"},
	{"int8", "\xd0\x80"},
	{"int16", "\xd1\x80\x00"},
	{"int32", "\xd2\x80\x00\x00\x00"},
	{"int64", "\xd3\x80\x00\x00\x00\x00\x00\x00\x00"},
	{"fixext1", "\xd4\x05a"},
	{"fixext2", "\xd5\x05ab"},
	{"fixext4", "\xd6\xffabcd"},
	{"fixext8", "\xd7\xffabcdefgh"},
	{"fixext16", "\xd8\x05abcdefghijklmnop"},
	{"str8", "\xd9\x03abc"},
	{"str16", "\xda\x00\x03abc"},
	{"str32", "\xdb\x00\x00\x00\x03abc"},
	{"array16", "\xdc\x00\x02\x01\x02"},
	{"array32", "\xdd\x00\x00\x00\x02\x01\x02"},
	{"map16", "\xde\x00\x01\xa1k\x01"},
	{"map32", "\xdf\x00\x00\x00\x01\xa1k\x01"},
	{"negative fixint", "\xe0"},
	{"negative fixint -1", "\xff"},
	{"nested", "\x92\x81\xa1a\x91\xc4\x01x\xd9\x02hi"},
}

func TestMsgpackFormats(t *testing.T) {
	for _, tt := range msgpackFormats {
		t.Run(tt.name, func(t *testing.T) {
			var raw msgpack.RawMessage
			if err := (codec.Msgpack{}).Unmarshal([]byte(tt.in), &raw); err != nil {
				t.Fatalf("got error %v, want nil", err)
			}
			if !rawMatches(raw, []byte(tt.in)) {
				t.Errorf("got %q, want %q", raw, tt.in)
			}
			for n := range len(tt.in) {
				err := codec.Msgpack{}.Unmarshal([]byte(tt.in[:n]), &raw)
				if !errors.Is(err, codec.ErrMalformed) {
					t.Errorf("first %d bytes: got error %v, want ErrMalformed", n, err)
				}
			}
			err := codec.Msgpack{}.Unmarshal([]byte(tt.in+"\xc0"), &raw)
			if !errors.Is(err, codec.ErrMalformed) {
				t.Errorf("with a trailing byte: got error %v, want ErrMalformed", err)
			}
		})
	}
}

func TestMsgpackCoversEveryFormatByte(t *testing.T) {
	seen := make(map[byte]bool)
	for _, tt := range msgpackFormats {
		seen[tt.in[0]] = true
	}
	for c := range 256 {
		b := byte(c)
		// One byte from each fix range is enough: they differ only in the
		// low bits, which the other cases cover.
		switch {
		case b <= 0x7f, b >= 0xe0, b >= 0x80 && b <= 0xbf, b == 0xc1:
			continue
		}
		if !seen[b] {
			t.Errorf("format byte %#x has no case in msgpackFormats", b)
		}
	}
}

func TestMsgpackNeverUsed(t *testing.T) {
	for _, in := range []string{"\xc1", "\x91\xc1", "\x81\xc1\xc0", "\x81\xa1k\xc1"} {
		var v any
		if err := (codec.Msgpack{}).Unmarshal([]byte(in), &v); !errors.Is(err, codec.ErrMalformed) {
			t.Errorf("Unmarshal(%q): got error %v, want ErrMalformed", in, err)
		}
	}
}

func TestMsgpackDeclaredLengths(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		// An array of n elements needs n bytes, a map of n pairs 2n.
		{"array16 fits", "\xdc\x00\x03\xc0\xc0\xc0", true},
		{"array16 one short", "\xdc\x00\x03\xc0\xc0", false},
		{"map16 fits", "\xde\x00\x02\xa0\xc0\xa1a\xc0", true},
		{"map16 one short", "\xde\x00\x02\xa0\xc0\xa1a", false},
		{"map16 odd bytes left", "\xde\x00\x02\xa0\xc0\xa0", false},
		{"fixmap short", "\x82\xa0\xc0\xa0", false},
		{"str8 one short", "\xd9\x03ab", false},
		{"bin16 one short", "\xc5\x00\x03ab", false},
		{"ext8 no type", "\xc7\x00", false},
		{"ext8 one short", "\xc7\x02\x05a", false},
		{"fixext4 one short", "\xd6\x05abc", false},
		{"str32 length cut", "\xdb\x00\x00", false},
		{"int64 cut", "\xd3\x00\x00\x00\x00\x00\x00\x00", false},
		{"element too long for array", "\x92\xd9\x05abcde", false},
	}
	for _, tt := range tests {
		var raw msgpack.RawMessage
		err := codec.Msgpack{}.Unmarshal([]byte(tt.in), &raw)
		if tt.ok && err != nil {
			t.Errorf("%s: got error %v, want nil", tt.name, err)
		}
		if !tt.ok && !errors.Is(err, codec.ErrMalformed) {
			t.Errorf("%s: got error %v, want ErrMalformed", tt.name, err)
		}
	}
}

// nestedArrays returns depth arrays nested in each other around a nil.
func nestedArrays(depth int) []byte {
	return append(bytes.Repeat([]byte{0x91}, depth), 0xc0)
}

func TestMsgpackMaxDepth(t *testing.T) {
	tests := []struct {
		maxDepth, depth int
		ok              bool
	}{
		{0, codec.DefaultMaxDepth, true},
		{0, codec.DefaultMaxDepth + 1, false},
		{-1, codec.DefaultMaxDepth, true},
		{-1, codec.DefaultMaxDepth + 1, false},
		{1, 1, true},
		{1, 2, false},
		{3, 3, true},
		{3, 4, false},
		{200, 200, true}, // deeper than the validator's stack array
		{200, 201, false},
		{1 << 30, 10000, true}, // capped at 10000
		{1 << 30, 10001, false},
	}
	for _, tt := range tests {
		c := codec.Msgpack{MaxDepth: tt.maxDepth}
		var v any
		err := c.Unmarshal(nestedArrays(tt.depth), &v)
		if tt.ok && err != nil {
			t.Errorf("MaxDepth %d, depth %d: got error %v, want nil", tt.maxDepth, tt.depth, err)
		}
		if !tt.ok && !errors.Is(err, codec.ErrTooDeep) {
			t.Errorf("MaxDepth %d, depth %d: got error %v, want ErrTooDeep", tt.maxDepth, tt.depth, err)
		}
	}

	// Empty containers and maps count too; a struct is a map.
	var v any
	if err := (codec.Msgpack{MaxDepth: 2}).Unmarshal([]byte("\x91\x81\xa1a\x90"), &v); !errors.Is(err, codec.ErrTooDeep) {
		t.Errorf("empty array at depth 3: got error %v, want ErrTooDeep", err)
	}
	if err := (codec.Msgpack{MaxDepth: 2}).Unmarshal([]byte("\x91\x81\xa1a\xc0"), &v); err != nil {
		t.Errorf("map at depth 2: got error %v, want nil", err)
	}
	// Depth is per path, not the number of containers.
	siblings := append([]byte{0xdc, 0x03, 0xe8}, bytes.Repeat([]byte{0x91, 0x90}, 1000)...)
	var w any
	if err := (codec.Msgpack{MaxDepth: 3}).Unmarshal(siblings, &w); err != nil {
		t.Errorf("1000 siblings of depth 3: got error %v, want nil", err)
	}
}

func TestMsgpackTruncated(t *testing.T) {
	values := []any{
		testUser,
		map[string]any{"a": []any{1, "two", 3.0, nil, []byte{4}}, "b": map[string]any{"c": true}},
		[]string{strings.Repeat("s", 300), strings.Repeat("t", 70000)},
		time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC),
	}
	for _, v := range values {
		data, err := codec.Msgpack{}.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		step := max(1, len(data)/500)
		for n := 0; n < len(data); n += step {
			var got any
			if err := (codec.Msgpack{}).Unmarshal(data[:n], &got); !errors.Is(err, codec.ErrMalformed) {
				t.Errorf("%T cut to %d of %d bytes: got error %v, want ErrMalformed", v, n, len(data), err)
			}
			var u user
			if err := (codec.Msgpack{}).Unmarshal(data[:n], &u); !errors.Is(err, codec.ErrMalformed) {
				t.Errorf("%T cut to %d of %d bytes into user: got error %v, want ErrMalformed", v, n, len(data), err)
			}
		}
	}
}

func TestMsgpackWrongType(t *testing.T) {
	data, err := codec.Msgpack{}.Marshal(map[string]any{"ID": "not a number"})
	if err != nil {
		t.Fatal(err)
	}
	var u user
	err = codec.Msgpack{}.Unmarshal(data, &u)
	if err == nil {
		t.Fatal("got nil error, want one")
	}
	if errors.Is(err, codec.ErrMalformed) || errors.Is(err, codec.ErrTooDeep) {
		t.Errorf("got error %v, want one that is neither ErrMalformed nor ErrTooDeep", err)
	}
}

func TestMsgpackDecoderPanic(t *testing.T) {
	// msgpack v5 panics on an unhashable key when decoding into map[any]any.
	for _, in := range []string{"\x81\x90\xc0", "\x81\x80\xc0", "\x81\xc4\x01x\xc0"} {
		var m map[any]any
		if err := (codec.Msgpack{}).Unmarshal([]byte(in), &m); err == nil {
			t.Errorf("Unmarshal(%q) into map[any]any: got nil error, want one", in)
		}
	}
	// The codec still works afterwards.
	roundTrip(t, codec.Msgpack{}, testUser)
}

func TestRandomBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	codecs := []codecIface{codec.JSON{}, codec.Msgpack{}, codec.Raw{}}
	buf := make([]byte, 64)
	for range 20000 {
		in := buf[:r.IntN(len(buf))]
		for i := range in {
			in[i] = byte(r.Uint32())
		}
		for _, c := range codecs {
			var a any
			_ = c.Unmarshal(in, &a)
			var u user
			_ = c.Unmarshal(in, &u)
			var s string
			_ = c.Unmarshal(in, &s)
			var m map[string]any
			_ = c.Unmarshal(in, &m)
		}
	}
}

func TestMsgpackAcceptsEncoderOutput(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	prog := make([]byte, 256)
	for range 3000 {
		for i := range prog {
			prog[i] = byte(r.Uint32())
		}
		checkEncoderOutputAccepted(t, prog[:r.IntN(len(prog))])
	}
	// Values large enough for the 16- and 32-bit length formats.
	big := []any{
		strings.Repeat("s", 1<<8),
		strings.Repeat("s", 1<<16),
		bytes.Repeat([]byte{1}, 1<<8),
		bytes.Repeat([]byte{1}, 1<<16),
		make([]any, 1<<4),
		make([]any, 1<<16),
		make([]int, 1<<16),
		bigMap(1 << 4),
		bigMap(1 << 16),
		time.Unix(1<<35, 1), // ext8: 12-byte timestamp
		time.Unix(-1, 0),
	}
	for _, v := range big {
		checkValueAccepted(t, v)
	}
}

func bigMap(n int) map[string]int {
	m := make(map[string]int, n)
	for i := range n {
		m[strconv.Itoa(i)] = i
	}
	return m
}

// rawMatches reports whether raw, decoded from data into a
// msgpack.RawMessage, holds data. msgpack decodes a nil into a nil
// RawMessage.
func rawMatches(raw msgpack.RawMessage, data []byte) bool {
	if string(data) == "\xc0" {
		return raw == nil
	}
	return bytes.Equal(raw, data)
}

// msgpack v5 reads an ext value found where a map is expected as a map
// starting at the ext's payload. These inputs are well formed, so they pass
// the walk, but read that way they hide the traps above.
var msgpackExtAsMap = []struct {
	name string
	in   string
}{
	{"fixext16 holding map32 huge", "\xd8\xdf\xdf\xdf\xdf\xdf\xdf\xdf\xdfhi{klmnop"},
	{"fixext16 holding array32 huge", "\xd8\x05\x81\xa1k\xdd\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00"},
	{"fixext8 holding map32 huge", "\xd7\x05\xdf\xff\xff\xff\xff\x00\x00\x00"},
	{"ext8 holding str32 huge", "\xc7\x08\x05\x81\xa1k\xdb\xff\xff\xff"},
	{"fixext1 map spilling out", "\x81\xa1a\xd4\x05\x81\xa1k\xdd\x7f\xff\xff\xff"},
	{"nil then bin32 huge", "\x82\xa1M\xd6\x05\xc0\xa1N\xc6\xff\xa1x\xc0"},
	{"nested ext", "\xd8\x05\x81\xa1k\xd6\x05\xdf\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00"},
	{"deep nesting in payload", "\xc8\x00\x65\x05" + strings.Repeat("\x81\xa0", 50) + "\xc0"},
}

func TestMsgpackExtAsMap(t *testing.T) {
	type withMap struct {
		M map[string]any
		N []any
	}
	targets := []struct {
		name string
		new  func() any
	}{
		{"map[string]any", func() any { return new(map[string]any) }},
		{"map[any]any", func() any { return new(map[any]any) }},
		{"map[string]string", func() any { return new(map[string]string) }},
		{"map[string][]int", func() any { return new(map[string][]int) }},
		{"map[string]map[string]any", func() any { return new(map[string]map[string]any) }},
		{"struct with map", func() any { return new(withMap) }},
		{"any", func() any { return new(any) }},
		{"RawMessage", func() any { return new(msgpack.RawMessage) }},
	}
	for _, tt := range msgpackExtAsMap {
		for _, target := range targets {
			t.Run(tt.name+"/"+target.name, func(t *testing.T) {
				const runs = 5
				if got := bytesAllocated(func() {
					for range runs {
						_ = codec.Msgpack{MaxDepth: 20}.Unmarshal([]byte(tt.in), target.new())
					}
				}) / runs; got > 1<<20 {
					t.Errorf("a decode allocated %d bytes, want at most 1 MiB", got)
				}
			})
		}
	}
}

func TestMsgpackExtAsMapTrapped(t *testing.T) {
	// The bytes are well formed, so RawMessage takes them; read as a map,
	// the payload is not.
	in := []byte("\xd7\x05\xdf\xff\xff\xff\xff\x00\x00\x00")
	var raw msgpack.RawMessage
	if err := (codec.Msgpack{}).Unmarshal(in, &raw); err != nil {
		t.Errorf("into RawMessage: got error %v, want nil", err)
	}
	var m map[string]any
	if err := (codec.Msgpack{}).Unmarshal(in, &m); err == nil {
		t.Errorf("into map[string]any: got nil error, want one")
	}
}

func TestMsgpackExtWrappedMap(t *testing.T) {
	// An ext whose payload is a well-formed map still decodes as a map, as
	// msgpack v5 allows.
	in := []byte("\xd6\x05\x81\xa1k\x07")
	var m map[string]int
	if err := (codec.Msgpack{}).Unmarshal(in, &m); err != nil {
		t.Fatalf("got error %v, want nil", err)
	}
	if want := map[string]int{"k": 7}; !reflect.DeepEqual(m, want) {
		t.Errorf("got %v, want %v", m, want)
	}
}

func TestMsgpackEmptyExtBeforeMap(t *testing.T) {
	// The decoder may read an empty ext and the map after it as one value,
	// so each such pair counts as one more level of nesting.
	tests := []struct {
		in       string
		maxDepth int
		ok       bool
	}{
		{"\x92\xc7\x00\x05\x80", 2, false},
		{"\x92\xc7\x00\x05\x80", 3, true},
		{"\x92\xc7\x00\x05\xc0", 1, true}, // no container after the pair
		{"\x93\xc7\x00\x05\xc0\x90", 2, false},
		{"\x92\xc7\x00\x05\x01", 1, true},
		{"\x91\x94\xc7\x00\x05\x80\xc7\x00\x05\x80", 4, false},
		{"\x91\x94\xc7\x00\x05\x80\xc7\x00\x05\x80", 5, true},
		{"\xc7\x00\x05", 1, true},
	}
	for _, tt := range tests {
		var raw msgpack.RawMessage
		err := codec.Msgpack{MaxDepth: tt.maxDepth}.Unmarshal([]byte(tt.in), &raw)
		if tt.ok && err != nil {
			t.Errorf("Unmarshal(%q) with MaxDepth %d: got error %v, want nil", tt.in, tt.maxDepth, err)
		}
		if !tt.ok && !errors.Is(err, codec.ErrTooDeep) {
			t.Errorf("Unmarshal(%q) with MaxDepth %d: got error %v, want ErrTooDeep", tt.in, tt.maxDepth, err)
		}
	}
}

func TestMsgpackTimestamps(t *testing.T) {
	// Timestamps are ext values whose payload often starts with a byte that
	// could start a map; they must still decode.
	type event struct {
		At   time.Time
		Tags map[string]string
	}
	for ns := 0; ns < 1e9; ns += 1e9 / 2000 {
		for _, sec := range []int64{0, 1_700_000_000, 1 << 31, 1 << 33, 1 << 35, -1} {
			want := event{At: time.Unix(sec, int64(ns)), Tags: map[string]string{"k": "v"}}
			data, err := codec.Msgpack{}.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			var got event
			if err := (codec.Msgpack{}).Unmarshal(data, &got); err != nil {
				t.Fatalf("%v: got error %v, want nil", want.At, err)
			}
			if !got.At.Equal(want.At) || !reflect.DeepEqual(got.Tags, want.Tags) {
				t.Fatalf("got %v, want %v", got, want)
			}
			var a any
			if err := (codec.Msgpack{}).Unmarshal(data, &a); err != nil {
				t.Fatalf("%v into any: got error %v, want nil", want.At, err)
			}
		}
	}
}

func TestMsgpackInternedStrings(t *testing.T) {
	type item struct {
		Kind string `msgpack:",intern"`
	}
	var items []item
	for i := range 129 { // indices up to 128: see the NOTE on Unmarshal
		items = append(items, item{Kind: "kind-" + strconv.Itoa(i)})
	}
	items = append(items, items...)
	data, err := codec.Msgpack{}.Marshal(items)
	if err != nil {
		t.Fatal(err)
	}
	var got []item
	if err := (codec.Msgpack{}).Unmarshal(data, &got); err != nil {
		t.Fatalf("got error %v, want nil", err)
	}
	if !reflect.DeepEqual(got, items) {
		t.Errorf("got %v, want %v", got, items)
	}
}

func TestUnmarshalDoesNotKeepInput(t *testing.T) {
	type doc struct {
		S string
		B []byte
		M map[string]string
	}
	want := doc{S: "string", B: []byte("bytes"), M: map[string]string{"key": "value"}}
	for _, cc := range structured {
		data, err := cc.c.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		var got doc
		if err := cc.c.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		for i := range data {
			data[i] = 0 // the caller reuses its read buffer
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: after the input was overwritten, got %q, want %q", cc.name, got, want)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	// Run with -race: the codecs share pooled encoders and decoders.
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				want := user{ID: g*1000 + i, Name: strconv.Itoa(i)}
				for _, cc := range structured {
					data, err := cc.c.Marshal(want)
					if err != nil {
						t.Error(err)
						return
					}
					var got user
					if err := cc.c.Unmarshal(data, &got); err != nil || got != want {
						t.Errorf("%s: got %v, %v, want %v, nil", cc.name, got, err, want)
						return
					}
				}
				var m map[any]any
				_ = codec.Msgpack{}.Unmarshal([]byte("\x81\x90\xc0"), &m) // recovered panic
				var ms map[string]any
				_ = codec.Msgpack{}.Unmarshal([]byte(msgpackExtAsMap[0].in), &ms) // trap
			}
		}()
	}
	for range 8 {
		<-done
	}
}

func TestMsgpackInternedIndexLimit(t *testing.T) {
	// The NOTE on Unmarshal: an interned index of 129 is written as a
	// fixext1 whose payload byte 0x81 would start a map, so it is refused.
	type item struct {
		Kind string `msgpack:",intern"`
	}
	var items []item
	for i := range 130 {
		items = append(items, item{Kind: "kind-" + strconv.Itoa(i)})
	}
	items = append(items, items...)
	data, err := codec.Msgpack{}.Marshal(items)
	if err != nil {
		t.Fatal(err)
	}
	var got []item
	err = codec.Msgpack{}.Unmarshal(data, &got)
	if err == nil {
		t.Fatal("got nil error, want one")
	}
	if errors.Is(err, codec.ErrMalformed) || errors.Is(err, codec.ErrTooDeep) {
		t.Errorf("got error %v, want a decode error", err)
	}
}
