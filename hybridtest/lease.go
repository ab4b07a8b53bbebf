package hybridtest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"
)

// This file holds the load leases of a Remote: the methods that make it a
// hybrid.Leaser (TakeLeases, ExtendLeases, ReleaseLeases, FillAndRelease),
// with the semantics of l2.Store's over Redis. A lease is an ordinary
// entry that holds its holder's token (followed by '*' once a taker found
// it held) and always has a lifetime, so Get, Peek, Keys and Len see it as
// they would see the key in Redis.

// checkLeaseTTL returns an error if ttl is shorter than a millisecond: a
// lease always has a lifetime.
func checkLeaseTTL(op string, n int, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("hybridtest: %s %d leases: ttl %v, want at least 1ms", op, n, ttl)
	}
	return nil
}

// TakeLeases takes a lease under token for ttl on each of keys that holds
// no live value (SET NX), as one step: it stores token under the key for
// ttl. taken[i] reports whether keys[i] was taken. When it was, values[i]
// is a copy of what guards[i] held right after the take (nil for nothing);
// when it was not, values[i] is nil, left[i] is how long the value that
// holds it has left (at least a millisecond), else 0, holders[i] the token
// it is held under (without the mark), else "", and the lease is marked
// as asked for (a '*' after its token), so that its release announces. A key held by token itself is not taken again; of repeated
// keys only the first can be taken. A key found without an expiry is given
// ttl and reported as having ttl left. guards must be as long as keys, and
// ttl at least a millisecond. With no keys it returns at once. It is
// l2.Store's TakeLeases.
func (r *Remote) TakeLeases(ctx context.Context, keys, guards []string, token string, ttl time.Duration) (taken []bool, left []time.Duration, values [][]byte, holders []string, err error) {
	defer r.count(func(c *Calls) { c.TakeLeases++ })
	if len(guards) != len(keys) {
		return nil, nil, nil, nil, fmt.Errorf("hybridtest: take %d leases: %d guards, want one per key", len(keys), len(guards))
	}
	if err := checkLeaseTTL("take", len(keys), ttl); err != nil {
		return nil, nil, nil, nil, err
	}
	if len(keys) == 0 {
		return nil, nil, nil, nil, nil
	}
	if err := r.begin(ctx, false); err != nil {
		return nil, nil, nil, nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	taken = make([]bool, len(keys))
	left = make([]time.Duration, len(keys))
	values = make([][]byte, len(keys))
	holders = make([]string, len(keys))
	for i, k := range keys {
		if _, ok := r.getLocked(k, now); !ok {
			r.setLocked(k, []byte(token), ttl, now)
			taken[i] = true
			if v, ok := r.getLocked(guards[i], now); ok {
				values[i] = append([]byte{}, v...)
			}
			continue
		}
		it := r.items[k]
		if it.expires.IsZero() {
			it.expires = now.Add(ttl)
		}
		holders[i] = strings.TrimSuffix(string(it.value), "*")
		if !bytes.HasSuffix(it.value, []byte("*")) {
			it.value = append(clone(it.value), '*') // asked for: its release announces
		}
		r.items[k] = it
		left[i] = max(it.expires.Sub(now), time.Millisecond)
	}
	return taken, left, values, holders, nil
}

// ExtendLeases sets to ttl the lifetime of each lease of keys that is still
// held under token, and reports in held[i] whether keys[i] was. ttl must be
// at least a millisecond; with no keys it returns at once. It is l2.Store's
// ExtendLeases.
func (r *Remote) ExtendLeases(ctx context.Context, keys []string, token string, ttl time.Duration) (held []bool, err error) {
	defer r.count(func(c *Calls) { c.ExtendLeases++ })
	if err := checkLeaseTTL("extend", len(keys), ttl); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	if err := r.begin(ctx, false); err != nil {
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
// channel is not empty and someone may wait for one of them (TakeLeases
// found it held and marked it, or it is no longer held under token),
// publishes msg on channel of r.Bus, as one step (see SetAndPublish): a
// subscriber that calls r on hearing the message finds the leases
// released. A lease named more than once is released once. When the
// publish fails, nothing is released; when none is due, r.Bus is not
// used. With no keys it only publishes, and with no channel either it
// returns at once. It is l2.Store's ReleaseLeases; given a channel, it
// fails with ErrNoBus when r.Bus is nil.
func (r *Remote) ReleaseLeases(ctx context.Context, keys []string, token string, channel string, msg []byte) error {
	defer r.count(func(c *Calls) { c.ReleaseLeases++ })
	if len(keys) == 0 && channel == "" {
		return nil
	}
	if r.Bus == nil && channel != "" {
		return ErrNoBus
	}
	if err := r.begin(ctx, false); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	waited := false
	for _, k := range keys {
		waited = waited || r.waitedLocked(k, token, now)
	}
	if channel != "" && (waited || len(keys) == 0) {
		if err := r.Bus.Publish(ctx, channel, msg); err != nil {
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

// FillAndRelease is a lease holder's write, as one step (see
// SetAndPublish): it stores a copy of value under key for ttl if key holds
// no live value (old == nil) or holds exactly old (old != nil; a missing
// key holds nothing, which no old matches); then it deletes lease if it is
// still held under token; then, when channel is not empty and someone may
// wait for the lease (as for ReleaseLeases), it publishes stored on
// channel of r.Bus if it stored value, else unstored. It reports whether
// it stored value. When the publish fails, nothing is written or
// released; when none is due, r.Bus is not used. ttl must be at least a
// millisecond. It is l2.Store's FillAndRelease; given a channel, it fails
// with ErrNoBus when r.Bus is nil.
func (r *Remote) FillAndRelease(ctx context.Context, key string, old, value []byte, ttl time.Duration, lease, token, channel string, stored, unstored []byte) (wrote bool, err error) {
	defer r.count(func(c *Calls) { c.FillAndRelease++ })
	if ttl < time.Millisecond {
		return false, fmt.Errorf("hybridtest: fill and release %q: ttl %v, want at least 1ms", key, ttl)
	}
	if r.Bus == nil && channel != "" {
		return false, ErrNoBus
	}
	if err := r.begin(ctx, false); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	cur, ok := r.getLocked(key, now)
	write := !ok
	if old != nil {
		write = ok && bytes.Equal(cur, old)
	}
	if channel != "" && r.waitedLocked(lease, token, now) {
		msg := unstored
		if write {
			msg = stored
		}
		if err := r.Bus.Publish(ctx, channel, msg); err != nil {
			return false, err
		}
	}
	if write {
		r.setLocked(key, value, ttl, now)
	}
	if v, ok := r.getLocked(lease, now); ok && heldBy(v, token) {
		delete(r.items, lease)
	}
	return write, nil
}
