package codec

import "errors"

// The IDs of the built-in codecs. They are written into every stored value
// and never change; see the package documentation.
const (
	// IDJSON is the ID of JSON.
	IDJSON byte = 1
	// IDMsgpack is the ID of Msgpack.
	IDMsgpack byte = 2
	// IDRaw is the ID of Raw.
	IDRaw byte = 3
)

// ErrMalformed reports that JSON.Unmarshal or Msgpack.Unmarshal was given
// bytes that are not one well-formed encoded value: truncated, followed by trailing bytes, using a
// format byte that does not exist, or declaring a length longer than the
// input. Check for it with errors.Is(err, codec.ErrMalformed); it is always
// returned wrapped, with the codec's name and the details.
var ErrMalformed = errors.New("malformed input")

// ErrTooDeep reports that Msgpack.Unmarshal was given arrays and maps nested
// deeper than Msgpack.MaxDepth allows. Check for it with
// errors.Is(err, codec.ErrTooDeep); it is always returned wrapped.
var ErrTooDeep = errors.New("nesting too deep")

// ErrUnsupportedType reports that Raw was asked to marshal a value, or
// unmarshal into a target, of a type it does not handle. Check for it with
// errors.Is(err, codec.ErrUnsupportedType); the wrapping error names the
// type.
var ErrUnsupportedType = errors.New("unsupported type")
