package hybrid

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"slices"
	"time"
)

// This file holds the hot keys of an instance and the hot set: their
// record in the shared tier, kept by a recorder goroutine, which a new
// instance warms from (WarmHot, see warm.go).

// HotKey is a key of HotKeys with its estimated reads.
type HotKey struct {
	Key string
	// Reads estimates this instance's recent L1 hits of Key: one hit in 16
	// is sampled into a fixed-size count-min sketch, and the sketch is
	// halved about every million hits of the cache, so this is about the
	// hits since the last halving or two, times 16. It may count more than
	// there were (keys that share counters), never fewer but for hits lost
	// to sampling or halving.
	Reads uint64
}

// HotKeys returns up to n of the keys this instance reads most, most read
// first: an approximate, per-instance, sampled ranking of recent L1 hits
// (see HotKey.Reads). Every entry L1 holds is ranked, in one pass over its
// keys (2-3 ms per 10,000 entries on a 2-core machine), so only keys held in L1
// here are ranked: a key read through to the shared tier on every call
// (WithSkip) is not. A hit allocates nothing for this. n <= 0, and a
// cache whose L1 holds no entries or has had no sampled hit, return nil.
func (c *Cache[V]) HotKeys(n int) []HotKey {
	hot := c.local.HotKeys(n)
	if len(hot) == 0 {
		return nil
	}
	out := make([]HotKey, len(hot))
	for i, h := range hot {
		out[i] = HotKey{Key: h.Key, Reads: h.Hits}
	}
	return out
}

const (
	defaultHotSetSize = 1000
	maxHotSetSize     = 100_000
	// hotSetFormat is the first byte of a hot-set record.
	hotSetFormat = 1
)

// checkHotSet validates Options.HotSetEvery and HotSetSize and fills in
// the size's default.
func (o *Options) checkHotSet() error {
	if o.HotSetEvery < 0 {
		return fmt.Errorf("hybrid: Options.HotSetEvery is negative (%v)", o.HotSetEvery)
	}
	if o.HotSetEvery > 0 && o.Remote == nil {
		return errors.New("hybrid: Options.HotSetEvery records the hot set in the shared tier: it needs a Remote")
	}
	if o.HotSetSize < 0 || o.HotSetSize > maxHotSetSize {
		return fmt.Errorf("hybrid: Options.HotSetSize (%d) is outside [0, %d]", o.HotSetSize, maxHotSetSize)
	}
	if o.HotSetSize == 0 {
		o.HotSetSize = defaultHotSetSize
	}
	return nil
}

// hotSetKey is the shared-tier key of the namespace's hot set: reserved
// (a NUL after the prefix), so no user key names it.
func (c *Cache[V]) hotSetKey() string { return c.prefix + "\x00hot" }

// startHotSet starts the recorder when Options.HotSetEvery asks for one
// and there is a shared tier. Close stops it and waits for it.
func (c *Cache[V]) startHotSet() {
	if c.o.HotSetEvery <= 0 || c.remote == nil {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(c.o.HotSetEvery)
		defer t.Stop()
		for {
			select {
			case <-c.stop.Done():
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(c.stop, c.o.HotSetEvery)
				if err := c.recordHot(ctx); err != nil && c.stop.Err() == nil {
					c.log.log(logL2, "hybrid: hot set not recorded", "namespace", c.o.Namespace, "err", err)
				}
				cancel()
			}
		}
	}()
}

