package l2

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file holds the load leases: TakeLeases, ExtendLeases,
// ReleaseLeases and FillAndRelease, which make a Store a hybrid.Leaser. See
// "Leases" in the package doc.

// takeLease takes the lease KEYS[1] under token ARGV[1] for ARGV[2] ms (SET
// NX PX). If it took it, it returns {1}, or, when KEYS[2] is given (the
// key the lease guards), {1, what KEYS[2] holds right after the take} (nil
// for nothing). Else it marks the lease as asked for (a '*' after its
// token, see below) and returns {0, the milliseconds it has left (at least
// 1), its holder's token (without the mark)}. A lease that vanished
// between the SET and the PTTL is tried once more; a key found without an
// expiry (no lease a Leaser wrote) is given ARGV[2] ms, so that it cannot
// block its key for ever.
var takeLease = redis.NewScript(`
for _ = 1, 2 do
	if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
		if KEYS[2] then
			return {1, redis.call('GET', KEYS[2])}
		end
		return {1}
	end
	local left = redis.call('PTTL', KEYS[1])
	local endless = left == -1
	if endless then
		left = tonumber(ARGV[2])
	end
	if left >= 0 then
		left = math.max(left, 1)
		local v = redis.call('GET', KEYS[1])
		local holder = v
		if string.sub(v, -1) ~= '*' then
			redis.call('SET', KEYS[1], v .. '*', 'PX', left)
		else
			holder = string.sub(v, 1, -2)
			if endless then
				redis.call('PEXPIRE', KEYS[1], left)
			end
		end
		return {0, left, holder}
	end
end
return {0, 1, ''}
`)

// A lease holds its holder's token, followed by '*' once someone who
// wanted it found it held (takeLease marks it so). Its holder's release
// announces then, and only then or when the lease is no longer its own:
// no one else waits for a lease no one else asked for.

// extendLease sets the lifetime of the lease KEYS[1] to ARGV[2] ms if it is
// held under token ARGV[1]; it returns 1 if it was.
var extendLease = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] or v == ARGV[1] .. '*' then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
return 0
`)

// release is the Lua function the release scripts share: it deletes the
// lease k if it is held under token t (marked or not), and returns 1 if
// someone may wait for it (it was marked, or is not held under t), else 0.
const release = `local function release(k, t)
	local v = redis.call('GET', k)
	if v == t then
		redis.call('DEL', k)
		return 0
	end
	if v == t .. '*' then
		redis.call('DEL', k)
	end
	return 1
end
`

// releaseLease deletes the lease KEYS[1] if it is held under token ARGV[1];
// then, if someone may wait for it (it was asked for while held, or it is
// no longer held under the token), and channel ARGV[2] is not empty, it
// publishes ARGV[3] on it. It returns 1 if someone may wait, else 0.
var releaseLease = redis.NewScript(release + `
local waited = release(KEYS[1], ARGV[1])
if waited == 1 and ARGV[2] ~= '' then
	redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return waited
`)

// releaseLeases is releaseLease for every lease of KEYS at once, on one
// server, with one message if someone may wait for any of them. KEYS must
// be distinct: a second release of one would find it gone and announce.
var releaseLeases = redis.NewScript(release + `
local waited = 0
for _, k in ipairs(KEYS) do
	waited = math.max(waited, release(k, ARGV[1]))
