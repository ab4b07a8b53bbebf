package hybrid

import (
	"fmt"

	"github.com/klauspost/compress/s2"

	"github.com/hybridcache/hybridcache/internal/envelope"
)

// Compression. With Options.CompressAbove set, a value whose encoding is at
// least that long is stored S2-compressed (github.com/klauspost/compress/s2)
// when that makes it shorter, and flagged so in its envelope: compressed
// and plain values live side by side, and a reader that predates the flag
// counts a compressed value as undecodable (a miss), never as garbage.

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
