package l1

import (
	"testing"
	"time"
)

func TestCellMeta(t *testing.T) {
	tests := []struct {
		weight  uint32
		ttl     time.Duration
		wantTTL time.Duration
	}{
		{1, time.Minute, time.Minute},
		{1<<32 - 1, 1500 * time.Microsecond, time.Millisecond}, // kept to the millisecond
		{0, time.Microsecond, time.Millisecond},                // at least one
		{7, 100 * 365 * 24 * time.Hour, maxTTL},                // cut, not wrapped
	}
	for _, tt := range tests {
		s := newCell("v", tt.weight, tt.ttl)
		if s.weight() != tt.weight || s.ttl() != tt.wantTTL || s.v != "v" {
			t.Errorf("newCell(v, %d, %v): weight %d, ttl %v, v %q; want %d, %v, v", tt.weight, tt.ttl, s.weight(), s.ttl(), s.v, tt.weight, tt.wantTTL)
		}
	}
}
