package hybrid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"github.com/hybridcache/hybridcache/internal/envelope"
)

// FuzzStoredValue reads arbitrary bytes from the shared tier as a stored
// value, through the whole read path (envelope, tags and their records,
// decompression, the msgpack validator and decoder): the result is a value
// or a miss, never a panic or a hang, and a miss loads.
func FuzzStoredValue(f *testing.F) {
	now := time.UnixMilli(1_700_000_000_000)
	hdr := envelope.Header{Codec: codec.IDMsgpack, Written: now, Expires: now.Add(time.Hour)}
	f.Add(envelope.Append(nil, hdr, []byte{0xa1, 'x'}))
	tagged := hdr
	tagged.Tags = []string{"t"}
	f.Add(envelope.Append(nil, tagged, []byte{0xa1, 'x'}))
	z := hdr
	z.Flags = envelope.FlagCompressed
	f.Add(envelope.Append(nil, z, s2.Encode(nil, []byte{0xa1, 'x'})))
	f.Add(envelope.Append(nil, z, s2.Encode(nil, make([]byte, 4<<20))))
	f.Add(envelope.Append(nil, hdr, []byte{0xdd, 0xff, 0xff, 0xff, 0xff}))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := new(hybridtest.Remote)
		c, err := hybrid.New[string](hybrid.Options{
			Namespace: "fz", Remote: r, Codec: codec.Msgpack{}, CompressAbove: 16,
			MaxValueBytes: 1 << 20, Logger: quiet, TTL: 2 * time.Hour,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r.Put("fz:k", b, time.Hour)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		v, err := c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) { return "loaded", nil })
		if errors.Is(err, hybrid.ErrNotFound) {
			return // a remembered absence (an envelope with the absent flag)
		}
		if err != nil {
			t.Fatalf("GetOrCreate: %v", err)
		}
		if v != "loaded" && c.Stats().L2.Hits != 1 {
			t.Fatalf("got %q without an L2 hit", v)
		}
	})
}
