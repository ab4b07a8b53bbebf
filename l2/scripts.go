package l2

import "github.com/redis/go-redis/v9"

// This file holds every Lua script of the Store (seven), and the fragments
// they share. Redis runs a script atomically: its reads and writes are one
// step, which no other client's command interleaves.

// A lease holds its holder's token, followed by '*' once someone who
// wanted it found it held (takeScript marks it so). Its holder's release
// announces then, and only then or when the lease is no longer its own:
// no one else waits for a lease no one else asked for.

// peekFragment defines peek(k, t): it reads the lease k and returns
// whether someone may wait for it (it is not held under token t, or it is
// marked), and whether it is held under t (marked or not), which its
// release deletes. releaseFragment defines release(k, t), which does that
// and returns 1 if someone may wait for the lease, else 0.
const (
	peekFragment = `local function peek(k, t)
	local v = redis.call('GET', k)
	return v ~= t, v == t or v == t .. '*'
end
`
	releaseFragment = peekFragment + `local function release(k, t)
	local waited, mine = peek(k, t)
	if mine then
		redis.call('DEL', k)
	end
	if waited then
		return 1
	end
	return 0
end
`
)

// setFragment defines set(k, v, ttl): SET k v, with PX ttl unless ttl is
// '0' (no expiry), or KEEPTTL if ttl is 'keep'.
const setFragment = `local function set(k, v, ttl)
	if ttl == 'keep' then
		redis.call('SET', k, v, 'KEEPTTL')
	elseif ttl == '0' then
		redis.call('SET', k, v)
	else
		redis.call('SET', k, v, 'PX', ttl)
	end
end
`

// newerFragment defines newer(k, v, off): 2 if the key k holds v already,
// 0 if it holds a value written after v's, else 1 (missing, or older).
// Write times are 8 bytes big-endian at byte offset off; a value too short
// to hold one counts as older (and v too short: any stored value does).
// They are read into Lua numbers, exact up to 2^53 (Unix milliseconds
// fit).
const newerFragment = `local function newer(k, v, off)
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
	local cur = redis.call('GET', k)
	if cur == v then
		return 2
	end
	local new = stamp(v)
	if cur and new then
		local old = stamp(cur)
		if old and old > new then
			return 0
		end
	end
	return 1
end
`

// bumpFragment defines bump(k): it adds one to the sequence counter k, or
// sets a missing one to the server's clock in microseconds times 1000, a
// value it never held (see tier.Write.Seq).
const bumpFragment = `local function bump(k)
	if redis.call('EXISTS', k) == 1 then
		redis.call('INCR', k)
	else
		local t = redis.call('TIME')
		redis.call('SET', k, t[1] .. string.format('%06d', tonumber(t[2])) .. '000')
	end
end
`

// touchFragment defines touchable(k, old, at, n): whether the key k holds
// at least at+n bytes that begin with old but for the n bytes at offset at,
// which a touch overwrites (see Write.Touch). It reads no more of the
// value than old and that range.
const touchFragment = `local function touchable(k, old, at, n)
	local want = math.max(#old, at + n)
	if want == 0 then
		return redis.call('EXISTS', k) == 1
	end
	local cur = redis.call('GETRANGE', k, 0, want - 1)
	if #cur < want then
		return false
	end
	local function outside(s)
		return string.sub(s, 1, math.min(at, #old)) .. string.sub(s, at + n + 1, #old)
	end
	return outside(cur) == outside(old)
end
`

