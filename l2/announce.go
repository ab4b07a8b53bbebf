package l2

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/keyslot"
	"github.com/hybridcache/hybridcache/tier"
)

// This file holds the announcement of a batch of writes as a whole
// (Feed.Msg): on one server, the batch and its message in one transaction;
// on Redis Cluster or a Ring, the message after every write of the batch.

// announced reports whether a batch on f has a message of its own to
// publish.
func announced(f tier.Feed) bool { return f.Msg != nil && f.Channel != "" }

// checkFeed returns why the Store cannot announce on f, or nil: a log entry
// for the batch (Feed.Entry) is refused where there is no log, and without
// a log to append it to.
func (s *Store) checkFeed(f tier.Feed) error {
	switch {
	case f.Entry == nil || !announced(f):
		return nil
	case s.topo != single:
		return s.noLog()
	case f.Log == "":
		return errors.New("Feed.Entry set, but no Feed.Log")
	case f.LogLen < 1:
		return fmt.Errorf("Feed.LogLen %d, want at least 1", f.LogLen)
	}
	return nil
}

// writeAtomic makes ws and then announces the batch by announceScript in
// one MULTI/EXEC transaction, on one server (or, on Redis Cluster, the
// master of the one slot of ws: see oneSlot): no other client's command
// comes between them. Scripts go by EVAL, not EVALSHA, so that none can
// fail with NOSCRIPT inside the transaction and be sent again outside it.
func (s *Store) writeAtomic(ctx context.Context, ws []tier.Write, f tier.Feed, stored []bool) error {
	scripted := s.scripted(ws, f)
	pipe := s.rdb.TxPipeline()
	cmds := make([]redis.Cmder, len(ws)+1)
	for i := range ws {
		w := &ws[i]
		switch {
		case scripted[i]:
			keys, args := s.scriptArgs(w, f, false)
			cmds[i] = writeScript.Eval(ctx, pipe, keys, args...)
		case w.If == tier.IfAbsent:
			cmds[i] = pipe.SetNX(ctx, s.prefix+w.Key, w.Value, expiry(w.TTL))
		default:
			cmds[i] = pipe.Set(ctx, s.prefix+w.Key, w.Value, expiry(w.TTL))
		}
	}
	keys, args := s.announceArgs(ws, f)
	cmds[len(ws)] = announceScript.Eval(ctx, pipe, keys, args...)
	if err := exec(ctx, pipe, cmds); err != nil {
		return err
	}
	var first error
	for i, cmd := range cmds[:len(ws)] {
		n, err := result(cmd)
		if err != nil {
			first = firstErr(first, keyErr(ws, i, err))
			continue
		}
		stored[i] = n != 0
	}
	if err := cmds[len(ws)].Err(); err != nil {
		first = firstErr(first, fmt.Errorf("announce: %w", err))
	}
	return first
}

// announceArgs returns the KEYS and ARGV of announceScript for f, after
// the writes ws: on Redis Cluster, in the slot of ws's first key (all of
// them share it: see oneSlot).
func (s *Store) announceArgs(ws []tier.Write, f tier.Feed) ([]string, []any) {
	switch {
	case f.Entry != nil:
		return []string{s.prefix + f.Log}, []any{f.Channel, f.Msg, strconv.Itoa(f.LogLen), f.Entry, "1", ""}
	case s.sharded:
		key := s.prefix + ws[0].Key
		return []string{key}, []any{keyslot.Channel(f.Channel, slot(key)), f.Msg, "0", "", "", "s"}
	case s.topo == cluster:
		return []string{s.prefix + ws[0].Key}, []any{f.Channel, f.Msg, "0", "", "", ""}
	}
	return nil, []any{f.Channel, f.Msg, "0", "", "", ""}
}

// oneSlot reports whether ws, on Redis Cluster, all name keys (their own,
// their leases and counters) in one hash slot, so that the batch and its
// message can go in one transaction on the slot's master.
func (s *Store) oneSlot(ws []tier.Write) bool {
	if s.topo != cluster || len(ws) == 0 {
		return false
	}
	want := slot(s.prefix + ws[0].Key)
	for _, w := range ws {
		if slot(s.prefix+w.Key) != want || (w.Lease != "" && slot(s.prefix+w.Lease) != want) || (w.Seq != "" && slot(s.prefix+w.Seq) != want) {
			return false
		}
	}
	return true
}

// announceAfter publishes f.Msg once the writes of its batch are done, on
// Redis Cluster (from any node: a PUBLISH reaches every node) or a Ring (on
// the channel's shard, where its subscribers listen).
func (s *Store) announceAfter(ctx context.Context, f tier.Feed) error {
	if err := s.publish(ctx, f.Channel, [][]byte{f.Msg}); err != nil {
		return fmt.Errorf("announce: %w", err)
	}
	return nil
}
