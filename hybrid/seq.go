package hybrid

import "github.com/hybridcache/hybridcache/internal/keyslot"

// A fill that read a key missing writes its value back only where the key
// still holds nothing (IfAbsent). A Delete leaves a tombstone for that
// write to find; but Redis under maxmemory may evict the tombstone, and
// then the fill would write back a value loaded before the Delete. So
// every Set and Delete also bumps a sequence counter in the shared tier,
// one per Redis Cluster hash slot of the namespace's keys (Write.Seq), and
// a fill reads the counter of each key with the key itself, in the same
// call, and writes back on the condition that the counter is unchanged
// (IfSeq): no Set or Delete of a key in that slot was made since its read,
// whatever of it the shared tier still holds. A counter found missing
// (never made, or evicted) is made by the write-back itself (IfAbsent with
// Seq), which then relies on the key's tombstone as before.
//
// A write-back refused because another key of the slot was written costs
// that key a miss on other instances, nothing more. The counters cost the
// shared tier one small key per slot written (at most 16384 per
// namespace), and a fill's read one more key per slot it reads.

// seqKey returns the shared-tier key (Remote prefix not included) of the
// sequence counter that covers key: in the same hash slot as key, once the
// Remote's prefix is put before both. It returns "" where no such counter
// can be named (a prefix whose braces make the slot of a counter differ
// from key's): then writes go without one, as before counters.
func (c *Cache[V]) seqKey(key string) string {
	slot := keyslot.Of(c.o.info.Prefix + c.prefix + key)
	s := c.prefix + "\x00seq:{" + keyslot.Tag(slot) + "}"
	if keyslot.Of(c.o.info.Prefix+s) != slot {
		return ""
	}
	return s
}

// withSeqs returns rkeys (keys with the cache's prefix) followed by the
// counter keys (see seqKey) of keys, each once, and, by key, the index of
// its counter in the result (-1: none).
func (c *Cache[V]) withSeqs(keys, rkeys []string) (all []string, at []int) {
	all = append(make([]string, 0, 2*len(keys)), rkeys...)
	at = make([]int, len(keys))
	var seen map[string]int
	if len(keys) > 1 {
		seen = make(map[string]int, len(keys))
	}
	for i, key := range keys {
		s := c.seqKey(key)
		if s == "" {
			at[i] = -1
			continue
		}
		if j, ok := seen[s]; ok {
			at[i] = j
			continue
		}
		at[i] = len(all)
		all = append(all, s)
		if seen != nil {
			seen[s] = at[i]
		}
	}
	return all, at
}

// fillCond returns the write of w's value, on the condition a fill writes
// back under: over the value it read, if the key still holds it; where it
// read nothing, where the key holds nothing and no Set or Delete was made
// in the key's slot since the read (see seqKey).
func (c *Cache[V]) fillCond(w *fillWrite) Write {
	r := Write{Key: c.prefix + w.key, Value: w.b, TTL: w.life, If: IfAbsent}
	switch {
	case w.old != nil:
		r.If, r.Old = IfEqual, w.old
	case w.seq == "":
	case w.seqWas != nil:
		r.If, r.Seq, r.SeqWas = IfSeq, w.seq, w.seqWas
	default:
		r.Seq = w.seq // makes the counter, missing when read
	}
	return r
}
