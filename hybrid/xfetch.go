package hybrid

import (
	"math"
	mrand "math/rand/v2"
	"time"
)

// This file holds probabilistic early refresh (Options.XFetchBeta): XFetch,
// from Vattani, Chierichetti and Lowenstein, "Optimal Probabilistic Cache
// Stampede Prevention" (VLDB 2015). A hit refreshes its value when
//
//	now - delta * beta * ln(rand()) >= expiry
//
// delta being how long the value took to load. -ln(rand()) is an
// exponential draw, so a hit at r before expiry refreshes with probability
// exp(-r / (beta * delta)): next to nothing while the value is young, more
// as expiry nears, sooner for a value slow to load. A hot key is refreshed
// once, a little before it expires, and its callers never wait for a load.
//
// The draw costs a random number and a logarithm, so only hits within
// xfetchSpan times beta * delta of expiry make it: the entry's due time is
// the start of that window, and hits before it are plain hits. A hit
// earlier than that would refresh with probability below exp(-xfetchSpan).

// xfetchSpan bounds the window of the draw, in units of beta * delta.
const xfetchSpan = 10

// xfetchSlack is how far apart an L1 expiry and the value's logical one may
// be for XFetch to race the first as if it were the second: L1's clock is
// coarse, and a write's two clocks are read a moment apart.
const xfetchSlack = int64(100 * time.Millisecond)

// maxXFetchBeta bounds Options.XFetchBeta and WithXFetchBeta.
const maxXFetchBeta = 10

// scheduleXFetch sets t's XFetch schedule under beta, t having its expiry
// and, in delta, its load time. lexp is the value's logical expiry (0: not
// known): XFetch races it, so an L1 entry whose lifetime LocalTTL cut short
// gets no window (it is read again from the shared tier when it ends, and
// the entry that read makes ends with the value).
func scheduleXFetch(t *timing, beta float64, lexp int64) {
	if t.delta <= 0 || lexp <= 0 {
		return
	}
	scale := beta * float64(t.delta)
	window := int64(xfetchSpan * scale)
	if d := lexp - t.expires; d > window+xfetchSlack || d < -window-xfetchSlack {
		return
	}
	t.scale = max(int64(scale), 1)
	t.due = min(t.due, t.expires-window)
}

// refreshNow reports whether a hit at now on t, due and before its expiry,
// starts a refresh: always, unless XFetch schedules it (then by the draw)
// and no failed or deferred refresh is to be tried again (again).
func refreshNow(t *timing, now int64) bool {
	if t.scale == 0 || t.again {
		return true
	}
	return float64(t.expires-now) <= -math.Log(mrand.Float64())*float64(t.scale)
}

// loadTime is what a load that took d stores of it under e: d when XFetch
// is on (at least a microsecond, the envelope's unit), else 0, so that
// caches without XFetch write envelopes as before.
func loadTime(e *policy, d time.Duration) time.Duration {
	if e.xfetch <= 0 {
		return 0
	}
	return max(d, time.Microsecond)
}

// loadedItem returns it with its load time, took, and its logical lifetime
// from now, ttl, for stamp to schedule XFetch by; it as it is when took is
// 0 or it is an absence.
func loadedItem[V any](it item[V], took, ttl time.Duration) item[V] {
	if took <= 0 || it.absent {
		return it
	}
	t := timing{due: math.MaxInt64, expires: math.MaxInt64}
	if it.t != nil {
		t = *it.t
	}
	t.delta, t.staleAt = int64(took), time.Now().Add(ttl).UnixNano()
	it.t = &t
	return it
}
