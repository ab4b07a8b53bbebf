// Package keyslot maps keys to Redis Cluster hash slots, and slots to a
// hash tag that puts a key in them, for the packages that must place keys
// side by side (package l2 groups keys by slot; package hybrid keeps a
// sequence counter in the slot of the keys it covers).
package keyslot

import (
	"strconv"
	"strings"
	"sync"
)

// Count is the number of hash slots in a Redis Cluster.
const Count = 16384

// crcTable is the CRC16/XMODEM table (polynomial 0x1021, initial value 0)
// that Redis Cluster uses to map keys to slots.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// crc16 returns the CRC16/XMODEM checksum of s.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

// Of returns the Redis Cluster hash slot of key. Only the hash tag is
// hashed when the key has one: the part between the first '{' and the first
// '}' after it, if that part is not empty. So "{user1}:a" and "{user1}:b"
// share a slot, while "a{}b" is hashed whole.
func Of(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % Count
}

var (
	tagsOnce sync.Once
	tags     [Count]string
)

// Tag returns a short string that hashes to slot: a key holding "{Tag}" as
// its first hash tag is in slot. The table is built on first use (about
// 10^5 checksums of short strings).
func Tag(slot uint16) string {
	tagsOnce.Do(func() {
		left := Count
		for n := 0; left > 0; n++ {
			s := strconv.FormatInt(int64(n), 36)
			if c := crc16(s) % Count; tags[c] == "" {
				tags[c] = s
				left--
			}
		}
	})
	return tags[slot%Count]
}

// Channel returns the name of base's sharded pub/sub channel in slot: base
// followed by slot's Tag in braces, or, when base has a hash tag of its
// own (see Tagged), base itself, whose one channel is in slot Of(base),
// whatever slot asks. Braces in a base without a hash tag are turned into
// parentheses first, so that the Tag decides the slot.
func Channel(base string, slot uint16) string {
	if Tagged(base) {
		return base
	}
	if strings.ContainsAny(base, "{}") {
		base = strings.NewReplacer("{", "(", "}", ")").Replace(base)
	}
	return base + "{" + Tag(slot) + "}"
}

// Tagged reports whether s has a hash tag: a '{' followed, later, by a '}'
// with something in between, so that Of hashes only that part of s.
func Tagged(s string) bool {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(s[i+1:], '}')
	return j > 0
}
