package message_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/hybridcache/hybridcache/internal/message"
)

func TestPositionedRoundTrip(t *testing.T) {
	secret := []byte("s3cret")
	m := message.Message{Op: message.OpSet, Origin: message.Origin{7}, Namespace: "ns", Keys: []string{"k"}, Value: []byte("env")}
	for _, pos := range []string{"0-0", "1-0", "1700000000000-17", "18446744073709551615-18446744073709551615"} {
		inner := message.Encode(m, secret)
		b := message.Positioned(pos, inner)
		if want := append([]byte{2, byte(len(pos))}, pos...); !bytes.HasPrefix(b, want) || !bytes.Equal(b[len(want):], inner) {
			t.Errorf("Positioned(%q): got % x, want % x then the message", pos, b, want)
		}
		got, err := message.Decode(b, secret)
		if err != nil {
			t.Fatalf("Decode(Positioned(%q)): %v", pos, err)
		}
		if got.Position != pos || !got.Authentic || got.Op != m.Op || got.Namespace != m.Namespace ||
			!slices.Equal(got.Keys, m.Keys) || !bytes.Equal(got.Value, m.Value) {
			t.Errorf("Decode(Positioned(%q)): got %+v, want %+v at %q, authentic", pos, got, m, pos)
		}
	}
	// A plain message has no position.
	got, err := message.Decode(message.Encode(m, secret), secret)
	if err != nil || got.Position != "" {
		t.Errorf("Decode of a plain message: position %q, err %v; want \"\", nil", got.Position, err)
	}
}

// TestPositionOutsideSignature: the position may change without breaking
// the signature; the inner message may not.
func TestPositionOutsideSignature(t *testing.T) {
	secret := []byte("s3cret")
	inner := message.Encode(message.Message{Op: message.OpDelete, Namespace: "ns", Keys: []string{"k"}}, secret)
	for _, pos := range []string{"1-0", "99-9"} {
		got, err := message.Decode(message.Positioned(pos, inner), secret)
		if err != nil || !got.Authentic || got.Position != pos {
			t.Errorf("position %q: got Authentic %v, Position %q, err %v; want true, %q, nil", pos, got.Authentic, got.Position, err, pos)
		}
	}
	forged := message.Positioned("1-0", message.Encode(message.Message{Op: message.OpDelete, Namespace: "ns", Keys: []string{"k"}}, []byte("other")))
	if got, err := message.Decode(forged, secret); err != nil || got.Authentic {
		t.Errorf("forged inner message: got Authentic %v, err %v; want false, nil", got.Authentic, err)
	}
}

func TestPositionedRejects(t *testing.T) {
	inner := message.Encode(message.Message{Op: message.OpDelete, Namespace: "ns", Keys: []string{"k"}}, nil)
	withPos := func(pos string) []byte {
		return append(append([]byte{2, byte(len(pos))}, pos...), inner...)
	}
	for name, b := range map[string][]byte{
		"version only":         {2},
		"no position":          withPos(""),
		"position past end":    {2, 9, '1', '-', '0'},
		"position, no message": message.Positioned("1-0", nil),
		"position only ms":     withPos("17"),
		"leading zero":         withPos("01-0"),
		"negative":             withPos("-1-0"),
		"too big":              withPos("18446744073709551616-0"),
		"not digits":           withPos("1-0x"),
		"two dashes":           withPos("1-0-0"),
		"nested":               message.Positioned("1-0", message.Positioned("2-0", inner)),
		"bad inner":            message.Positioned("1-0", inner[:len(inner)-1]),
	} {
		if m, err := message.Decode(b, nil); !errors.Is(err, message.ErrInvalid) {
			t.Errorf("%s: got %+v, err %v; want ErrInvalid", name, m, err)
		}
	}
}

func TestPositionedPanics(t *testing.T) {
	for _, n := range []int{0, message.MaxPositionLen + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Positioned with a position of %d bytes: no panic, want one", n)
				}
			}()
			message.Positioned(string(make([]byte, n)), nil)
		}()
	}
}

func TestComparePositions(t *testing.T) {
	// In order: invalid strings bytewise ("" first), then valid ids by
	// number.
	ordered := []string{
		"", "-", "01-0", "1", "1-", "1-01", "a-b", "x",
		"0-0", "0-1", "0-18446744073709551615", "1-0", "2-0", "9-5", "10-0",
		"1700000000000-0", "1700000000000-2", "1700000000000-10",
		"18446744073709551615-0", "18446744073709551615-18446744073709551615",
	}
	for i, a := range ordered {
		for j, b := range ordered {
			if got, want := message.ComparePositions(a, b), compareInts(i, j); got != want {
				t.Errorf("ComparePositions(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
}

func compareInts(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return +1
	}
	return 0
}

// FuzzComparePositions: ComparePositions is antisymmetric, equal only for
// equal strings, and transitive.
func FuzzComparePositions(f *testing.F) {
	f.Add("1-0", "2-0", "10-0")
	f.Add("", "0-0", "x")
	f.Add("01-0", "1-0", "1-00")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		ab, ba := message.ComparePositions(a, b), message.ComparePositions(b, a)
		if ab != -ba {
			t.Fatalf("ComparePositions(%q, %q) = %d but reversed %d", a, b, ab, ba)
		}
		if (ab == 0) != (a == b) {
			t.Fatalf("ComparePositions(%q, %q) = %d", a, b, ab)
		}
		if ab <= 0 && message.ComparePositions(b, c) <= 0 && message.ComparePositions(a, c) > 0 {
			t.Fatalf("not transitive: %q <= %q <= %q but %q > %q", a, b, c, a, c)
		}
	})
}

func TestPositionBefore(t *testing.T) {
	for _, tc := range []struct {
		pos, want string
		ok        bool
	}{
		{"5-3", "5-2", true},
		{"5-0", "4-18446744073709551615", true},
		{"0-1", "0-0", true},
		{"0-0", "", false},
		{"", "", false},
		{"x-1", "", false},
	} {
		got, ok := message.PositionBefore(tc.pos)
		if got != tc.want || ok != tc.ok {
			t.Errorf("PositionBefore(%q) = %q, %v, want %q, %v", tc.pos, got, ok, tc.want, tc.ok)
		}
		if ok && message.ComparePositions(got, tc.pos) >= 0 {
			t.Errorf("PositionBefore(%q) = %q, which is not before it", tc.pos, got)
		}
	}
}
