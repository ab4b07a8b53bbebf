package codec

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// DefaultMaxDepth is the nesting limit that Msgpack.Unmarshal applies when
// Msgpack.MaxDepth is zero. Cache values are rarely nested more than a few
// levels; 64 leaves room for deep documents while keeping the decoder's
// recursion, a few hundred bytes of stack a level, small.
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
	r   bytes.Reader
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
// with msgpack.RegisterExtDecoder, like one with a DecodeMsgpack or
// UnmarshalMsgpack method, must itself be safe on hostile bytes.
//
// NOTE: msgpack v5 panics on some well-formed input, such as an array used as
// a key when decoding into map[any]any. Unmarshal recovers such a panic and
// returns it as an error.
func (c Msgpack) Unmarshal(data []byte, v any) (err error) {
	if err := validateMsgpack(data, c.maxDepth()); err != nil {
		return err
	}
	s := decPool.Get().(*decState)
	defer func() {
		if r := recover(); r != nil {
			// Do not reuse a decoder left in an unknown state.
			err = fmt.Errorf("codec: msgpack: decoder panic: %v", r)
		}
	}()
	s.r.Reset(data)
	s.dec.Reset(&s.r)
	err = s.dec.Decode(v)
	s.r.Reset(nil)
	decPool.Put(s)
	if err != nil {
		return fmt.Errorf("codec: msgpack: %w", err)
	}
	return nil
}

func (c Msgpack) maxDepth() int {
	switch {
	case c.MaxDepth <= 0:
		return DefaultMaxDepth
	case c.MaxDepth > maxMaxDepth:
		return maxMaxDepth
	}
	return c.MaxDepth
}
