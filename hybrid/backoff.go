package hybrid

import (
	"context"
	"math"
	mrand "math/rand/v2"
	"time"
)

// This file holds when a background refresh (EagerRefresh, XFetchBeta)
// comes due again. The state lives in the L1 entry's timing, so it costs a
// hit nothing, is bounded by L1 and goes with the entry: a refresh that
// starts moves the entry's due time to its expiry (the hits that follow are
// plain hits while it runs); one that fails moves it to a backoff,
// exponential, capped and jittered (Options.RefreshBackoff); one that finds
// another instance's lease moves it to when that lease ends. A new value
// brings a new schedule.

// maxBackoffShift caps the doublings of RefreshBackoff: 32 times at most.
const maxBackoffShift = 5

// maxRefreshBackoff bounds Options.RefreshBackoff.
const maxRefreshBackoff = time.Hour

// startRefresh starts the refresh of keys, whose L1 entries a hit found
// due (held, by index): each entry is claimed first, so that later hits do
// not find it due while the refresh runs, and a key another hit claimed
// first is dropped; then the refresh waits for others to share a batch
// load (RefreshBatch) or starts at once. keys and held are the caller's to
// give: they are reordered.
func (c *Cache[V]) startRefresh(ctx context.Context, keys []string, held []item[V], load loader[V], e policy) {
	n := 0
	for i := range keys {
		if c.reschedule(keys[i], held[i], math.MaxInt64, held[i].t.fails, false, true) {
			keys[n], held[n] = keys[i], held[i]
			n++
		}
	}
	if n == 0 {
		return
	}
	if c.batch != nil {
		c.batch.add(c, keys[:n], held[:n], e)
		return
	}
	c.refreshMany(ctx, keys[:n], held[:n], load, e)
}

// claim is startRefresh's claim again, for the keys[idx] a refresh is
// about to load: its read of the shared tier stored their values in L1
// anew, due as a new value is. Each is due at its expiry, unless the
// refresh fails (backOff) or another instance's lease puts it off.
func (c *Cache[V]) claim(keys []string, held []item[V], idx []int) {
	for _, i := range idx {
		c.reschedule(keys[i], held[i], math.MaxInt64, held[i].t.fails, false, false)
	}
}

// backOff puts off the next refresh of each of keys[idx], whose refresh
// failed: RefreshBackoff, doubled for each failure in a row before, drawn
// between half and all of that.
func (c *Cache[V]) backOff(keys []string, held []item[V], idx []int) {
	now := c.local.Now()
	for _, i := range idx {
		fails := held[i].t.fails
		if fails < math.MaxUint8 {
			fails++
		}
		d := c.o.RefreshBackoff << min(fails-1, maxBackoffShift)
		d = d/2 + mrand.N(d/2+1)
		if c.reschedule(keys[i], held[i], now+int64(d), fails, true, false) {
			c.n.refreshBackoffs.Add(1)
		}
	}
}

// deferRefresh puts off key's refresh until until (L1's clock): another
// instance holds its lease and is refreshing it, and its write will reach
// this one. If none has by then, the hit at until refreshes.
func (c *Cache[V]) deferRefresh(key string, held item[V], until int64) {
	if c.reschedule(key, held, until, held.t.fails, true, false) {
		c.n.refreshesDeferred.Add(1)
	}
}

// reschedule sets when key's L1 entry next comes due (due, at most its
// expiry), how many refreshes of its value failed in a row, and whether
// the hit at due refreshes without XFetch's draw (again), unless the entry
// no longer holds the value held held (a write replaced it), has expired,
// or, with ifDue, is not due (a claim: another hit claimed it first). It
// reports whether it did. The entry keeps its end in L1.
func (c *Cache[V]) reschedule(key string, held item[V], due int64, fails uint8, again, ifDue bool) bool {
	set := false
	c.local.Update(key, func(it item[V]) (item[V], uint32, time.Duration, bool) {
		now := c.local.Now()
		if it.absent || it.t == nil || it.t.written > held.writtenAt() || now >= it.t.expires || it.t.ends <= now || (ifDue && now < it.t.due) {
			return it, 0, 0, false
		}
		t := *it.t // a new one: the old may be shared with another copy of it
		t.due, t.fails, t.again = min(due, t.expires), fails, again
		it.t = &t
		set = true
		return it, weight(key, it, t.size), time.Duration(t.ends - now), true
	})
	return set
}
