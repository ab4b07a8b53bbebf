package hybrid

import (
	"testing"
	"unsafe"
)

// TestTimingOverhead: timingOverhead covers the allocation of a timing,
// which Go rounds up to a size class (128 bytes holds anything over 112), so
// that an entry with a timing weighs what it costs.
func TestTimingOverhead(t *testing.T) {
	if n := unsafe.Sizeof(timing{}); n > timingOverhead || n <= 112 && timingOverhead > 112 {
		t.Errorf("a timing is %d bytes, weighed %d: change timingOverhead to the size class that holds it", n, timingOverhead)
	}
}
