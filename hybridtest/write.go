package hybridtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"strconv"
	"time"

	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds Write, the one write of a Remote, with the semantics of
// l2.Store's over one Redis server.

// Write makes each write of ws, in order, each as one step with its
// message, log entry and lease release (no other call of r runs within a
// step; other calls may run between two), and reports which stored their
// value. It is l2.Store's Write over one Redis server. For each write:
//
//   - If decides whether it stores: Always does; IfAbsent where the key
//     holds no live value; IfEqual where it holds exactly Old (an empty
//     Old, nil included, matches an empty value, never a missing key);
//     IfNewer where it holds nothing, or a value whose write time (8 bytes
//     big-endian at offset StampAt; a value too short counts as older) is
//     not after Value's. IfNewer also reports stored, writing and
//     publishing nothing, where the key holds exactly Value. IfSeq where
//     the key holds no live value and the counter Seq holds exactly
//     SeqWas (a missing counter never matches).
//   - A write with Seq (but IfSeq) that stores bumps the counter Seq: by
//     one, or, where it is missing, to a value it never held.
//   - With Touch (and IfEqual), the stored value is kept and Value written
//     over its bytes from offset TouchAt, where the key holds at least
//     TouchAt+len(Value) bytes that begin with Old but for those bytes.
//   - A stored value lives for TTL (<= 0: no expiry), or, with KeepTTL,
//     for the lifetime the key had left.
//   - Msg goes out if the write stored, Else if not (nil: nothing), on
//     f.Channel (empty: nothing goes out); with Lease set, only if someone
//     may wait for the lease (a taker found it held, or it is not held
//     under Token). With Log set, a message that goes out first appends
//     Log to the log f.Log, trimmed to exactly f.LogLen entries (Redis
//     trims to about that many), and goes out positioned at the new entry
//     (see message.Positioned). Positions are "<n>-0", n counting up from
//     1 across all the logs of r, so that a log dropped with DropLog and
//     created again gets newer positions, as a Redis stream does after a
//     restart. Without Log, a write with Seq sends its message sequenced
//     at the counter's value after the write (see message.Sequenced).
//   - Lease, if set, is then deleted if it is still held under Token,
//     whether or not the write stored.
//
// When a message is due and r.Bus is nil or its Publish fails, that write
// is not made, and Write returns the error with what the writes before it
// stored.
//
// A batch announced as a whole (f.Msg set, and f.Channel) is made as one
// step (Info().AtomicBatch), unless SplitBatch is set: each write as above,
// then f.Entry is appended to the log f.Log and f.Msg goes out, positioned
// at the entry if there is one. With r.Bus nil it fails with ErrNoBus
// before any write; when the publish of f.Msg fails, the writes are made
// and Write returns the error. f.Entry without a log (NoLog) fails the call
// with an error wrapping errors.ErrUnsupported.
//
// Each write is checked before any is made: an unknown Cond, KeepTTL or
// Touch without IfEqual, IfSeq without Seq, a negative StampAt with IfNewer or TouchAt with
// Touch, Lease without
// Token, or Log set without f.Log or with f.LogLen below 1 fails the call
// (Log on a Remote with NoLog fails it with an error wrapping
// errors.ErrUnsupported). With no writes it returns at once.
func (r *Remote) Write(ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error) {
	if len(ws) == 0 {
		return []bool{}, nil
	}
	if err := r.checkFeed(f); err != nil {
		return nil, fmt.Errorf("hybridtest: write of %d: %w", len(ws), err)
	}
	for i, w := range ws {
		if err := r.checkWrite(w, f); err != nil {
			return nil, fmt.Errorf("hybridtest: write %d of %d (%q): %w", i, len(ws), w.Key, err)
		}
	}
	stored := make([]bool, len(ws))
	defer r.count(func(c *Calls) {
		c.Write++
		c.Writes += len(ws)
		for i, w := range ws {
			switch w.If {
			case tier.Always:
				c.Always++
			case tier.IfAbsent:
				c.IfAbsent++
			case tier.IfEqual:
				c.IfEqual++
			case tier.IfNewer:
				c.IfNewer++
			case tier.IfSeq:
				c.IfSeq++
			}
			if w.Lease != "" {
				c.Releasing++
			}
			if w.Touch {
				c.Touches++
			}
			if stored[i] {
				c.Written++
			}
		}
	})
	if err := r.begin(ctx); err != nil {
		return nil, err
	}
	if f.Msg != nil && f.Channel != "" {
		return stored, r.writeAnnounced(ctx, ws, f, stored)
	}
	for i, w := range ws {
		ok, err := r.write(ctx, w, f)
		if err != nil {
			return stored, fmt.Errorf("hybridtest: write %d of %d (%q): %w", i, len(ws), w.Key, err)
		}
		stored[i] = ok
	}
	return stored, nil
}

