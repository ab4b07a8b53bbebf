package l2

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file holds the invalidation log: SetPublishAndLog, OpenLog and
// ReadLog, which make a Store a hybrid.Journal. See "Invalidation log" in
// the package doc.

// setPublishAndLog appends an entry with field m = ARGV[5] to the stream
// KEYS[2], trimmed to about ARGV[6] entries; writes KEYS[1] = ARGV[1] (with
// expiry ARGV[2] milliseconds unless it is 0); and publishes on channel
// ARGV[3] the message ARGV[4] positioned at the new entry's id: byte 2, the
// id's length, the id, the message. It returns the id. The XADD goes first:
// if it fails (the log key holds another type), nothing is written.
var setPublishAndLog = redis.NewScript(`
local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*', 'm', ARGV[5])
local ttl = tonumber(ARGV[2])
if ttl > 0 then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
else
	redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('PUBLISH', ARGV[3], string.char(2, #id) .. id .. ARGV[4])
return id
`)

// replacePublishAndLog is replaceAndPublish that also appends ARGV[5] to
// the stream KEYS[2] (MAXLEN ~ ARGV[6]) and publishes the entry's id, then
// ARGV[4], as setPublishAndLog does. It returns 1 if it replaced.
var replacePublishAndLog = redis.NewScript(`
local replaced = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
	replaced = 1
end
local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*', 'm', ARGV[5])
redis.call('PUBLISH', ARGV[3], string.char(2, #id) .. id .. ARGV[4])
return replaced
`)

// openLog returns the id of the newest entry of the stream KEYS[1], first
// adding a marker entry (field "open") if the stream is missing or empty.
var openLog = redis.NewScript(`
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last > 0 then
	return last[1][1]
end
return redis.call('XADD', KEYS[1], '*', 'open', '')
`)

// readLog reads the stream KEYS[1]: {0} if it is missing, else {1, id of
// its oldest entry ("" if empty), last-generated-id, length, entries-added
// (-1 before Redis 7), {id, m, id, m, ...}}: up to ARGV[2] entries with a
// field m, oldest first, from ARGV[1] ('-', or '(' and an id for the
// entries after it). Other entries (markers) are skipped and do not count.
// One script, so the figures and the entries are of one moment.
var readLog = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
	return {0}
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local f = {}
for i = 1, #info, 2 do
	f[info[i]] = info[i + 1]
end
local first = ''
if type(f['first-entry']) == 'table' then
	first = f['first-entry'][1]
