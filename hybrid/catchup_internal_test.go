package hybrid

import "testing"

// TestKeepSlot: a slot's entries stay after a loss only when its counter is
// what was known, or messages each the next in sequence brought what is
// known up to it.
func TestKeepSlot(t *testing.T) {
	for _, tc := range []struct {
		name        string
		pre, now, k uint64
		want        bool
	}{
		{"unchanged", 5, 5, 5, true},
		{"written meanwhile", 5, 8, 5, false},
		{"written, every message seen", 5, 8, 8, true},
		{"written, messages seen past the read", 5, 8, 9, true},
		{"went back", 5, 3, 5, false},
		{"missing now", 5, 0, 5, false},
		{"unknown", 0, 5, 0, false},
		{"marked missing", seqMissing, 5, seqMissing, false},
		{"known marked missing", 5, 5, seqMissing, false},
	} {
		if got := keepSlot(tc.pre, tc.now, tc.k); got != tc.want {
			t.Errorf("%s: keepSlot(%d, %d, %d) = %v, want %v", tc.name, tc.pre, tc.now, tc.k, got, tc.want)
		}
	}
}
