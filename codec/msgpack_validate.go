package codec

import (
	"encoding/binary"
	"fmt"
)

// validateMsgpack reports whether data is exactly one well-formed
// MessagePack value whose arrays and maps nest at most maxDepth levels deep.
//
// It walks the encoding without recursion and without allocating (unless
// maxDepth exceeds DefaultMaxDepth), checking every declared length against
// the bytes left: a str, bin or ext of n bytes needs n bytes, an array of n
// elements at least n bytes and a map of n pairs at least 2n bytes, one for
// each of the smallest possible elements. So once it accepts data, a decoder
// that sizes its slices and maps by the declared lengths allocates in
// proportion to len(data), and recurses at most maxDepth levels.
//
// The payload of an ext value is opaque here: it is checked only for length.
func validateMsgpack(data []byte, maxDepth int) error {
	// stack holds, for each open array or map, how many values it still
	// expects after the one being read; pending is that count for the
	// innermost one (or for the top level, which expects one value).
	var stackBuf [DefaultMaxDepth]int
	stack := stackBuf[:0]
	pending := 1
	pos := 0
	for {
		for pending == 0 {
			if len(stack) == 0 {
				if pos != len(data) {
					return fmt.Errorf("codec: msgpack: %w: %d trailing bytes after the value at offset %d",
						ErrMalformed, len(data)-pos, pos)
				}
				return nil
			}
			pending = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
		}
		if pos >= len(data) {
			return fmt.Errorf("codec: msgpack: %w: unexpected end of input at offset %d", ErrMalformed, pos)
		}
		start := pos
		c := data[pos]
		pos++
		pending--

		// Each case sets either size, the bytes that follow the header, or
		// children, the values inside an array or map. hdr is the width of a
		// big-endian length field right after the format byte.
		var size, hdr int
		children, isContainer := 0, false
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
				return fmt.Errorf("codec: msgpack: %w: format byte 0xc1 (never used) at offset %d", ErrMalformed, start)
			case 0xcc, 0xd0: // uint8, int8
				size = 1
			case 0xcd, 0xd1: // uint16, int16
				size = 2
			case 0xca, 0xce, 0xd2: // float32, uint32, int32
				size = 4
			case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
				size = 8
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16: type byte + data
				size = 1 + 1<<(c-0xd4)
			case 0xc4, 0xd9, 0xc7: // bin8, str8, ext8
				hdr = 1
			case 0xc5, 0xda, 0xc8: // bin16, str16, ext16
				hdr = 2
			case 0xc6, 0xdb, 0xc9: // bin32, str32, ext32
				hdr = 4
			case 0xdc, 0xde: // array16, map16
				hdr, isContainer = 2, true
			case 0xdd, 0xdf: // array32, map32
				hdr, isContainer = 4, true
			}
		}

		if hdr > 0 {
			if len(data)-pos < hdr {
				return fmt.Errorf("codec: msgpack: %w: %s at offset %d: length cut short", ErrMalformed, formatName(c), start)
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
			left := uint64(len(data) - pos)
			switch {
			case c == 0xdc || c == 0xdd: // arrays: at least one byte per element
				if n > left {
					return fmt.Errorf("codec: msgpack: %w: %s at offset %d declares %d elements, %d bytes left",
						ErrMalformed, formatName(c), start, n, left)
				}
				children = int(n)
			case c == 0xde || c == 0xdf: // maps: at least two bytes per pair
				if n > left/2 {
					return fmt.Errorf("codec: msgpack: %w: %s at offset %d declares %d pairs, %d bytes left",
						ErrMalformed, formatName(c), start, n, left)
				}
				children = 2 * int(n)
			case c >= 0xc7 && c <= 0xc9: // ext: the type byte, then n bytes
				size = int(n) + 1
				if n+1 > left {
					return fmt.Errorf("codec: msgpack: %w: %s at offset %d declares %d bytes, %d left",
						ErrMalformed, formatName(c), start, n+1, left)
				}
			default: // str, bin
				if n > left {
					return fmt.Errorf("codec: msgpack: %w: %s at offset %d declares %d bytes, %d left",
						ErrMalformed, formatName(c), start, n, left)
				}
				size = int(n)
			}
		}

		if isContainer {
			// The container being opened is at depth len(stack)+1.
			if len(stack) >= maxDepth {
				return fmt.Errorf("codec: msgpack: %w: %s at offset %d is nested more than %d levels deep",
					ErrTooDeep, formatName(c), start, maxDepth)
			}
			if children > len(data)-pos {
				return fmt.Errorf("codec: msgpack: %w: %s at offset %d declares %d values, %d bytes left",
					ErrMalformed, formatName(c), start, children, len(data)-pos)
			}
			if children > 0 {
				stack = append(stack, pending)
				pending = children
			}
			continue
		}
		if size > len(data)-pos {
			return fmt.Errorf("codec: msgpack: %w: %s at offset %d needs %d bytes, %d left",
				ErrMalformed, formatName(c), start, size, len(data)-pos)
		}
		pos += size
	}
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
