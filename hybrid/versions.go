package hybrid

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds the two records that keep L1 in step with writes and
// messages: versions, which orders L1 stores against changes (the "no stale
// fill" promise), and echoes, which counts this instance's own announced
// writes whose message has not come back (so a peer's older value is not
// swapped in over ours). Both hash keys into a fixed number of slots: a
// collision costs at most a skipped store or swap, never a stale one.

const (
	versionSlots = 4096
	// echoGrace is how long an own write whose message never came back
	// keeps values carried by peers' messages out.
	echoGrace = 5 * time.Second
)

// slots maps keys to slot numbers.
type slots struct{ seed maphash.Seed }

func newSlots() slots { return slots{seed: maphash.MakeSeed()} }

func (s slots) of(key string) uint32 {
	return uint32(maphash.String(s.seed, key) % versionSlots)
}

// versions counts changes: every change of a key bumps its slot, and Clear
// or a bus loss bumps the generation. A fill takes a token before it reads
// the shared tier and stores its result in L1 only while the token is
// still valid.
type versions struct {
	slots
	gen atomic.Uint64
	// losses counts the generation bumps made for bus losses (see
	// bumpAllLoss), which an own write may outlive (see ownWrite).
	losses atomic.Uint64
	seq    [versionSlots]atomic.Uint64
}

// token is the version of one key's slot, and the generation, at a moment.
type token struct {
	slot     uint32
	gen, seq uint64
}

// token returns key's version now.
func (v *versions) token(key string) token {
	i := v.of(key)
	return token{slot: i, gen: v.gen.Load(), seq: v.seq[i].Load()}
}

// valid reports whether nothing touched t's slot or the generation since t.
func (v *versions) valid(t token) bool {
	return v.gen.Load() == t.gen && v.seq[t.slot].Load() == t.seq
}

// bump marks key as changed. Call it before changing key's L1 entry.
func (v *versions) bump(key string) { v.seq[v.of(key)].Add(1) }

// bumpToken marks key as changed and returns a token that counts that
// change as seen.
func (v *versions) bumpToken(key string) token {
	i := v.of(key)
	return token{slot: i, gen: v.gen.Load(), seq: v.seq[i].Add(1)}
}

// bumpAll marks every key as changed.
func (v *versions) bumpAll() { v.gen.Add(1) }

// bumpAllLoss marks every key as changed because messages may have been
// lost: fills in flight may have read a value whose change was missed.
func (v *versions) bumpAllLoss() {
	v.losses.Add(1)
	v.gen.Add(1)
}

// ownWrite bumps t's slot again after this instance's own write of t's
// key, which began when v.losses was lost, and returns the new token, valid
// if nobody else bumped the slot since t and the generation moved only for
// bus losses. A loss says that others' changes may have
// been missed, not that this write is outdated: what it wrote is the
// newest this instance knows of the key.
func (v *versions) ownWrite(t token, lost uint64) (token, bool) {
	seq := v.seq[t.slot].Add(1)
	gen := v.gen.Load()
	ok := seq == t.seq+1 && gen-t.gen == v.losses.Load()-lost
	return token{slot: t.slot, gen: gen, seq: seq}, ok
}

// bumpMany is bumpToken for each of keys, bumping each slot once: keys of
// one slot share its token.
func (v *versions) bumpMany(keys []string) []token {
	toks := make([]token, len(keys))
	first := make(map[uint32]int, len(keys))
	for i, key := range keys {
		s := v.of(key)
		if j, ok := first[s]; ok {
			toks[i] = toks[j]
			continue
		}
		first[s] = i
		toks[i] = v.bumpToken(key)
	}
	return toks
}

// ownWriteMany is ownWrite for tokens from bumpMany, bumping each slot once
// again: toks[i] becomes the new token of key i, and ok[i] reports whether
// it is valid.
func (v *versions) ownWriteMany(toks []token, lost uint64) (ok []bool) {
	ok = make([]bool, len(toks))
	done := make(map[uint32]int, len(toks))
	for i, t := range toks {
		if j, seen := done[t.slot]; seen {
			toks[i], ok[i] = toks[j], ok[j]
			continue
		}
		done[t.slot] = i
		toks[i], ok[i] = v.ownWrite(t, lost)
	}
	return ok
}

// echoes counts, per slot, this instance's announced writes whose message
// has not come back yet. While one is outstanding, a value carried by a
// peer's message may be older than ours, so it is dropped, not swapped in.
// A count whose message was lost stops mattering after echoGrace.
type echoes struct {
	slots
	s [versionSlots]struct {
		pending atomic.Int64
		since   atomic.Int64 // UnixNano of the latest own write
	}
	mu sync.Mutex
	// last is, per slot, the log position of the newest own message
	// counted back, so that one that arrives twice (on the bus and in a
	// replay) is counted once.
	last [versionSlots]string
}

// sent records an announced write of key about to start.
func (e *echoes) sent(key string) { e.sentSlot(e.of(key)) }

// sentMany is sent for a message that names keys: each slot counts it once.
func (e *echoes) sentMany(keys []string) {
	if len(keys) == 1 {
		e.sent(keys[0])
		return
	}
	for _, s := range e.distinct(keys) {
		e.sentSlot(s)
	}
}

func (e *echoes) sentSlot(i uint32) {
	s := &e.s[i]
	s.since.Store(time.Now().UnixNano())
	s.pending.Add(1)
}

// backMany is back for a message that names keys: each slot counts it once.
func (e *echoes) backMany(keys []string, pos string) {
	if len(keys) == 1 {
		e.back(keys[0], pos)
		return
	}
	for _, s := range e.distinct(keys) {
		e.backSlot(s, pos)
	}
}

// distinct returns the slots of keys, each once.
func (e *echoes) distinct(keys []string) []uint32 {
	out := make([]uint32, 0, len(keys))
	seen := make(map[uint32]bool, len(keys))
	for _, key := range keys {
		if s := e.of(key); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// back records that the message of one of our writes of key came back, at
// the log position pos ("": the write was not logged). A position not after
// the newest counted for key's slot was counted already.
func (e *echoes) back(key, pos string) { e.backSlot(e.of(key), pos) }

// backSlot is back for slot i.
func (e *echoes) backSlot(i uint32, pos string) {
	if pos != "" {
		e.mu.Lock()
		seen := message.ComparePositions(pos, e.last[i]) <= 0
		if !seen {
			e.last[i] = pos
		}
		e.mu.Unlock()
		if seen {
			return
		}
	}
	s := &e.s[i]
	for {
		n := s.pending.Load()
		if n <= 0 || s.pending.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// settled reports whether no write of ours to key awaits its message, so
// a value carried by a peer's message for key may be swapped in.
func (e *echoes) settled(key string) bool {
	s := &e.s[e.of(key)]
	return s.pending.Load() <= 0 || time.Now().UnixNano()-s.since.Load() > int64(echoGrace)
}
