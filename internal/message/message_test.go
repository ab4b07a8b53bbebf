package message_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hybridcache/hybridcache/internal/message"
)

func TestRoundTrip(t *testing.T) {
	secret := []byte("s3cret")
	origin := message.Origin{1, 2, 3}
	tests := []struct {
		name   string
		m      message.Message
		secret []byte
	}{
		{"delete unsigned", message.Message{Op: message.OpDelete, Origin: origin, Namespace: "ns", Keys: []string{"a"}}, nil},
		{"set signed with value", message.Message{Op: message.OpSet, Origin: origin, Namespace: "ns", Keys: []string{"k"}, Value: []byte("env")}, secret},
		{"clear", message.Message{Op: message.OpClear, Origin: origin, Namespace: "products"}, secret},
		{"tag with its record", message.Message{Op: message.OpTag, Origin: origin, Namespace: "ns", Keys: []string{"t"}, Value: []byte("12345678")}, secret},
		{"clear record (the empty tag)", message.Message{Op: message.OpTag, Origin: origin, Namespace: "ns", Keys: []string{""}, Value: []byte("12345678")}, secret},
		{"expire unsigned", message.Message{Op: message.OpExpire, Origin: origin, Namespace: "ns", Keys: []string{"k"}}, nil},
		{"expire signed", message.Message{Op: message.OpExpire, Origin: origin, Namespace: "ns", Keys: []string{"k"}}, secret},
		{"many keys", message.Message{Op: message.OpDelete, Origin: origin, Namespace: "n", Keys: []string{"a", "", "ccc"}}, nil},
		{"filled with token", message.Message{Op: message.OpFilled, Origin: origin, Namespace: "ns", Keys: []string{"k"}, Value: message.PackValues([][]byte{[]byte("v")}), Token: "0a0b.7"}, secret},
		{"load failed unsigned with token", message.Message{Op: message.OpLoadFailed, Origin: origin, Namespace: "ns", Keys: []string{"k"}, Token: "0a0b.8"}, nil},
	}
	for _, tt := range tests {
		b := message.Encode(tt.m, tt.secret)
		got, err := message.Decode(b, tt.secret)
		if err != nil {
			t.Fatalf("%s: Decode: %v", tt.name, err)
		}
		if got.Op != tt.m.Op || got.Origin != tt.m.Origin || got.Namespace != tt.m.Namespace || len(got.Keys) != len(tt.m.Keys) || (tt.secret != nil && !bytes.Equal(got.Value, tt.m.Value)) || got.Token != tt.m.Token {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.m)
		}
		if got.Authentic != (len(tt.secret) > 0) {
			t.Errorf("%s: got Authentic %v, want %v", tt.name, got.Authentic, len(tt.secret) > 0)
		}
	}
}

