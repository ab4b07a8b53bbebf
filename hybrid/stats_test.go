package hybrid_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/hybridcache/hybridcache/hybrid"
)

func TestStatsL1Entries(t *testing.T) {
	c := newTestCache[string](t, hybrid.Options{})
	ctx := context.Background()
	for i := range 10 {
		if err := c.Set(ctx, "k"+strconv.Itoa(i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	// L1.Size is not checked: otter accounts weights in its maintenance,
	// which runs later on its own goroutine.
	if st := c.Stats(); st.L1.Entries != 10 {
		t.Errorf("Stats: got L1.Entries %d, want 10", st.L1.Entries)
	}
}