end
local out = {}
local start, want = ARGV[1], tonumber(ARGV[2])
while want > 0 do
	local page = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', want)
	local kept = 0
	for _, e in ipairs(page) do
		if e[2][1] == 'm' then
			out[#out + 1] = e[1]
			out[#out + 1] = e[2][2]
			kept = kept + 1
		end
	end
	if #page < want then
		break
	end
	want = want - kept
	start = '(' .. page[#page][1]
end
return {1, first, f['last-generated-id'], f['length'], f['entries-added'] or -1, out}
`)

// logUnsupported returns the error of a log call on a topology without a
// log: it wraps errors.ErrUnsupported.
func (s *Store) logUnsupported(op, log string) error {
	if s.topo == single {
		return nil
	}
	kind := "Redis Cluster"
	if s.topo == ring {
		kind = "a go-redis Ring"
	}
	return fmt.Errorf("l2: %s %q: no invalidation log on %s: %w", op, log, kind, errors.ErrUnsupported)
}

// SetPublishAndLog stores value under key for ttl, as Set does, appends
// entry to the invalidation log log (a Redis stream under Options.Prefix +
// log, trimmed to about maxLen entries) and publishes on channel msg
// positioned at the new entry's id, all in one Lua script: the published
// bytes are 2, the id's length as one byte, the id, then msg (see package
// internal/message). As with SetAndPublish, messages on channel come in the
// order of the writes, and so do the log's entries.
//
// maxLen must be at least 1. Trimming is approximate (MAXLEN ~): the log
// keeps at least maxLen entries, and up to about maxLen plus the server's
// stream-node-max-entries (100 by default).
//
// On Redis Cluster or a go-redis Ring it makes no round trip and returns an
// error wrapping errors.ErrUnsupported.
//
// NOTE: as with SetAndPublish, an error does not say the write was not
// made.
func (s *Store) SetPublishAndLog(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte, log string, entry []byte, maxLen int) error {
	if err := s.logUnsupported("set, publish and log", key); err != nil {
		return err
	}
	if maxLen < 1 {
		return fmt.Errorf("l2: set, publish and log %q: maxLen %d, want at least 1", key, maxLen)
	}
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	err := setPublishAndLog.Run(ctx, s.rdb, []string{s.prefix + key, s.prefix + log},
		value, int64(expiry(ttl)/time.Millisecond), channel, msg, entry, maxLen).Err()
	if err != nil {
		return fmt.Errorf("l2: set, publish and log %q: %w", key, withCause(ctx, err))
	}
	return nil
}

// ReplacePublishAndLog is ReplaceAndPublish that, in the same script, also
// appends entry to the invalidation log log and publishes the entry's
// position before msg, as SetPublishAndLog does; it reports whether it
// replaced. Package hybrid's Expire uses it, so that an expiry missed
// during a bus loss is replayed. Not on Redis Cluster or a Ring
// (errors.ErrUnsupported).
func (s *Store) ReplacePublishAndLog(ctx context.Context, key string, old, value []byte, channel string, msg []byte, log string, entry []byte, maxLen int) (bool, error) {
	if err := s.logUnsupported("replace, publish and log", key); err != nil {
		return false, err
	}
	if maxLen < 1 {
		return false, fmt.Errorf("l2: replace, publish and log %q: maxLen %d, want at least 1", key, maxLen)
	}
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	n, err := replacePublishAndLog.Run(ctx, s.rdb, []string{s.prefix + key, s.prefix + log},
		old, value, channel, msg, entry, maxLen).Int()
	if err != nil {
		return false, fmt.Errorf("l2: replace, publish and log %q: %w", key, withCause(ctx, err))
	}
	return n == 1, nil
}

// OpenLog returns the position (stream id) of the newest entry of the
// invalidation log log, first creating it if it is missing, or adding to
// it if it is empty, a marker entry that ReadLog skips. One Lua script,
// bounded by Options.WriteTimeout since it may write.
//
// On Redis Cluster or a go-redis Ring it makes no round trip and returns an
// error wrapping errors.ErrUnsupported: a script runs on one node, and so
// would the log.
func (s *Store) OpenLog(ctx context.Context, log string) (string, error) {
	if err := s.logUnsupported("open log", log); err != nil {
		return "", err
	}
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	pos, err := openLog.Run(ctx, s.rdb, []string{s.prefix + log}).Text()
	if err != nil {
		return "", fmt.Errorf("l2: open log %q: %w", log, withCause(ctx, err))
	}
	return pos, nil
}

// ReadLog returns up to max entries of the invalidation log log that come
// after the position after, oldest first, and their positions, skipping
// OpenLog's markers. It reports complete when the log holds every entry
// ever appended after after:
//
//   - the log exists;
//   - after is not newer than the newest id the log has given (else the
//     log lost entries: Redis restarted or failed over);
//   - its oldest entry is not newer than after, or after is that newest id
//     (else entries after after were trimmed, or the log was created anew).
//
// An empty after, or "0-0", means before the first entry: then the log is
// complete only if no entry was ever removed from it (known on Redis 7 and
// later; on older servers it is reported incomplete). A non-empty after
// must be a stream id "<ms>-<seq>". With max 0 it returns no entries, only complete;
// max must not be negative.
//
// When complete is false the entries are still those the log holds after
// after, but some are missing. One Lua script (EXISTS, XINFO STREAM, and
// XRANGE once per page, more than once only if markers were skipped),
// bounded by Options.ReadTimeout.
//
// On Redis Cluster or a go-redis Ring it makes no round trip and returns an
// error wrapping errors.ErrUnsupported.
func (s *Store) ReadLog(ctx context.Context, log, after string, max int) (entries [][]byte, positions []string, complete bool, err error) {
	if err := s.logUnsupported("read log", log); err != nil {
		return nil, nil, false, err
	}
	if max < 0 {
		return nil, nil, false, fmt.Errorf("l2: read log %q: max %d, want at least 0", log, max)
	}
	start := "-"
	if after != "" {
		if _, _, ok := parseID(after); !ok {
			return nil, nil, false, fmt.Errorf("l2: read log %q: position %q is not a stream id", log, after)
		}
		start = "(" + after
	}
	ctx, cancel := withTimeout(ctx, s.read)
	defer cancel()
	res, err := readLog.Run(ctx, s.rdb, []string{s.prefix + log}, start, max).Slice()
	if err != nil {
		return nil, nil, false, fmt.Errorf("l2: read log %q: %w", log, withCause(ctx, err))
	}
	st, err := parseLogState(res)
	if err != nil {
		return nil, nil, false, fmt.Errorf("l2: read log %q: %w", log, err)
	}
	return st.entries, st.positions, st.complete(after), nil
}

// logState is what readLog found.
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
	case compareIDs(after, st.last) > 0:
		return false
	}
	return after == st.last || (st.first != "" && compareIDs(st.first, after) <= 0)
}

// parseLogState reads the reply of readLog.
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

// compareIDs compares two stream ids as internal/message.ComparePositions
// does (a leaf package, l2 keeps its own copy; a test checks they agree):
// valid ids by number, any other string before every valid id, and two
// such strings bytewise.
func compareIDs(a, b string) int {
	ams, aseq, aok := parseID(a)
	bms, bseq, bok := parseID(b)
	switch {
	case aok && bok:
		if c := cmp.Compare(ams, bms); c != 0 {
			return c
		}
		return cmp.Compare(aseq, bseq)
	case aok:
		return +1
	case bok:
		return -1
	}
	return strings.Compare(a, b)
}

// parseID splits a stream id "<ms>-<seq>", as Redis writes it (decimal, no
// sign or leading zero, below 2^64), into its two numbers.
func parseID(s string) (ms, seq uint64, ok bool) {
	l, r, found := strings.Cut(s, "-")
	if !found {
		return 0, 0, false
	}
	if ms, ok = parseUint(l); !ok {
		return 0, 0, false
	}
	if seq, ok = parseUint(r); !ok {
		return 0, 0, false
	}
	return ms, seq, true
}

func parseUint(s string) (uint64, bool) {
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// setIfNewerPublishAndLog is setIfNewerAndPublish (see store.go) that, when
// it stores, first appends an entry with field m = ARGV[6] to the stream
// KEYS[2], trimmed to about ARGV[7] entries, and publishes ARGV[4]
// positioned at the new entry's id, as setPublishAndLog does. It returns 1
// if it stored, 2 if KEYS[1] already holds ARGV[1], 0 if it holds a newer
// value (nothing written, logged or published).
var setIfNewerPublishAndLog = redis.NewScript(newerCheck + `local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '*', 'm', ARGV[6])
local ttl = tonumber(ARGV[2])
if ttl > 0 then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
else
	redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('PUBLISH', ARGV[3], string.char(2, #id) .. id .. ARGV[4])
return 1
`)

// SetIfNewerPublishAndLog is SetIfNewerAndPublish that, when it stores,
// also appends entry to the invalidation log log and publishes msg
// positioned at the new entry's id, as SetPublishAndLog does, all in one
// Lua script; when it does not store (key holds value already, or a newer
// value), nothing is written, logged or published. Package hybrid replays
// queued writes with it when it keeps a log, so that the log holds the
// replayed writes too.
//
// maxLen must be at least 1, and stampOffset not negative. On Redis
// Cluster or a go-redis Ring it makes no round trip and returns an error
// wrapping errors.ErrUnsupported.
//
// NOTE: as with SetAndPublish, an error does not say the write was not
// made.
func (s *Store) SetIfNewerPublishAndLog(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte, stampOffset int, log string, entry []byte, maxLen int) (stored bool, err error) {
	if err := s.logUnsupported("set if newer, publish and log", key); err != nil {
		return false, err
	}
	if maxLen < 1 {
		return false, fmt.Errorf("l2: set if newer, publish and log %q: maxLen %d, want at least 1", key, maxLen)
	}
	if stampOffset < 0 {
		return false, fmt.Errorf("l2: set if newer, publish and log %q: negative stamp offset %d", key, stampOffset)
	}
	ctx, cancel := withTimeout(ctx, s.write)
	defer cancel()
	n, err := setIfNewerPublishAndLog.Run(ctx, s.rdb, []string{s.prefix + key, s.prefix + log},
		value, int64(expiry(ttl)/time.Millisecond), channel, msg, stampOffset, entry, maxLen).Int()
	if err != nil {
		return false, fmt.Errorf("l2: set if newer, publish and log %q: %w", key, withCause(ctx, err))
	}
	return n != 0, nil
}
