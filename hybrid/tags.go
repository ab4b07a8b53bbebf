package hybrid

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"math"
	"sync"
	"time"

	"github.com/hybridcache/hybridcache/internal/message"
)

// Tags. A value written with WithTags carries its tags in L1 and in its
// envelope in the shared tier. DeleteByTag(tag) does not find and delete
// those values one by one in the shared tier: it writes a tag record (the
// time of the delete) next to them and announces it. From then on a value
// read from the shared tier that carries the tag and was written no later
// than that time is a miss, as if deleted. Each instance deletes the tagged
// values in its L1 when it gets the message, and keeps what it knows of tag
// records in tagState: filled from the bus, and read from the shared tier
// the first time a value with an unknown tag is read. Losing the bus drops
// that knowledge along with L1.
//
// Clear is DeleteByTag of a built-in tag that every value carries without
// naming it, clearTag: its record (the time of the last Clear) is read and
// known like any tag's, and a value read from the shared tier that was
// written no later than it is a miss.

// tagState is what an instance knows of tag records.
type tagState struct {
	mu sync.Mutex
	// deleted maps a tag to what is known of its record.
	deleted map[string]tagRecord
	// epoch changes whenever knowledge is dropped, so that a record read
	// before that is not learned after it.
	epoch uint64
}

// maxKnownTags bounds tagState; past it, knowledge is dropped and read
// again as needed.
const maxKnownTags = 100_000

// tagRecord is what an instance knows of one tag record.
type tagRecord struct {
	t     int64 // the time of the tag's last delete, Unix milliseconds
	until int64 // the record lives at least until then, Unix milliseconds
}

// lookup returns the time of tag's last delete (Unix milliseconds), if
// known.
func (s *tagState) lookup(tag string) (int64, bool) {
	r, ok := s.record(tag)
	return r.t, ok
}

// record returns what is known of tag's record.
func (s *tagState) record(tag string) (tagRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.deleted[tag]
	return r, ok
}

func (s *tagState) currentEpoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// learn records that tag was last deleted at t and that its record lives
// until at least until, unless knowledge was dropped since epoch. Both
// only move forward.
func (s *tagState) learn(epoch uint64, tag string, t, until int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch != s.epoch {
		return
	}
	if s.deleted == nil || len(s.deleted) >= maxKnownTags {
		s.deleted = make(map[string]tagRecord)
		s.epoch++
	}
	old, ok := s.deleted[tag]
	switch {
	case !ok || t > old.t:
		s.deleted[tag] = tagRecord{t: t, until: until}
	case t == old.t && until > old.until:
		s.deleted[tag] = tagRecord{t: t, until: until}
	}
}

// forget drops what is known of tag: it changed, and its record is to be
// read again.
func (s *tagState) forget(tag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.deleted, tag)
	s.epoch++
}

// clear drops everything known.
func (s *tagState) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleted = nil
	s.epoch++
}

// clearTag is the built-in tag every value carries, deleted by Clear. No
// tag of WithTags is empty, so none collides with it.
const clearTag = ""

// tagKey is the shared-tier key of tag's record: Namespace:\x00tag:<tag>,
// and Namespace:\x00clear for clearTag. A NUL byte cannot start a key of
// ours (check rejects it), so no key collides with them.
func (c *Cache[V]) tagKey(tag string) string {
	if tag == clearTag {
		return c.prefix + "\x00clear"
	}
	return c.prefix + "\x00tag:" + tag
}

// recordLife is how long tag's record is kept in the shared tier: the clear
// record for ever (a value of any lifetime may predate it, and it is one
// key per namespace), a tag's for twice tagLife, so that a value written
// with the tag up to tagLife after the record was written dies before it.
func recordLife(o *Options, tag string) time.Duration {
	if tag == clearTag {
		return 0
	}
	return 2 * tagLife(o)
}

// recordUntil returns how long tag's record, written at t (Unix
// milliseconds), lives at least.
func recordUntil(o *Options, tag string, t int64) int64 {
	life := recordLife(o, tag)
	if life <= 0 {
		return math.MaxInt64
	}
	return t + life.Milliseconds()
}

// tagLife is how long tag records are kept in the shared tier: at least a
// day, and at least as long as a value lives there by default. A tagged
// write may not outlive it (see Options.entry).
func tagLife(o *Options) time.Duration {
	return max(24*time.Hour, o.TTL+o.FailSafeMaxAge)
}

// encodeTagRecord and decodeTagRecord give a tag record's stored form: the
// time of the delete, Unix milliseconds, 8 bytes big-endian.
func encodeTagRecord(t int64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(t))
}

func decodeTagRecord(b []byte) (int64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b)), true
}

