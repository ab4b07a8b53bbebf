package keyslot

import (
	"strings"
	"testing"
)

// TestOf checks slots Redis Cluster documents (CLUSTER KEYSLOT).
func TestOf(t *testing.T) {
	for key, want := range map[string]uint16{"foo": 12182, "bar": 5061, "{user1000}.following": 3443, "{user1000}.followers": 3443, "a{}b": Of("a{}b")} {
		if got := Of(key); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestTag: every slot has a tag, and a key holding it is in the slot.
func TestTag(t *testing.T) {
	for s := range uint16(Count) {
		tag := Tag(s)
		if tag == "" || Of("x{"+tag+"}y") != s {
			t.Fatalf("Tag(%d) = %q, in slot %d", s, tag, Of("{"+tag+"}"))
		}
	}
}

func TestChannel(t *testing.T) {
	for _, s := range []uint16{0, 1, 5461, 12182, Count - 1} {
		c := Channel("ns:inv", s)
		if Of(c) != s || !strings.HasPrefix(c, "ns:inv{") {
			t.Errorf("Channel(%q, %d) = %q, in slot %d", "ns:inv", s, c, Of(c))
		}
	}
}

func TestChannelTagged(t *testing.T) {
	for base, tagged := range map[string]bool{"{app}:ns": true, "x{a}y{b}": true, "a{}b": false, "a{b": false, "a}b{": false, "plain": false} {
		if Tagged(base) != tagged {
			t.Errorf("Tagged(%q) = %v, want %v", base, !tagged, tagged)
		}
		c := Channel(base, 77)
		if tagged && c != base {
			t.Errorf("Channel(%q, 77) = %q, want the base itself", base, c)
		}
		if !tagged && Of(c) != 77 {
			t.Errorf("Channel(%q, 77) = %q, in slot %d", base, c, Of(c))
		}
	}
}
