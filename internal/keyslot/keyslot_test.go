package keyslot

import "testing"

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
