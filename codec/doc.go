// Package codec turns cache values into bytes and back, so that the shared
// tier of a hybrid cache can store them. A codec is a value with three
// methods, ID, Marshal and Unmarshal, matching hybrid.Codec.
//
// # Codecs and their IDs
//
// Every codec has a one-byte ID that the cache writes next to each stored
// value, so that a value written by one codec is recognised, and treated as a
// miss, by a reader configured with another instead of being misread. The IDs
// are part of the stored format and never change:
//
//	IDJSON    = 1  JSON{}     encoding/json
//	IDMsgpack = 2  Msgpack{}  MessagePack (github.com/vmihailenco/msgpack/v5)
//	IDRaw     = 3  Raw{}      []byte or string, stored as is
//
// ID 0 is never used. IDs up to 127 are reserved for this package; a codec
// written elsewhere should pick an ID from 128 to 255.
//
// The zero value of each codec is ready to use, and each is safe for
// concurrent use. Marshal always returns a fresh slice that the caller may
// keep and modify; Unmarshal never keeps a reference to its input, so the
// caller may reuse the buffer once it returns.
//
// # Bad input
//
// The bytes handed to Unmarshal come from a shared store and may be corrupt,
// truncated, written by an older version of a type, or hostile. No codec
// panics or exhausts memory on them; each returns an error instead:
//
//   - JSON relies on encoding/json, which checks the whole input before it
//     decodes, limits nesting to 10000 levels and allocates only in
//     proportion to the input. Syntax errors (including truncation and too
//     deep nesting) wrap ErrMalformed; other errors, such as a JSON string
//     where the target has a number, come from encoding/json, wrapped.
//   - Msgpack first walks the input with a small iterative validator, which
//     rejects it with ErrMalformed unless it is exactly one well-formed
//     MessagePack value in which every declared length fits in the bytes
//     that follow, and with ErrTooDeep if arrays and maps nest deeper than
//     Msgpack.MaxDepth (default: DefaultMaxDepth). Only then does the
//     msgpack decoder see the bytes. Without this step the decoder allocates
//     gigabytes for a five-byte input that declares a huge array, and
//     overflows the stack, killing the process, on deeply nested input.
//     Ext payloads are opaque, except that msgpack v5 reads one as a map
//     where it expects a map: Unmarshal lets it do so only if the payload
//     is well formed too, and otherwise returns an error.
//   - Raw accepts any bytes. Its only errors are a target of the wrong type,
//     which wraps ErrUnsupportedType, and a nil pointer.
//
// Check for the sentinels with errors.Is. An input that is well formed but
// does not fit the target type (a string where the target has an int) gives
// an error from the underlying library, wrapped, that matches neither.
package codec