end
if waited == 1 and ARGV[2] ~= '' then
	redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return waited
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
// reports whether keys[i] was taken. When it was, values[i] is what
// guards[i] (the key the lease guards, also with the prefix) held right
// after the take: nil for nothing, a non-nil empty slice for an empty
// value. When it was not, values[i] is nil, left[i] is how long the lease
// that holds it has left (its PTTL, at least a millisecond), else 0,
// holders[i] is the token it is held under (without the mark, below),
// else "", and the lease is marked as asked for (a '*' after its holder's
// token), so that its holder's release announces.
// A key held by token itself is not taken again. Of repeated keys, only
// the first can be taken. A key found without an expiry, which a Leaser
// never writes, is given ttl and reported as having ttl left, so that it
// cannot hold its key for ever. guards must be as long as keys.
//
// ttl is rounded down to whole milliseconds and must be at least one. Each
// key gets a small Lua script (the take and the PTTL in one atomic step),
// and the scripts go in one pipeline. On one server (or a Sentinel-managed
// primary) each script also reads its guarded key right after its take:
// one round trip in all. In Redis Cluster, where a lease and the key it
// guards are generally in different slots, and with a Ring, the scripts
// take one round trip per node, and the guarded keys of the leases taken
// are read once they are done, as GetMany reads them: a second round trip,
// made only if a lease was taken. Either way a guarded key is read after
// its lease was set, so that a value stored by a holder that released the
// lease before the take is seen. With no keys it returns at once.
//
// NOTE: the takes are not atomic together: when an error is returned (with
// nil results), some leases may have been taken (also when only the read
// of the guarded keys failed, in Redis Cluster).
func (s *Store) TakeLeases(ctx context.Context, keys, guards []string, token string, ttl time.Duration) (taken []bool, left []time.Duration, values [][]byte, holders []string, err error) {
	if len(guards) != len(keys) {
		return nil, nil, nil, nil, fmt.Errorf("l2: take %d leases: %d guards, want one per key", len(keys), len(guards))
	}
	ms, err := leaseMillis("take", len(keys), ttl)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if len(keys) == 0 {
		return nil, nil, nil, nil, nil
	}
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	// A script may name its guarded key only where one server holds every
	// key: a Ring would send it to the lease's shard, Redis Cluster refuse
	// it across slots.
	inScript := s.topo == single
	args := []any{token, ms}
	cmds, err := s.evalEachCmds(ctx, takeLease, len(keys), func(i int) []string {
		if inScript {
			return []string{s.prefix + keys[i], s.prefix + guards[i]}
		}
		return []string{s.prefix + keys[i]}
	}, func(int) []any { return args })
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("l2: take %d leases: %w", len(keys), withCause(ctx, err))
	}
	taken = make([]bool, len(keys))
	left = make([]time.Duration, len(keys))
	values = make([][]byte, len(keys))
	holders = make([]string, len(keys))
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
				return nil, nil, nil, nil, fmt.Errorf("l2: take %d leases: script reply for %q: %v", len(keys), keys[i], r)
			}
			left[i] = time.Duration(max(ms, 1)) * time.Millisecond
			holders[i] = holder
		case flag == 1 && !inScript:
			taken[i] = true
			read = append(read, i)
		case flag == 1 && len(r) == 2:
			taken[i] = true
			switch v := r[1].(type) {
			case nil:
			case string:
				values[i] = append([]byte{}, v...)
			default:
				return nil, nil, nil, nil, fmt.Errorf("l2: take %d leases: script reply for %q: a %T", len(keys), keys[i], v)
			}
		default:
			return nil, nil, nil, nil, fmt.Errorf("l2: take %d leases: script reply for %q: %v", len(keys), keys[i], cmd.Val())
		}
	}
	if len(read) > 0 {
		vals, err := s.getMany(ctx, pick(guards, read))
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("l2: take %d leases: read %d guarded keys: %w", len(keys), len(read), err)
		}
		for j, i := range read {
			values[i] = vals[j]
		}
	}
	return taken, left, values, holders, nil
}

