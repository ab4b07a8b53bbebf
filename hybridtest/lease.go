package hybridtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"strings"
	"time"
)

// This file holds the load leases of a Remote (TakeLeases, ExtendLeases,
// ReleaseLeases; Write releases them too), with the semantics of
// l2.Store's over one Redis server. A lease is an ordinary entry that
// holds its holder's token (followed by '*' once a taker found it held)
// and always has a lifetime, so Get, Peek, Keys and Len see it as they
// would see the key in Redis.

// checkLeases returns what is wrong with the arguments of a lease call.
func checkLeases(op string, n int, token string, ttl time.Duration) error {
	if token == "" {
		return fmt.Errorf("hybridtest: %s %d leases: empty token", op, n)
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("hybridtest: %s %d leases: ttl %v, want at least 1ms", op, n, ttl)
	}
	return nil
}

// TakeLeases takes a lease under token for ttl on each of keys that holds
// no live value (SET NX), as one step: it stores token under the key for
// ttl. When keys[i] is taken, the Lease's Value is a copy of what
// guards[i] held right after the take (nil for nothing). When it is not,
// Left is how long the value that holds it has left (at least a
// millisecond), Holder the token it is held under (without the mark), and
// the lease is marked as asked for (a '*' after its token), so that its
// release announces. A key held by token itself is not taken again (and
// is marked); of repeated keys only the first can be taken. A key found
// without an expiry is given ttl and reported as having ttl left. guards
// must be as long as keys, token not empty and ttl at least a millisecond.
// With no keys it returns at once. It is l2.Store's TakeLeases.
func (r *Remote) TakeLeases(ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]tier.Lease, error) {
	if len(guards) != len(keys) {
		return nil, fmt.Errorf("hybridtest: take %d leases: %d guards, want one per key", len(keys), len(guards))
	}
	if err := checkLeases("take", len(keys), token, ttl); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return []tier.Lease{}, nil
	}
	defer r.count(func(c *Calls) { c.TakeLeases++ })
	if err := r.begin(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	out := make([]tier.Lease, len(keys))
	for i, k := range keys {
		if _, ok := r.getLocked(k, now); !ok {
			r.setLocked(k, []byte(token), ttl, now)
			out[i].Taken = true
			if v, ok := r.getLocked(guards[i], now); ok {
				out[i].Value = stored(v)
			}
			continue
		}
		it := r.items[k]
		if it.expires.IsZero() {
			it.expires = now.Add(ttl)
		}
		out[i].Holder = strings.TrimSuffix(string(it.value), "*")
		if !bytes.HasSuffix(it.value, []byte("*")) {
			it.value = append(stored(it.value), '*') // asked for: its release announces
		}
		r.items[k] = it
		out[i].Left = max(it.expires.Sub(now), time.Millisecond)
	}
	return out, nil
}

// ExtendLeases sets to ttl the lifetime of each lease of keys that is still
// held under token, and reports in held[i] whether keys[i] was. token
// must not be empty, and ttl at least a millisecond; with no keys it
// returns at once. It is l2.Store's ExtendLeases.
func (r *Remote) ExtendLeases(ctx context.Context, keys []string, token string, ttl time.Duration) (held []bool, err error) {
	if err := checkLeases("extend", len(keys), token, ttl); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return []bool{}, nil
	}
	defer r.count(func(c *Calls) { c.ExtendLeases++ })
	if err := r.begin(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	held = make([]bool, len(keys))
	for i, k := range keys {
		if v, ok := r.getLocked(k, now); ok && heldBy(v, token) {
			it := r.items[k]
			it.expires = now.Add(ttl)
			r.items[k] = it
			held[i] = true
		}
	}
	return held, nil
}

// ReleaseLeases deletes each lease of keys that is still held under token
// (one that expired, or that another holder took, stays), then, when
// f.Channel and msg are not empty and someone may wait for one of them
// (TakeLeases found it held and marked it, or it is no longer held under
// token), publishes msg on f.Channel of r.Bus, as one step (see Write): a
// subscriber that calls r on hearing the message finds the leases
// released. When the message is due and r.Bus is nil or its Publish
// fails, nothing is released. token must not be empty; with no keys it
// returns at once. It is l2.Store's ReleaseLeases.
func (r *Remote) ReleaseLeases(ctx context.Context, keys []string, token string, msg []byte, f tier.Feed) error {
	if token == "" {
		return errors.New("hybridtest: release leases: empty token")
	}
	if len(keys) == 0 {
		return nil
	}
	defer r.count(func(c *Calls) { c.ReleaseLeases++ })
	if err := r.begin(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	waited := false
	for _, k := range keys {
		waited = waited || r.waitedLocked(k, token, now)
	}
	if waited && msg != nil && f.Channel != "" {
		if r.Bus == nil {
			return ErrNoBus
		}
		if err := r.Bus.Publish(ctx, f.Channel, msg); err != nil {
			return err
		}
	}
	for _, k := range keys {
		if v, ok := r.getLocked(k, now); ok && heldBy(v, token) {
			delete(r.items, k)
		}
	}
	return nil
}

// heldBy reports whether v, a lease's value, is token's: the token, marked
// with '*' or not.
func heldBy(v []byte, token string) bool {
	return string(v) == token || string(v) == token+"*"
}

// waitedLocked reports whether someone may wait for the lease k of token:
// it was asked for while held (marked), or it is not held under token.
func (r *Remote) waitedLocked(k, token string, now time.Time) bool {
	v, ok := r.getLocked(k, now)
	return !ok || string(v) != token
}