func TestValueOnlyWhenSigned(t *testing.T) {
	m := message.Message{Op: message.OpSet, Namespace: "ns", Keys: []string{"k"}, Value: []byte("v")}
	got, err := message.Decode(message.Encode(m, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Value != nil {
		t.Errorf("unsigned message carried value %q, want none", got.Value)
	}
}

// An extend carries its Value unsigned, and signed; a forged signature
// leaves it without one, as any other op.
func TestExtendValue(t *testing.T) {
	m := message.Message{Op: message.OpExtend, Namespace: "ns", Keys: []string{"k"}, Value: []byte("until")}
	for _, c := range []struct {
		name         string
		sign, verify []byte
		value        string
		authentic    bool
	}{
		{"unsigned", nil, nil, "until", false},
		{"unsigned, read with a secret", nil, []byte("s"), "until", false},
		{"signed", []byte("s"), []byte("s"), "until", true},
		{"forged", []byte("x"), []byte("s"), "", false},
	} {
		got, err := message.Decode(message.Encode(m, c.sign), c.verify)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(got.Value) != c.value || got.Authentic != c.authentic || got.Op != message.OpExtend {
			t.Errorf("%s: got op %v, Value %q, Authentic %v; want extend, %q, %v", c.name, got.Op, got.Value, got.Authentic, c.value, c.authentic)
		}
	}
}

func TestForgedSignature(t *testing.T) {
	m := message.Message{Op: message.OpSet, Namespace: "ns", Keys: []string{"k"}, Value: []byte("planted")}
	b := message.Encode(m, []byte("attacker key"))
	got, err := message.Decode(b, []byte("real key"))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if got.Authentic || got.Value != nil {
		t.Errorf("got Authentic %v Value %q, want false and none", got.Authentic, got.Value)
	}
	if len(got.Keys) != 1 || got.Keys[0] != "k" {
		t.Errorf("got keys %q, want [k] (a forged message may still evict)", got.Keys)
	}
	// Tampering with a signed message breaks its signature.
	good := message.Encode(m, []byte("real key"))
	good[len(good)-40] ^= 1
	if got, _ := message.Decode(good, []byte("real key")); got.Authentic {
		t.Error("tampered message verified")
	}
}

// A signed lease holder's news cannot be passed off as another holder's:
// the token is inside the signature.
func TestTokenSigned(t *testing.T) {
	secret := []byte("s")
	b := message.Encode(message.Message{Op: message.OpFilled, Namespace: "ns", Keys: []string{"k"}, Value: message.PackValues([][]byte{[]byte("v")}), Token: "aa.1"}, secret)
	i := bytes.Index(b, []byte("aa.1"))
	b[i+3] = '2'
	got, err := message.Decode(b, secret)
	if err != nil {
		t.Fatal(err)
	}
	if got.Authentic || got.Value != nil || got.Token != "aa.2" {
		t.Errorf("token changed: got Authentic %v, Value %q, Token %q; want false, none, aa.2", got.Authentic, got.Value, got.Token)
	}
}

func TestDecodeRejects(t *testing.T) {
	valid := message.Encode(message.Message{Op: message.OpDelete, Namespace: "ns", Keys: []string{"k"}}, nil)
	hugeCount := append(bytes.Clone(valid[:22]), 0xff, 0xff, 0xff, 0xff, 0x0f)
	for name, b := range map[string][]byte{
		"empty":             nil,
		"short":             valid[:10],
		"version 9":         append([]byte{9}, valid[1:]...),
		"op 0":              append([]byte{1, 0}, valid[2:]...),
		"op 11":             append([]byte{1, 11}, valid[2:]...),
		"expire, no key":    message.Encode(message.Message{Op: message.OpExpire, Namespace: "ns"}, nil),
		"value unsigned":    append([]byte{1, 1, 1}, valid[3:]...),
		"trailing":          append(bytes.Clone(valid), 0),
		"truncated key":     valid[:len(valid)-1],
		"huge key count":    hugeCount,
		"token on a delete": append([]byte{1, 2, 4}, append(bytes.Clone(valid[3:]), 1, 'x')...),
		"empty token":       append([]byte{1, 6, 4}, append(bytes.Clone(valid[3:]), 0)...),
		"long token":        append([]byte{1, 6, 4}, append(append(bytes.Clone(valid[3:]), 0x80, 0x02), bytes.Repeat([]byte("x"), 256)...)...),
		"truncated token":   append([]byte{1, 6, 4}, append(bytes.Clone(valid[3:]), 3, 'x')...),
		"flag 16":           append([]byte{1, 2, 16}, valid[3:]...),
		"no send time":      append([]byte{1, 2, 8}, valid[3:]...),
		"short send time":   append([]byte{1, 2, 8}, append(bytes.Clone(valid[3:]), 1, 2, 3)...),
	} {
		if _, err := message.Decode(b, nil); !errors.Is(err, message.ErrInvalid) {
			t.Errorf("%s: got err %v, want ErrInvalid", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	secret := []byte("fuzz")
	f.Add(message.Encode(message.Message{Op: message.OpSet, Namespace: "ns", Keys: []string{"k"}, Value: []byte("v")}, secret))
	f.Add(message.Encode(message.Message{Op: message.OpClear, Namespace: "ns"}, nil))
	f.Add(message.Encode(message.Message{Op: message.OpDelete, Namespace: "ns", Keys: []string{"a", "b"}}, nil))
	f.Add(message.Encode(message.Message{Op: message.OpExpire, Namespace: "ns", Keys: []string{"k"}}, secret))
	f.Add(message.Encode(message.Message{Op: message.OpTag, Namespace: "ns", Keys: []string{""}, Value: []byte("12345678")}, secret))
	f.Add([]byte{1, 2, 0})
	f.Add(message.Encode(message.Message{Op: message.OpFilled, Namespace: "ns", Keys: []string{"a", "b"}, Value: message.PackValues([][]byte{[]byte("v"), nil})}, secret))
	f.Add(message.Encode(message.Message{Op: message.OpLoadFailed, Namespace: "ns", Keys: []string{"k"}, Value: []byte("db down")}, secret))
	f.Add(message.Encode(message.Message{Op: message.OpNotFound, Namespace: "ns", Keys: []string{"k"}}, nil))
	f.Add(message.Encode(message.Message{Op: message.OpNotStored, Namespace: "ns", Keys: []string{"k"}}, secret))
	f.Add(message.Encode(message.Message{Op: message.OpExtend, Namespace: "ns", Keys: []string{"k"}, Value: []byte("0123456789abcdefv1")}, nil))
	f.Add(message.Encode(message.Message{Op: message.OpFilled, Namespace: "ns", Keys: []string{"k"}, Value: message.PackValues([][]byte{[]byte("v")}), Token: "0a.1"}, secret))
	f.Add(message.Encode(message.Message{Op: message.OpNotFound, Namespace: "ns", Keys: []string{"k"}, Token: "0a.2"}, nil))
	f.Add(message.Positioned("1700000000000-0", message.Encode(message.Message{Op: message.OpSet, Namespace: "ns", Keys: []string{"k"}, Value: []byte("v")}, secret)))
	f.Add(message.Positioned("18446744073709551615-18446744073709551615", message.Encode(message.Message{Op: message.OpTag, Namespace: "ns", Keys: []string{"t"}}, nil)))
	f.Add(message.Positioned("1-0", message.Positioned("2-0", message.Encode(message.Message{Op: message.OpClear}, nil))))
	f.Add(message.Sequenced(1733000000000000123, message.Encode(message.Message{Op: message.OpSet, Namespace: "ns", Keys: []string{"k"}, Value: []byte("v")}, secret)))
	f.Add(message.Sequenced(1, message.Sequenced(2, message.Encode(message.Message{Op: message.OpDelete, Namespace: "ns", Keys: []string{"k"}}, nil))))
	f.Add([]byte{3, 1, '0'})
	f.Add([]byte{3, 20, '9'})
	f.Add([]byte{2, 3, '1', '-', '0'})
	f.Add([]byte{2, 200, '1', '-', '0'})
	f.Add([]byte{2})
	f.Add(message.Encode(message.Message{Op: message.OpSet, Namespace: "ns", Keys: []string{"k"}, Value: []byte("v"), Sent: 1}, secret))
	f.Add(message.Encode(message.Message{Op: message.OpDelete, Namespace: "ns", Keys: []string{"k"}, Sent: -1}, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := message.Decode(b, secret)
		if err != nil {
			if !errors.Is(err, message.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if m.Op != message.OpClear && len(m.Keys) == 0 {
			t.Fatal("decoded a set, delete, tag or expire with no key")
		}
		if m.Value != nil && !m.Authentic && m.Op != message.OpExtend {
			t.Fatal("value from an unauthentic message other than an extend")
		}
		if m.Token != "" && (m.Op < message.OpFilled || m.Op > message.OpNotStored || len(m.Token) > message.MaxTokenLen) {
			t.Fatalf("token of %d bytes on op %v", len(m.Token), m.Op)
		}
		if len(m.Keys) > len(b) {
			t.Fatalf("%d keys from %d bytes", len(m.Keys), len(b))
		}
		if (m.Position != "") != (b[0] == message.VersionPositioned) {
			t.Fatalf("position %q from a message of version %d", m.Position, b[0])
		}
		if m.Position != "" && message.ComparePositions(m.Position, "0-0") < 0 {
			t.Fatalf("decoded position %q is not a valid stream id", m.Position)
		}
	})
}

// A message carries its send time inside the signature; one without it
// (from a sender that predates it) decodes as before, with Sent 0.
func TestSent(t *testing.T) {
	secret := []byte("s")
	sent := int64(1_700_000_000_123_456_789)
	for _, sec := range [][]byte{nil, secret} {
		m := message.Message{Op: message.OpSet, Namespace: "ns", Keys: []string{"k"}, Value: []byte("v"), Sent: sent}
		b := message.Encode(m, sec)
		got, err := message.Decode(b, sec)
		if err != nil {
			t.Fatal(err)
		}
		if got.Sent != sent || got.Authentic != (sec != nil) {
			t.Errorf("secret %q: got Sent %d, Authentic %v; want %d, %v", sec, got.Sent, got.Authentic, sent, sec != nil)
		}
		m.Sent = 0
		old := message.Encode(m, sec)
		if len(old) != len(b)-8 || old[2]&8 != 0 {
			t.Errorf("secret %q: a message without a send time has %d bytes and flags %#x, want %d and no flag 8", sec, len(old), old[2], len(b)-8)
		}
		if got, err := message.Decode(old, sec); err != nil || got.Sent != 0 {
			t.Errorf("secret %q: old format: got Sent %d, err %v; want 0, nil", sec, got.Sent, err)
		}
	}
	b := message.Encode(message.Message{Op: message.OpDelete, Namespace: "ns", Keys: []string{"k"}, Sent: sent}, secret)
	b[len(b)-32-1]++ // the last byte of the send time, inside the signature
	got, err := message.Decode(b, secret)
	if err != nil {
		t.Fatal(err)
	}
	if got.Authentic || got.Sent != sent+1 {
		t.Errorf("send time changed: got Authentic %v, Sent %d; want false, %d", got.Authentic, got.Sent, sent+1)
	}
}

func TestPackValues(t *testing.T) {
	vals := [][]byte{[]byte("first"), nil, bytes.Repeat([]byte("x"), 300), []byte("z")}
	got, err := message.UnpackValues(message.PackValues(vals), len(vals))
	if err != nil {
		t.Fatal(err)
	}
	for i := range vals {
		if !bytes.Equal(got[i], vals[i]) || (vals[i] == nil) != (got[i] == nil) {
			t.Errorf("value %d: got %q, want %q", i, got[i], vals[i])
		}
	}
	packed := message.PackValues(vals)
	for name, c := range map[string]struct {
		b []byte
		n int
	}{
		"too few":   {packed, len(vals) + 1},
		"trailing":  {packed, len(vals) - 1},
		"truncated": {packed[:len(packed)-1], len(vals)},
		"huge len":  {[]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 1},
	} {
		if _, err := message.UnpackValues(c.b, c.n); !errors.Is(err, message.ErrInvalid) {
			t.Errorf("%s: got err %v, want ErrInvalid", name, err)
		}
	}
}

func TestOpOf(t *testing.T) {
	for _, op := range []message.Op{message.OpSet, message.OpFilled, message.OpLoadFailed, message.OpNotFound, message.OpNotStored} {
		b := message.Encode(message.Message{Op: op, Namespace: "ns", Keys: []string{"k"}}, []byte("s"))
		if got := message.OpOf(b); got != op {
			t.Errorf("OpOf(%v message) = %v", op, got)
		}
		if got := message.OpOf(message.Positioned("1-0", b)); got != op {
			t.Errorf("OpOf(positioned %v message) = %v", op, got)
		}
		if got := message.OpOf(message.Sequenced(12, b)); got != op {
			t.Errorf("OpOf(sequenced %v message) = %v", op, got)
		}
	}
	for name, b := range map[string][]byte{"empty": nil, "one byte": {1}, "positioned, nothing inside": {2, 3, '1', '-', '0'}, "sequenced, cut": {3, 9, '1'}, "sequenced twice": {3, 1, '1', 3, 1, '2', 1, 1}} {
		if got := message.OpOf(b); got != 0 {
			t.Errorf("OpOf(%s) = %v, want 0", name, got)
		}
	}
}
