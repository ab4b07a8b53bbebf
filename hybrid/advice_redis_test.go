package hybrid_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
)

// TestNewAdvisesEvictionPolicy: New, on a Redis that evicts any key once
// full (allkeys-lru), warns once of what that costs; on one that never
// evicts (noeviction), it says nothing of eviction.
func TestNewAdvisesEvictionPolicy(t *testing.T) {
	srv.NeedReal(t)
	for _, policy := range []string{"allkeys-lru", "noeviction"} {
		t.Run(policy, func(t *testing.T) {
			s, err := redistest.StartWith("--maxmemory", "4mb", "--maxmemory-policy", policy)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			logger, logs := captureLogger()
			newTestCache[string](t, hybrid.Options{Namespace: redistest.Prefix(t), Remote: l2.New(rdb, l2.Options{}), Logger: logger})
			var lines []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "evict") {
					lines = append(lines, line)
				}
			}
			switch {
			case policy == "noeviction" && len(lines) > 0:
				t.Errorf("New on a Redis that never evicts: got %q, want no advice about eviction", lines)
			case policy == "noeviction":
			case len(lines) != 1 || !strings.Contains(lines[0], "WARN") || !strings.Contains(lines[0], "maxmemory-policy allkeys-lru") || !strings.Contains(lines[0], "one more load"):
				t.Errorf("New on a Redis that evicts any key: got %q, want one warning naming allkeys-lru and what it costs", lines)
			}
		})
	}
}
