package hybridtest

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds the invalidation log of a Remote: the methods that make
// it a hybrid.Journal, with the semantics of l2.Store's over Redis, and
// the helpers that let a test look at a log or damage it.

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
	marker bool // added by OpenLog; not returned by ReadLog
}

// pos returns the position of number n: "<n>-0".
func pos(n uint64) string { return strconv.FormatUint(n, 10) + "-0" }

// appendLocked appends an entry (or a marker) to l under the next
// position, and returns it.
func (j *journal) appendLocked(l *memLog, entry []byte, marker bool) uint64 {
	j.seq++
	l.entries = append(l.entries, logEntry{n: j.seq, entry: clone(entry), marker: marker})
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

// SetPublishAndLog stores value under key, as Set does, appends a copy of
// entry to the log named log, trimmed to exactly maxLen entries (Redis
// trims to about maxLen), and publishes on channel of r.Bus
// message.Positioned(pos, msg), where pos is the new entry's position, all
// as one step (see SetAndPublish). maxLen must be at least 1. Positions
// are "<n>-0", n counting up from 1 across all the logs of r, so that a
// log dropped with DropLog and created again gets newer positions, as a
// Redis stream does after a restart.
func (r *Remote) SetPublishAndLog(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte, log string, entry []byte, maxLen int) error {
	defer r.count(func(c *Calls) { c.SetPublishAndLog++ })
	if r.Bus == nil {
		return ErrNoBus
	}
	if maxLen < 1 {
		return fmt.Errorf("hybridtest: set, publish and log %q: maxLen %d, want at least 1", key, maxLen)
	}
	if err := r.begin(ctx, false); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.Bus.Publish(ctx, channel, message.Positioned(pos(r.journal.seq+1), msg)); err != nil {
		return err
	}
	l := r.journal.logLocked(log, true)
	r.journal.appendLocked(l, entry, false)
	l.trim(maxLen)
	r.setLocked(key, value, ttl, r.now())
	return nil
}

// ReplacePublishAndLog is ReplaceAndPublish that also appends entry to the
// log named log and publishes the entry's position before msg, as
// SetPublishAndLog does, in one step.
func (r *Remote) ReplacePublishAndLog(ctx context.Context, key string, old, value []byte, channel string, msg []byte, log string, entry []byte, maxLen int) (bool, error) {
	defer r.count(func(c *Calls) { c.ReplaceAndPublish++ })
	if r.Bus == nil {
		return false, ErrNoBus
	}
	if maxLen < 1 {
		return false, fmt.Errorf("hybridtest: replace, publish and log %q: maxLen %d, want at least 1", key, maxLen)
	}
	if err := r.begin(ctx, false); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.Bus.Publish(ctx, channel, message.Positioned(pos(r.journal.seq+1), msg)); err != nil {
		return false, err
	}
	l := r.journal.logLocked(log, true)
	r.journal.appendLocked(l, entry, false)
	l.trim(maxLen)
	cur, ok := r.getLocked(key, r.now())
	if !ok || !bytes.Equal(cur, old) {
		return false, nil
	}
	it := r.items[key]
	it.value = clone(value)
	r.items[key] = it
	return true, nil
}

// OpenLog returns the position of the newest entry of the log named log,
// first adding a marker entry (which ReadLog skips) if the log is missing
// or empty.
func (r *Remote) OpenLog(ctx context.Context, log string) (string, error) {
	defer r.count(func(c *Calls) { c.OpenLog++ })
	if err := r.begin(ctx, false); err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.journal.logLocked(log, true)
	if len(l.entries) == 0 {
		r.journal.appendLocked(l, nil, true)
	}
	return pos(l.entries[len(l.entries)-1].n), nil
}

// ReadLog returns copies of up to max entries of the log named log after
// the position after, oldest first, and their positions, skipping
// markers. complete follows l2.Store.ReadLog: false when the log is
// missing, after is newer than the last position it gave out, or its
// oldest entry is newer than after (unless after is that last position);
// for an after of "" or "0-0", false when any entry was ever trimmed.
// after must be "" or a stream id, and max at least 0.
func (r *Remote) ReadLog(ctx context.Context, log, after string, max int) (entries [][]byte, positions []string, complete bool, err error) {
	defer r.count(func(c *Calls) { c.ReadLog++ })
	if max < 0 {
		return nil, nil, false, fmt.Errorf("hybridtest: read log %q: max %d, want at least 0", log, max)
	}
	if after != "" && message.ComparePositions(after, "0-0") < 0 {
		return nil, nil, false, fmt.Errorf("hybridtest: read log %q: position %q is not a stream id", log, after)
	}
	if err := r.begin(ctx, false); err != nil {
		return nil, nil, false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.journal.logLocked(log, false)
	if l == nil {
		return nil, nil, false, nil
	}
	for _, e := range l.entries {
		if len(entries) == max {
			break
		}
		if e.marker || message.ComparePositions(pos(e.n), after) <= 0 {
			continue
		}
		entries = append(entries, clone(e.entry))
		positions = append(positions, pos(e.n))
	}
	last := pos(l.last)
	switch {
	case after == "" || after == "0-0":
		complete = l.added == len(l.entries)
	case message.ComparePositions(after, last) > 0:
		complete = false
	default:
		complete = after == last || (len(l.entries) > 0 && message.ComparePositions(pos(l.entries[0].n), after) <= 0)
	}
	return entries, positions, complete, nil
}

// PeekLog returns copies of the entries of the log named log, oldest
// first, and their positions, without markers, as ReadLog does, without
// counting a call, waiting or failing. A missing log has none.
func (r *Remote) PeekLog(log string) (entries [][]byte, positions []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.journal.logLocked(log, false)
	if l == nil {
		return nil, nil
	}
	for _, e := range l.entries {
		if !e.marker {
			entries = append(entries, clone(e.entry))
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

// SetIfNewerPublishAndLog is SetIfNewerAndPublish that, when it stores,
// also appends entry to the log named log and publishes msg positioned at
// the new entry, as SetPublishAndLog does, as one step. It is l2.Store's
// SetIfNewerPublishAndLog.
func (r *Remote) SetIfNewerPublishAndLog(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte, stampOffset int, log string, entry []byte, maxLen int) (stored bool, err error) {
	defer r.count(func(c *Calls) { c.SetIfNewerPublishAndLog++ })
	if r.Bus == nil {
		return false, ErrNoBus
	}
	if maxLen < 1 {
		return false, fmt.Errorf("hybridtest: set if newer, publish and log %q: maxLen %d, want at least 1", key, maxLen)
	}
	if stampOffset < 0 {
		return false, fmt.Errorf("hybridtest: set if newer, publish and log %q: negative stamp offset %d", key, stampOffset)
	}
	if err := r.begin(ctx, false); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	switch r.newerLocked(key, value, stampOffset, now) {
	case holdsValue:
		return true, nil
	case holdsNewer:
		return false, nil
	}
	if err := r.Bus.Publish(ctx, channel, message.Positioned(pos(r.journal.seq+1), msg)); err != nil {
		return false, err
	}
	l := r.journal.logLocked(log, true)
	r.journal.appendLocked(l, entry, false)
	l.trim(maxLen)
	r.setLocked(key, value, ttl, now)
	return true, nil
}
