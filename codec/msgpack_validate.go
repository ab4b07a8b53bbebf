package codec

import (
	"encoding/binary"
	"fmt"
)

// validateMsgpack checks that data is exactly one well-formed MessagePack
// value whose arrays and maps nest at most maxDepth levels deep, and returns
// the offsets at which the decoder must not read a format byte (see below).
//
// It walks the encoding without recursion and, unless maxDepth exceeds
// DefaultMaxDepth, without allocating, checking every declared length
// against the bytes left: a str, bin or ext of n bytes needs n bytes, an
// array of n elements at least n bytes and a map of n pairs at least 2n
// bytes, one for each of the smallest possible elements. So once it accepts
// data, a decoder that sizes its slices and maps by the declared lengths
// allocates in proportion to len(data), and recurses at most maxDepth levels.
//
// # Ext values read as maps
//
// The payload of an ext value is opaque to MessagePack, but msgpack v5 reads
// it as MessagePack in one place: where it expects a map (DecodeMapLen) and
// finds an ext, it skips the ext header and decodes a map from the first
// payload byte onwards, ignoring the declared length. Bytes that the walk
// treated as opaque are then read as format bytes and lengths, and the
// decoder may run past the payload, out of step with the walk. So for every
// ext whose first payload byte could start a map (nil, fixmap, map16, map32;
// any other byte makes the decoder fail at once), the payload is walked too,
// as a sequence of values that must fill it exactly. If it passes, reading
// it as a map is as safe as the rest of the input. If not, its offset is
// returned as a trap: the decoder's reader refuses to read a single byte
// there, which ends only that misreading, since every other path reads an
// ext payload in one block (the one exception, an interned string index in
// a fixext1, is noted at Msgpack.Unmarshal). Payloads inside a payload are
// not walked again: those that could start a map become traps.
//
// An empty ext payload cannot be trapped, since its payload offset is the
// offset of the next value. If that value is a map or nil, the decoder may
// read the two values as one, which keeps it in step with the walk but
// leaves its containers one value short, so that each later value may be
// read one level deeper than the walk saw it. The walk counts such pairs and
// adds the count to the depth of every container after them.
func validateMsgpack(data []byte, maxDepth int) (traps []int, err error) {
	w := msgpackWalk{data: data, maxDepth: maxDepth}
	if err := w.walk(0, len(data), 0, false); err != nil {
		return nil, err
	}
	return w.traps, nil
}

// msgpackWalk is the state of validateMsgpack.
type msgpackWalk struct {
	data     []byte
	maxDepth int
	traps    []int // ascending
	merges   int   // empty exts before a map or nil, see validateMsgpack
}

// mayStartMap reports whether msgpack v5's DecodeMapLen accepts c as the
// first byte of a map: nil, fixmap, map16 or map32.
func mayStartMap(c byte) bool {
	return c == 0xc0 || c&0xf0 == 0x80 || c == 0xde || c == 0xdf
}

