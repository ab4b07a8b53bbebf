// Package envelope is the stored form of a cache value in the shared tier:
// a fixed header (format, codec id, flags, write time, logical expiry)
// followed by the codec's payload.
//
// Layout of format 1 (big-endian):
//
//	[0]      format, 1
//	[1]      codec id (see package codec)
//	[2]      flags: 1 absent (a remembered "not found", empty payload);
//	         2 deleted (a tombstone left by a delete; payload: a nonce);
//	         any other bit is unknown
//	[3:11]   write time, Unix milliseconds
//	[11:19]  logical expiry, Unix milliseconds, 0 for none
//	[19:]    payload
//
// Anything else (another format, an unknown flag, a short header) is
// rejected with an error wrapping ErrCorrupt, so a reader never misreads it.
package envelope

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Format is the envelope format this package writes.
const Format = 1

// HeaderLen is the length of a format 1 header.
const HeaderLen = 19

// FlagAbsent marks a remembered absence: the key has no value.
const FlagAbsent = 1

// FlagDeleted marks a tombstone: the key was deleted. Readers treat it as a
// miss; it keeps a fill that read the key before the delete from writing
// its outdated value back (its write-if-absent finds the tombstone).
const FlagDeleted = 2

// knownFlags has every flag bit this version understands.
const knownFlags = FlagAbsent | FlagDeleted

// ErrCorrupt is wrapped by every error Decode returns; check with errors.Is.
var ErrCorrupt = errors.New("corrupt envelope")

// Header is the metadata stored with a value.
type Header struct {
	Codec   byte
	Flags   byte
	Written time.Time // truncated to milliseconds
	Expires time.Time // zero: no logical expiry
}

// Append appends h and payload to dst in format 1 and returns the result.
func Append(dst []byte, h Header, payload []byte) []byte {
	var hdr [HeaderLen]byte
	hdr[0] = Format
	hdr[1] = h.Codec
	hdr[2] = h.Flags
	binary.BigEndian.PutUint64(hdr[3:11], uint64(h.Written.UnixMilli()))
	if !h.Expires.IsZero() {
		binary.BigEndian.PutUint64(hdr[11:19], uint64(h.Expires.UnixMilli()))
	}
	dst = append(dst, hdr[:]...)
	return append(dst, payload...)
}

// Decode splits b into its header and payload. The payload aliases b.
func Decode(b []byte) (Header, []byte, error) {
	if len(b) < HeaderLen {
		return Header{}, nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrCorrupt, len(b), HeaderLen)
	}
	if b[0] != Format {
		return Header{}, nil, fmt.Errorf("%w: unknown format %d", ErrCorrupt, b[0])
	}
	if b[2]&^knownFlags != 0 {
		return Header{}, nil, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, b[2])
	}
	h := Header{
		Codec:   b[1],
		Flags:   b[2],
		Written: time.UnixMilli(int64(binary.BigEndian.Uint64(b[3:11]))),
	}
	if exp := int64(binary.BigEndian.Uint64(b[11:19])); exp != 0 {
		h.Expires = time.UnixMilli(exp)
	}
	return h, b[HeaderLen:], nil
}
