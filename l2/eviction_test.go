package l2_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
)

// evictionAdvice returns the lines of a Store's Info().Advice about
// eviction, for a Store on a redis-server of its own started with args.
func evictionAdvice(t *testing.T, args ...string) []string {
	t.Helper()
	s, err := redistest.StartWith(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	var out []string
	for _, line := range l2.New(rdb, l2.Options{}).Info().Advice {
		if strings.Contains(line, "evict") {
			out = append(out, line)
		}
	}
	return out
}

// TestInfoAdvisesEvictionPolicy: Info().Advice reads Redis's
// maxmemory-policy and says what an evicting policy costs, and which of
// the cache's records it protects; a Redis that does not evict (noeviction,
// or no maxmemory) gets no such line, and neither does one that refuses
// CONFIG, quietly.
func TestInfoAdvisesEvictionPolicy(t *testing.T) {
	if !redistest.RequireReal() {
		srv.NeedReal(t)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string // in the one line of advice; none: no line
	}{
		{"allkeys-lru", []string{"--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"},
			[]string{"allkeys-lru", "evicts any key", "one more load", "flush of L1", "Clear record", "no record of the cache is protected"}},
		{"volatile-lru", []string{"--maxmemory", "4mb", "--maxmemory-policy", "volatile-lru"},
			[]string{"volatile-lru", "keys with an expiry", "one more load", "tombstone", "The Clear record and the invalidation log have no expiry and are protected"}},
		{"noeviction", []string{"--maxmemory", "4mb", "--maxmemory-policy", "noeviction"}, nil},
		{"no maxmemory", []string{"--maxmemory-policy", "allkeys-lru"}, nil},
		{"CONFIG refused", []string{"--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", ""}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := evictionAdvice(t, tc.args...)
			if tc.want == nil {
				if len(got) > 0 {
					t.Fatalf("advice: got %q, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("advice: got %q, want one line about eviction", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("advice %q: does not say %q", got[0], w)
				}
			}
		})
	}
}
