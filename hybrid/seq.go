package hybrid

import (
	"context"
	"github.com/hybridcache/hybridcache/tier"

	"github.com/hybridcache/hybridcache/internal/keyslot"
)

// A fill that read a key missing writes its value back only where the key
// still holds nothing (IfAbsent). A Delete leaves a tombstone for that
// write to find; but Redis under maxmemory may evict the tombstone, and
// then the fill would write back a value loaded before the Delete. So
// every Set and Delete also bumps a sequence counter in the shared tier,
// one per Redis Cluster hash slot of the namespace's keys (Write.Seq); a
// fill reads the counters of the keys it found missing, before it loads
// them, and writes back on the condition that the counter is unchanged
// (IfSeq): no Set or Delete of a key in that slot was made since, whatever
// of it the shared tier still holds. A counter found missing (never made,
// or evicted) is made by the write-back itself (IfAbsent with Seq), which
// then relies on the key's tombstone alone.
//
// A write-back refused because another key of the slot was written costs
// that key a miss on other instances, nothing more. The counters cost the
// shared tier one small key per slot written (at most 16384 per
// namespace), and a fill that loads one more read, before its load.

// seqKey returns the shared-tier key (Remote prefix not included) of the
// sequence counter that covers key: in the same hash slot as key, once the
// Remote's prefix is put before both. It returns "" where no such counter
// can be named (a prefix whose braces make the slot of a counter differ
// from key's): then writes go without one, and a fill relies on the
// tombstone alone.
func (c *Cache[V]) seqKey(key string) string {
	slot := keyslot.Of(c.o.info.Prefix + c.prefix + key)
	s := c.prefix + "\x00seq:{" + keyslot.Tag(slot) + "}"
	if keyslot.Of(c.o.info.Prefix+s) != slot {
		return ""
	}
	return s
}

// readSeqs reads the sequence counters of f's keys still to load that
// its read found missing, into f.seqWas, in one call: before their load,
// so that a Set or Delete made after it shows in the counter, and one made
// before it in what the load reads. Nothing is read where the write-back
// cannot follow (the read was skipped or failed, or the write is skipped).
// A counter that cannot be read is taken as missing.
func (c *Cache[V]) readSeqs(ctx context.Context, f *fill[V]) {
	if c.remote == nil || f.e.skip&(SkipRemoteRead|SkipRemoteWrite) != 0 {
		return
	}
	var keys, rkeys []string
	var seen map[string]bool
	for _, i := range f.missIdx {
		key := f.keys[i]
		if f.vals[i].st != readMiss || f.replace[key] != nil {
			continue
		}
		s := c.seqKey(key)
		if s == "" {
			continue
		}
		keys = append(keys, key)
		if len(f.missIdx) > 1 {
			if seen == nil {
				seen = make(map[string]bool, len(f.missIdx))
			}
			if seen[s] {
				continue
			}
			seen[s] = true
		}
		rkeys = append(rkeys, s)
	}
	if len(rkeys) == 0 {
		return
	}
	name := ""
	if len(keys) == 1 {
		name = keys[0]
	}
	vals, err := c.get(ctx, OpGetSeq, name, rkeys)
	if err != nil {
		return
	}
	bySeq := make(map[string][]byte, len(rkeys))
	for j, s := range rkeys {
		if vals[j] != nil {
			bySeq[s] = vals[j]
		}
	}
	for _, key := range keys {
		if b := bySeq[c.seqKey(key)]; b != nil {
			if f.seqWas == nil {
				f.seqWas = make(map[string][]byte, len(keys))
			}
			f.seqWas[key] = b
		}
	}
}

// fillCond returns the write of w's value, on the condition a fill writes
// back under: over the value it read, if the key still holds it; where it
// read nothing, where the key holds nothing and no Set or Delete was made
// in the key's slot since the read (see seqKey).
func (c *Cache[V]) fillCond(w *fillWrite) tier.Write {
	r := tier.Write{Key: c.prefix + w.key, Value: w.b, TTL: w.life, If: tier.IfAbsent}
	switch {
	case w.old != nil:
		r.If, r.Old = tier.IfEqual, w.old
	case w.seq == "":
	case w.seqWas != nil:
		r.If, r.Seq, r.SeqWas = tier.IfSeq, w.seq, w.seqWas
	default:
		r.Seq = w.seq // makes the counter, missing when read
	}
	return r
}
