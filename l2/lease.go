package l2

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file holds the load leases: TakeLeases, ExtendLeases and
// ReleaseLeases, which make a Store a hybrid.Leaser. See "Leases" in the
// package doc.

// takeLease takes the lease KEYS[1] under token ARGV[1] for ARGV[2] ms (SET
// NX PX). It returns 0 if it took it, else the milliseconds the lease held
// has left, at least 1. A lease that vanished between the SET and the PTTL
// is tried once more; a key found without an expiry (no lease a Leaser
// wrote) is given ARGV[2] ms, so that it cannot block its key for ever.
var takeLease = redis.NewScript(`
for _ = 1, 2 do
	if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
		return 0
	end
	local left = redis.call('PTTL', KEYS[1])
	if left == -1 then
		redis.call('PEXPIRE', KEYS[1], ARGV[2])
		return tonumber(ARGV[2])
	end
	if left >= 0 then
		return math.max(left, 1)
	end
end
return 1
`)

// extendLease sets the lifetime of the lease KEYS[1] to ARGV[2] ms if it is
// held under token ARGV[1]; it returns 1 if it was.
var extendLease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
return 0
`)

// releaseLease deletes the lease KEYS[1] if it is held under token ARGV[1],
// then publishes ARGV[3] on channel ARGV[2] unless ARGV[2] is empty. It
// returns 1 if it deleted.
var releaseLease = redis.NewScript(`
local n = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
	n = redis.call('DEL', KEYS[1])
end
if ARGV[2] ~= '' then
	redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return n
