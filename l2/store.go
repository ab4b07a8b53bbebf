package l2

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Prefix is prepended to every key the Store reads or writes, so that
	// several caches or applications can share one Redis: with Prefix
	// "app:", Get(ctx, "user:1") reads the Redis key "app:user:1". The
	// invalidation log of SetPublishAndLog, OpenLog and ReadLog is a key
	// and is prefixed too; the channel given to SetAndPublish and
	// SetPublishAndLog is not (hybrid.Cache adds the prefix to the default
	// channel it derives, and to its messages, see Store.Prefix).
	//
	// NOTE: in Redis Cluster the prefix is part of the hashed key, so a
	// prefix with a hash tag ("{app}:") puts every key in one slot, on one
	// node.
	//
	// default: "" (keys are used as given).
	Prefix string

	// ReadTimeout bounds each read (Get, GetMany, ReadLog) as a whole:
	// dials, waits for a pooled connection, retries and their back-off
	// included, whatever the client's retry settings. It is applied as a
	// deadline on ctx unless ctx ends sooner. A call that runs out of time
	// returns an error for which errors.Is(err, context.DeadlineExceeded)
	// is true.
	//
	// NOTE: go-redis applies a ctx deadline to the socket only when the
	// client was built with ContextTimeoutEnabled: true. Without it, a call
	// to a stalled server lasts until the client's own ReadTimeout (see
	// Store.ReadBound and the package doc).
	//
	// default (0): 250 milliseconds, far above a healthy round trip (under
	// a millisecond on a LAN, a few across zones with TLS) yet short enough
	// that a dead Redis delays a read that the loader can answer by a
	// quarter of a second at most. Negative: no bound of the Store's own.
	ReadTimeout time.Duration

	// WriteTimeout bounds each write (Set, SetIfAbsent, SetManyIfAbsent,
	// CompareAndSet, SetAndPublish, SetIfNewerAndPublish, SetPublishAndLog,
	// SetIfNewerPublishAndLog, OpenLog, TakeLeases, ExtendLeases,
	// ReleaseLeases, FillAndRelease) as ReadTimeout bounds reads. A
	// TakeLeases that reads the keys its leases guard in a second round
	// trip (Redis Cluster, Ring) does so within the same bound.
	//
	// default (0): 1 second, longer than reads: a failed write is returned
	// to the caller and may have been applied all the same, a script may
	// take two round trips (EVALSHA, then EVAL after NOSCRIPT) and a batch
	// carries many values. Negative: no bound of the Store's own.
	WriteTimeout time.Duration
}

// Defaults of Options.ReadTimeout and Options.WriteTimeout.
const (
	defaultReadTimeout  = 250 * time.Millisecond
	defaultWriteTimeout = time.Second
)

// topology says how keys of one batch may be spread over commands.
type topology uint8

const (
	// single is one server (or a Sentinel-managed primary): any keys may
	// share one MGET.
	single topology = iota
	// cluster is Redis Cluster: a multi-key command must stay in one hash
	// slot.
	cluster
	// ring is a go-redis Ring, sharded client-side by key: one command per
	// key, since a multi-key command would go to the first key's shard only.
	ring
)

// Store is a byte store over Redis: the second tier of a hybrid cache. It
// implements the Remote, BatchRemote, CompareAndSetter, Announcer,
// Journal, Replacer, NewerSetter, NewerJournal and Leaser interfaces of
// package hybrid (the Journal's log on one server or a Sentinel-managed
// primary only). Create it with New; it is safe for
// concurrent use.
//
// A Store does not own its client: closing the client is the caller's job,
// and a Store needs no closing of its own.
type Store struct {
	rdb       redis.UniversalClient
	prefix    string
	read      *timeout      // bound of a read
	write     *timeout      // bound of a write
	readBound time.Duration // what ReadBound reports
	topo      topology
}

