package hybrid

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"time"

	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/klauspost/compress/s2"
)

// This file holds the stored form of a value (the envelope of package
// envelope around the codec's bytes): encoding, decoding, tombstones,
// compression and the size a value adds to L1.

// Codec turns values into bytes and back. ID is a stable byte written into
// every stored envelope, so a value written by another codec is recognised
// and treated as a miss rather than misread. The built-in codecs are
// codec.JSON (1), codec.Msgpack (2) and codec.Raw (3).
type Codec interface {
	ID() byte
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// errTombstone is decode's answer for a tombstone: a miss, not corruption.
var errTombstone = errors.New("hybrid: deleted")

// decodeInto decodes the envelope b into *it, which must be the zero item,
// and returns the value's remaining logical lifetime (<= 0: stale, kept
// past its logical expiry for fail-safe) and its write time (Unix
// nanoseconds). The item gets a timing, with what the envelope says of
// it, when timed or when the value has tags or a version. On an error *it
// may be partly set.
func (c *Cache[V]) decodeInto(it *item[V], b []byte, timed bool) (ttl time.Duration, written int64, err error) {
	return c.decodeAt(it, b, timed, time.Now())
}

// decodeAt is decodeInto measuring the lifetime left from now.
func (c *Cache[V]) decodeAt(it *item[V], b []byte, timed bool, now time.Time) (ttl time.Duration, written int64, err error) {
	h, payload, err := envelope.Decode(b)
	if err != nil {
		return 0, 0, err
	}
	written = h.Written.UnixNano()
	if h.Codec != c.codec.ID() {
		return 0, written, fmt.Errorf("hybrid: value written with codec %d, this cache uses %d", h.Codec, c.codec.ID())
	}
	ttl = c.def.localTTL
	if !h.Expires.IsZero() {
		ttl = h.Expires.Sub(now)
	}
	if timed || len(h.Tags) > 0 || h.Version != "" {
		it.t = &timing{written: written, staleAt: h.Expires.UnixNano(), tags: h.Tags, size: c.size(b),
			version: h.Version, flags: h.Flags, fresh: true, delta: int64(h.LoadTime)}
		if !h.Expires.IsZero() {
			it.t.remote = h.Expires.UnixNano()
		}
	}
	if h.Flags&envelope.FlagDeleted != 0 {
		return 0, written, errTombstone
	}
	if h.Flags&envelope.FlagAbsent != 0 {
		if len(payload) != 0 {
			return 0, written, errors.New("hybrid: absence marker with a payload")
		}
		it.absent = true
		return ttl, written, nil
	}
	if h.Flags&envelope.FlagCompressed != 0 {
		if payload, err = c.decompress(payload); err != nil {
			return 0, written, err
		}
	}
	if err := c.codec.Unmarshal(payload, &it.v); err != nil {
		return 0, written, err
	}
	return ttl, written, nil
}

// encodeTombstone returns the envelope a delete leaves behind. Its payload
// is a random nonce, so that no two deletes leave the same bytes and a
// fill's compare-and-set against one tombstone never matches a later one.
func (c *Cache[V]) encodeTombstone(ttl time.Duration) []byte {
	now := time.Now()
	h := envelope.Header{Codec: c.codec.ID(), Flags: envelope.FlagDeleted, Written: now, Expires: now.Add(ttl)}
	var nonce [8]byte
	binary.LittleEndian.PutUint64(nonce[:], mrand.Uint64())
	return envelope.Append(make([]byte, 0, envelope.HeaderLen+len(nonce)), h, nonce[:])
}

// expiredNow returns a copy of the envelope b whose logical expiry is now,
// and the logical lifetime b had left (def, when b has no expiry); nil when
// b holds nothing live to expire: a tombstone, bytes that do not decode, a
// value already past its expiry.
func expiredNow(b []byte, def time.Duration) ([]byte, time.Duration) {
	h, payload, err := envelope.Decode(b)
	if err != nil || h.Flags&envelope.FlagDeleted != 0 {
		return nil, 0
	}
	now := time.Now()
	left := def
	if !h.Expires.IsZero() {
		if left = h.Expires.Sub(now); left <= 0 {
			return nil, 0
		}
	}
	h.Expires = now
	return envelope.Append(make([]byte, 0, len(b)), h, payload), left
}

// encodeAbsent returns the envelope of a remembered absence.
func (c *Cache[V]) encodeAbsent(ttl time.Duration, tags []string) []byte {
	now := time.Now()
	h := envelope.Header{Codec: c.codec.ID(), Flags: envelope.FlagAbsent, Written: now, Expires: now.Add(ttl), Tags: tags}
	return envelope.Append(make([]byte, 0, envelope.HeaderLen+envelope.TagsLen(tags)), h, nil)
}

// encode returns v's envelope, with version ("" for none), or an error
// wrapping ErrValueTooLarge.
func (c *Cache[V]) encode(key string, v V, ttl time.Duration, tags []string, version string) ([]byte, error) {
	return c.encodeLoaded(key, v, ttl, tags, version, 0)
}

// encodeLoaded is encode for a value whose load took took (see loadTime;
// 0: none stored).
func (c *Cache[V]) encodeLoaded(key string, v V, ttl time.Duration, tags []string, version string, took time.Duration) ([]byte, error) {
	payload, err := c.codec.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("hybrid: encode %q: %w", key, err)
	}
	if len(payload) > c.o.MaxValueBytes {
		return nil, fmt.Errorf("%w: %q encodes to %d bytes, limit %d", ErrValueTooLarge, key, len(payload), c.o.MaxValueBytes)
	}
	now := time.Now()
	h := envelope.Header{Codec: c.codec.ID(), Written: now, Expires: now.Add(ttl), Tags: tags, Version: version, LoadTime: took}
	if z, ok := c.compress(payload); ok {
		payload, h.Flags = z, envelope.FlagCompressed
	}
	n := envelope.HeaderLen + envelope.VersionLen(version) + envelope.TagsLen(tags) + len(payload)
	if took > 0 {
		n += envelope.LoadTimeLen
	}
	return envelope.Append(make([]byte, 0, n), h, payload), nil
}

