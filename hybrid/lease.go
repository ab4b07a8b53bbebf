package hybrid

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"strconv"
	"sync"
	"time"

	"github.com/hybridcache/hybridcache/internal/keyslot"
	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds load leases (Options.LoadLease) as their holder sees
// them: a fill that finds nothing live in either tier takes a lease on its
// keys in the shared tier, so that one instance of the fleet loads a key
// while the others wait for the value it announces (see leasewait.go and
// leasenews.go).

// leaseSlack is added to what a lease has left before a waiter tries to
// take it over: the holder's keep-alive may be a little late.
const leaseSlack = 2 * time.Millisecond

// maxFilledInline bounds the values one filled message carries together;
// the rest are read from the shared tier by whoever waits for them.
const maxFilledInline = 1 << 20

// heldLease is this instance's lease on keys, kept alive until released.
type heldLease struct {
	keys  []string // the keys, not prefixed
	token string
	life  time.Duration // the lease's lifetime, renewed by the keep-alive
	// released is set, on the fill's goroutine, once the fill has
	// released the lease or handed it to its write (see abandon).
	released bool
	once     sync.Once
	stop     chan struct{} // closed by halt: ends the keep-alive
	done     chan struct{} // closed when the keep-alive has ended
}

// halt ends h's keep-alive, if it has one, and waits for it. It may be
// called more than once, and on a nil h.
func (h *heldLease) halt() {
	if h == nil || h.stop == nil {
		return
	}
	h.once.Do(func() { close(h.stop) })
	<-h.done
}

// abandon releases h, if its fill did not, as a failed load's: deferred by
// the fill of key (or of a batch of n keys), it runs when the load calls
// runtime.Goexit or panics, so that neither the keep-alive nor the lease
// outlives the load, and the waiters hear of the failure at once.
func (c *Cache[V]) abandon(ctx context.Context, h *heldLease, what string) {
	if h != nil && !h.released && len(h.keys) > 0 {
		c.releaseLeases(ctx, h, nil, fmt.Errorf("%w: %s: %w", ErrPanic, what, errGoexit))
	}
	h.halt() // also when the fill released its keys in parts
}

// part returns a lease on keys, some of h's, to release apart from h.
func (h *heldLease) part(keys []string) *heldLease {
	return &heldLease{keys: keys, token: h.token, life: h.life}
}

// leaseKey is the shared-tier key of key's lease:
// Namespace:\x00lease:{tag}<key>, where tag hashes to key's Redis Cluster
// slot (keyslot.Tag), so that on Cluster a lease is in its key's slot and
// one script takes it and reads the key, or writes the key and releases
// it. Where a prefix's braces make that impossible, the tag is left out.
// (See tagKey for why the NUL byte.)
func (c *Cache[V]) leaseKey(key string) string {
	slot := keyslot.Of(c.o.info.Prefix + c.prefix + key)
	l := c.prefix + "\x00lease:{" + keyslot.Tag(slot) + "}" + key
	if keyslot.Of(c.o.info.Prefix+l) != slot {
		return c.prefix + "\x00lease:" + key
	}
	return l
}

func (c *Cache[V]) leaseKeys(keys []string) []string {
	full := make([]string, len(keys))
	for i, key := range keys {
		full[i] = c.leaseKey(key)
	}
	return full
}

// leaseToken returns a token no other lease holder has: this instance's id
// and a sequence number.
func (c *Cache[V]) leaseToken() string {
	return hex.EncodeToString(c.origin[:]) + "." + strconv.FormatUint(c.leases.seq.Add(1), 10)
}

// leasing reports whether a fill under e takes leases.
func (c *Cache[V]) leasing(e *policy) bool { return e.lease > 0 && c.remote != nil && c.bus != nil }

// keepAlive extends h's leases every third of d until h is released, so
// that a load slower than d is not taken over while it runs.
func (c *Cache[V]) keepAlive(h *heldLease, d time.Duration) {
	h.stop, h.done = make(chan struct{}), make(chan struct{})
	// Read once: the fill narrows h.keys while this runs (see storeLoaded).
	keys, name := c.leaseKeys(h.keys), leaseName(h.keys)
	c.wg.Add(1) // within the fill's own count, so never after Close's Wait
	go func() {
		defer c.wg.Done()
		defer close(h.done)
		t := time.NewTicker(d / 3)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-c.stop.Done():
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(c.stop, d/3)
			var held []bool
			err := c.do(ctx, OpLeaseExtend, name, func(ctx context.Context) (err error) {
				held, err = c.remote.ExtendLeases(ctx, keys, h.token, d)
				return err
			})
			cancel()
			if err != nil || len(held) != len(keys) {
				continue // tried again at the next tick
			}
			lost := 0
			for _, ok := range held {
				if !ok {
					lost++
				}
			}
			if lost == len(keys) {
				return // taken over: our write is fenced by its set-if-absent
			}
		}
	}()
}

