package l1

import (
	"cmp"
	"hash/maphash"
	"slices"
	"sync/atomic"
)

// Hot keys: which keys this cache's readers ask for most. Otter ranks its
// entries by how likely W-TinyLFU is to keep them (Hottest), which mixes
// recency, admission and frequency; it is not a count of reads, and its
// frequency sketch is not exposed. So entries are ranked by a small
// count-min sketch of sampled hits, kept here because Get counts its hits
// anyway: one hit in hotSample (about; see Get) hashes its key and adds one
// to a counter in each of hotDepth rows. Nothing is allocated on a hit;
// the sketch is a fixed hotDepth*hotWidth*4 bytes per cache.

const (
	// hotSample is the share of hits sampled: one in hotSample.
	hotSample = 16
	// hotSampleShift picks a hit as sampled when its stripe count, mixed,
	// has its top bits all zero: 64 - log2(hotSample).
	hotSampleShift = 60
	hotDepth       = 4
	hotWidth       = 4096 // a power of two; 12 bits of the hash per row
	hotWidthBits   = 12
	// hotAgeEvery is how many samples pass between two halvings of every
	// counter, so the ranking follows recent reads: about 16 samples per
	// counter, a million hits.
	hotAgeEvery = 16 * hotWidth
)

// hotSketch is a count-min sketch of sampled hits, with periodic halving.
type hotSketch struct {
	seed  maphash.Seed
	rows  [hotDepth][hotWidth]atomic.Uint32
	added atomic.Uint64
}

func newHotSketch() *hotSketch { return &hotSketch{seed: maphash.MakeSeed()} }

// sampled reports whether the hit whose stripe count is n is sampled: n
// times the golden ratio (a Weyl sequence) falls in the first hotSample-th
// of its range. Unlike n%hotSample, a loop over hotSample keys does not
// always sample the same one.
func sampled(n uint64) bool { return (n*0x9e3779b97f4a7c15)>>hotSampleShift == 0 }

// add counts one sampled hit of key, and halves every counter once every
// hotAgeEvery samples (on the goroutine of the sample that reaches it: a
// pass over the counters, tens of microseconds, once per about a million
// hits).
func (s *hotSketch) add(key string) {
	h := maphash.String(s.seed, key)
	for i := range hotDepth {
		s.rows[i][(h>>(i*hotWidthBits))&(hotWidth-1)].Add(1)
	}
	if s.added.Add(1)%hotAgeEvery == 0 {
		s.age()
	}
}

// age halves every counter. A hit counted during the pass may be lost:
// the sketch is an estimate.
func (s *hotSketch) age() {
	for i := range s.rows {
		for j := range s.rows[i] {
			if v := s.rows[i][j].Load(); v > 0 {
				s.rows[i][j].Store(v >> 1)
			}
		}
	}
}

// estimate is the least counter of key: its sampled hits, or more (a
// count-min sketch never counts less, but for hits lost to halving).
func (s *hotSketch) estimate(key string) uint64 {
	h := maphash.String(s.seed, key)
	m := uint32(1<<32 - 1)
	for i := range hotDepth {
		m = min(m, s.rows[i][(h>>(i*hotWidthBits))&(hotWidth-1)].Load())
	}
	return uint64(m)
}

// Hot is a key and an estimate of its recent hits (see HotKeys).
type Hot struct {
	Key  string
	Hits uint64
}

// HotKeys returns up to n keys, most hit first, with an estimate of their
// hits: sampled hits (one in 16) times 16, halved about every million
// hits of the cache, so recent hits count most. It ranks every entry: a
// pass over the keys, without otter's eviction lock, keeping the best n
// in a heap. Keys with no sampled hit are left out. n <= 0 returns nil.
//
// Otter's retention order (Hottest) was tried as the source of candidates
// and measured: on a Zipf (s=1.1) read pattern over 10,000 keys, the first
// 256 entries in that order held 0 to 6 of the 10 most-read keys, so it is
// not used (bench/RESULTS.md).
func (c *Cache[V]) HotKeys(n int) []Hot {
	if n <= 0 {
		return nil
	}
	var top hotHeap
	for key := range c.c.Keys() {
		est := c.hot.estimate(key)
		if est == 0 {
			continue
		}
		h := Hot{Key: key, Hits: est * hotSample}
		switch {
		case len(top) < n:
			top.push(h)
		case h.Hits > top[0].Hits:
			top[0] = h
			top.down(0)
		}
	}
	if len(top) == 0 {
		return nil
	}
	slices.SortFunc(top, func(a, b Hot) int { return cmp.Or(cmp.Compare(b.Hits, a.Hits), cmp.Compare(a.Key, b.Key)) })
	return top
}

// hotHeap is a min-heap of Hot by Hits: the n best seen so far, the least
// at the root.
type hotHeap []Hot

func (h *hotHeap) push(x Hot) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].Hits <= s[i].Hits {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h hotHeap) down(i int) {
	for {
		l, m := 2*i+1, i
		if l < len(h) && h[l].Hits < h[m].Hits {
			m = l
		}
		if r := l + 1; r < len(h) && h[r].Hits < h[m].Hits {
			m = r
		}
		if m == i {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