// writeAnnounced makes ws, then announces them with f.Msg (and f.Entry),
// all as one step unless r.SplitBatch is set.
func (r *Remote) writeAnnounced(ctx context.Context, ws []tier.Write, f tier.Feed, stored []bool) error {
	if r.Bus == nil {
		return ErrNoBus
	}
	if !r.SplitBatch {
		r.mu.Lock()
		defer r.mu.Unlock()
	}
	for i, w := range ws {
		var ok bool
		var err error
		if r.SplitBatch {
			ok, err = r.write(ctx, w, f)
		} else {
			ok, err = r.writeLocked(ctx, w, f)
		}
		if err != nil {
			return fmt.Errorf("hybridtest: write %d of %d (%q): %w", i, len(ws), w.Key, err)
		}
		stored[i] = ok
	}
	if r.SplitBatch {
		r.mu.Lock()
		defer r.mu.Unlock()
	}
	msg := f.Msg
	if f.Entry != nil {
		msg = message.Positioned(pos(r.journal.seq+1), msg)
	}
	if err := r.Bus.Publish(ctx, f.Channel, msg); err != nil {
		return fmt.Errorf("hybridtest: announce %d writes: %w", len(ws), err)
	}
	if f.Entry != nil {
		l := r.journal.logLocked(f.Log, true)
		r.journal.appendLocked(l, f.Entry, false)
		l.trim(f.LogLen)
	}
	return nil
}

// checkFeed returns what is wrong with f, for a batch it announces.
func (r *Remote) checkFeed(f tier.Feed) error {
	switch {
	case f.Entry == nil || f.Msg == nil || f.Channel == "":
		return nil
	case r.NoLog:
		return fmt.Errorf("a log entry for the batch: the Remote keeps no log: %w", errors.ErrUnsupported)
	case f.Log == "":
		return errors.New("Feed.Entry without Feed.Log")
	case f.LogLen < 1:
		return fmt.Errorf("Feed.Entry with Feed.LogLen %d, want at least 1", f.LogLen)
	}
	return nil
}

// checkWrite returns what is wrong with w, given f.
func (r *Remote) checkWrite(w tier.Write, f tier.Feed) error {
	switch {
	case w.If > tier.IfSeq:
		return fmt.Errorf("unknown condition %d", w.If)
	case w.KeepTTL && w.If != tier.IfEqual:
		return errors.New("KeepTTL without IfEqual")
	case w.Touch && w.If != tier.IfEqual:
		return errors.New("Touch without IfEqual")
	case w.If == tier.IfSeq && w.Seq == "":
		return errors.New("IfSeq without Seq")
	case w.Touch && w.TouchAt < 0:
		return fmt.Errorf("negative TouchAt %d", w.TouchAt)
	case w.If == tier.IfNewer && w.StampAt < 0:
		return fmt.Errorf("negative StampAt %d", w.StampAt)
	case w.Lease != "" && w.Token == "":
		return fmt.Errorf("lease %q without a token", w.Lease)
	case w.Log == nil:
		return nil
	case r.NoLog:
		return fmt.Errorf("a log entry: the Remote keeps no log: %w", errors.ErrUnsupported)
	case f.Log == "":
		return errors.New("a log entry without Feed.Log")
	case f.LogLen < 1:
		return fmt.Errorf("a log entry with Feed.LogLen %d, want at least 1", f.LogLen)
	}
	return nil
}

// write makes w as one step and reports whether it stored.
func (r *Remote) write(ctx context.Context, w tier.Write, f tier.Feed) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writeLocked(ctx, w, f)
}

