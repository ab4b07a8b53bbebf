package l2

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file holds what the Store tells its user of Redis's eviction
// policy: the records a hybrid cache keeps in Redis, and what losing each
// to eviction costs (see "Redis eviction policies" in docs/operations.md).

// evictionAdvice returns a line of advice when the Redis behind rdb evicts
// keys once full (maxmemory set, and a maxmemory-policy other than
// noeviction), saying which of the cache's records it may evict and what
// that costs; nil when it does not, and when CONFIG GET is refused or
// fails (a managed Redis may rename or forbid CONFIG), quietly. One round
// trip, bounded by d.
func evictionAdvice(rdb redis.UniversalClient, d time.Duration) []string {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cfg, err := rdb.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		return nil
	}
	policy, max := cfg["maxmemory-policy"], cfg["maxmemory"]
	if max == "" || max == "0" {
		return nil // no limit: nothing is evicted
	}
	const costs = "an evicted value costs a miss and a load; an evicted load lease (Options.LoadLease) one more load of its key"
	const deletes = "an evicted DeleteByTag record costs a miss and a load for each value of the tag written before it was found missing; an evicted Delete tombstone costs nothing (fills and replays are conditional on a counter per slot; see Redis eviction policies in docs/operations.md)"
	switch {
	case strings.HasPrefix(policy, "allkeys-"):
		return []string{fmt.Sprintf("l2: Redis evicts any key once full (maxmemory %s, maxmemory-policy %s): %s; an evicted invalidation log a flush of L1 at the next bus loss; %s; an evicted Clear record a miss and a load for every value written before it was found missing; no record of the cache is protected. Give Redis the memory to run with noeviction, or use a volatile-* policy", max, policy, costs, deletes)}
	case strings.HasPrefix(policy, "volatile-"):
		return []string{fmt.Sprintf("l2: Redis evicts keys with an expiry once full (maxmemory %s, maxmemory-policy %s): %s; %s. The Clear record and the invalidation log have no expiry and are protected", max, policy, costs, deletes)}
	}
	return nil
}
