package hybrid

// DropLocal removes key from this instance's L1 only, so benchmarks can
// measure the L1-miss path again and again.
func (c *Cache[V]) DropLocal(key string) { c.local.Delete(key) }

// LocalNow is the L1 clock (see l1.Cache.Now), so benchmarks can wait for
// an L1 entry to expire.
func (c *Cache[V]) LocalNow() int64 { return c.local.Now() }