// walk checks data[start:end]. At the top level it expects one value or, if
// payload is set, a sequence of one or more values: the payload of an ext.
// base is the nesting depth of the values at the top level.
func (w *msgpackWalk) walk(start, end, base int, payload bool) error {
	data := w.data
	// stack holds, for each open array or map, how many values it still
	// expects after the one being read; pending is that count for the
	// innermost one (or for the top level).
	var stackBuf [DefaultMaxDepth]int
	stack := stackBuf[:0]
	pending := 1
	pos := start
	for {
		for pending == 0 {
			if len(stack) > 0 {
				pending = stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				continue
			}
			if pos == end {
				return nil
			}
			if !payload {
				return fmt.Errorf("codec: msgpack: %w: %d trailing bytes after the value at offset %d",
					ErrMalformed, end-pos, pos)
			}
			pending = 1
		}
		if pos >= end {
			return fmt.Errorf("codec: msgpack: %w: unexpected end of input at offset %d", ErrMalformed, pos)
		}
		at := pos
		c := data[pos]
		pos++
		pending--

		// Each case sets size, the bytes that follow the format byte (for
		// ext, the type byte and the data), or children, the values inside
		// an array or map; or hdr, the width of a big-endian length that
		// follows the format byte and gives size or children.
		var size, hdr, children int
		isContainer, isExt := false, false
		switch {
		case c <= 0x7f, c >= 0xe0: // positive and negative fixint
		case c <= 0x8f: // fixmap
			children, isContainer = 2*int(c&0x0f), true
		case c <= 0x9f: // fixarray
			children, isContainer = int(c&0x0f), true
		case c <= 0xbf: // fixstr
			size = int(c & 0x1f)
		default:
			switch c {
			case 0xc0, 0xc2, 0xc3: // nil, false, true
			case 0xc1:
				return fmt.Errorf("codec: msgpack: %w: format byte 0xc1 (never used) at offset %d", ErrMalformed, at)
			case 0xcc, 0xd0: // uint8, int8
				size = 1
			case 0xcd, 0xd1: // uint16, int16
				size = 2
			case 0xca, 0xce, 0xd2: // float32, uint32, int32
				size = 4
			case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
				size = 8
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16
				size, isExt = 1+1<<(c-0xd4), true
			case 0xc4, 0xd9: // bin8, str8
				hdr = 1
			case 0xc5, 0xda: // bin16, str16
				hdr = 2
			case 0xc6, 0xdb: // bin32, str32
				hdr = 4
			case 0xc7: // ext8
				hdr, isExt = 1, true
			case 0xc8: // ext16
				hdr, isExt = 2, true
			case 0xc9: // ext32
				hdr, isExt = 4, true
			case 0xdc, 0xde: // array16, map16
				hdr, isContainer = 2, true
			case 0xdd, 0xdf: // array32, map32
				hdr, isContainer = 4, true
			}
		}

		if hdr > 0 {
			if end-pos < hdr {
				return fmt.Errorf("codec: msgpack: %w: %s at offset %d: length cut short", ErrMalformed, formatName(c), at)
			}
			var n uint64
			switch hdr {
			case 1:
				n = uint64(data[pos])
			case 2:
				n = uint64(binary.BigEndian.Uint16(data[pos:]))
			case 4:
				n = uint64(binary.BigEndian.Uint32(data[pos:]))
			}
			pos += hdr
			left := uint64(end - pos)
			switch {
			case c == 0xdc || c == 0xdd: // arrays: at least one byte per element
				if n > left {
					return fmt.Errorf("codec: msgpack: %w: %s at offset %d declares %d elements, %d bytes left",
						ErrMalformed, formatName(c), at, n, left)
				}
				children = int(n)
			case c == 0xde || c == 0xdf: // maps: at least two bytes per pair
				if n > left/2 {
					return fmt.Errorf("codec: msgpack: %w: %s at offset %d declares %d pairs, %d bytes left",
						ErrMalformed, formatName(c), at, n, left)
				}
				children = 2 * int(n)
			default: // str, bin, ext (whose type byte comes first)
				if isExt {
					n++
				}
				if n > left {
					return fmt.Errorf("codec: msgpack: %w: %s at offset %d declares %d bytes, %d left",
						ErrMalformed, formatName(c), at, n, left)
				}
				size = int(n)
			}
		}

		if isContainer {
			// The container being opened is at depth base+len(stack)+1,
			// or up to w.merges deeper.
			if base+len(stack)+w.merges >= w.maxDepth {
				return fmt.Errorf("codec: msgpack: %w: %s at offset %d is nested more than %d levels deep",
					ErrTooDeep, formatName(c), at, w.maxDepth)
			}
			if children > end-pos {
				return fmt.Errorf("codec: msgpack: %w: %s at offset %d declares %d values, %d bytes left",
					ErrMalformed, formatName(c), at, children, end-pos)
			}
			if children > 0 {
				stack = append(stack, pending)
				pending = children
			}
			continue
		}
		if size > end-pos {
			return fmt.Errorf("codec: msgpack: %w: %s at offset %d needs %d bytes, %d left",
				ErrMalformed, formatName(c), at, size, end-pos)
		}
		pos += size
		if isExt {
			if err := w.checkExt(at, pos-size+1, pos, base+len(stack), payload); err != nil {
				return err
			}
		}
	}
}

// checkExt deals with the ext at offset at whose payload is
// data[start:end], at nesting depth depth (not counting w.merges), as
// validateMsgpack describes.
func (w *msgpackWalk) checkExt(at, start, end, depth int, inPayload bool) error {
	if start == end {
		if end < len(w.data) && mayStartMap(w.data[end]) {
			if inPayload {
				// Fail the payload, which becomes a trap.
				return fmt.Errorf("codec: msgpack: %w: empty %s at offset %d followed by a map or nil",
					ErrMalformed, formatName(w.data[at]), at)
			}
			w.merges++
		}
		return nil
	}
	if !mayStartMap(w.data[start]) {
		return nil
	}
	if inPayload {
		w.traps = append(w.traps, start)
		return nil
	}
	mark := len(w.traps)
	if err := w.walk(start, end, depth, true); err != nil {
		w.traps = append(w.traps[:mark], start)
	}
	return nil
}

// formatName returns the MessagePack name of format byte c, for errors.
func formatName(c byte) string {
	switch {
	case c <= 0x7f:
		return "positive fixint"
	case c <= 0x8f:
		return "fixmap"
	case c <= 0x9f:
		return "fixarray"
	case c <= 0xbf:
		return "fixstr"
	case c >= 0xe0:
		return "negative fixint"
	}
	names := [...]string{
		"nil", "(never used)", "false", "true",
		"bin8", "bin16", "bin32",
		"ext8", "ext16", "ext32",
		"float32", "float64",
		"uint8", "uint16", "uint32", "uint64",
		"int8", "int16", "int32", "int64",
		"fixext1", "fixext2", "fixext4", "fixext8", "fixext16",
		"str8", "str16", "str32",
		"array16", "array32",
		"map16", "map32",
	}
	return names[c-0xc0]
}
