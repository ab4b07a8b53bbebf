package hybrid

import (
	"context"
	"github.com/hybridcache/hybridcache/tier"
)

// DropLocal removes key from this instance's L1 only, so benchmarks can
// measure the L1-miss path again and again.
func (c *Cache[V]) DropLocal(key string) { c.local.Delete(key) }

// LocalNow is the L1 clock (see l1.Cache.Now), so benchmarks can wait for
// an L1 entry to expire.
func (c *Cache[V]) LocalNow() int64 { return c.local.Now() }

// VerifyRounds runs n rounds of the verifier (Options.VerifyRate) at once,
// of up to 32 keys each, on this goroutine and without pacing, as its
// goroutine would, and returns how many entries they sampled; benchmarks
// measure a round's cost with it.
func (c *Cache[V]) VerifyRounds(ctx context.Context, n int) int {
	c.ver.heads, _ = c.remote.(tier.HeadReader)
	w := c.newVerifyWalk()
	defer w.close()
	r := newVerifyRound[V](verifyBatch)
	sampled := 0
	for range n {
		w.take(r, c.prefix, verifyBatch)
		if len(r.keys) > 0 {
			c.verifyRound(ctx, r)
		}
		sampled += len(r.keys)
	}
	return sampled
}

// RecordHotSet records the hot set at once, as the recorder
// (Options.HotSetEvery) does on its tick, so tests need not wait for it.
func (c *Cache[V]) RecordHotSet(ctx context.Context) error { return c.recordHot(ctx) }

// HotSetRecord returns the namespace's hot set as recorded in the shared
// tier, as WarmHot reads it.
func (c *Cache[V]) HotSetRecord(ctx context.Context) ([]HotKey, error) { return c.hotSet(ctx) }

// LeaseKey is leaseKey, for tests that look at a lease in Redis.
func (c *Cache[V]) LeaseKey(key string) string { return c.leaseKey(key) }
