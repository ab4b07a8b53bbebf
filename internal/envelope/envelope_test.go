package envelope_test

import (
	"bytes"
	"encoding/binary"
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
		{Codec: 1, Written: written, Version: `W/"etag-1"`},
		{Codec: 2, Flags: envelope.FlagCompressed, Written: written, Tags: []string{"a", "b"}, Version: "v2"},
		{Codec: 2, Written: written, LoadTime: 50 * time.Millisecond},
		{Codec: 2, Written: written, Tags: []string{"t"}, LoadTime: 1500 * time.Microsecond},
		{Codec: 2, Written: written, Tags: []string{"t"}, Version: "v3", LoadTime: time.Second},
	} {
		b := envelope.Append(nil, h, []byte("payload"))
		got, payload, err := envelope.Decode(b)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if got.Codec != h.Codec || !got.Written.Equal(h.Written) || !got.Expires.Equal(h.Expires) || !slices.Equal(got.Tags, h.Tags) ||
			got.Version != h.Version || got.LoadTime != h.LoadTime ||
			got.Flags&^(envelope.FlagTagged|envelope.FlagVersioned|envelope.FlagLoadTime) != h.Flags {
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
	versionFlagOnly := bytes.Clone(good)
	versionFlagOnly[2] = envelope.FlagVersioned
	versioned := envelope.Append(nil, envelope.Header{Codec: 1, Written: time.Now(), Version: "etag"}, nil)
	emptyVersion := append(bytes.Clone(good[:envelope.HeaderLen]), 0)
	emptyVersion[2] = envelope.FlagVersioned
	loadFlagOnly := bytes.Clone(good)
	loadFlagOnly[2] = envelope.FlagLoadTime
	zeroLoad := append(bytes.Clone(loadFlagOnly[:envelope.HeaderLen]), 0)
	longLoad := append(bytes.Clone(loadFlagOnly[:envelope.HeaderLen]), 0x81, 0xc0, 0xdd, 0xee, 0xc1, 0x02) // MaxLoadTime + 1 µs
	// Times no writer makes: beyond MaxTime (year 10000 here) or before
	// the Unix epoch.
	at := func(off int, ms int64) []byte {
		b := bytes.Clone(good)
		binary.BigEndian.PutUint64(b[off:off+8], uint64(ms))
		return b
	}
	year10000 := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	for name, b := range map[string][]byte{
		"written in year 10000":    at(3, year10000),
		"written before 1970":      at(3, -1),
		"written past MaxTime":     at(3, envelope.MaxTime.UnixMilli()+1),
		"expiring in year 10000":   at(envelope.ExpiresAt, year10000),
		"expiring before 1970":     at(envelope.ExpiresAt, -1),
		"expiring past MaxTime":    at(envelope.ExpiresAt, envelope.MaxTime.UnixMilli()+1),
		"empty":                    nil,
		"short header":             good[:envelope.HeaderLen-1],
		"other format":             future,
		"unknown flag":             flagged,
		"tag flag, no tags":        tagFlagOnly,
		"tag cut short":            tagged[:envelope.HeaderLen+2],
		"long varint":              longCount,
		"65 tags":                  tooMany,
		"version flag, no version": versionFlagOnly,
		"version cut short":        versioned[:len(versioned)-1],
		"empty version":            emptyVersion,
		"load flag, no time":       loadFlagOnly[:envelope.HeaderLen],
		"zero load time":           zeroLoad,
		"load time too long":       longLoad,
		"json text":                []byte(`{"id":1,"name":"not an envelope"}`),
	} {
		if _, _, err := envelope.Decode(b); !errors.Is(err, envelope.ErrCorrupt) {
			t.Errorf("%s: got err %v, want ErrCorrupt", name, err)
		}
	}
}

// TestTimesBounded: Append stores a time outside what Decode accepts at
// the nearest bound, so that what a writer stores always decodes, and
// MaxTime itself round-trips.
func TestTimesBounded(t *testing.T) {
	for _, tt := range []struct {
		name                     string
		written, expires         time.Time
		wantWritten, wantExpires time.Time
	}{
		{"zero write time", time.Time{}, time.Time{}, time.UnixMilli(0), time.Time{}},
		{"expiry before 1970", time.UnixMilli(5), time.UnixMilli(-5), time.UnixMilli(5), time.UnixMilli(1)},
		{"year 3000", time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(3000, 1, 2, 0, 0, 0, 0, time.UTC), envelope.MaxTime, envelope.MaxTime},
		{"MaxTime", envelope.MaxTime, envelope.MaxTime, envelope.MaxTime, envelope.MaxTime},
	} {
		h, _, err := envelope.Decode(envelope.Append(nil, envelope.Header{Codec: 1, Written: tt.written, Expires: tt.expires}, nil))
		if err != nil || !h.Written.Equal(tt.wantWritten) || !h.Expires.Equal(tt.wantExpires) {
			t.Errorf("%s: got written %v, expiry %v, %v; want %v, %v", tt.name, h.Written, h.Expires, err, tt.wantWritten, tt.wantExpires)
		}
	}
	if got := envelope.MaxTime.UnixNano() / int64(time.Millisecond); got != envelope.MaxTime.UnixMilli() {
		t.Errorf("MaxTime's Unix nanoseconds overflow: %d ms from them, %d ms", got, envelope.MaxTime.UnixMilli())
	}
}

// TestUnversionedUnchanged: the versioned flag is the only change an
// envelope with a version makes, and one without a version is byte for
// byte what format 1 was before versions.
func TestUnversionedUnchanged(t *testing.T) {
	written := time.UnixMilli(1_700_000_000_123)
	plain := envelope.Append(nil, envelope.Header{Codec: 1, Written: written, Tags: []string{"t"}}, []byte("x"))
	if plain[2]&envelope.FlagVersioned != 0 {
		t.Errorf("an envelope without a version has the versioned flag: %#x", plain[2])
	}
	want := []byte{1, 1, envelope.FlagTagged, 0, 0, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x7b, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 't', 'x'}
	if !bytes.Equal(plain, want) {
		t.Errorf("envelope without a version:\n got % x\nwant % x", plain, want)
	}
}

// TestHead: the head is the envelope's prefix up to its tags, and two
// envelopes of one value differ in it only by their expiry.
func TestHead(t *testing.T) {
	written := time.UnixMilli(1_700_000_000_123)
	h := envelope.Header{Codec: 2, Flags: envelope.FlagCompressed, Written: written, Expires: written.Add(time.Minute), Tags: []string{"a"}, Version: "v7"}
	b := envelope.Append(nil, h, []byte("payload"))
	head := envelope.Head(nil, h)
	if !bytes.HasPrefix(b, head) {
		t.Fatalf("head % x is not a prefix of the envelope % x", head, b)
	}
	if len(head) != envelope.HeaderLen+1+len(h.Version) {
		t.Errorf("head of %d bytes, want the header and the version (%d)", len(head), envelope.HeaderLen+1+len(h.Version))
	}
	h2 := h
	h2.Expires = written.Add(time.Hour)
	head2 := envelope.Head(nil, h2)
	for i := range head {
		if in := i >= envelope.ExpiresAt && i < envelope.ExpiresAt+8; (head[i] != head2[i]) && !in {
			t.Errorf("heads of one value differ at byte %d, outside the expiry", i)
		}
	}
	if bytes.Equal(head, head2) {
		t.Error("heads of two expiries are equal")
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

// TestReadHeader reads the fixed header of whole envelopes and of their
// first HeaderLen bytes alike, and rejects what Decode rejects in it.
func TestReadHeader(t *testing.T) {
	written := time.UnixMilli(1_700_000_000_123)
	h := envelope.Header{Codec: 2, Flags: envelope.FlagDeleted, Written: written, Expires: written.Add(time.Minute), Tags: []string{"a"}, Version: "v1"}
	b := envelope.Append(nil, h, []byte("payload"))
	for _, cut := range []int{len(b), envelope.HeaderLen} {
		got, err := envelope.ReadHeader(b[:cut])
		if err != nil {
			t.Fatalf("ReadHeader of %d bytes: %v", cut, err)
		}
		if !got.Written.Equal(written) || !got.Expires.Equal(h.Expires) || got.Codec != 2 || got.Flags != envelope.FlagDeleted|envelope.FlagTagged|envelope.FlagVersioned {
			t.Errorf("ReadHeader of %d bytes = %+v, want written %v, expiry %v, codec 2, flags deleted|tagged|versioned", cut, got, written, h.Expires)
		}
	}
	bad := slices.Clone(b[:envelope.HeaderLen])
	bad[2] = 128
	for name, in := range map[string][]byte{"short": b[:envelope.HeaderLen-1], "empty": nil, "flag": bad, "format": append([]byte{9}, b[1:envelope.HeaderLen]...)} {
		if _, err := envelope.ReadHeader(in); !errors.Is(err, envelope.ErrCorrupt) {
			t.Errorf("ReadHeader(%s) error = %v, want ErrCorrupt", name, err)
		}
	}
}
