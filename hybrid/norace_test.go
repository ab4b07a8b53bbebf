//go:build !race

package hybrid_test

// raceEnabled reports whether the race detector is on; it allocates, so
// allocation counts are skipped under it.
const raceEnabled = false
