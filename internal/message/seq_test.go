package message_test

import (
	"bytes"
	"errors"
	"strconv"
	"testing"

	"github.com/hybridcache/hybridcache/internal/message"
)

func TestSequencedRoundTrip(t *testing.T) {
	secret := []byte("s3cret")
	m := message.Message{Op: message.OpSet, Origin: message.Origin{7}, Namespace: "ns", Keys: []string{"k"}, Value: []byte("env")}
	inner := message.Encode(m, secret)
	for _, seq := range []uint64{1, 9, 10, 1733000000000000123, 1<<64 - 1} {
		b := message.Sequenced(seq, inner)
		d := strconv.FormatUint(seq, 10)
		if want := append([]byte{3, byte(len(d))}, d...); !bytes.HasPrefix(b, want) || !bytes.Equal(b[len(want):], inner) {
			t.Errorf("Sequenced(%d): got % x, want % x then the message", seq, b, want)
		}
		got, err := message.Decode(b, secret)
		if err != nil {
			t.Fatalf("Decode(Sequenced(%d)): %v", seq, err)
		}
		if got.Seq != seq || !got.Authentic || got.Position != "" || got.Op != m.Op || got.Keys[0] != "k" || !bytes.Equal(got.Value, m.Value) {
			t.Errorf("Decode(Sequenced(%d)): got %+v", seq, got)
		}
	}
	if got, err := message.Decode(inner, secret); err != nil || got.Seq != 0 {
		t.Errorf("Decode of a plain message: Seq %d, err %v; want 0, nil", got.Seq, err)
	}
	// The sequence is outside the signature, like a position.
	if got, err := message.Decode(message.Sequenced(5, inner), secret); err != nil || !got.Authentic {
		t.Errorf("sequenced signed message: Authentic %v, err %v; want true, nil", got.Authentic, err)
	}
}

func TestSequencedRejects(t *testing.T) {
	inner := message.Encode(message.Message{Op: message.OpDelete, Namespace: "ns", Keys: []string{"k"}}, nil)
	withSeq := func(d string) []byte { return append(append([]byte{3, byte(len(d))}, d...), inner...) }
	for name, b := range map[string][]byte{
		"version only":    {3},
		"length past end": {3, 9, '1'},
		"empty":           withSeq(""),
		"zero":            withSeq("0"),
		"leading zero":    withSeq("01"),
		"not a number":    withSeq("1a"),
		"negative":        withSeq("-1"),
		"past 64 bits":    withSeq("18446744073709551616"),
		"21 digits":       withSeq("100000000000000000000"),
		"no inner":        {3, 1, '1'},
		"sequenced twice": message.Sequenced(1, message.Sequenced(2, inner)),
	} {
		if _, err := message.Decode(b, nil); !errors.Is(err, message.ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
	if !panics(func() { message.Sequenced(0, inner) }) {
		t.Error("Sequenced(0, …) did not panic")
	}
}

func panics(f func()) (p bool) {
	defer func() { p = recover() != nil }()
	f()
	return false
}
