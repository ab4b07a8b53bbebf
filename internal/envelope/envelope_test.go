package envelope_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/internal/envelope"
)

func TestRoundTrip(t *testing.T) {
	written := time.UnixMilli(1_700_000_000_123)
	for _, h := range []envelope.Header{
		{Codec: 2, Written: written, Expires: written.Add(time.Minute)},
		{Codec: 1, Written: written},
		{Codec: 1, Written: written, Tags: []string{"a", "tag two"}},
		{Codec: 3, Flags: envelope.FlagCompressed, Written: written, Tags: []string{"x"}},
		{Codec: 2, Written: written, LoadTime: 50 * time.Millisecond},
		{Codec: 2, Written: written, Tags: []string{"t"}, LoadTime: 1500 * time.Microsecond},
	} {
		b := envelope.Append(nil, h, []byte("payload"))
		got, payload, err := envelope.Decode(b)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if got.Codec != h.Codec || !got.Written.Equal(h.Written) || !got.Expires.Equal(h.Expires) || !slices.Equal(got.Tags, h.Tags) || got.LoadTime != h.LoadTime || got.Flags&^(envelope.FlagTagged|envelope.FlagLoadTime) != h.Flags {
			t.Errorf("got header %+v, want %+v", got, h)
		}
		if !bytes.Equal(payload, []byte("payload")) {
			t.Errorf("got payload %q, want %q", payload, "payload")
		}
	}
}

// TestDecodeBeforeLoadTime: an envelope written before the load-time field
// existed (these bytes) still decodes, with no load time; a load time is
// written only when there is one, so such envelopes are written as before.
func TestDecodeBeforeLoadTime(t *testing.T) {
	old := []byte{1, 2, 0, 0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0x7b, 0, 0, 1, 0x8b, 0xcf, 0xe6, 0x52, 0xdb, 0x91, 0x01}
	h, payload, err := envelope.Decode(old)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if h.LoadTime != 0 || h.Codec != 2 || h.Written.UnixMilli() != 1_700_000_000_123 || !bytes.Equal(payload, []byte{0x91, 0x01}) {
		t.Errorf("got %+v, payload %x; want codec 2, written 1700000000123, no load time, payload 9101", h, payload)
	}
	if again := envelope.Append(nil, h, payload); !bytes.Equal(again, old) {
		t.Errorf("re-encoded %x, want the same bytes %x", again, old)
	}
	for _, d := range []time.Duration{time.Nanosecond, 48 * time.Hour} {
		h, _, err := envelope.Decode(envelope.Append(nil, envelope.Header{Codec: 1, LoadTime: d}, nil))
		if want := max(min(d, envelope.MaxLoadTime), time.Microsecond); err != nil || h.LoadTime != want {
			t.Errorf("load time %v: got %v, %v; want %v", d, h.LoadTime, err, want)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	good := envelope.Append(nil, envelope.Header{Codec: 1, Written: time.Now()}, []byte("x"))
	future := bytes.Clone(good)
	future[0] = 2
	flagged := bytes.Clone(good)
	flagged[2] = 0x80
	tagged := envelope.Append(nil, envelope.Header{Codec: 1, Written: time.Now(), Tags: []string{"t"}}, []byte("x"))
	tagFlagOnly := bytes.Clone(good)
	tagFlagOnly[2] = envelope.FlagTagged
	longCount := bytes.Clone(tagged)
	longCount[envelope.HeaderLen] = 0x81 // count 1 in two bytes: not canonical
	longCount = append(longCount[:envelope.HeaderLen+1], append([]byte{0}, longCount[envelope.HeaderLen+1:]...)...)
	tooMany := append(bytes.Clone(good[:envelope.HeaderLen]), 65)
	tooMany[2] = envelope.FlagTagged
	loadFlagOnly := bytes.Clone(good)
	loadFlagOnly[2] = envelope.FlagLoadTime
	zeroLoad := append(bytes.Clone(loadFlagOnly[:envelope.HeaderLen]), 0)
	longLoad := append(bytes.Clone(loadFlagOnly[:envelope.HeaderLen]), 0x81, 0xc0, 0xdd, 0xee, 0xc1, 0x02) // MaxLoadTime + 1 µs
	for name, b := range map[string][]byte{
		"empty":              nil,
		"load flag, no time": loadFlagOnly[:envelope.HeaderLen],
		"zero load time":     zeroLoad,
		"load time too long": longLoad,
		"short header":       good[:envelope.HeaderLen-1],
		"other format":       future,
		"unknown flag":       flagged,
		"tag flag, no tags":  tagFlagOnly,
		"tag cut short":      tagged[:envelope.HeaderLen+2],
		"long varint":        longCount,
		"65 tags":            tooMany,
		"json text":          []byte(`{"id":1,"name":"not an envelope"}`),
	} {
		if _, _, err := envelope.Decode(b); !errors.Is(err, envelope.ErrCorrupt) {
			t.Errorf("%s: got err %v, want ErrCorrupt", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(envelope.Append(nil, envelope.Header{Codec: 2, Written: time.UnixMilli(1)}, []byte{0x91, 0x01}))
	f.Add([]byte{1, 1, 0})
	f.Add(bytes.Repeat([]byte{0xff}, 40))
	f.Add(envelope.Append(nil, envelope.Header{Codec: 1, Written: time.UnixMilli(1), Tags: []string{"a", "bc"}}, []byte("1")))
	f.Add(envelope.Append(nil, envelope.Header{Codec: 1, Written: time.UnixMilli(1), Tags: []string{"a"}, LoadTime: time.Second}, []byte("1")))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, payload, err := envelope.Decode(b)
		if err != nil {
			if !errors.Is(err, envelope.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		// What decodes re-encodes to the same bytes (but for an expiry
		// that lands exactly on the zero time, which reads as "none").
		rawExpiry := !bytes.Equal(b[11:19], make([]byte, 8))
		if h.Expires.IsZero() && rawExpiry {
			return
		}
		if again := envelope.Append(nil, h, payload); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, want %x", again, b)
		}
	})
}
