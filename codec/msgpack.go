package codec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// DefaultMaxDepth is the nesting limit that Msgpack.Unmarshal applies when
// Msgpack.MaxDepth is zero. Cache values are rarely nested more than a few
// levels; 64 leaves room for deep documents while keeping shallow the
// decoder's recursion, which takes stack at every level.
const DefaultMaxDepth = 64

// maxMaxDepth caps Msgpack.MaxDepth at the nesting limit of encoding/json.
const maxMaxDepth = 10000

// Msgpack is the codec that stores values as MessagePack, using
// github.com/vmihailenco/msgpack/v5 with its default options. Its ID is
// IDMsgpack. The zero value is ready to use.
//
// Values are encoded as msgpack.Marshal encodes them: structs as maps keyed
// by field name (or by the `msgpack` struct tag), time.Time as the timestamp
// extension. MessagePack is usually smaller and faster to decode than JSON.
//
// Unmarshal validates its input before decoding it; see the package
// documentation.
type Msgpack struct {
	// MaxDepth is the deepest nesting of arrays and maps (a struct is a
	// map) that Unmarshal accepts; deeper input is rejected with ErrTooDeep
	// before it reaches the decoder. A top-level array is at depth 1.
	//
	// default: DefaultMaxDepth (64). Zero or a negative value means the
	// default; values above 10000 are treated as 10000.
	MaxDepth int
}

// ID returns IDMsgpack.
func (Msgpack) ID() byte { return IDMsgpack }

// encState is a pooled encoder with the buffer it writes to.
type encState struct {
	enc *msgpack.Encoder
	buf bytes.Buffer
}

// maxPooledBuf is the largest buffer put back into encPool, so that one huge
// value does not pin its buffer for the life of the process.
const maxPooledBuf = 64 << 10

var encPool = sync.Pool{New: func() any {
	s := new(encState)
	s.enc = msgpack.NewEncoder(&s.buf)
	return s
}}

// Marshal returns the MessagePack encoding of v in a fresh slice.
func (Msgpack) Marshal(v any) ([]byte, error) {
	s := encPool.Get().(*encState)
	s.buf.Reset()
	s.enc.Reset(&s.buf)
	err := s.enc.Encode(v)
	var b []byte
	if err == nil {
		b = bytes.Clone(s.buf.Bytes())
	}
	if s.buf.Cap() <= maxPooledBuf {
		encPool.Put(s)
	}
	if err != nil {
		return nil, fmt.Errorf("codec: msgpack: %w", err)
	}
	return b, nil
}

// decState is a pooled decoder with the reader it reads from.
type decState struct {
	dec *msgpack.Decoder
	r   trapReader
}

var decPool = sync.Pool{New: func() any {
	s := new(decState)
	s.dec = msgpack.NewDecoder(&s.r)
	return s
}}

// Unmarshal decodes the single MessagePack value in data into v, which must
// be a non-nil pointer.
//
// Before decoding, it checks that data is one well-formed value nested at
// most MaxDepth levels deep; if not, it returns an error wrapping
// ErrMalformed or ErrTooDeep, checked with errors.Is. A well-formed value
// that does not fit v gives the decoder's error, wrapped.
//
// NOTE: the check bounds what the decoder allocates to a multiple of
// len(data): the multiple is the size of the largest slice or map element
// in v's type, since an element encoded in one byte (nil) may decode into a
// large zero struct. It cannot see inside ext payloads, so a type registered
// with msgpack.RegisterExt or RegisterExtDecoder, like one with a
// DecodeMsgpack or UnmarshalMsgpack method, must itself be safe on hostile
// bytes.
//
// NOTE: msgpack v5 decodes an ext value found where a map is expected as a
// map read from the ext's payload. Unmarshal allows that only when the
// payload is itself well formed; otherwise it returns an error. As a side
// effect, a string field tagged `msgpack:",intern"` whose interned index is
// 129 to 143, 222 or 223 cannot be decoded.
//
// NOTE: msgpack v5 panics on some well-formed input, such as an array used as
// a key when decoding into map[any]any. Unmarshal recovers such a panic and
// returns it as an error.
func (c Msgpack) Unmarshal(data []byte, v any) (err error) {
	traps, err := validateMsgpack(data, c.maxDepth())
	if err != nil {
		return err
	}
	s := decPool.Get().(*decState)
	defer func() {
		if r := recover(); r != nil {
			// Do not reuse a decoder left in an unknown state.
			err = fmt.Errorf("codec: msgpack: decoder panic: %v", r)
		}
	}()
	s.r.reset(data, traps)
	s.dec.Reset(&s.r)
	err = s.dec.Decode(v)
	trapped := s.r.trapped
	s.r.reset(nil, nil)
	decPool.Put(s)
	if trapped >= 0 {
		return fmt.Errorf("codec: msgpack: ext payload at offset %d read as a map, but it is not well formed", trapped)
	}
	if err != nil {
		return fmt.Errorf("codec: msgpack: %w", err)
	}
	return nil
}

// trapReader reads a byte slice, like bytes.Reader, but fails ReadByte at
// the offsets in traps: the payloads of ext values that the decoder must not
// read as a map (see validateMsgpack). Read, which the decoder uses for ext
// payloads it reads as bytes, reads across traps.
type trapReader struct {
	data    []byte
	pos     int
	traps   []int // ascending
	next    int   // index in traps of the first trap at or after pos
	trapped int   // the trap that ReadByte hit, or -1
}

func (r *trapReader) reset(data []byte, traps []int) {
	*r = trapReader{data: data, traps: traps, trapped: -1}
}

// Read implements io.Reader.
func (r *trapReader) Read(p []byte) (int, error) {
	if r.pos >= len(r.data) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(p, r.data[r.pos:])
	r.pos += n
	return n, nil
}

// ReadByte implements io.ByteReader.
func (r *trapReader) ReadByte() (byte, error) {
	if r.pos >= len(r.data) {
		return 0, io.EOF
	}
	for r.next < len(r.traps) && r.traps[r.next] < r.pos {
		r.next++
	}
	if r.next < len(r.traps) && r.traps[r.next] == r.pos {
		r.trapped = r.pos
		return 0, errTrapped
	}
	b := r.data[r.pos]
	r.pos++
	return b, nil
}

// UnreadByte implements io.ByteScanner.
func (r *trapReader) UnreadByte() error {
	if r.pos <= 0 {
		return errors.New("codec: msgpack: UnreadByte at the start of the input")
	}
	r.pos--
	for r.next > 0 && r.traps[r.next-1] >= r.pos {
		r.next--
	}
	return nil
}

var errTrapped = errors.New("codec: msgpack: ext payload read as a map")

func (c Msgpack) maxDepth() int {
	switch {
	case c.MaxDepth <= 0:
		return DefaultMaxDepth
	case c.MaxDepth > maxMaxDepth:
		return maxMaxDepth
	}
	return c.MaxDepth
}
