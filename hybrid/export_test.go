package hybrid

// DropLocal removes key from this instance's L1 only, so benchmarks can
// measure the L1-miss path again and again.
func (c *Cache[V]) DropLocal(key string) { c.local.Delete(key) }
