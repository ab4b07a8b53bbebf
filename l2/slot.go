package l2

import "github.com/hybridcache/hybridcache/internal/keyslot"

// slotCount is the number of hash slots in a Redis Cluster.
const slotCount = keyslot.Count

// slot returns the Redis Cluster hash slot of key (see keyslot.Of).
func slot(key string) uint16 { return keyslot.Of(key) }