// described returns it, whose envelope b was just encoded, with a timing
// that holds what b says of it (write time, shared-tier expiry, flags, tags
// and version) when it needs one: when timed, or with tags or a version.
// Otherwise L1 keeps the value alone.
func described[V any](it item[V], b []byte, tags []string, version string, timed bool) item[V] {
	if !timed && len(tags) == 0 && version == "" {
		return it
	}
	it.t = &timing{due: math.MaxInt64, expires: math.MaxInt64, tags: tags, version: version, fresh: true,
		flags: b[2], written: stampOf(b, 3), remote: stampOf(b, envelope.ExpiresAt)}
	return it
}

// stampOf reads the Unix milliseconds at offset off of the envelope b as
// Unix nanoseconds.
func stampOf(b []byte, off int) int64 {
	return int64(binary.BigEndian.Uint64(b[off:off+8])) * 1e6
}

// compress returns payload compressed and true, or payload and false when
// compression is off, the payload is short, or it does not shrink.
func (c *Cache[V]) compress(payload []byte) ([]byte, bool) {
	if c.o.CompressAbove <= 0 || len(payload) < c.o.CompressAbove {
		return payload, false
	}
	z := s2.Encode(nil, payload)
	if len(z) >= len(payload) {
		return payload, false
	}
	return z, true
}

// decompress undoes compress, refusing to inflate past MaxValueBytes.
func (c *Cache[V]) decompress(z []byte) ([]byte, error) {
	n, err := s2.DecodedLen(z)
	if err != nil {
		return nil, fmt.Errorf("hybrid: compressed value: %w", err)
	}
	if n > c.o.MaxValueBytes {
		return nil, fmt.Errorf("%w: compressed value inflates to %d bytes, limit %d", ErrValueTooLarge, n, c.o.MaxValueBytes)
	}
	b, err := s2.Decode(make([]byte, n), z)
	if err != nil {
		return nil, fmt.Errorf("hybrid: compressed value: %w", err)
	}
	return b, nil
}

// size is what a value stored as the envelope b adds to L1's weight
// besides its key: the envelope, and its decoded length when compressed,
// since L1 holds the decoded value.
func (c *Cache[V]) size(b []byte) int {
	if len(b) > 2 && b[2]&envelope.FlagCompressed != 0 {
		if _, z, err := envelope.Decode(b); err == nil {
			if n, err := s2.DecodedLen(z); err == nil {
				return len(b) + n
			}
		}
	}
	return len(b)
}
