package hybrid

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

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
// evicted, or lost with a Redis restarted empty) is made by the fill that
// found it so (see readSeqs); one that lost it again by its write-back
// refuses that write-back. Only where a counter could be neither read nor
// made does the write-back make it (IfAbsent with Seq), relying on the
// key's tombstone alone.
//
// A write-back refused because another key of the slot was written costs
// that key a miss on other instances, nothing more. The counters cost the
// shared tier one small key per slot written (at most 16384 per
// namespace), a fill that loads one more read, before its load, and the
// first such fill of a slot whose counter is missing one write more.

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
// before it in what the load reads. A counter found missing (never made,
// evicted, or lost with a Redis that restarted empty) is made here, with a
// value it never held (see newSeq), so that the write-back is conditional
// on it too: were it left missing, the write-back would rely on the key's
// tombstone alone, which Redis may lose with the counter while the load
// runs. Nothing is read where the write-back cannot follow (the read was
// skipped or failed, or the write is skipped). A counter that cannot be
// read or made is taken as missing.
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
	var missing []string
	for j, s := range rkeys {
		if vals[j] != nil {
			bySeq[s] = vals[j]
		} else {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		c.makeSeqs(ctx, name, missing, bySeq)
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

// makeSeqs makes the missing sequence counters rkeys, each with a value
// it never held, where they are still missing, and puts in bySeq the value
// each holds then: the one made here, or, for a counter another instance
// made meanwhile, the one read again. Counters it cannot make or read are
// left out.
func (c *Cache[V]) makeSeqs(ctx context.Context, name string, rkeys []string, bySeq map[string][]byte) {
	ws := make([]tier.Write, len(rkeys))
	for j, s := range rkeys {
		ws[j] = tier.Write{Key: s, Value: newSeq(), If: tier.IfAbsent}
	}
	made, err := c.writeFeed(ctx, OpGetSeq, name, ws, tier.Feed{})
	if err != nil {
		return
	}
	var again []string
	for j, s := range rkeys {
		if made[j] {
			bySeq[s] = ws[j].Value
		} else {
			again = append(again, s)
		}
	}
	if len(again) == 0 {
		return
	}
	vals, err := c.get(ctx, OpGetSeq, name, again)
	if err != nil {
		return
	}
	for j, s := range again {
		if vals[j] != nil {
			bySeq[s] = vals[j]
		}
	}
}

// newSeq returns a value for a sequence counter made anew that it never
// held before: this clock in microseconds, times 1000, plus 1 to 999 at
// random. A write that bumps a missing counter makes it the server's clock
// in microseconds times 1000 (see Write.Seq), and each bump adds one, so
// neither repeats a value a fill read before the counter was lost, short
// of a thousand bumps in a microsecond or clocks set back.
func newSeq() []byte {
	return strconv.AppendInt(nil, time.Now().UnixMicro()*1000+1+rand.Int64N(999), 10)
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
		r.Seq = w.seq // makes the counter, which could not be read or made
	}
	return r
}
