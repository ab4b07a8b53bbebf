package hybrid

import (
	"hash/maphash"
	"sync/atomic"
	"time"
)

// fence orders L1 stores against writes and invalidations (the "no stale
// fill" and convergence promises).
//
// Every change of a key bumps its slot; Clear and a bus loss bump the
// generation. A fill takes a token before it reads the shared tier and
// stores its result only if the token is still valid after the store;
// otherwise it drops the key. Keys share slots, so a collision costs at most
// a skipped store, never a stale one.
//
// The slot also counts this instance's own announced writes whose message
// has not come back yet. While one is outstanding, a value carried by
// another instance's message may be older than ours, so it is dropped
// instead of swapped in. A count whose message was lost stops mattering
// after pendingGrace.
type fence struct {
	seed  maphash.Seed
	gen   atomic.Uint64
	slots [fenceSlots]slot
}

type slot struct {
	seq          atomic.Uint64
	pending      atomic.Int64
	pendingSince atomic.Int64 // UnixNano of the latest own write
}

const (
	fenceSlots   = 4096
	pendingGrace = 5 * time.Second
)

type token struct {
	slot     uint32
	gen, seq uint64
}

func newFence() *fence { return &fence{seed: maphash.MakeSeed()} }

func (f *fence) slot(key string) uint32 {
	return uint32(maphash.String(f.seed, key) % fenceSlots)
}

// token records the state of key's slot and the generation now.
func (f *fence) token(key string) token {
	i := f.slot(key)
	return token{slot: i, gen: f.gen.Load(), seq: f.slots[i].seq.Load()}
}

// valid reports whether nothing touched t's slot or the generation since t.
func (f *fence) valid(t token) bool {
	return f.gen.Load() == t.gen && f.slots[t.slot].seq.Load() == t.seq
}

// bump marks key as changed. Call it before changing key's L1 entry.
func (f *fence) bump(key string) { f.slots[f.slot(key)].seq.Add(1) }

// bumpToken marks key as changed and returns a token that counts that
// change as seen.
func (f *fence) bumpToken(key string) token {
	i := f.slot(key)
	return token{slot: i, gen: f.gen.Load(), seq: f.slots[i].seq.Add(1)}
}

// advance bumps t's slot again and returns the new token, valid only if
// nobody else bumped the slot since t.
func (f *fence) advance(t token) (token, bool) {
	seq := f.slots[t.slot].seq.Add(1)
	ok := seq == t.seq+1 && f.gen.Load() == t.gen
	t.seq = seq
	return t, ok
}

// bumpAll marks every key as changed.
func (f *fence) bumpAll() { f.gen.Add(1) }

// ownWrite records an announced write of key about to start.
func (f *fence) ownWrite(key string) {
	s := &f.slots[f.slot(key)]
	s.pendingSince.Store(time.Now().UnixNano())
	s.pending.Add(1)
}

// ownMessage records that the message of one of our writes of key came back.
func (f *fence) ownMessage(key string) {
	s := &f.slots[f.slot(key)]
	for {
		n := s.pending.Load()
		if n <= 0 || s.pending.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// mayReplace reports whether a value carried by another instance's message
// for key may be swapped in: no write of ours to key is still unconfirmed.
func (f *fence) mayReplace(key string) bool {
	s := &f.slots[f.slot(key)]
	return s.pending.Load() <= 0 || time.Now().UnixNano()-s.pendingSince.Load() > int64(pendingGrace)
}
