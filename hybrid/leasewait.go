package hybrid

import (
	"context"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"strings"
	"time"
)

// This file holds the lease step of a fill (Options.LoadLease): take the
// leases no one holds and load those keys; wait for the holders of the
// others, and take their values, or their leases once they end.

// leaseRun is the lease step of one fill of keys (one key, or a batch's
// misses), toks their tokens from before the fill's read. Each key ends in
// one of two ways: answer(i, it, err), with what another instance's load
// gave (a value, stored in L1 if toks[i] is still valid, or an error); or
// load(idx, h), which loads keys[idx] and stores them, h being this fill's
// lease on some of them (nil: none), to release once stored.
type leaseRun[V any] struct {
	c      *Cache[V]
	keys   []string
	toks   []token
	e      *policy
	answer func(i int, it item[V], err error)
	load   func(idx []int, h *heldLease)

	w        *leaseWait
	deadline time.Time         // LeaseWait from the start: then the rest is loaded here
	pending  []int             // the keys not ended yet
	takeNow  []int             // keys to take a lease on in the next round
	alone    []int             // keys to load without a lease in the next round
	retry    map[int]time.Time // when a waited lease ends
	waited   map[int]bool      // keys found held at least once
	holder   []string          // the token of each waited lease's holder
}

// leased runs the lease step of a fill (see leaseRun). A key is loaded
// under a lease when this fill takes it, at once or after the holder's
// lease ended; without one when the shared tier cannot be reached for it,
// or after Options.LeaseWait. alone are keys to load without a lease from
// the start. When ctx ends, leased returns the keys not yet ended, for the
// caller to end.
func (c *Cache[V]) leased(ctx context.Context, keys []string, toks []token, alone []int, e *policy,
	answer func(i int, it item[V], err error), load func(idx []int, h *heldLease)) (left []int) {
	r := &leaseRun[V]{
		c: c, keys: keys, toks: toks, e: e, answer: answer, load: load,
		deadline: time.Now().Add(c.o.LeaseWait),
		alone:    alone,
		retry:    make(map[int]time.Time),
		waited:   make(map[int]bool),
		holder:   make([]string, len(keys)),
	}
	r.w = c.leases.watch(keys)
	defer c.leases.unwatch(r.w, keys)
	r.pending = without(all(len(keys)), alone)
	r.takeNow = r.pending
	for {
		r.takeAndLoad(ctx)
		if len(r.pending) == 0 {
			return nil
		}
		if ctx.Err() != nil || !r.sleep(ctx) {
			return r.pending
		}
		read, unsure, news := r.sort()
		r.check(ctx, unsure, news)
		if len(read) > 0 && !r.readChanged(ctx, read) {
			return append(r.pending, read...)
		}
		r.pending = append(append(r.pending, r.takeNow...), r.alone...)
		if !time.Now().Before(r.deadline) {
			// Waited long enough: load the rest here.
			c.n.leasesTimedOut.Add(uint64(len(r.pending) - len(r.alone)))
			r.alone, r.takeNow = r.pending, nil
		}
	}
}

// takeAndLoad takes the leases of takeNow and loads the keys it took, with
// those to load alone. The keys it took whose value another instance
// stored meanwhile are answered instead (see recheck).
func (r *leaseRun[V]) takeAndLoad(ctx context.Context) {
	if len(r.takeNow) == 0 && len(r.alone) == 0 {
		return
	}
	mine, h, found := r.take(ctx, r.takeNow)
	if h == nil {
		// The leases could not be asked for: load them alone.
		r.alone = append(r.alone, mine...)
		mine = nil
	} else if len(mine) > 0 {
		var answered []int
		mine, answered = r.recheck(ctx, mine, h, found)
		r.pending = without(r.pending, answered)
		if len(h.keys) > 0 {
			r.c.keepAlive(h, r.e.lease)
		}
	}
	r.pending = without(without(r.pending, mine), r.alone)
	if len(mine)+len(r.alone) > 0 {
		r.load(append(mine, r.alone...), h)
	}
	r.takeNow, r.alone = nil, nil
}

