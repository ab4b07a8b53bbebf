package l2

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/tier"
)

// This file holds the load leases: TakeLeases, ExtendLeases and
// ReleaseLeases (a write releases one with Write.Lease). See "Leases" in
// the package doc.

// leaseMillis returns ttl in whole milliseconds, or an error if it is
// shorter than one: a lease always has a lifetime.
func leaseMillis(ttl time.Duration) (int64, error) {
	if ttl < time.Millisecond {
		return 0, fmt.Errorf("ttl %v, want at least 1ms", ttl)
	}
	return ttl.Milliseconds(), nil
}

// TakeLeases takes a lease under token for ttl on each of keys that holds
// nothing: it writes token under the key with SET NX PX, so that a lease
// is a plain string key, with Options.Prefix, that expires by itself.
// When keys[i] was taken, the result's Value is what guards[i] (the key
// the lease guards, also with the prefix) held right after the take: nil
// for nothing, a non-nil empty slice for an empty value. When it was not,
// Left is how long the lease that holds it has left (its PTTL, at least a
// millisecond), Holder the token it is held under (without the mark), and
// the lease is marked as asked for (a '*' after its holder's token), so
// that its holder's release announces. A key held by token itself is not
// taken again. Of repeated keys, only the first can be taken. A key found
// without an expiry, which a Store never writes, is given ttl and reported
// as having ttl left, so that it cannot hold its key for ever. guards must
// be as long as keys.
//
// ttl is rounded down to whole milliseconds and must be at least one. Each
// key gets takeScript (the take and the PTTL in one atomic step), and the
// scripts go in one pipeline. On one server (or a Sentinel-managed
// primary), and in Redis Cluster for a lease in the slot of its guarded
// key, each script also reads its guarded key right after its take: one
// round trip in all (per node). For a lease in another slot, and with a
// Ring, the guarded keys of the leases taken are read once the scripts are
// done, as Get reads them: a second round trip, made only if a lease was
// taken. Either way a guarded key is read after
// its lease was set. With no keys it returns at once.
//
// NOTE: the takes are not atomic together: when an error is returned (with
// no results), some leases may have been taken.
func (s *Store) TakeLeases(ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]tier.Lease, error) {
	sub := about("take", "leases", keys)
	if len(guards) != len(keys) {
		return nil, sub.fail(fmt.Errorf("%d guards, want one per key", len(guards)))
	}
	ms, err := leaseMillis(ttl)
	if err != nil {
		return nil, sub.fail(err)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	var out []tier.Lease
	err = call(ctx, s.write, sub, func(ctx context.Context) error {
		var err error
		out, err = s.take(ctx, keys, guards, token, ms)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// take is TakeLeases without its checks, bound and wrapping.
func (s *Store) take(ctx context.Context, keys, guards []string, token string, ms int64) ([]tier.Lease, error) {
	// A script may name its guarded key only where one server holds both
	// (see together): a Ring would send it to the lease's shard, Redis
	// Cluster refuse it across slots.
	args := []any{token, ms}
	cmds, err := s.evalEach(ctx, takeScript, len(keys), func(i int) []string {
		if s.together(keys[i], guards[i]) {
			return []string{s.prefix + keys[i], s.prefix + guards[i]}
		}
		return []string{s.prefix + keys[i]}
	}, func(int) []any { return args })
	if err != nil {
		return nil, err
	}
	out := make([]tier.Lease, len(keys))
	var read []int // leases taken whose guarded key is still to be read
	for i, cmd := range cmds {
		r, ok := cmd.Val().([]any)
		flag := int64(-1)
		if ok && len(r) > 0 {
			flag, _ = r[0].(int64)
		}
		switch {
		case flag == 0 && len(r) == 3:
			ms, ok1 := r[1].(int64)
			holder, ok2 := r[2].(string)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("script reply for %q: %v", keys[i], r)
			}
			out[i] = tier.Lease{Left: time.Duration(max(ms, 1)) * time.Millisecond, Holder: holder}
		case flag == 1 && !s.together(keys[i], guards[i]):
			out[i].Taken = true
			read = append(read, i)
		case flag == 1 && len(r) == 2:
			out[i].Taken = true
			switch v := r[1].(type) {
			case nil:
			case string:
				out[i].Value = append([]byte{}, v...)
			default:
				return nil, fmt.Errorf("script reply for %q: a %T", keys[i], v)
			}
		default:
			return nil, fmt.Errorf("script reply for %q: %v", keys[i], cmd.Val())
		}
	}
	if len(read) > 0 {
		picked := make([]string, len(read))
		for j, i := range read {
			picked[j] = guards[i]
		}
		vals, err := s.get(ctx, picked)
		if err != nil {
			return nil, fmt.Errorf("read %d guarded keys: %w", len(read), err)
		}
		for j, i := range read {
			out[i].Value = vals[j]
		}
	}
	return out, nil
}

// ExtendLeases sets to ttl the lifetime of each lease of keys that is still
// held under token (PEXPIRE), and reports in held[i] whether keys[i] was.
// A lease that expired, or that another holder took since, is left as it
// is. ttl is rounded down to whole milliseconds and must be at least one.
// extendScript per key, all in one pipeline (one round trip per node);
// with no keys it returns at once.
func (s *Store) ExtendLeases(ctx context.Context, keys []string, token string, ttl time.Duration) (held []bool, err error) {
	sub := about("extend", "leases", keys)
	ms, err := leaseMillis(ttl)
	if err != nil {
		return nil, sub.fail(err)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	held = make([]bool, len(keys))
	args := []any{token, ms}
	err = call(ctx, s.write, sub, func(ctx context.Context) error {
		cmds, err := s.evalEach(ctx, extendScript, len(keys),
			func(i int) []string { return []string{s.prefix + keys[i]} },
			func(int) []any { return args })
		if err != nil {
			return err
		}
		for i, cmd := range cmds {
			n, err := cmd.Int64()
			if err != nil {
				return fmt.Errorf("script reply for %q: %w", keys[i], err)
			}
			held[i] = n == 1
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return held, nil
}

// ReleaseLeases deletes each lease of keys that is still held under token
// (one that expired, or that another holder took since, stays), then, when
// f.Channel is not empty and someone may wait for one of them (a taker
// found it held, or it is no longer held under token), publishes msg on
// it; f.Log is not used. The message leaves after every release: a
// subscriber that tries to take a lease on hearing it finds it released.
// A lease named more than once is released once.
//
// On one server it is releaseScript over every lease: one atomic step, one
// round trip. In Redis Cluster and with a Ring, releaseScript per key, all
// in one pipeline, take one round trip per node, run in parallel, and the
// PUBLISH follows once they are done. With no keys it only publishes, and
// with no channel either it returns at once.
//
// NOTE: when an error is returned, some leases may have been released, and
// the message may have been published.
func (s *Store) ReleaseLeases(ctx context.Context, keys []string, token string, msg []byte, f tier.Feed) error {
	if len(keys) == 0 {
		return nil // no lease: no one waits, nothing to say
	}
	// A lease named twice is released once: its second release would find
	// it gone, as if someone else had taken it, and announce.
	keys = distinct(keys)
	return call(ctx, s.write, about("release", "leases", keys), func(ctx context.Context) error {
		if s.topo == single {
			// One script for every lease: the release and, if any was
			// waited for, the message, in one atomic step.
			return releaseScript.Run(ctx, s.rdb, s.fullKeys(keys), token, f.Channel, msg, "").Err()
		}
		// Elsewhere the scripts run on several nodes at once, and the
		// PUBLISH must wait for all of them.
		args := []any{token, "", "", ""}
		cmds, err := s.evalEach(ctx, releaseScript, len(keys),
			func(i int) []string { return []string{s.prefix + keys[i]} },
			func(int) []any { return args })
		if err != nil {
			return err
		}
		if f.Channel == "" || !slices.ContainsFunc(cmds, func(c *redis.Cmd) bool { n, _ := c.Int64(); return n == 1 }) {
			return nil
		}
		if err := s.publish(ctx, f.Channel, [][]byte{msg}); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		return nil
	})
}

// distinct returns keys without their repeats, in order: keys itself when
// none repeats.
func distinct(keys []string) []string {
	if len(keys) < 2 {
		return keys
	}
	seen := make(map[string]struct{}, len(keys))
	var out []string // nil until a repeat is found
	for i, k := range keys {
		if _, ok := seen[k]; ok {
			if out == nil {
				out = slices.Clone(keys[:i])
			}
			continue
		}
		seen[k] = struct{}{}
		if out != nil {
			out = append(out, k)
		}
	}
	if out == nil {
		return keys
	}
	return out
}