// pick returns keys[i] for each i of idx, in order.
func pick(keys []string, idx []int) []string {
	out := make([]string, len(idx))
	for j, i := range idx {
		out[j] = keys[i]
	}
	return out
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
// channel is not empty and someone may wait for one of them (a taker found
// it held, or it is no longer held under token), publishes msg on channel.
// The message leaves after every release: a subscriber that tries to take
// a lease on hearing it finds it released. A lease named more than once is
// released once.
//
// On one server it is one Lua script over every lease: one atomic step,
// one round trip. In Redis Cluster a script per key, all in one pipeline,
// take one round trip per node, run in parallel, and the PUBLISH follows
// once they are done (with a go-redis Ring it reaches one shard only, as
// with SetAndPublish). With no keys it only publishes, and with no channel
// either it returns at once.
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
	// A lease named twice is released once: its second release would find
	// it gone, as if someone else had taken it, and announce.
	keys = distinct(keys)
	if s.topo == single {
		// One script for every lease: the release and, if any was waited
		// for, the message, in one atomic step.
		full := make([]string, len(keys))
		for i, k := range keys {
			full[i] = s.prefix + k
		}
		if err := releaseLeases.Run(ctx, s.rdb, full, token, channel, msg).Err(); err != nil {
			return fmt.Errorf("l2: release %d leases: %w", len(keys), withCause(ctx, err))
		}
		return nil
	}
	// Elsewhere the scripts run on several nodes at once, and the PUBLISH
	// must wait for all of them.
	waited, err := s.evalEach(ctx, releaseLease, keys, token, "", "")
	if err != nil {
		return fmt.Errorf("l2: release %d leases: %w", len(keys), withCause(ctx, err))
	}
	if channel != "" && slices.Contains(waited, 1) {
		if err := s.rdb.Publish(ctx, channel, msg).Err(); err != nil {
			return fmt.Errorf("l2: release %d leases: publish: %w", len(keys), withCause(ctx, err))
		}
	}
	return nil
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

// fillAndRelease is FillAndRelease on one server. It stores ARGV[1] under
// KEYS[1] for ARGV[2] ms: with SET NX if ARGV[3] is "nx", else only if
// KEYS[1] holds exactly ARGV[4]. Then it deletes the lease KEYS[2] if it is
// held under token ARGV[5]. Then, if someone may wait for the lease (as in
// releaseLease) and channel ARGV[6] is not empty, it publishes ARGV[7] on
// it if it stored, else ARGV[8]. It returns 1 if it stored.
var fillAndRelease = redis.NewScript(release + `
local wrote = 0
if ARGV[3] == 'nx' then
	if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
		wrote = 1
	end
elseif redis.call('GET', KEYS[1]) == ARGV[4] then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
	wrote = 1
end
if release(KEYS[2], ARGV[5]) == 1 and ARGV[6] ~= '' then
	if wrote == 1 then
		redis.call('PUBLISH', ARGV[6], ARGV[7])
	else
		redis.call('PUBLISH', ARGV[6], ARGV[8])
	end
end
return wrote
`)

// FillAndRelease is a lease holder's write. It stores value under key for
// ttl if key holds nothing (old == nil, as SetIfAbsent does) or holds
// exactly old (old != nil, as CompareAndSet does; an empty old matches an
// empty value only); then it deletes the lease lease if it is still held
// under token (one that expired, or that another holder took since,
// stays); then, when channel is not empty and someone may wait for the
// lease (a taker found it held, or it is no longer held under token), it
// publishes stored on channel if it stored value, else unstored. It
// reports whether it stored value.
// ttl is rounded down to whole milliseconds and must be at least one: the
// value always gets an expiry.
//
// On one server (or a Sentinel-managed primary) it is one Lua script with
// key and lease as its KEYS: one atomic step, one round trip. In Redis
// Cluster, where key and lease are generally in different slots, the write
// comes first, as its own call (SET NX, or the script of CompareAndSet), on
// key's master; then lease's master runs the release script of
// ReleaseLeases, which also publishes the message (cluster-wide, as in
// SetAndPublish): two round trips, in that order, so that a subscriber that
// hears the message finds the value written and the lease released. With
// a Ring the message is a PUBLISH of its own after the release, as with
// ReleaseLeases.
//
// NOTE: as with SetAndPublish, an error does not say the write was not
// made. In Redis Cluster and with a Ring, an error of the release or the
// message comes with wrote reporting the write that was made; the lease
// may then be left to expire, and the message may not have been sent.
func (s *Store) FillAndRelease(ctx context.Context, key string, old, value []byte, ttl time.Duration, lease, token, channel string, stored, unstored []byte) (wrote bool, err error) {
	if ttl < time.Millisecond {
		return false, fmt.Errorf("l2: fill and release %q: ttl %v, want at least 1ms", key, ttl)
	}
	ms := ttl.Milliseconds()
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	if s.topo == single {
		mode := "nx"
		if old != nil {
			mode = "cas"
		}
		n, err := fillAndRelease.Run(ctx, s.rdb, []string{s.prefix + key, s.prefix + lease},
			value, ms, mode, old, token, channel, stored, unstored).Int()
		if err != nil {
			return false, fmt.Errorf("l2: fill and release %q: %w", key, withCause(ctx, err))
		}
		return n == 1, nil
	}

	// One step per key, each on its own master, in order.
	if old == nil {
		wrote, err = s.rdb.SetNX(ctx, s.prefix+key, value, time.Duration(ms)*time.Millisecond).Result()
	} else {
		var n int
		n, err = compareAndSet.Run(ctx, s.rdb, []string{s.prefix + key}, old, value, ms).Int()
		wrote = n == 1
	}
	if err != nil {
		return false, fmt.Errorf("l2: fill and release %q: %w", key, withCause(ctx, err))
	}
	msg := unstored
	if wrote {
		msg = stored
	}
	// In Redis Cluster a PUBLISH from the script reaches every node. With
	// a Ring it would reach the lease's shard only; a PUBLISH of its own
	// goes to the channel's shard, where the Ring's subscribers listen.
	inScript := s.topo == cluster
	scriptChannel, scriptMsg := "", []byte(nil)
	if inScript {
		scriptChannel, scriptMsg = channel, msg
	}
	waited, err := releaseLease.Run(ctx, s.rdb, []string{s.prefix + lease}, token, scriptChannel, scriptMsg).Int()
	if err != nil {
		return wrote, fmt.Errorf("l2: fill and release %q: release %q: %w", key, lease, withCause(ctx, err))
	}
	if !inScript && channel != "" && waited == 1 {
		if err := s.rdb.Publish(ctx, channel, msg).Err(); err != nil {
			return wrote, fmt.Errorf("l2: fill and release %q: publish: %w", key, withCause(ctx, err))
		}
	}
	return wrote, nil
}

// evalEach runs script once for each of keys (with the prefix, as KEYS[1]),
// with args as ARGV, and returns each reply, an integer, in order. See
// evalEachArgs.
func (s *Store) evalEach(ctx context.Context, script *redis.Script, keys []string, args ...any) ([]int64, error) {
	return s.evalEachArgs(ctx, script, keys, func(int) []any { return args })
}

// evalEachArgs runs script once for each of keys (with the prefix, as
// KEYS[1]), with args(i) as ARGV for keys[i], as evalEachCmds does, and
// returns each reply, an integer, in order.
func (s *Store) evalEachArgs(ctx context.Context, script *redis.Script, keys []string, args func(i int) []any) ([]int64, error) {
	cmds, err := s.evalEachCmds(ctx, script, len(keys), func(i int) []string { return []string{s.prefix + keys[i]} }, args)
	if err != nil {
		return nil, err
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

// evalEachCmds runs script n times, the i-th with keys(i) (full keys) as
// KEYS and args(i) as ARGV, all in one pipeline by EVALSHA, and returns the
// commands, which hold the replies, in order. EVALSHA in a pipeline does
// not fall back by itself: the calls that failed with NOSCRIPT (a server
// restarted, or its script cache flushed) are sent again by EVAL, in order,
// in a second pipeline. Any other failure is returned.
func (s *Store) evalEachCmds(ctx context.Context, script *redis.Script, n int, keys func(i int) []string, args func(i int) []any) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, n)
	var retry []int
	pipe := s.rdb.Pipeline()
	for i := range n {
		cmds[i] = script.EvalSha(ctx, pipe, keys(i), args(i)...)
	}
	if err := execScripts(ctx, pipe, cmds, func(i int) { retry = append(retry, i) }); err != nil {
		return nil, err
	}
	if len(retry) > 0 {
		pipe = s.rdb.Pipeline()
		again := make([]*redis.Cmd, len(retry))
		for j, i := range retry {
			again[j] = script.Eval(ctx, pipe, keys(i), args(i)...)
		}
		if err := execScripts(ctx, pipe, again, nil); err != nil {
			return nil, err
		}
		for j, i := range retry {
			cmds[i] = again[j]
		}
	}
	return cmds, nil
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
