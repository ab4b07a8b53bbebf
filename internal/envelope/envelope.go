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
//	         4 tagged (the payload starts with the tags, see below);
//	         8 compressed (the codec's bytes are compressed, by the
//	         reader of the flag, not by this package);
//	         16 versioned (the payload starts with a version, see below);
//	         32 load time (the payload carries how long the value took
//	         to load, see below);
//	         any other bit is unknown
//	[3:11]   write time, Unix milliseconds, 0 to MaxTime
//	[11:19]  logical expiry, Unix milliseconds, 1 to MaxTime, 0 for none
//	         (ExpiresAt)
//	[19:]    payload
//
// With the versioned flag the payload starts with the value's version (an
// ETag, say, that its loader gave it): a uvarint length (1 to
// MaxVersionLen) and its bytes. With the tagged flag the tags follow: a
// uvarint count of tags (1 to MaxTags), then each tag as a uvarint length
// (1 to MaxTagLen) and its bytes; the codec's bytes come last. The version
// comes first so that the header and the version, which identify a value
// (see Head), are one prefix of the envelope. With the load-time flag, a
// uvarint of the load time in microseconds (1 to MaxLoadTime) follows the
// tags, before the codec's bytes. An envelope without a flag reads as it
// did before the flag; one with it is refused, as corrupt, by a reader
// older than the flag.
//
// Anything else (another format, an unknown flag, a short header, a time
// outside those bounds) is
// rejected with an error wrapping ErrCorrupt, so a reader never misreads it.
// A reader that predates a flag rejects the envelopes that carry it: one
// without the versioned flag (16) takes a versioned envelope for a corrupt
// one (a miss to it), and one with it reads every older envelope as before.
package envelope

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
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

// FlagTagged marks a value that carries tags (Header.Tags).
const FlagTagged = 4

// FlagCompressed marks a payload whose codec bytes are compressed.
const FlagCompressed = 8

// FlagVersioned marks a value that carries a version (Header.Version).
const FlagVersioned = 16

// knownFlags has every flag bit this version understands.
const knownFlags = FlagAbsent | FlagDeleted | FlagTagged | FlagCompressed | FlagVersioned | FlagLoadTime

// ExpiresAt is the byte offset of the logical expiry in an envelope: 8
// bytes, big-endian Unix milliseconds. A value's lifetime is extended in
// place by writing them anew (see Head).
const ExpiresAt = 11

// MaxVersionLen bounds the length of a version.
const MaxVersionLen = 255

// FlagLoadTime marks a value that carries its load time
// (Header.LoadTime).
const FlagLoadTime = 32

// MaxLoadTime bounds Header.LoadTime: Append stores a longer one as this,
// and Decode rejects more.
const MaxLoadTime = 24 * time.Hour

// LoadTimeLen is the most bytes Append adds for a load time.
const LoadTimeLen = binary.MaxVarintLen64

// The bounds on tags: how many one value may carry and how long each is.
// Decode rejects more, and a cache accepts no more in WithTags.
const (
	MaxTags   = 32
	MaxTagLen = 200
)

// MaxTime is the latest write time or logical expiry an envelope holds:
// the last millisecond whose Unix nanoseconds fit in an int64 (in April
// 2262), as a cache keeps them. Append stores a later time as MaxTime and
// one before the Unix epoch as the epoch (an expiry as a millisecond past
// it, since 0 means none); Decode rejects a time outside.
var MaxTime = time.UnixMilli(maxMilli)

// maxMilli is MaxTime in Unix milliseconds.
const maxMilli = math.MaxInt64 / int64(time.Millisecond)

// ErrCorrupt is wrapped by every error Decode returns; check with errors.Is.
var ErrCorrupt = errors.New("corrupt envelope")

// Header is the metadata stored with a value.
type Header struct {
	Codec   byte
	Flags   byte
	Written time.Time // truncated to milliseconds
	Expires time.Time // zero: no logical expiry
	// Tags are the value's tags. Append sets FlagTagged when there are
	// any; Decode fills them in when the flag is set.
	Tags []string
	// Version is the value's version, "" for none. Append sets
	// FlagVersioned when there is one; Decode fills it in when the flag is
	// set.
	Version string
	// LoadTime is how long the value took to load, to the microsecond
	// (0: not known). Append sets FlagLoadTime when it is positive;
	// Decode fills it in when the flag is set.
	LoadTime time.Duration
}

// Append appends h and payload to dst in format 1 and returns the result.
// Tags or a version beyond the bounds Decode accepts make an envelope
// Decode rejects; the caller checks them.
func Append(dst []byte, h Header, payload []byte) []byte {
	if h.LoadTime <= 0 {
		h.Flags &^= FlagLoadTime
	}
	dst = Head(dst, h)
	if len(h.Tags) > 0 {
		dst = binary.AppendUvarint(dst, uint64(len(h.Tags)))
		for _, tag := range h.Tags {
			dst = binary.AppendUvarint(dst, uint64(len(tag)))
			dst = append(dst, tag...)
		}
	}
	if h.LoadTime > 0 {
		dst = binary.AppendUvarint(dst, uint64(max(min(h.LoadTime, MaxLoadTime)/time.Microsecond, 1)))
	}
	return append(dst, payload...)
}

