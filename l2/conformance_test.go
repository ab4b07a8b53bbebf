package l2_test

import (
	"github.com/hybridcache/hybridcache/tier"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// openStore returns the open function of the conformance suite for a
// Store on rdb: each subtest gets a Store under a prefix of its own, and a
// Bus on the same client, which hears what the Store publishes.
func openStore(rdb func(t *testing.T) redis.UniversalClient) func(t *testing.T) (tier.Remote, hybrid.Bus) {
	return func(t *testing.T) (tier.Remote, hybrid.Bus) {
		c := rdb(t)
		bus := invalidate.New(c, invalidate.Options{})
		t.Cleanup(func() { bus.Close() })
		return l2.New(c, l2.Options{Prefix: redistest.Prefix(t) + ":"}), bus
	}
}

// TestConformance runs the shared tier's conformance suite against a Store
// on one server: a real one, since the suite waits for real expiries, which
// the embedded fallback does not run.
func TestConformance(t *testing.T) {
	srv.NeedReal(t)
	hybridtest.TestRemote(t, openStore(func(t *testing.T) redis.UniversalClient { return srv.Client(t) }))
}

// TestClusterConformance runs the suite against a Store on Redis Cluster,
// which keeps no log.
func TestClusterConformance(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	hybridtest.TestRemote(t, openStore(func(t *testing.T) redis.UniversalClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { c.Close() })
		return c
	}))
}
