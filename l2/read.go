package l2

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// Get returns the values stored under keys: one slot per key, in order,
// nil for a missing key (an empty stored value is a non-nil empty slice).
// A miss is not an error. Keys may repeat. With no keys it returns at
// once.
//
// One key is a GET. More are one MGET on one server; in Redis Cluster they
// are grouped by hash slot, one MGET per slot (a GET for a slot of one
// key), all in one pipeline, which go-redis splits into one round trip per
// node, run in parallel, so that keys in different slots never fail with
// CROSSSLOT; with a Ring, a GET per key in one pipeline. If any command
// fails, Get returns only an error.
func (s *Store) Get(ctx context.Context, keys []string) ([][]byte, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	var out [][]byte
	err := call(ctx, s.read, about("get", "keys", keys), func(ctx context.Context) error {
		var err error
		out, err = s.get(ctx, keys)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// get is Get without its bound and its wrapping: TakeLeases reads the keys
// its leases guard with it. keys is not empty.
func (s *Store) get(ctx context.Context, keys []string) ([][]byte, error) {
	out := make([][]byte, len(keys))
	if len(keys) == 1 {
		v, err := s.rdb.Get(ctx, s.prefix+keys[0]).Bytes()
		return out, one(out, 0, v, err)
	}
	full := s.fullKeys(keys)
	groups := s.split(full)
	if groups == nil {
		vals, err := s.rdb.MGet(ctx, full...).Result()
		if err != nil {
			return nil, err
		}
		return out, fill(out, nil, vals)
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
			v, gerr := cmd.Bytes()
			err = one(out, g.idx[0], v, gerr)
		case *redis.SliceCmd:
			if err = cmd.Err(); err == nil {
				err = fill(out, g.idx, cmd.Val())
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// one stores in out[i] the reply of a GET: v, or nil for a missing key.
func one(out [][]byte, i int, v []byte, err error) error {
	switch {
	case errors.Is(err, redis.Nil):
		return nil
	case err != nil:
		return err
	case v == nil:
		v = []byte{}
	}
	out[i] = v
	return nil
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
	// One allocation holds the copies of every string value; each slot's
	// capacity ends at its own bytes, so an append to one never writes
	// over the next.
	n := 0
	for _, v := range vals {
		if v, ok := v.(string); ok {
			n += len(v)
		}
	}
	slab := make([]byte, 0, n)
	for j, v := range vals {
		var b []byte
		switch v := v.(type) {
		case nil:
		case string:
			at := len(slab)
			slab = append(slab, v...)
			b = slab[at:len(slab):len(slab)]
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

// Heads returns the first n bytes (n > 0) of the value of each of keys
// (all of a shorter value), in order, nil for a missing key, as
// tier.HeadReader asks. It sends one GETRANGE key 0 n-1 per key, all in
// one pipeline, which go-redis sends to each node in one round trip (in
// parallel on Redis Cluster, where single-key commands need no grouping by
// slot). GETRANGE answers a missing key and an empty value alike, so an
// empty value reads as missing (the cache never stores one). If any
// command fails (a key holding another type, say), Heads returns only an
// error. With no keys it returns at once.
func (s *Store) Heads(ctx context.Context, keys []string, n int) ([][]byte, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if n <= 0 {
		return nil, fmt.Errorf("l2: heads: length %d, want at least 1", n)
	}
	out := make([][]byte, len(keys))
	err := call(ctx, s.read, about("heads", "keys", keys), func(ctx context.Context) error {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, len(keys))
		for i, key := range keys {
			cmds[i] = pipe.GetRange(ctx, s.prefix+key, 0, int64(n)-1)
		}
		// Exec reports the first failed command: look at each instead.
		_, _ = pipe.Exec(ctx)
		for i, cmd := range cmds {
			v, err := cmd.Bytes()
			if err != nil {
				return err
			}
			if len(v) > 0 {
				out[i] = v
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