// New returns a Store that keeps its entries in rdb: a *redis.Client (also
// one from redis.NewFailoverClient), a *redis.ClusterClient or a
// *redis.Ring, or any redis.UniversalClient wrapping one of them by
// embedding. New panics if rdb is nil.
func New(rdb redis.UniversalClient, o Options) *Store {
	if rdb == nil {
		panic("l2: New: nil client")
	}
	s := &Store{
		rdb:    rdb,
		prefix: o.Prefix,
		read:   newTimeout(bound(o.ReadTimeout, defaultReadTimeout)),
		write:  newTimeout(bound(o.WriteTimeout, defaultWriteTimeout)),
		topo:   topologyOf(rdb),
	}
	if deadlinesReachSocket(rdb) {
		s.readBound = s.read.d
	}
	return s
}

// topologyOf tells a cluster or ring client from a single-node one, also
// through types that embed the go-redis client.
func topologyOf(rdb redis.UniversalClient) topology {
	switch rdb.(type) {
	case *redis.ClusterClient:
		return cluster
	case *redis.Ring:
		return ring
	}
	if _, ok := rdb.(interface {
		MasterForKey(context.Context, string) (*redis.Client, error)
	}); ok {
		return cluster
	}
	if _, ok := rdb.(interface {
		GetShardClientForKey(string) (*redis.Client, error)
	}); ok {
		return ring
	}
	return single
}

// Get returns the value stored under key. A missing key is ok == false with
// a nil error.
func (s *Store) Get(ctx context.Context, key string) ([]byte, bool, error) {
	ctx, cancel := withTimeout(ctx, s.read)
	defer cancel()
	v, err := s.rdb.Get(ctx, s.prefix+key).Bytes()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("l2: get %q: %w", key, withCause(ctx, err))
	}
	return v, true, nil
}

// Set stores value under key for ttl, rounded down to whole milliseconds
// (and up to one millisecond when shorter). A ttl of zero or less stores it
// without expiry.
func (s *Store) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	if err := s.rdb.Set(ctx, s.prefix+key, value, expiry(ttl)).Err(); err != nil {
		return fmt.Errorf("l2: set %q: %w", key, withCause(ctx, err))
	}
	return nil
}

// SetIfAbsent stores value under key for ttl, as Set does, only if key
// holds nothing (SET NX), and reports whether it stored it. A cache fills
// with it, so that a fill never overwrites another instance's write.
func (s *Store) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	stored, err := s.rdb.SetNX(ctx, s.prefix+key, value, expiry(ttl)).Result()
	if err != nil {
		return false, fmt.Errorf("l2: set if absent %q: %w", key, withCause(ctx, err))
	}
	return stored, nil
}

// GetMany returns the values stored under keys: one slot per key, in order,
// nil for a missing key (an empty stored value is a non-nil empty slice).
// Keys may repeat. With no keys it returns at once.
//
// On one server GetMany sends one MGET. In Redis Cluster it groups keys by
// hash slot and sends one MGET per slot (a GET for a slot of one key), all
// in one pipeline, which go-redis splits into one round trip per node, run
// in parallel; so keys in different slots never fail with CROSSSLOT. If any
// command fails, GetMany returns only an error.
func (s *Store) GetMany(ctx context.Context, keys []string) ([][]byte, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	ctx, cancel := withTimeout(ctx, s.read)
	defer cancel()
	out, err := s.getMany(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("l2: get %d keys: %w", len(keys), err)
	}
	return out, nil
}

