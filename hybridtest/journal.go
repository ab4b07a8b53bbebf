package hybridtest

import (
	"context"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"strconv"

	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds the invalidation logs of a Remote, as Redis streams hold
// them: ReadLog, with the semantics of l2.Store's over one Redis server,
// and the helpers that let a test look at a log or damage it. Write
// appends to them (see Write).

// journal is the logs of a Remote.
type journal struct {
	logs map[string]*memLog
	seq  uint64 // the number of the last position given out, in any log
}

// memLog is one log, as a Redis stream holds it.
type memLog struct {
	entries []logEntry // oldest first
	last    uint64     // the number of the last position it gave out
	added   int        // entries ever appended, markers included
}

type logEntry struct {
	n      uint64
	entry  []byte
	marker bool // added when the log was opened empty; ReadLog skips it
}

// pos returns the position of number n: "<n>-0".
func pos(n uint64) string { return strconv.FormatUint(n, 10) + "-0" }

// appendLocked appends an entry (or a marker) to l under the next
// position, and returns it.
func (j *journal) appendLocked(l *memLog, entry []byte, marker bool) uint64 {
	j.seq++
	l.entries = append(l.entries, logEntry{n: j.seq, entry: stored(entry), marker: marker})
	l.last = j.seq
	l.added++
	return j.seq
}

// logLocked returns the log named name, creating it if create is true.
func (j *journal) logLocked(name string, create bool) *memLog {
	l := j.logs[name]
	if l == nil && create {
		if j.logs == nil {
			j.logs = make(map[string]*memLog)
		}
		l = new(memLog)
		j.logs[name] = l
	}
	return l
}

// trim keeps the newest keep entries of l (keep >= 0).
func (l *memLog) trim(keep int) {
	if n := len(l.entries) - keep; n > 0 {
		l.entries = append([]logEntry(nil), l.entries[n:]...)
	}
}

// ReadLog returns copies of up to max entries of the log named log after
// the position after, oldest first, with their positions, and the
// position of its newest entry (Last). after must be "" or a stream id,
// and max at least 0; on a Remote with NoLog, ReadLog fails with an error
// wrapping errors.ErrUnsupported.
//
// With after "", ReadLog opens the log: if it is missing or empty, it
// appends a marker entry, which later reads skip (as l2.Store does, so
// that the log has a newest position); it returns only Last.
//
// Otherwise Complete is false when the log is missing, when after is newer
// than the last position it gave out, or when its oldest entry is newer
// than after (unless after is that last position); for an after of "0-0",
// when any entry was ever trimmed.
func (r *Remote) ReadLog(ctx context.Context, log, after string, max int) (tier.LogPage, error) {
	switch {
	case r.NoLog:
		return tier.LogPage{}, fmt.Errorf("hybridtest: read log %q: the Remote keeps no log: %w", log, errors.ErrUnsupported)
	case max < 0:
		return tier.LogPage{}, fmt.Errorf("hybridtest: read log %q: max %d, want at least 0", log, max)
	case after != "" && message.ComparePositions(after, "0-0") < 0:
		return tier.LogPage{}, fmt.Errorf("hybridtest: read log %q: position %q is not a stream id", log, after)
	}
	defer r.count(func(c *Calls) {
		c.ReadLog++
		if after == "" {
			c.OpenLog++
		}
	})
	if err := r.begin(ctx); err != nil {
		return tier.LogPage{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if after == "" {
		l := r.journal.logLocked(log, true)
		if len(l.entries) == 0 {
			r.journal.appendLocked(l, nil, true)
		}
		return tier.LogPage{Last: pos(l.last)}, nil
	}
	l := r.journal.logLocked(log, false)
	if l == nil {
		return tier.LogPage{}, nil
	}
	var p tier.LogPage
	for _, e := range l.entries {
		if len(p.Entries) == max {
			break
		}
		if e.marker || message.ComparePositions(pos(e.n), after) <= 0 {
			continue
		}
		p.Entries = append(p.Entries, stored(e.entry))
		p.Positions = append(p.Positions, pos(e.n))
	}
	p.Last = pos(l.last)
	switch {
	case after == "0-0":
		p.Complete = l.added == len(l.entries)
	case message.ComparePositions(after, p.Last) > 0:
		p.Complete = false
	default:
		p.Complete = after == p.Last || (len(l.entries) > 0 && message.ComparePositions(pos(l.entries[0].n), after) <= 0)
	}
	return p, nil
}

// PeekLog returns copies of the entries of the log named log, oldest
// first, and their positions, without markers, without counting a call,
// waiting or failing. A missing log has none.
func (r *Remote) PeekLog(log string) (entries [][]byte, positions []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.journal.logLocked(log, false)
	if l == nil {
		return nil, nil
	}
	for _, e := range l.entries {
		if !e.marker {
			entries = append(entries, stored(e.entry))
			positions = append(positions, pos(e.n))
		}
	}
	return entries, positions
}

// DropLog deletes the log named log, as a Redis restart without
// persistence, or a failover to a replica that never had it, does: ReadLog
// reports it incomplete after any position until it is created again,
// and then after any position from before.
func (r *Remote) DropLog(log string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.journal.logs, log)
}

// TrimLog drops the oldest entries of the log named log (markers
// included) so that at most keep remain, as XTRIM does, so that a test can
// make a reader fall behind the log.
func (r *Remote) TrimLog(log string, keep int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.journal.logLocked(log, false); l != nil {
		l.trim(max(keep, 0))
	}
}