`)

// leaseMillis returns ttl in whole milliseconds, or an error if it is
// shorter than one: a lease always has a lifetime.
func leaseMillis(op string, n int, ttl time.Duration) (int64, error) {
	if ttl < time.Millisecond {
		return 0, fmt.Errorf("l2: %s %d leases: ttl %v, want at least 1ms", op, n, ttl)
	}
	return ttl.Milliseconds(), nil
}

// TakeLeases takes a lease under token for ttl on each of keys that holds
// nothing: it writes token under key with SET NX PX, so that a lease is a
// plain string key, with Options.Prefix, that expires by itself. taken[i]
// reports whether keys[i] was taken; when it was not, left[i] is how long
// the lease that holds it has left (its PTTL, at least a millisecond), else
// 0. A key held by token itself is not taken again. Of repeated keys, only
// the first can be taken. A key found without an expiry, which a Leaser
// never writes, is given ttl and reported as having ttl left, so that it
// cannot hold its key for ever.
//
// ttl is rounded down to whole milliseconds and must be at least one. Each
// key gets a small Lua script (the take and the PTTL in one atomic step);
// the scripts go in one pipeline, one round trip per node in Redis
// Cluster. With no keys it returns at once.
//
// NOTE: the takes are not atomic together: when an error is returned (with
// nil results), some leases may have been taken.
func (s *Store) TakeLeases(ctx context.Context, keys []string, token string, ttl time.Duration) (taken []bool, left []time.Duration, err error) {
	ms, err := leaseMillis("take", len(keys), ttl)
	if err != nil {
		return nil, nil, err
	}
	if len(keys) == 0 {
		return nil, nil, nil
	}
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	res, err := s.evalEach(ctx, takeLease, keys, token, ms)
	if err != nil {
		return nil, nil, fmt.Errorf("l2: take %d leases: %w", len(keys), withCause(ctx, err))
	}
	taken = make([]bool, len(keys))
	left = make([]time.Duration, len(keys))
	for i, n := range res {
		if n == 0 {
			taken[i] = true
		} else {
			left[i] = time.Duration(max(n, 1)) * time.Millisecond
		}
	}
	return taken, left, nil
}

// ExtendLeases sets to ttl the lifetime of each lease of keys that is still
// held under token (PEXPIRE), and reports in held[i] whether keys[i] was.
// A lease that expired, or that another holder took since, is left as it
// is. ttl is rounded down to whole milliseconds and must be at least one.
// One Lua script per key, all in one pipeline (one round trip per node);
// with no keys it returns at once.
func (s *Store) ExtendLeases(ctx context.Context, keys []string, token string, ttl time.Duration) (held []bool, err error) {
	ms, err := leaseMillis("extend", len(keys), ttl)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, nil
	}
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	res, err := s.evalEach(ctx, extendLease, keys, token, ms)
	if err != nil {
		return nil, fmt.Errorf("l2: extend %d leases: %w", len(keys), withCause(ctx, err))
	}
	held = make([]bool, len(keys))
	for i, n := range res {
		held[i] = n == 1
	}
	return held, nil
}

// ReleaseLeases deletes each lease of keys that is still held under token
// (one that expired, or that another holder took since, stays), then, when
// channel is not empty, publishes msg on channel. The message leaves after
// every release: a subscriber that tries to take a lease on hearing it
// finds it released.
//
// One Lua script per key, all in one pipeline. On one server that is one
// round trip: the last key's script also publishes. In Redis Cluster the
// scripts take one round trip per node, run in parallel, and the PUBLISH
// follows once they are done (with a go-redis Ring it reaches one shard
// only, as with SetAndPublish). With no keys it only publishes, and with
// no channel either it returns at once.
//
// NOTE: when an error is returned, some leases may have been released, and
// the message may have been published.
func (s *Store) ReleaseLeases(ctx context.Context, keys []string, token string, channel string, msg []byte) error {
	if len(keys) == 0 && channel == "" {
		return nil
	}
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	if len(keys) == 0 {
		if err := s.rdb.Publish(ctx, channel, msg).Err(); err != nil {
			return fmt.Errorf("l2: release 0 leases: publish: %w", withCause(ctx, err))
		}
		return nil
	}
	// On one server the commands of a pipeline run in order, so the last
	// script publishes after every release. Elsewhere they run on several
	// nodes at once, and the PUBLISH must wait for all of them.
	inScript := s.topo == single
	last := len(keys) - 1
	_, err := s.evalEachArgs(ctx, releaseLease, keys, func(i int) []any {
		if inScript && i == last {
			return []any{token, channel, msg}
		}
		return []any{token, "", ""}
	})
	if err != nil {
		return fmt.Errorf("l2: release %d leases: %w", len(keys), withCause(ctx, err))
	}
	if !inScript && channel != "" {
		if err := s.rdb.Publish(ctx, channel, msg).Err(); err != nil {
			return fmt.Errorf("l2: release %d leases: publish: %w", len(keys), withCause(ctx, err))
		}
	}
	return nil
}

// evalEach runs script once for each of keys (with the prefix, as KEYS[1]),
// with args as ARGV, and returns each reply, an integer, in order. See
// evalEachArgs.
func (s *Store) evalEach(ctx context.Context, script *redis.Script, keys []string, args ...any) ([]int64, error) {
	return s.evalEachArgs(ctx, script, keys, func(int) []any { return args })
}

// evalEachArgs runs script once for each of keys (with the prefix, as
// KEYS[1]), with args(i) as ARGV for keys[i], all in one pipeline by
// EVALSHA, and returns each reply, an integer, in order. EVALSHA in a
// pipeline does not fall back by itself: the calls that failed with
// NOSCRIPT (a server restarted, or its script cache flushed) are sent again
// by EVAL, in order, in a second pipeline. Any other failure is returned.
func (s *Store) evalEachArgs(ctx context.Context, script *redis.Script, keys []string, args func(i int) []any) ([]int64, error) {
	cmds := make([]*redis.Cmd, len(keys))
	var retry []int
	pipe := s.rdb.Pipeline()
	for i, k := range keys {
		cmds[i] = script.EvalSha(ctx, pipe, []string{s.prefix + k}, args(i)...)
	}
	if err := execScripts(ctx, pipe, cmds, func(i int) { retry = append(retry, i) }); err != nil {
		return nil, err
	}
	if len(retry) > 0 {
		pipe = s.rdb.Pipeline()
		again := make([]*redis.Cmd, len(retry))
		for j, i := range retry {
			again[j] = script.Eval(ctx, pipe, []string{s.prefix + keys[i]}, args(i)...)
		}
		if err := execScripts(ctx, pipe, again, nil); err != nil {
			return nil, err
		}
		for j, i := range retry {
			cmds[i] = again[j]
		}
	}
	out := make([]int64, len(keys))
	for i, cmd := range cmds {
		n, err := cmd.Int64()
		if err != nil {
			return nil, fmt.Errorf("script reply for %q: %w", keys[i], err)
		}
		out[i] = n
	}
	return out, nil
}

// execScripts runs pipe, whose commands are cmds, and returns the first
// failure other than NOSCRIPT. When noScript is not nil, it is called with
// the index of each command that failed with NOSCRIPT; when it is nil,
// NOSCRIPT is a failure too.
func execScripts(ctx context.Context, pipe redis.Pipeliner, cmds []*redis.Cmd, noScript func(i int)) error {
	_, err := pipe.Exec(ctx)
	// A failure that no server sent (the network, ctx) may have left the
	// commands without an error of their own.
	var re redis.Error
	if err != nil && !errors.As(err, &re) {
		return err
	}
	for i, cmd := range cmds {
		switch cerr := cmd.Err(); {
		case cerr == nil:
		case noScript != nil && redis.HasErrorPrefix(cerr, "NOSCRIPT"):
			noScript(i)
		default:
			return cerr
		}
	}
	return nil
}
