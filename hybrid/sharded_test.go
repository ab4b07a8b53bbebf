package hybrid_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// TestClusterPubSubModes: on Redis Cluster a cache's Remote and Bus use
// sharded pub/sub by default, or classic with Classic set on both; either
// way a Set on one instance reaches the other. A Remote and a Bus that
// disagree would lose every message: New refuses them, as it refuses a
// Channel whose hash tag is not the keys' slot.
func TestClusterPubSubModes(t *testing.T) {
	newClient := clusterNodes(t)
	for _, classic := range []bool{false, true} {
		name := "sharded"
		if classic {
			name = "classic"
		}
		t.Run(name, func(t *testing.T) {
			o := hybrid.Options{Namespace: redistest.Prefix(t), TTL: time.Minute}
			a := newInstance(t, "A", newClient, o, invalidate.Options{Classic: classic})
			b := newInstance(t, "B", newClient, o, invalidate.Options{Classic: classic})
			if a.bus.Sharded() == classic || a.remote.Info().Sharded == classic {
				t.Fatalf("bus sharded %v, remote sharded %v; want %v", a.bus.Sharded(), a.remote.Info().Sharded, !classic)
			}
			ctx := context.Background()
			for _, k := range []string{"k1", "k2", "k3", "k4"} { // several slots
				if _, err := b.c.GetOrCreate(ctx, k, func(context.Context, string) (string, error) { return "old", nil }); err != nil {
					t.Fatal(err)
				}
				if err := a.c.Set(ctx, k, "new"); err != nil {
					t.Fatal(err)
				}
				waitFor(t, 5*time.Second, "B sees "+k+" change", func() bool {
					v, ok, err := b.c.Get(ctx, k)
					return err == nil && ok && v == "new"
				}, nil)
			}
		})
	}
	t.Run("mismatch", func(t *testing.T) {
		rdb := newClient(t)
		bus := invalidate.New(rdb, invalidate.Options{Logger: quiet})
		t.Cleanup(func() { bus.Close() })
		_, err := hybrid.New[string](hybrid.Options{Namespace: redistest.Prefix(t), Remote: l2.New(rdb, l2.Options{Classic: true}), Bus: bus, Logger: quiet})
		if err == nil || !strings.Contains(err.Error(), "no message would arrive") {
			t.Errorf("New with a classic Remote and a sharded Bus: %v, want an error", err)
		}
		_, err = hybrid.New[string](hybrid.Options{Namespace: redistest.Prefix(t), Remote: l2.New(rdb, l2.Options{}), Bus: bus, Channel: "inv:{elsewhere}", Logger: quiet})
		if err == nil || !strings.Contains(err.Error(), "hash tag") {
			t.Errorf("New with a tagged Channel: %v, want an error", err)
		}
	})
}
