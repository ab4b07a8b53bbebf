package invalidate

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limiter{every: time.Minute}
		if n, ok := l.allow(); !ok || n != 0 {
			t.Fatalf("first event: got %d suppressed, ok %v, want 0, true", n, ok)
		}
		for i := range 3 {
			if _, ok := l.allow(); ok {
				t.Fatalf("event %d within the period: got ok, want it held back", i+2)
			}
		}
		time.Sleep(time.Minute)
		if n, ok := l.allow(); !ok || n != 3 {
			t.Errorf("first event after the period: got %d suppressed, ok %v, want 3, true", n, ok)
		}
		if n, ok := l.allow(); ok {
			t.Errorf("next event: got ok with %d suppressed, want it held back", n)
		}
	})
}