// recordHot merges this instance's hot keys (HotKeys of
// Options.HotSetSize) into the namespace's hot set in the shared tier:
// the reads recorded there are halved, this instance's are added, and the
// Options.HotSetSize keys with the most are kept. The record is one value
// under a reserved key, written only if no other instance wrote it since
// it was read (else this round is skipped, and the other's kept), with a
// lifetime of ten rounds (at least an hour). The recorder
// (Options.HotSetEvery) calls it.
func (c *Cache[V]) recordHot(ctx context.Context) error {
	if err := c.checkBatch(ctx); err != nil {
		return err
	}
	if c.remote == nil {
		return errors.New("hybrid: record hot set: no Remote")
	}
	size := c.o.HotSetSize
	if size == 0 {
		size = defaultHotSetSize
	}
	hot := c.HotKeys(size)
	if len(hot) == 0 {
		return nil
	}
	key := c.hotSetKey()
	old, found, err := c.readRecord(ctx, OpHotSet, "", key)
	if err != nil {
		return fmt.Errorf("hybrid: record hot set: %w", err)
	}
	reads := make(map[string]uint64, len(hot)+size)
	if found {
		prev, err := decodeHotSet(old)
		if err != nil {
			c.log.log(logDecode, "hybrid: hot set record does not decode; replaced", "namespace", c.o.Namespace, "err", err)
		}
		for _, h := range prev {
			reads[h.Key] = h.Reads / 2
		}
	}
	for _, h := range hot {
		reads[h.Key] += h.Reads
	}
	merged := make([]HotKey, 0, len(reads))
	for k, n := range reads {
		merged = append(merged, HotKey{Key: k, Reads: n})
	}
	slices.SortFunc(merged, func(a, b HotKey) int {
		return cmp.Or(cmp.Compare(b.Reads, a.Reads), cmp.Compare(a.Key, b.Key))
	})
	merged = merged[:min(len(merged), size)]
	w := tier.Write{Key: key, Value: encodeHotSet(merged), TTL: max(10*c.o.HotSetEvery, time.Hour), If: tier.IfAbsent}
	if found {
		w.If, w.Old = tier.IfEqual, old
	}
	if _, err := c.write(ctx, OpHotSet, "", []tier.Write{w}); err != nil {
		return fmt.Errorf("hybrid: record hot set: %w", err)
	}
	return nil
}

// hotSet returns the namespace's hot set as recorded in the shared tier
// (see recordHot), most read first; nil if none is recorded.
func (c *Cache[V]) hotSet(ctx context.Context) ([]HotKey, error) {
	if err := c.checkBatch(ctx); err != nil {
		return nil, err
	}
	if c.remote == nil {
		return nil, errors.New("hybrid: WarmHot: no Remote")
	}
	b, found, err := c.readRecord(ctx, OpHotSet, "", c.hotSetKey())
	if err != nil || !found {
		return nil, err
	}
	hot, err := decodeHotSet(b)
	if err != nil {
		c.n.decodeErrors.Add(1)
		return nil, fmt.Errorf("hybrid: WarmHot: hot set: %w", err)
	}
	return hot, nil
}

// WarmHot warms L1 (see Warm) with the keys of the namespace's hot set,
// and returns how many it stored. The hot set is what the instances of the
// namespace record in the shared tier every Options.HotSetEvery: the keys
// each reads most (see HotKeys), merged, most read first. A service calls
// WarmHot at start, before it reports ready; without a recorded hot set it
// stores nothing.
func (c *Cache[V]) WarmHot(ctx context.Context) (int, error) {
	hot, err := c.hotSet(ctx)
	if err != nil || len(hot) == 0 {
		return 0, err
	}
	keys := make([]string, len(hot))
	for i, h := range hot {
		keys[i] = h.Key
	}
	return c.Warm(ctx, keys)
}

// encodeHotSet writes hot as the format byte, then, per key, its reads
// and its length as uvarints and its bytes.
func encodeHotSet(hot []HotKey) []byte {
	n := 1
	for _, h := range hot {
		n += 2*binary.MaxVarintLen64 + len(h.Key)
	}
	b := make([]byte, 1, n)
	b[0] = hotSetFormat
	for _, h := range hot {
		b = binary.AppendUvarint(b, h.Reads)
		b = binary.AppendUvarint(b, uint64(len(h.Key)))
		b = append(b, h.Key...)
	}
	return b
}

var errHotSetFormat = errors.New("hot set record: unknown format or truncated")

func decodeHotSet(b []byte) ([]HotKey, error) {
	if len(b) == 0 || b[0] != hotSetFormat {
		return nil, errHotSetFormat
	}
	b = b[1:]
	var hot []HotKey
	for len(b) > 0 {
		reads, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errHotSetFormat
		}
		b = b[n:]
		l, n := binary.Uvarint(b)
		if n <= 0 || l == 0 || l > uint64(len(b)-n) {
			return nil, errHotSetFormat
		}
		b = b[n:]
		hot = append(hot, HotKey{Key: string(b[:l]), Reads: reads})
		b = b[l:]
	}
	return hot, nil
}