// getMany is GetMany without its bound and its wrapping: TakeLeases reads
// the keys its leases guard with it.
func (s *Store) getMany(ctx context.Context, keys []string) ([][]byte, error) {
	full := s.fullKeys(keys)
	out := make([][]byte, len(keys))
	groups := s.split(full)
	if groups == nil {
		vals, err := s.rdb.MGet(ctx, full...).Result()
		if err != nil {
			return nil, withCause(ctx, err)
		}
		if err := fill(out, nil, vals); err != nil {
			return nil, err
		}
		return out, nil
	}
	// A group of one key gets a GET, cheaper to decode than an MGET.
	pipe := s.rdb.Pipeline()
	cmds := make([]redis.Cmder, len(groups))
	for i, g := range groups {
		if len(g.keys) == 1 {
			cmds[i] = pipe.Get(ctx, g.keys[0])
		} else {
			cmds[i] = pipe.MGet(ctx, g.keys...)
		}
	}
	// Exec reports the first failed command, and a GET of a missing key
	// fails with redis.Nil: look at each command instead.
	_, _ = pipe.Exec(ctx)
	for i, g := range groups {
		var err error
		switch cmd := cmds[i].(type) {
		case *redis.StringCmd:
			var v []byte
			if v, err = cmd.Bytes(); err == nil {
				if v == nil {
					v = []byte{}
				}
				out[g.idx[0]] = v
			} else if errors.Is(err, redis.Nil) {
				err = nil
			} else {
				err = withCause(ctx, err)
			}
		case *redis.SliceCmd:
			if err = cmd.Err(); err == nil {
				err = fill(out, g.idx, cmd.Val())
			} else {
				err = withCause(ctx, err)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SetManyIfAbsent stores values[i] under keys[i] for ttls[i], as
// SetIfAbsent does, and reports in stored[i] whether it stored it. The three
// slices must have the same length. With no keys it returns at once. Of
// repeated keys, only the first can be stored. All the SET NX commands go in
// one pipeline: one round trip per node.
//
// NOTE: the writes are not atomic: when an error is returned (with nil
// stored), some keys may have been written and others not.
func (s *Store) SetManyIfAbsent(ctx context.Context, keys []string, values [][]byte, ttls []time.Duration) ([]bool, error) {
	if len(values) != len(keys) || len(ttls) != len(keys) {
		return nil, fmt.Errorf("l2: set many if absent: lengths differ: %d keys, %d values, %d ttls", len(keys), len(values), len(ttls))
	}
	if len(keys) == 0 {
		return nil, nil
	}
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.BoolCmd, len(keys))
	for i, key := range keys {
		cmds[i] = pipe.SetNX(ctx, s.prefix+key, values[i], expiry(ttls[i]))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("l2: set if absent %d keys: %w", len(keys), withCause(ctx, err))
	}
	stored := make([]bool, len(keys))
	for i, cmd := range cmds {
		stored[i] = cmd.Val()
	}
	return stored, nil
}

// setAndPublish writes KEYS[1] = ARGV[1] (with expiry ARGV[2] milliseconds
// unless it is 0) and publishes ARGV[4] on channel ARGV[3], in one atomic
// step.
var setAndPublish = redis.NewScript(`
local ttl = tonumber(ARGV[2])
if ttl > 0 then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
else
	redis.call('SET', KEYS[1], ARGV[1])
end
return redis.call('PUBLISH', ARGV[3], ARGV[4])
`)

// compareAndSet stores ARGV[2] under KEYS[1] for ARGV[3] ms (0: no expiry)
// only if KEYS[1] holds exactly ARGV[1]; it returns 1 if it stored.
var compareAndSet = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
local ttl = tonumber(ARGV[3])
if ttl > 0 then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
else
	redis.call('SET', KEYS[1], ARGV[2])
end
return 1
`)

// CompareAndSet stores value under key for ttl only if key holds exactly
// old, in one Lua script, and reports whether it stored. A fill uses it to
// replace what it read (a stale, undecodable or deleted entry) without
// overwriting a write that landed since.
func (s *Store) CompareAndSet(ctx context.Context, key string, old, value []byte, ttl time.Duration) (bool, error) {
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	n, err := compareAndSet.Run(ctx, s.rdb, []string{s.prefix + key}, old, value, int64(expiry(ttl)/time.Millisecond)).Int()
	if err != nil {
		return false, fmt.Errorf("l2: compare and set %q: %w", key, withCause(ctx, err))
	}
	return n == 1, nil
}

// SetAndPublish stores value under key for ttl, as Set does, and publishes
// msg on channel, in one Lua script. Redis runs a script atomically, so
// messages about one key reach every subscriber of channel in the order of
// the writes, and the last message received carries the value Redis holds.
// The script goes by EVALSHA, falling back to EVAL the first time a server
// does not know it.
//
// In Redis Cluster the script runs on the master of key's slot (key is
// passed as KEYS[1]); the PUBLISH inside it is the classic, cluster-wide
// one, so subscribers connected to any node receive it.
//
// NOTE: an error does not say the write was not made (the reply may have
// been lost after the script ran). With a go-redis Ring the message is
// published on key's shard only.
func (s *Store) SetAndPublish(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte) error {
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	err := setAndPublish.Run(ctx, s.rdb, []string{s.prefix + key}, value, int64(expiry(ttl)/time.Millisecond), channel, msg).Err()
	if err != nil {
		return fmt.Errorf("l2: set and publish %q: %w", key, withCause(ctx, err))
	}
	return nil
}

// replaceAndPublish stores ARGV[2] under KEYS[1], keeping the key's
// remaining lifetime (KEEPTTL), only if KEYS[1] holds exactly ARGV[1]; then,
// whether or not it replaced, publishes ARGV[4] on channel ARGV[3] unless
// ARGV[3] is empty. It returns 1 if it replaced.
var replaceAndPublish = redis.NewScript(`
local replaced = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
	replaced = 1
end
if ARGV[3] ~= '' then
	redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return replaced
`)

// ReplaceAndPublish stores value under key only if key holds exactly old,
// keeping the lifetime key has left, and, whether or not it replaced,
// publishes msg on channel (nothing when channel is empty), in one Lua
// script; it reports whether it replaced. Package hybrid's Expire uses it to
// move a stored value's logical expiry without changing how long Redis
// keeps it, and without overwriting a write that landed since it read the
// value. It needs Redis 6.0 or later (SET KEEPTTL).
//
// NOTE: as with SetAndPublish, an error does not say the script did not run.
func (s *Store) ReplaceAndPublish(ctx context.Context, key string, old, value []byte, channel string, msg []byte) (bool, error) {
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	n, err := replaceAndPublish.Run(ctx, s.rdb, []string{s.prefix + key}, old, value, channel, msg).Int()
	if err != nil {
		return false, fmt.Errorf("l2: replace and publish %q: %w", key, withCause(ctx, err))
	}
	return n == 1, nil
}

// expiry turns a ttl into the expiration go-redis's Set takes: 0 for none
// (a negative value would mean KEEPTTL to go-redis), otherwise whole
// milliseconds, at least one.
func expiry(ttl time.Duration) time.Duration {
	switch {
	case ttl <= 0:
		return 0
	case ttl < time.Millisecond:
		return time.Millisecond
	}
	return ttl.Truncate(time.Millisecond)
}

// fullKeys returns keys with the prefix applied, or keys itself when there
// is no prefix.
func (s *Store) fullKeys(keys []string) []string {
	if s.prefix == "" {
		return keys
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = s.prefix + k
	}
	return full
}

// group is a set of keys that one multi-key command may carry.
type group struct {
	keys []string // full keys
	idx  []int    // idx[j] is the position of keys[j] in the caller's slice
}

// split groups full keys so that each group can go in one multi-key
// command: by hash slot in Redis Cluster, one key per group with a Ring. It
// returns nil when all the keys can go in one command.
func (s *Store) split(full []string) []group {
	if s.topo == single || len(full) == 1 {
		return nil
	}
	if s.topo == ring {
		order := make([]int, len(full))
		groups := make([]group, len(full))
		for i := range full {
			order[i] = i
			groups[i] = group{keys: full[i : i+1], idx: order[i : i+1]}
		}
		return groups
	}
	// Sort the keys by slot: each run of one slot is a group.
	slots := make([]uint16, len(full))
	order := make([]int, len(full))
	for i, k := range full {
		slots[i] = slot(k)
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(slots[a], slots[b]) })
	if slots[order[0]] == slots[order[len(order)-1]] {
		return nil
	}
	sorted := make([]string, len(full))
	for j, i := range order {
		sorted[j] = full[i]
	}
	var groups []group
	start := 0
	for j := 1; j <= len(order); j++ {
		if j == len(order) || slots[order[j]] != slots[order[start]] {
			groups = append(groups, group{keys: sorted[start:j], idx: order[start:j]})
			start = j
		}
	}
	return groups
}

// fill stores the MGET reply vals in out, at the positions idx, or in order
// when idx is nil.
func fill(out [][]byte, idx []int, vals []any) error {
	want := len(out)
	if idx != nil {
		want = len(idx)
	}
	if len(vals) != want {
		return fmt.Errorf("MGET returned %d values for %d keys", len(vals), want)
	}
	for j, v := range vals {
		var b []byte
		switch v := v.(type) {
		case nil:
		case string:
			b = append([]byte{}, v...)
		case []byte:
			b = v
		default:
			return fmt.Errorf("MGET returned a %T", v)
		}
		if idx != nil {
			out[idx[j]] = b
		} else {
			out[j] = b
		}
	}
	return nil
}

// newerCheck begins the set-if-newer scripts: it returns 2 when KEYS[1]
// holds ARGV[1] already and 0 when it holds a value written later (write
// times read as 8 bytes big-endian at byte offset ARGV[5]); otherwise the
// script goes on to write.
const newerCheck = `
local off = tonumber(ARGV[5])
local function stamp(s)
	if #s < off + 8 then
		return nil
	end
	local t = 0
	for i = off + 1, off + 8 do
		t = t * 256 + string.byte(s, i)
	end
	return t
end
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
	return 2
end
local new = stamp(ARGV[1])
if cur and new then
	local old = stamp(cur)
	if old and old > new then
		return 0
	end
end
`

// setIfNewerAndPublish stores ARGV[1] under KEYS[1] (with expiry ARGV[2]
// milliseconds unless it is 0) only if KEYS[1] is missing, or its value's
// write time is not newer than ARGV[1]'s (both read as 8 bytes big-endian
// at byte offset ARGV[5]; a value too short to hold one counts as older)
// and it is not ARGV[1] itself. When it stored, it publishes ARGV[4] on
// channel ARGV[3] unless ARGV[3] is empty. It returns 1 if it stored, 2 if
// the key already holds ARGV[1] (nothing written or published), 0 if it
// holds a newer value.
var setIfNewerAndPublish = redis.NewScript(newerCheck + `local ttl = tonumber(ARGV[2])
if ttl > 0 then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
else
	redis.call('SET', KEYS[1], ARGV[1])
end
if ARGV[3] ~= '' then
	redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return 1
`)

// SetIfNewerAndPublish stores value under key for ttl, as Set does, only if
// key holds nothing or a value not written after value, and then publishes
// msg on channel (nothing when channel is empty), in one Lua script. A
// value's write time is read by the script from its own bytes: 8 bytes,
// big-endian, at byte offset stampOffset (the caller's format decides
// where; package hybrid passes 3 for its envelopes and 0 for its 8-byte
// records). A stored value too short to hold one counts as older; so does
// any stored value when value itself is too short.
//
// stored reports whether key holds value when the call returns: true if
// the script wrote it, and true also, with nothing written or published,
// when key already held exactly value (a retry of a write that landed
// although its call failed). It is false, with nothing written or
// published, when key holds a newer value. Of two different values with
// the same write time, value wins: one writer's later write in the same
// millisecond must not lose to its earlier one. Package
// hybrid replays queued writes with it (hybrid.Options.QueueWrites), so
// that a replay never overwrites a newer write of another instance.
//
// Write times are compared as the numbers they are (the script reads them
// into Lua numbers, exact up to 2^53: Unix milliseconds fit).
//
// NOTE: as with SetAndPublish, an error does not say the write was not
// made.
func (s *Store) SetIfNewerAndPublish(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte, stampOffset int) (stored bool, err error) {
	if stampOffset < 0 {
		return false, fmt.Errorf("l2: set if newer %q: negative stamp offset %d", key, stampOffset)
	}
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	n, err := setIfNewerAndPublish.Run(ctx, s.rdb, []string{s.prefix + key}, value, int64(expiry(ttl)/time.Millisecond), channel, msg, stampOffset).Int()
	if err != nil {
		return false, fmt.Errorf("l2: set if newer and publish %q: %w", key, withCause(ctx, err))
	}
	return n != 0, nil
}

// Prefix returns Options.Prefix, the prefix of every key the Store reads or
// writes. A hybrid.Cache over the Store makes it part of its bus channel and
// of its messages, so that caches kept apart by the prefix share neither.
func (s *Store) Prefix() string { return s.prefix }