// writeScript makes one Write (see write.go for its arguments) in five
// steps:
//
//  1. reads, writing nothing: the condition on KEYS[1] (ARGV[2]: 'always',
//     'absent', 'equal' to ARGV[3], 'newer' with write times at offset
//     ARGV[3], 'touch': touchable with old ARGV[3] at offset ARGV[14], or
//     'seq': absent, and the counter KEYS[ARGV[15]] holds ARGV[16], not
//     empty), giving stored 1, 0, or 2 (newer: holds the value already);
//     and the lease KEYS[2] (ARGV[9] '1') under token ARGV[10];
//  2. picks the message: ARGV[6] if stored 1 and ARGV[5] is '1', ARGV[8]
//     if stored 0 and ARGV[7] is '1', none if stored 2 or the lease is
//     held under the token unmarked (no one waits);
//  3. if a message goes out and ARGV[11] (the log's length) is not '0',
//     XADD to the log, the last of KEYS, field m = ARGV[12];
//  4. if stored is 1, SET KEYS[1] to ARGV[1] with ttl ARGV[4] (see set),
//     or for a touch, SETRANGE KEYS[1] at ARGV[14] to ARGV[1] and set its
//     lifetime to ARGV[4] (PEXPIRE; '0': PERSIST; 'keep': as it is);
//     and, unless the condition is 'seq', bumps the counter KEYS[ARGV[15]]
//     if ARGV[15] is not '0' (see bump); then deletes the lease if it is
//     held under the token;
//  5. PUBLISHes the message on channel ARGV[13] unless it is empty,
//     positioned at the log entry's id if one was added: byte 2, the id's
//     length, the id, the message; else, if the write names a counter
//     that holds a number, sequenced at the counter's value after step 4:
//     byte 3, the number's length, the number, the message (see
//     message.Sequenced); by SPUBLISH if ARGV[17] is 's' (sharded pub/sub:
//     the channel is then in KEYS[1]'s slot).
//
// It returns stored. A step that fails (a key of the wrong type) fails
// the script; step 3 is the first that writes, so a log that is not a
// stream writes nothing.
var writeScript = redis.NewScript(peekFragment + setFragment + newerFragment + touchFragment + bumpFragment + `
local key, cond = KEYS[1], ARGV[2]
local seq
if ARGV[15] ~= '0' then
	seq = KEYS[tonumber(ARGV[15])]
end
local stored = 1
if cond == 'absent' then
	if redis.call('EXISTS', key) == 1 then
		stored = 0
	end
elseif cond == 'equal' then
	if redis.call('GET', key) ~= ARGV[3] then
		stored = 0
	end
elseif cond == 'newer' then
	stored = newer(key, ARGV[1], tonumber(ARGV[3]))
elseif cond == 'touch' then
	if not touchable(key, ARGV[3], tonumber(ARGV[14]), #ARGV[1]) then
		stored = 0
	end
elseif cond == 'seq' then
	if redis.call('EXISTS', key) == 1 or ARGV[16] == '' or redis.call('GET', seq) ~= ARGV[16] then
		stored = 0
	end
end
local leased, waited, mine = ARGV[9] == '1', true, false
if leased then
	waited, mine = peek(KEYS[2], ARGV[10])
end
local msg
if stored == 1 and ARGV[5] == '1' then
	msg = ARGV[6]
elseif stored == 0 and ARGV[7] == '1' then
	msg = ARGV[8]
end
if not waited then
	msg = nil
end
if msg and ARGV[11] ~= '0' then
	local id = redis.call('XADD', KEYS[#KEYS], 'MAXLEN', '~', ARGV[11], '*', 'm', ARGV[12])
	msg = string.char(2, #id) .. id .. msg
end
if stored == 1 and cond == 'touch' then
	if #ARGV[1] > 0 then
		redis.call('SETRANGE', key, tonumber(ARGV[14]), ARGV[1])
	end
	if ARGV[4] == '0' then
		redis.call('PERSIST', key)
	elseif ARGV[4] ~= 'keep' then
		redis.call('PEXPIRE', key, ARGV[4])
	end
elseif stored == 1 then
	set(key, ARGV[1], ARGV[4])
end
if stored == 1 and seq and cond ~= 'seq' then
	bump(seq)
end
if mine then
	redis.call('DEL', KEYS[2])
end
if msg and seq and ARGV[11] == '0' then
	local n = redis.call('GET', seq)
	if n and string.match(n, '^[1-9][0-9]*$') and #n <= 20 then
		msg = string.char(3, #n) .. n .. msg
	end
end
if msg and ARGV[13] ~= '' then
	if ARGV[17] == 's' then
		redis.call('SPUBLISH', ARGV[13], msg)
	else
		redis.call('PUBLISH', ARGV[13], msg)
	end
end
return stored
`)

// takeScript takes the lease KEYS[1] under token ARGV[1] for ARGV[2] ms
// (SET NX PX). If it took it, it returns {1}, or, when KEYS[2] is given
// (the key the lease guards), {1, what KEYS[2] holds right after the take}
// (nil for nothing). Else it marks the lease as asked for (a '*' after its
// token) and returns {0, the milliseconds it has left (at least 1), its
// holder's token (without the mark)}. A lease that vanished between the
// SET and the PTTL is tried once more; a key found without an expiry (no
// lease a Store wrote) is given ARGV[2] ms, so that it cannot block its
// key for ever.
var takeScript = redis.NewScript(`
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

// extendScript sets the lifetime of the lease KEYS[1] to ARGV[2] ms if it
// is held under token ARGV[1] (marked or not); it returns 1 if it was.
var extendScript = redis.NewScript(peekFragment + `
local _, mine = peek(KEYS[1], ARGV[1])
if mine then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
return 0
`)

// releaseScript releases every lease of KEYS held under token ARGV[1]
// (see release); then, if someone may wait for any of them and channel
// ARGV[2] is not empty, it publishes ARGV[3] on it (by SPUBLISH if ARGV[4]
// is 's': the channel is then in the slot of KEYS). It returns 1 if
// someone may wait, else 0. KEYS must be distinct: a second release of
// one would find it gone and announce.
var releaseScript = redis.NewScript(releaseFragment + `
local waited = 0
for _, k in ipairs(KEYS) do
	waited = math.max(waited, release(k, ARGV[1]))
end
if waited == 1 and ARGV[2] ~= '' then
	if ARGV[4] == 's' then
		redis.call('SPUBLISH', ARGV[2], ARGV[3])
	else
		redis.call('PUBLISH', ARGV[2], ARGV[3])
	end
end
return waited
`)

// openLogScript returns the id of the newest entry of the stream KEYS[1],
// first adding a marker entry (field "open") if the stream is missing or
// empty.
var openLogScript = redis.NewScript(`
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last > 0 then
	return last[1][1]
end
return redis.call('XADD', KEYS[1], '*', 'open', '')
`)

// readLogScript reads the stream KEYS[1]: {0} if it is missing, else {1,
// id of its oldest entry ("" if empty), last-generated-id, length,
// entries-added (-1 before Redis 7), {id, m, id, m, ...}}: up to ARGV[2]
// entries with a field m, oldest first, from ARGV[1] ('-', or '(' and an
// id for the entries after it). Other entries (markers) are skipped and
// do not count. One script, so the figures and the entries are of one
// moment.
var readLogScript = redis.NewScript(`
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

// announceScript announces a batch of writes (Feed.Msg): if KEYS[1] (the
// log) is given, it XADDs to it the field m = ARGV[4], trimmed to about
// ARGV[3] entries, and publishes ARGV[2] on channel ARGV[1] positioned at
// the new entry's id (byte 2, the id's length, the id, the message, as
// writeScript does); else it publishes ARGV[2] as it is. It returns 1.
var announceScript = redis.NewScript(`
local msg = ARGV[2]
if KEYS[1] then
	local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'm', ARGV[4])
	msg = string.char(2, #id) .. id .. msg
end
redis.call('PUBLISH', ARGV[1], msg)
return 1
`)