// DeleteByTag deletes every value written with tag (see WithTags), on
// every instance and in the shared tier: later reads miss them and load
// anew. It costs one write and one message, plus, on each instance, a pass
// over L1. A value counts as written before the delete when its write
// time, by the clock of the instance that wrote it, is not after the
// delete's time by the clock of this one: keep clocks in sync.
//
// Values written later with the tag are not affected. When the shared tier
// or the bus fails, L1 here is cleared of the tag anyway and the error is
// returned; other instances may keep their copies until their LocalTTL,
// unless Options.QueueWrites queued the delete (the error wraps ErrQueued)
// and its replay reaches them first.
func (c *Cache[V]) DeleteByTag(ctx context.Context, tag string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := (EntryOption{kind: kindTags, s: []string{tag}}).check(); err != nil {
		return fmt.Errorf("hybrid: DeleteByTag: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.deleteTag(ctx, OpDeleteTag, tag)
}

// deleteTag records the time of a delete of tag (clearTag: a Clear) in the
// shared tier, announces it with one message (a tag message naming tag,
// which carries the record when signed) and drops what it covers from L1
// here, even when the shared tier or the bus fails. op names the call.
func (c *Cache[V]) deleteTag(ctx context.Context, op Op, tag string) error {
	now := time.Now().UnixMilli()
	record := encodeTagRecord(now)
	m := message.Message{Op: message.OpTag, Origin: c.origin, Namespace: c.scope, Keys: []string{tag}, Value: record}
	w := &pendingWrite{op: op, name: tag, rkey: c.tagKey(tag), b: record, life: recordLife(&c.o, tag), m: m, stamp: stampRecord}
	err := c.enqueue(w, c.writeAndPublish(ctx, w))
	// After the shared tier: a fill that read a tagged value meanwhile
	// must not store it.
	c.tags.learn(c.tags.currentEpoch(), tag, now, recordUntil(&c.o, tag, now))
	c.dropTagged(tag)
	// Return once the record's millisecond has passed: a value written then
	// counts as deleted (see deletedSince), and one this instance writes
	// after the call must not.
	time.Sleep(time.Until(time.UnixMilli(now + 1)))
	return err
}

// dropTagged makes L1 forget every value tagged with tag (every value, for
// clearTag) and every fill in progress (which may have read one).
func (c *Cache[V]) dropTagged(tag string) {
	c.vers.bumpAll()
	c.flights.ForgetAll()
	if tag == clearTag {
		c.local.Clear()
		return
	}
	c.local.DeleteIf(func(_ string, it item[V]) bool { return it.hasTag(tag) })
}

// tags returns the tags it carries (WithTags).
func (it item[V]) tags() []string {
	if it.t == nil {
		return nil
	}
	return it.t.tags
}

// hasTag reports whether it carries tag.
func (it item[V]) hasTag(tag string) bool {
	if it.t == nil {
		return false
	}
	for _, t := range it.t.tags {
		if t == tag {
			return true
		}
	}
	return false
}

// tagDeleted reports whether a value read from the shared tier with tags,
// written at written (Unix nanoseconds), was deleted by a Clear or a
// DeleteByTag, reading records it does not know yet from the shared tier.
// When a record cannot be read, the value counts as deleted: a miss is
// safe, a stale value is not.
func (c *Cache[V]) tagDeleted(ctx context.Context, tags []string, written int64) bool {
	if c.recordDeleted(ctx, clearTag, written) {
		return true
	}
	for _, tag := range tags {
		if c.recordDeleted(ctx, tag, written) {
			return true
		}
	}
	return false
}

// recordDeleted is tagDeleted for one tag.
func (c *Cache[V]) recordDeleted(ctx context.Context, tag string, written int64) bool {
	t, ok := c.tags.lookup(tag)
	if !ok {
		var err error
		if t, err = c.readTag(ctx, tag); err != nil {
			return true
		}
	}
	return deletedSince(t, written)
}

// deletedSince reports whether a value written at written (Unix
// nanoseconds) predates a tag delete at t (Unix milliseconds; 0: none). The
// delete's millisecond counts as before: a value written then is deleted.
func deletedSince(t, written int64) bool {
	return t != 0 && written/int64(time.Millisecond) <= t
}

// tagKnownDeleted is tagDeleted without reading the shared tier: it
// reports true for a tag it does not know. A Clear not known here does not
// count: this instance dropped L1 when it heard of it (or of a bus loss),
// and what L1 holds since was stored after it.
func (c *Cache[V]) tagKnownDeleted(tags []string, written int64) bool {
	if t, ok := c.tags.lookup(clearTag); ok && deletedSince(t, written) {
		return true
	}
	for _, tag := range tags {
		t, ok := c.tags.lookup(tag)
		if !ok || deletedSince(t, written) {
			return true
		}
	}
	return false
}

// readTag reads tag's record from the shared tier and learns it. A
// missing record is written anew (see the top of this file): the time it
// was found missing, unless another instance wrote one first, which is
// then read and learnt.
func (c *Cache[V]) readTag(ctx context.Context, tag string) (int64, error) {
	if c.remote == nil {
		return 0, nil
	}
	op := recordOp(tag)
	epoch := c.tags.currentEpoch()
	for attempt := 0; ; attempt++ {
		b, found, err := c.readRecord(ctx, op, tag, c.tagKey(tag))
		if err != nil {
			return 0, err
		}
		if found {
			t, ok := decodeTagRecord(b)
			if !ok {
				c.n.decodeErrors.Add(1)
				return 0, errors.New("hybrid: the record does not decode")
			}
			c.tags.learn(epoch, tag, t, recordUntil(&c.o, tag, t))
			// A record written this very millisecond (another instance
			// found it missing): a value this instance writes from now on
			// must not count as written in it.
			time.Sleep(time.Until(time.UnixMilli(t + 1)))
			return t, nil
		}
		if attempt > 0 {
			return 0, errors.New("hybrid: the record was written and gone again at once") // unknown
		}
		now := time.Now().UnixMilli()
		w := tier.Write{Key: c.tagKey(tag), Value: encodeTagRecord(now), TTL: recordLife(&c.o, tag), If: tier.IfAbsent}
		stored, err := c.writeFeed(ctx, op, tag, []tier.Write{w}, tier.Feed{})
		if err != nil {
			return 0, err
		}
		if stored[0] {
			c.tags.learn(epoch, tag, now, recordUntil(&c.o, tag, now))
			// A value this instance writes from now on must not count as
			// written in the record's millisecond.
			time.Sleep(time.Until(time.UnixMilli(now + 1)))
			return now, nil
		}
	}
}

// recordOp is the op of reads and writes of tag's record.
func recordOp(tag string) Op {
	if tag == clearTag {
		return OpGetClear
	}
	return OpGetTag
}

// knowTags makes sure, before this instance writes a value that carries
// tags (and clearTag, which every value carries) to the shared tier, that
// each tag's record exists there and lives at least tagLife more, so that
// the value is not taken for deleted when a record written later, because
// it was missing, says the tag was deleted after the value was written. It
// costs a round trip for a record this instance does not know yet, or
// whose lifetime it extends; none otherwise, and none right after a read
// of the shared tier failed (within knowPause), so that a write while
// Redis is down waits for one call, not two. It returns an error when a
// record this instance does not know could not be read or made: a value
// written then would count as deleted once another instance finds the
// record missing, so Set and SetMany do not write it (a fill's write-back
// goes ahead: its value costs a miss later, nothing more). A record it
// knows but cannot extend costs the value a miss later, nothing more.
func (c *Cache[V]) knowTags(ctx context.Context, tags []string) error {
	if c.remote == nil || time.Now().UnixNano() < c.down.last.Load()+int64(knowPause) {
		return nil
	}
	if err := c.knowTag(ctx, clearTag); err != nil {
		return err
	}
	for _, tag := range tags {
		if err := c.knowTag(ctx, tag); err != nil {
			return err
		}
	}
	return nil
}

// knowPause is how long after a failed read of the shared tier knowTags
// does not read records.
const knowPause = 100 * time.Millisecond

// knowTag is knowTags for one tag.
func (c *Cache[V]) knowTag(ctx context.Context, tag string) error {
	r, ok := c.tags.record(tag)
	if !ok {
		if _, err := c.readTag(ctx, tag); err != nil {
			return unknownRecord(tag, err)
		}
		return nil
	}
	now := time.Now()
	if r.until >= now.Add(tagLife(&c.o)).UnixMilli() {
		return nil
	}
	// Extend the record's lifetime, if it still is the one known here.
	epoch := c.tags.currentEpoch()
	b := encodeTagRecord(r.t)
	w := tier.Write{Key: c.tagKey(tag), Value: b, TTL: recordLife(&c.o, tag), If: tier.IfEqual, Old: b}
	stored, err := c.writeFeed(ctx, recordOp(tag), tag, []tier.Write{w}, tier.Feed{})
	if err != nil {
		return nil
	}
	if stored[0] {
		c.tags.learn(epoch, tag, r.t, recordUntil(&c.o, tag, now.UnixMilli()))
		return nil
	}
	c.tags.forget(tag) // deleted anew, or lost: read it again
	if _, err := c.readTag(ctx, tag); err != nil {
		return unknownRecord(tag, err)
	}
	return nil
}

// unknownRecord is the error of a write not made because the record of
// tag could not be read or made (err).
func unknownRecord(tag string, err error) error {
	name := "the Clear record"
	if tag != clearTag {
		name = fmt.Sprintf("the record of tag %q", tag)
	}
	return fmt.Errorf("hybrid: %s could not be read, so a value written now could count as deleted later: not written: %w", name, err)
}
