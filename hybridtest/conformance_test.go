package hybridtest_test

import (
	"github.com/hybridcache/hybridcache/tier"
	"testing"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"go.uber.org/goleak"
)

var _ hybrid.Bus = (*hybridtest.Bus)(nil)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openRemote returns a fresh Remote on a fresh Bus, with a log and atomic
// announced batches, or without either (as on Redis Cluster).
func openRemote(noLog bool) func(t *testing.T) (tier.Remote, hybrid.Bus) {
	return func(t *testing.T) (tier.Remote, hybrid.Bus) {
		bus := new(hybridtest.Bus)
		t.Cleanup(func() { bus.Close() })
		return &hybridtest.Remote{Bus: bus, NoLog: noLog, SplitBatch: noLog}, bus
	}
}

func TestConformance(t *testing.T) {
	hybridtest.TestRemote(t, openRemote(false))
}

// TestConformanceNoLog: the Remote as on Redis Cluster, without a log or
// atomic announced batches.
func TestConformanceNoLog(t *testing.T) {
	hybridtest.TestRemote(t, openRemote(true))
}