// Head appends to dst the part of h's envelope that identifies the value
// it was written with: the header (with FlagTagged set if h has tags, and
// FlagLoadTime if it has a load time; a FlagLoadTime in h.Flags is kept)
// and the version, which the tags, the load time and the payload follow. Two envelopes with
// one head, but for the logical expiry (bytes ExpiresAt to ExpiresAt+8),
// hold one value as the writer of its version sees it.
func Head(dst []byte, h Header) []byte {
	var hdr [HeaderLen]byte
	hdr[0] = Format
	hdr[1] = h.Codec
	hdr[2] = h.Flags &^ (FlagTagged | FlagVersioned)
	if len(h.Tags) > 0 {
		hdr[2] |= FlagTagged
	}
	if h.Version != "" {
		hdr[2] |= FlagVersioned
	}
	if h.LoadTime > 0 {
		hdr[2] |= FlagLoadTime
	}
	binary.BigEndian.PutUint64(hdr[3:11], uint64(milli(h.Written, 0)))
	if !h.Expires.IsZero() {
		binary.BigEndian.PutUint64(hdr[ExpiresAt:ExpiresAt+8], uint64(milli(h.Expires, 1)))
	}
	dst = append(dst, hdr[:]...)
	if h.Version != "" {
		dst = binary.AppendUvarint(dst, uint64(len(h.Version)))
		dst = append(dst, h.Version...)
	}
	return dst
}

// milli returns t in Unix milliseconds, within [lo, MaxTime].
func milli(t time.Time, lo int64) int64 {
	switch {
	case t.Before(time.UnixMilli(lo)):
		return lo
	case t.After(MaxTime):
		return maxMilli
	}
	return t.UnixMilli()
}

// VersionLen is how many bytes Append adds for a version.
func VersionLen(version string) int {
	if version == "" {
		return 0
	}
	return binary.MaxVarintLen64 + len(version)
}

// TagsLen is how many bytes Append adds for tags.
func TagsLen(tags []string) int {
	if len(tags) == 0 {
		return 0
	}
	n := binary.MaxVarintLen64
	for _, tag := range tags {
		n += binary.MaxVarintLen64 + len(tag)
	}
	return n
}

// Decode splits b into its header and payload. The payload aliases b.
func Decode(b []byte) (Header, []byte, error) {
	h, err := ReadHeader(b)
	if err != nil {
		return Header{}, nil, err
	}
	payload := b[HeaderLen:]
	if h.Flags&FlagVersioned != 0 {
		n, k := uvarint(payload)
		if k <= 0 || n == 0 || n > MaxVersionLen || n > uint64(len(payload)-k) {
			return Header{}, nil, fmt.Errorf("%w: bad version length", ErrCorrupt)
		}
		h.Version = string(payload[k : k+int(n)])
		payload = payload[k+int(n):]
	}
	if h.Flags&FlagTagged != 0 {
		var err error
		if h.Tags, payload, err = decodeTags(payload); err != nil {
			return Header{}, nil, err
		}
	}
	if h.Flags&FlagLoadTime != 0 {
		us, k := uvarint(payload)
		if k <= 0 || us == 0 || us > uint64(MaxLoadTime/time.Microsecond) {
			return Header{}, nil, fmt.Errorf("%w: bad load time", ErrCorrupt)
		}
		h.LoadTime, payload = time.Duration(us)*time.Microsecond, payload[k:]
	}
	return h, payload, nil
}

// ReadHeader reads the fixed header at the front of b (format, codec,
// flags, write time and logical expiry), and nothing after it: b may be
// cut anywhere past HeaderLen, as a read of the first HeaderLen bytes of a
// stored value is. A short header, another format, an unknown flag or a
// time outside [the Unix epoch, MaxTime] is an error wrapping ErrCorrupt,
// as in Decode.
func ReadHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrCorrupt, len(b), HeaderLen)
	}
	if b[0] != Format {
		return Header{}, fmt.Errorf("%w: unknown format %d", ErrCorrupt, b[0])
	}
	if b[2]&^knownFlags != 0 {
		return Header{}, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, b[2])
	}
	written, exp := int64(binary.BigEndian.Uint64(b[3:11])), int64(binary.BigEndian.Uint64(b[11:19]))
	if written < 0 || written > maxMilli {
		return Header{}, fmt.Errorf("%w: write time %d ms outside [0, %d]", ErrCorrupt, written, maxMilli)
	}
	if exp < 0 || exp > maxMilli {
		return Header{}, fmt.Errorf("%w: expiry %d ms outside [0, %d]", ErrCorrupt, exp, maxMilli)
	}
	h := Header{Codec: b[1], Flags: b[2], Written: time.UnixMilli(written)}
	if exp != 0 {
		h.Expires = time.UnixMilli(exp)
	}
	return h, nil
}

// decodeTags splits the tags off the front of a tagged payload.
func decodeTags(b []byte) ([]string, []byte, error) {
	n, k := uvarint(b)
	if k <= 0 || n == 0 || n > MaxTags {
		return nil, nil, fmt.Errorf("%w: bad tag count", ErrCorrupt)
	}
	b = b[k:]
	tags := make([]string, 0, n)
	for range n {
		l, k := uvarint(b)
		if k <= 0 || l == 0 || l > MaxTagLen || l > uint64(len(b)-k) {
			return nil, nil, fmt.Errorf("%w: bad tag length", ErrCorrupt)
		}
		tags = append(tags, string(b[k:k+int(l)]))
		b = b[k+int(l):]
	}
	return tags, b, nil
}

// uvarint is binary.Uvarint that also rejects a longer encoding than
// needed, so that every envelope has one form.
func uvarint(b []byte) (uint64, int) {
	v, k := binary.Uvarint(b)
	var min [binary.MaxVarintLen64]byte
	if k > 0 && binary.PutUvarint(min[:], v) != k {
		return 0, -1
	}
	return v, k
}
