package hybrid

import (
	"context"
	"fmt"
	"time"

	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/flight"
	"github.com/hybridcache/hybridcache/tier"
)

// This file holds the lease step of a background refresh (Options.LoadLease
// with EagerRefresh or XFetchBeta): before it loads, a refresh takes the
// keys' load leases, so that of the instances whose copies come due at
// about the same time one loads; the others serve their copies until its
// write reaches them. Unlike a cold fill, no caller waits for a refresh, so
// a refresh that finds a lease held does not wait for it either.

// refreshLeases takes the leases of keys[todo], which a refresh (of keys,
// held, calls) is about to load, and returns those it is to load and its
// lease on them (nil: the shared tier could not be asked; load them all
// without). A key whose lease another instance holds is left to it: its
// call ends with the value held, and its refresh is put off until the lease
// ends. A key whose value another instance stored since the refresh's read
// (it came with the lease) is answered with it, its lease released.
func (c *Cache[V]) refreshLeases(ctx context.Context, keys []string, held []item[V], calls []*flight.Call[V], todo []int, e *policy) ([]int, *heldLease) {
	ask := pick(keys, todo)
	toks := c.tokens(ask)
	tok := c.leaseToken()
	var got []tier.Lease
	err := c.call(ctx, OpLease, leaseName(ask), func(ctx context.Context) (err error) {
		got, err = c.remote.TakeLeases(ctx, c.leaseKeys(ask), c.prefixed(ask), tok, e.lease)
		if err == nil && len(got) != len(ask) {
			err = fmt.Errorf("hybrid: Remote.TakeLeases returned %d results for %d keys", len(got), len(ask))
		}
		return err
	})
	if err != nil {
		c.n.leasesSkipped.Add(uint64(len(todo)))
		return todo, nil
	}
	now := c.local.Now()
	var mine []int
	var taken, answered []string
	for j, i := range todo {
		if !got[j].Taken {
			c.deferRefresh(keys[i], held[i], now+int64(got[j].Left+leaseSlack))
			c.flights.Finish(keys[i], calls[i], held[i].v, nil)
			continue
		}
		c.n.leasesTaken.Add(1)
		var it item[V]
		if b := got[j].Value; writtenAfter(b, held[i]) && c.take(ctx, nil, &it, keys[i], b, toks[j], e, time.Now()) == readHit {
			answered = append(answered, keys[i])
			c.flights.Finish(keys[i], calls[i], it.v, nil)
			continue
		}
		mine, taken = append(mine, i), append(taken, keys[i])
	}
	h := &heldLease{keys: taken, token: tok, life: e.lease}
	if len(answered) > 0 {
		c.releaseLeases(ctx, h.part(answered), make([][]byte, len(answered)), nil)
	}
	if len(taken) > 0 {
		c.keepAlive(h, e.lease)
	}
	return mine, h
}

// writtenAfter reports whether b, stored bytes, hold a value written after
// held's.
func writtenAfter[V any](b []byte, held item[V]) bool {
	if b == nil {
		return false
	}
	h, _, err := envelope.Decode(b)
	return err == nil && h.Written.UnixNano() > held.writtenAt()
}
