package message

import (
	"cmp"
	"strconv"
	"strings"
)

// ComparePositions compares two positions in the invalidation log, Redis
// stream ids "<ms>-<seq>", and returns -1, 0 or +1 as a is before, equal
// to or after b. Valid ids compare by ms, then by seq, both as unsigned
// 64-bit numbers. A valid id is in the form Redis writes: two decimal
// numbers without sign or leading zeros, each below 2^64, joined by "-".
//
// Any other string, "" included, is before every valid id; two such
// strings compare bytewise, so "" is first of all. So ComparePositions is
// a total order in which only equal strings compare equal, and a
// remembered position of "" (nothing applied yet) is before every entry.
func ComparePositions(a, b string) int {
	ams, aseq, aok := parsePosition(a)
	bms, bseq, bok := parsePosition(b)
	switch {
	case aok && bok:
		if c := cmp.Compare(ams, bms); c != 0 {
			return c
		}
		return cmp.Compare(aseq, bseq)
	case aok:
		return +1
	case bok:
		return -1
	}
	return strings.Compare(a, b)
}

// ValidPosition reports whether s is a position in the form Redis writes
// (see ComparePositions).
func ValidPosition(s string) bool {
	_, _, ok := parsePosition(s)
	return ok
}

// parsePosition splits a valid stream id into its two numbers.
func parsePosition(s string) (ms, seq uint64, ok bool) {
	l, r, found := strings.Cut(s, "-")
	if !found {
		return 0, 0, false
	}
	if ms, ok = parseUint(l); !ok {
		return 0, 0, false
	}
	if seq, ok = parseUint(r); !ok {
		return 0, 0, false
	}
	return ms, seq, true
}

// parseUint parses a decimal number in canonical form: digits only, no
// leading zero unless it is "0", below 2^64.
func parseUint(s string) (uint64, bool) {
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// PositionBefore returns the position just before pos, so that reading a
// log after it starts with the entry at pos itself. ok is false when pos is
// not a valid id or is "0-0".
func PositionBefore(pos string) (string, bool) {
	ms, seq, ok := parsePosition(pos)
	switch {
	case !ok || (ms == 0 && seq == 0):
		return "", false
	case seq > 0:
		return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq-1, 10), true
	}
	return strconv.FormatUint(ms-1, 10) + "-" + strconv.FormatUint(^uint64(0), 10), true
}