// writeLocked is write with r.mu held.
func (r *Remote) writeLocked(ctx context.Context, w tier.Write, f tier.Feed) (bool, error) {
	now := r.now()
	cur, ok := r.getLocked(w.Key, now)
	var write, found bool
	switch w.If {
	case tier.Always:
		write = true
	case tier.IfAbsent:
		write = !ok
	case tier.IfEqual:
		write = ok && bytes.Equal(cur, w.Old)
		if w.Touch {
			write = ok && touchable(cur, w.Old, w.TouchAt, len(w.Value))
		}
	case tier.IfNewer:
		found = ok && bytes.Equal(cur, w.Value)
		write = !found && (!ok || !newer(cur, w.Value, w.StampAt))
	case tier.IfSeq:
		seq, has := r.getLocked(w.Seq, now)
		write = !ok && has && len(w.SeqWas) > 0 && bytes.Equal(seq, w.SeqWas)
	}
	msg := w.Else
	if write || found {
		msg = w.Msg
	}
	if found || (w.Lease != "" && !r.waitedLocked(w.Lease, w.Token, now)) {
		msg = nil
	}
	// The counter is bumped first: an unlogged message goes out sequenced
	// at its value after the write.
	if write && w.Seq != "" && w.If != tier.IfSeq {
		r.bumpLocked(w.Seq, now)
	}
	if msg != nil && f.Channel != "" {
		if r.Bus == nil {
			return false, ErrNoBus
		}
		if w.Log != nil {
			msg = message.Positioned(pos(r.journal.seq+1), msg)
		} else if w.Seq != "" {
			if cur, ok := r.getLocked(w.Seq, now); ok {
				if n, err := strconv.ParseUint(string(cur), 10, 64); err == nil && n > 0 {
					msg = message.Sequenced(n, msg)
				}
			}
		}
		if err := r.Bus.Publish(ctx, f.Channel, msg); err != nil {
			return false, err
		}
		if w.Log != nil {
			l := r.journal.logLocked(f.Log, true)
			r.journal.appendLocked(l, w.Log, false)
			l.trim(f.LogLen)
		}
	}
	switch {
	case write && w.Touch:
		it := r.items[w.Key]
		it.value = stored(it.value)
		copy(it.value[w.TouchAt:], w.Value)
		if !w.KeepTTL {
			it.expires = time.Time{}
			if w.TTL > 0 {
				it.expires = now.Add(w.TTL)
			}
		}
		r.items[w.Key] = it
	case write && w.KeepTTL:
		it := r.items[w.Key]
		it.value = stored(w.Value)
		r.items[w.Key] = it
	case write:
		r.setLocked(w.Key, w.Value, w.TTL, now)
	}
	if w.Lease != "" {
		if v, ok := r.getLocked(w.Lease, now); ok && heldBy(v, w.Token) {
			delete(r.items, w.Lease)
		}
	}
	return write || found, nil
}

// bumpLocked adds one to the sequence counter key, or sets a missing one
// to a value it never held: the clock in microseconds times 1000, and
// never at or below a value the Remote gave a counter before.
func (r *Remote) bumpLocked(key string, now time.Time) {
	cur, ok := r.getLocked(key, now)
	var n int64
	if ok {
		n, _ = strconv.ParseInt(string(cur), 10, 64)
		n++
	} else {
		n = max(now.UnixMicro()*1000, r.seqFloor+1)
	}
	r.seqFloor = max(r.seqFloor, n)
	r.setLocked(key, []byte(strconv.FormatInt(n, 10)), 0, now)
}

// touchable reports whether cur holds at least at+n bytes that begin with
// old but for the n bytes at offset at.
func touchable(cur, old []byte, at, n int) bool {
	if len(cur) < max(len(old), at+n) {
		return false
	}
	for i, b := range old {
		if (i < at || i >= at+n) && cur[i] != b {
			return false
		}
	}
	return true
}

// newer reports whether cur was written after value, by their write times
// at offset off (8 bytes big-endian). A stored value too short to hold one
// counts as older, and so does any stored value when value is too short.
func newer(cur, value []byte, off int) bool {
	if len(cur) < off+8 || len(value) < off+8 {
		return false
	}
	return binary.BigEndian.Uint64(cur[off:]) > binary.BigEndian.Uint64(value[off:])
}