// sleep waits for news of the pending keys, for the first waited lease to
// end, or for the deadline. It reports false if ctx ended first.
func (r *leaseRun[V]) sleep(ctx context.Context) bool {
	next := r.deadline
	for _, i := range r.pending {
		if t, ok := r.retry[i]; ok && t.Before(next) {
			next = t
		}
	}
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	select {
	case <-r.w.signal:
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return true
}

// sort goes through the news heard since the last look, and ends or moves
// each pending key: answered with a holder's value or error; to alone
// (its holder cannot store it); to takeNow (its holder's lease ended); to
// read (something changed it); to unsure (a holder's failure that may be
// forged, see check); or kept pending.
func (r *leaseRun[V]) sort() (read, unsure []int, unsureNews []leaseNews) {
	news, all := r.w.take()
	now := time.Now()
	var still []int
	for _, i := range r.pending {
		n, heard := news[r.keys[i]]
		if heard && n.holder != r.holder[i] {
			// Not from the holder this fill found (an earlier lease's
			// news, replayed, or a change of another kind): a reason
			// to read the key, no more.
			n = leaseNews{}
		}
		switch {
		case heard && (n.failed != nil || n.alone) && !n.sure:
			unsure, unsureNews = append(unsure, i), append(unsureNews, n)
		case heard && n.failed != nil:
			r.c.n.leasesAnswered.Add(1)
			r.answer(i, item[V]{}, n.failed)
		case heard && n.alone:
			r.alone = append(r.alone, i) // nothing to wait for: the holder cannot store it
		case heard && n.value != nil:
			if it, ok := r.c.takeFilled(r.keys[i], n.value, r.toks[i], r.e); ok {
				r.c.n.leasesAnswered.Add(1)
				r.answer(i, it, nil)
			} else {
				read = append(read, i)
			}
		case heard || all:
			read = append(read, i)
		case !now.Before(r.retry[i]):
			r.takeNow = append(r.takeNow, i) // the holder's lease ended: take it over
		default:
			still = append(still, i)
		}
	}
	r.pending = still
	return read, unsure, unsureNews
}

// check settles the unsure keys, given their news: a holder releases its
// lease before it sends its news, so while it still holds it, the news is
// forged.
func (r *leaseRun[V]) check(ctx context.Context, unsure []int, news []leaseNews) {
	if len(unsure) == 0 {
		return
	}
	held := r.c.leasesHeld(ctx, r.keys, unsure, r.holder)
	for j, i := range unsure {
		n := news[j]
		switch {
		case held[j]:
			r.pending = append(r.pending, i)
		case n.failed != nil:
			r.c.n.leasesAnswered.Add(1)
			r.answer(i, item[V]{}, n.failed)
		default:
			r.alone = append(r.alone, i)
		}
	}
}

// readChanged reads keys[idx], which may have been stored meanwhile, from
// the shared tier, and answers those it finds; the others go to takeNow,
// or to alone if the shared tier failed. It reports false if ctx ended
// first.
func (r *leaseRun[V]) readChanged(ctx context.Context, idx []int) bool {
	ask := pick(r.keys, idx)
	res := make([]found[V], len(ask))
	_, cut := r.c.readRemoteMany(ctx, ask, nil, r.c.tokens(ask), res, r.e)
	if cut {
		return false
	}
	for j, i := range idx {
		switch res[j].st {
		case readHit:
			r.c.n.leasesAnswered.Add(1)
			r.answer(i, res[j].it, nil)
		case readDown:
			r.alone = append(r.alone, i)
		default:
			r.takeNow = append(r.takeNow, i)
		}
	}
	return true
}

// take takes leases on keys[idx] for this fill. It returns those it took
// and the lease on them; h is nil when the shared tier could not be asked
// (then mine is idx: to load alone). For the others, retry gets when their
// holder's lease ends, and holder their holder's token. What the keys it
// took held once taken is in found, by index, for recheck.
func (r *leaseRun[V]) take(ctx context.Context, idx []int) (mine []int, h *heldLease, found map[int]taken) {
	c, keys, e, retry, waited, holder := r.c, r.keys, r.e, r.retry, r.waited, r.holder
	if len(idx) == 0 {
		return nil, &heldLease{life: e.lease}, nil
	}
	tok := c.leaseToken()
	ask := pick(keys, idx)
	toks := c.tokens(ask) // before the read that comes with the take
	var got []tier.Lease
	err := c.call(ctx, OpLease, leaseName(ask), func(ctx context.Context) (err error) {
		got, err = c.remote.TakeLeases(ctx, c.leaseKeys(ask), c.prefixed(ask), tok, e.lease)
		if err == nil && len(got) != len(ask) {
			err = fmt.Errorf("hybrid: Remote.TakeLeases returned %d results for %d keys", len(got), len(ask))
		}
		return err
	})
	if err != nil {
		c.n.leasesSkipped.Add(uint64(len(idx)))
		return idx, nil, nil
	}
	now := time.Now()
	var held []string
	for j, i := range idx {
		if got[j].Taken {
			mine = append(mine, i)
			held = append(held, keys[i])
			c.n.leasesTaken.Add(1)
			if waited[i] {
				c.n.leasesTakenOver.Add(1)
			}
			if got[j].Value != nil {
				if found == nil {
					found = make(map[int]taken)
				}
				found[i] = taken{b: got[j].Value, tok: toks[j]}
			}
			continue
		}
		if !waited[i] {
			waited[i] = true
			c.n.leasesWaited.Add(1)
		}
		retry[i] = now.Add(max(got[j].Left, time.Millisecond) + leaseSlack)
		holder[i] = got[j].Holder
	}
	return mine, &heldLease{keys: held, token: tok, life: e.lease}, found
}

// taken is what a key held right after this fill took its lease: the
// stored bytes, and the key's token from before that read.
type taken struct {
	b   []byte
	tok token
}

// recheck looks at what the keys[mine] this fill has just taken leases on
// (h) held once taken (found): another instance may have stored one
// between this fill's first read and its lease (its lease released in
// between). Those holding a live value are answered and their leases
// released, announced without a value, so that whoever waits for them
// reads them too; h keeps the rest, which are returned.
func (r *leaseRun[V]) recheck(ctx context.Context, mine []int, h *heldLease, found map[int]taken) (rest, answered []int) {
	c, keys, e, answer := r.c, r.keys, r.e, r.answer
	if len(found) == 0 {
		return mine, nil
	}
	var filled []string
	for _, i := range mine {
		f, ok := found[i]
		var it item[V]
		if ok && c.take(ctx, nil, &it, keys[i], f.b, f.tok, e, time.Now()) == readHit {
			answered = append(answered, i)
			filled = append(filled, keys[i])
			answer(i, it, nil)
		} else {
			rest = append(rest, i)
		}
	}
	if len(filled) > 0 {
		h.keys = pick(keys, rest)
		c.releaseLeases(ctx, h.part(filled), make([][]byte, len(filled)), nil)
	}
	return rest, answered
}

// leasesHeld reports, for each keys[i] of idx, whether its lease is still
// held under holder[i], as read from the shared tier in one call. A read
// that fails reports none held.
func (c *Cache[V]) leasesHeld(ctx context.Context, keys []string, idx []int, holder []string) []bool {
	ask := pick(keys, idx)
	vals, err := c.get(ctx, OpLeaseCheck, leaseName(ask), c.leaseKeys(ask))
	held := make([]bool, len(idx))
	if err != nil {
		return held
	}
	for j, i := range idx {
		held[j] = vals[j] != nil && strings.TrimSuffix(string(vals[j]), "*") == holder[i]
	}
	return held
}

// leaseName names the keys of a lease call in spans and errors.
func leaseName(keys []string) string {
	if len(keys) == 1 {
		return keys[0]
	}
	return ""
}

// takeFilled decodes b, the value a lease holder stored under key and
// announced, and stores it in L1 if tok is still valid. It reports false
// if b does not decode or is not live, and the key is to be read instead.
func (c *Cache[V]) takeFilled(key string, b []byte, tok token, e *policy) (item[V], bool) {
	e = e.of(key)
	var it item[V]
	ttl, written, err := c.decodeInto(&it, b, e.timed())
	if err != nil {
		c.n.decodeErrors.Add(1)
		return item[V]{}, false
	}
	if ttl <= 0 || c.tagKnownDeleted(it.tags(), written) {
		return item[V]{}, false
	}
	c.storeLocal(nil, key, it, c.size(b), min(ttl, e.localTTL), tok, e)
	return it, true
}

// without returns s without the elements of drop.
func without(s, drop []int) []int {
	if len(drop) == 0 {
		return s
	}
	gone := make(map[int]bool, len(drop))
	for _, i := range drop {
		gone[i] = true
	}
	out := s[:0:0]
	for _, i := range s {
		if !gone[i] {
			out = append(out, i)
		}
	}
	return out
}
