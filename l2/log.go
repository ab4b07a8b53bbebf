package l2

import (
	"context"
	"errors"
	"fmt"

	"github.com/hybridcache/hybridcache/internal/message"
	"github.com/hybridcache/hybridcache/tier"
)

// This file holds the reading of the invalidation log, which a write with
// Write.Log appends to (see "Invalidation log" in the package doc).

// noLog returns the error of a log call on a topology without a log: it
// wraps errors.ErrUnsupported.
func (s *Store) noLog() error {
	kind := "Redis Cluster"
	if s.topo == ring {
		kind = "a go-redis Ring"
	}
	return fmt.Errorf("no invalidation log on %s: %w", kind, errors.ErrUnsupported)
}

// ReadLog returns up to max entries of the invalidation log log (a Redis
// stream under Options.Prefix + log) that come after the position after,
// oldest first, and their positions, skipping the markers of an open. Its
// Last is the newest position the log has given out (Redis's
// last-generated-id; "" for a missing log). It reports Complete when the
// log holds every entry ever appended after after:
//
//   - the log exists;
//   - after is not newer than Last (else the log lost entries: Redis
//     restarted or failed over);
//   - its oldest entry is not newer than after, or after is Last (else
//     entries after after were trimmed, or the log was created anew).
//
// "0-0" means before the first entry: then the log is complete only if no
// entry was ever removed from it (known on Redis 7 and later; on older
// servers it is reported incomplete). after must be a stream id
// "<ms>-<seq>", and max not negative; with max 0 it returns no entries.
// When Complete is false the entries are still those the log holds after
// after, but some are missing. One Lua script (EXISTS, XINFO STREAM, and
// XRANGE once per page, more than once only if markers were skipped),
// bounded by Options.ReadTimeout.
//
// With after empty it opens the log: it returns, as Last, the position of
// its newest entry, first adding a marker entry (which reads skip) if the
// log is missing or empty, and no entries, with Complete true (nothing
// after Last is missing). One Lua script, bounded by Options.WriteTimeout
// since it may write; max is not used.
//
// On Redis Cluster or a go-redis Ring it makes no round trip and returns an
// error wrapping errors.ErrUnsupported: a script runs on one node, and so
// would the log.
func (s *Store) ReadLog(ctx context.Context, log, after string, max int) (tier.LogPage, error) {
	sub := subject{op: "read log", key: log, n: 1}
	if after == "" {
		sub.op = "open log"
	}
	switch {
	case s.topo != single:
		return tier.LogPage{}, sub.fail(s.noLog())
	case after == "":
		var last string
		err := call(ctx, s.write, sub, func(ctx context.Context) error {
			var err error
			last, err = openLogScript.Run(ctx, s.rdb, []string{s.prefix + log}).Text()
			return err
		})
		return tier.LogPage{Complete: err == nil, Last: last}, err
	case max < 0:
		return tier.LogPage{}, sub.fail(fmt.Errorf("max %d, want at least 0", max))
	}
	if !message.ValidPosition(after) {
		return tier.LogPage{}, sub.fail(fmt.Errorf("position %q is not a stream id", after))
	}
	var st logState
	err := call(ctx, s.read, sub, func(ctx context.Context) error {
		res, err := readLogScript.Run(ctx, s.rdb, []string{s.prefix + log}, "("+after, max).Slice()
		if err != nil {
			return err
		}
		st, err = parseLogState(res)
		return err
	})
	if err != nil {
		return tier.LogPage{}, err
	}
	return tier.LogPage{Entries: st.entries, Positions: st.positions, Complete: st.complete(after), Last: st.last}, nil
}

// logState is what readLogScript found.
type logState struct {
	exists        bool
	first, last   string // oldest entry ("": none), last id given out
	length, added int64  // entries now, entries ever appended (-1: unknown)
	entries       [][]byte
	positions     []string
}

// complete reports whether the log holds every entry appended after after
// (see ReadLog).
func (st logState) complete(after string) bool {
	switch {
	case !st.exists:
		return false
	case after == "" || after == "0-0": // every entry ever appended comes after it
		return st.added >= 0 && st.added == st.length
	case message.ComparePositions(after, st.last) > 0:
		return false
	}
	return after == st.last || (st.first != "" && message.ComparePositions(st.first, after) <= 0)
}

// parseLogState reads the reply of readLogScript.
func parseLogState(res []any) (logState, error) {
	var st logState
	bad := func() (logState, error) { return logState{}, fmt.Errorf("unexpected reply %v", res) }
	if len(res) == 0 {
		return bad()
	}
	if n, ok := res[0].(int64); !ok || n == 0 {
		return st, nil
	}
	if len(res) != 6 {
		return bad()
	}
	var ok [5]bool
	st.exists = true
	st.first, ok[0] = res[1].(string)
	st.last, ok[1] = res[2].(string)
	st.length, ok[2] = res[3].(int64)
	st.added, ok[3] = res[4].(int64)
	flat, ok4 := res[5].([]any)
	ok[4] = ok4 && len(flat)%2 == 0
	if ok != [5]bool{true, true, true, true, true} {
		return bad()
	}
	if len(flat) > 0 {
		st.entries = make([][]byte, 0, len(flat)/2)
		st.positions = make([]string, 0, len(flat)/2)
	}
	for i := 0; i < len(flat); i += 2 {
		id, ok1 := flat[i].(string)
		m, ok2 := flat[i+1].(string)
		if !ok1 || !ok2 {
			return bad()
		}
		st.positions = append(st.positions, id)
		st.entries = append(st.entries, []byte(m))
	}
	return st, nil
}
