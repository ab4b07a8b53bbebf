package l2

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/hybridcache/hybridcache/internal/message"
)

// TestCompareIDsAgreesWithMessage: l2 keeps its own copy of the comparison
// of positions; it must agree with internal/message's.
func TestCompareIDsAgreesWithMessage(t *testing.T) {
	ids := []string{
		"", "-", "0", "0-", "-0", "00-0", "01-1", "1-01", "+1-0", "1-0 ", "x-y", "1-2-3",
		"0-0", "0-1", "1-0", "1-1", "2-0", "10-0", "9-10", "1700000000000-0", "1700000000000-1",
		"18446744073709551615-18446744073709551615", "18446744073709551616-0",
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		ids = append(ids, strconv.FormatUint(r.Uint64N(1000), 10)+"-"+strconv.FormatUint(r.Uint64N(3), 10))
	}
	for _, a := range ids {
		for _, b := range ids {
			if got, want := compareIDs(a, b), message.ComparePositions(a, b); got != want {
				t.Errorf("compareIDs(%q, %q) = %d; message.ComparePositions says %d", a, b, got, want)
			}
		}
	}
}

func TestLogStateComplete(t *testing.T) {
	live := logState{exists: true, first: "5-0", last: "9-0", length: 5, added: 9} // 4 trimmed
	whole := logState{exists: true, first: "1-0", last: "9-0", length: 9, added: 9}
	empty := logState{exists: true, last: "9-0", length: 0, added: 9}
	old := logState{exists: true, first: "1-0", last: "9-0", length: 9, added: -1} // before Redis 7
	tests := []struct {
		name  string
		st    logState
		after string
		want  bool
	}{
		{"missing", logState{}, "5-0", false},
		{"missing from start", logState{}, "", false},
		{"at oldest", live, "5-0", true},
		{"inside", live, "7-3", true},
		{"at newest", live, "9-0", true},
		{"past newest", live, "9-1", false},
		{"before oldest", live, "4-9", false},
		{"start, trimmed", live, "", false},
		{"0-0, trimmed", live, "0-0", false},
		{"start, whole", whole, "", true},
		{"0-0, whole", whole, "0-0", true},
		{"empty, at last", empty, "9-0", true},
		{"empty, before last", empty, "8-0", false},
		{"start, unknown added", old, "", false},
		{"inside, unknown added", old, "3-0", true},
	}
	for _, tt := range tests {
		if got := tt.st.complete(tt.after); got != tt.want {
			t.Errorf("%s: complete(%q) = %v, want %v", tt.name, tt.after, got, tt.want)
		}
	}
}