// storeFilled is storeRemote for the one key a fill holds a lease on (h):
// the write, the release and the announcement to the waiting instances
// are one atomic write (Write.Lease). A write not made (the key changed
// here since its token, or the call failed) still releases the lease,
// announced without a value.
func (c *Cache[V]) storeFilled(ctx context.Context, fw fillWrite, h *heldLease) {
	key, b := fw.key, fw.b
	h.halt()
	h.released = true
	m := message.Message{Op: message.OpFilled, Origin: c.origin, Namespace: c.scope, Keys: h.keys, Token: h.token}
	unstored := c.encodeMsg(m)
	stored := unstored
	if len(c.o.Secret) > 0 && len(b) <= c.o.InlineMaxBytes {
		m.Value = message.PackValues([][]byte{b})
		stored = c.encodeMsg(m)
	}
	wrote, tried := false, false
	err := c.retry(ctx, OpSet, key, func() bool { return c.vers.valid(fw.tok) }, func(ctx context.Context) (err error) {
		tried = true
		w := c.fillCond(&fw)
		w.Msg, w.Else, w.Lease, w.Token = stored, unstored, c.leaseKey(key), h.token
		res, err := c.remote.Write(ctx, []tier.Write{w}, tier.Feed{Channel: c.feed.Channel})
		if err == nil && len(res) != 1 {
			err = fmt.Errorf("hybrid: Remote.Write returned %d results for 1 write", len(res))
		}
		wrote = err == nil && res[0]
		return err
	})
	switch {
	case !tried || err != nil:
		if tried {
			c.unverified(key, fw.tok)
		}
		c.releaseLeases(ctx, h, [][]byte{nil}, nil)
	case !wrote:
		c.vers.bump(key)
		c.local.Delete(key)
		c.tellHere(message.OpFilled, h.keys, nil, nil, h.token)
	default:
		c.tellHere(message.OpFilled, h.keys, [][]byte{b}, nil, h.token)
	}
}

// releaseLeases releases h, if it holds keys, and tells the instances
// waiting for one of them (the Remote announces only if one asked) how the
// load went: for the keys it stored, their stored values
// (vals[i] for h.keys[i], nil: read it from the shared tier), or its load
// error. A fill ended by Close tells them nothing but that the lease is
// free, so that one of them takes over at once.
func (c *Cache[V]) releaseLeases(ctx context.Context, h *heldLease, vals [][]byte, loadErr error) {
	if h == nil || len(h.keys) == 0 {
		return
	}
	h.halt()
	h.released = true
	m := message.Message{Op: message.OpFilled, Origin: c.origin, Namespace: c.scope, Keys: h.keys, Token: h.token}
	switch {
	case errors.Is(loadErr, ErrNotFound):
		m.Op = message.OpNotFound
	case errors.Is(loadErr, errNotStored):
		m.Op = message.OpNotStored
	case loadErr != nil && c.stop.Err() == nil:
		m.Op, m.Value = message.OpLoadFailed, errText(loadErr.Error())
	case len(c.o.Secret) > 0 && loadErr == nil:
		inline := make([][]byte, len(h.keys))
		total := 0
		for i, b := range vals {
			if b != nil && len(b) <= c.o.InlineMaxBytes && total+len(b) <= maxFilledInline {
				inline[i] = b
				total += len(b)
			}
		}
		m.Value = message.PackValues(inline)
	}
	msg := c.encodeMsg(m)
	// The fill's ctx may have ended (Close, LoadTimeout): the release is
	// still wanted, for at most what the lease had left.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.life+time.Second)
	defer cancel()
	// Not counted in Published: the Remote announces only when another
	// instance asked for one of the leases.
	c.call(ctx, OpLeaseRelease, leaseName(h.keys), func(ctx context.Context) error {
		return c.remote.ReleaseLeases(ctx, c.leaseKeys(h.keys), h.token, msg, tier.Feed{Channel: c.feed.Channel})
	})
	if m.Op == message.OpFilled && loadErr != nil {
		vals = nil // a fill ended by Close: nothing stored
	}
	c.tellHere(m.Op, h.keys, vals, m.Value, h.token)
}
