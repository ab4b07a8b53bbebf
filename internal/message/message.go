// Package message is the invalidation message that instances of a hybrid
// cache send each other over the bus: which keys of which namespace changed,
// how, from which instance, and optionally the new stored envelope.
//
// Layout of version 1:
//
//	[0]       version, 1
//	[1]       op: 1 set, 2 delete, 3 clear (the local tiers only), 4 tag
//	          (the keys are tags; the empty tag is the namespace's clear
//	          record, which every value carries), 5 expire, 6 filled (a
//	          lease holder's load stored the keys where nothing live was),
//	          7 load failed (a lease holder's load of the keys failed), 8
//	          not found (a lease holder's load found no value for the keys),
//	          9 not stored (a lease holder loaded the keys but could not
//	          store them), 10 extend (the key's value was found not
//	          modified and its lifetime extended in place)
//	[2]       flags: 1 carries a value (only signed, but for extend), 2
//	          signed, 4 carries a lease token, 8 carries its send time
//	[3:19]    origin instance id
//	uvarint   namespace length, then the namespace
//	uvarint   key count, then per key: uvarint length, key bytes
//	if flag 1: uvarint value length, then the value (set: the new
//	           envelope of the one key, or, naming more keys (a batch),
//	           their envelopes packed by PackValues; tag: the delete's tag
//	           record; filled: the keys' envelopes, packed by PackValues;
//	           load failed: the error; extend: which value, and until
//	           when, as its sender puts it)
//	if flag 4: uvarint token length (1 to MaxTokenLen), then the token of
//	           the lease holder that sent it (ops 6 to 9 only)
//	if flag 8: 8 bytes, big-endian: the sender's clock when it built the
//	           message, in Unix nanoseconds (see Message.Sent)
//	if flag 2: the last 32 bytes are HMAC-SHA256(secret, everything before)
//
// Flag 8 came after the others: a message without it is the same as
// before, and a receiver takes it with Sent zero. A receiver that predates
// it rejects a message that has it (bad flags), as it rejects any flag it
// does not know.
//
// The token is inside the signature, so that a signed lease holder's news
// cannot be passed off as another lease's: a receiver takes news only from
// the holder it found holding the lease.
//
// Layout of version 2, a positioned message (a version 1 message and its
// position in the invalidation log, see Positioned):
//
//	[0]       version, 2
//	[1]       position length n, 1 to 255
//	[2:2+n]   position, a Redis stream id "<ms>-<seq>" (see ComparePositions)
//	[2+n:]    a version 1 message
//
// The position is outside the signature: the script that appends the
// message to the log learns the position after the message was signed. A
// position is only to be trusted when the inner message is Authentic, and
// even then it may have been moved by whoever can publish on the channel
// (an authentic message can be replayed under another position).
//
// Layout of version 3, a sequenced message (a version 1 message and the
// value of the sequence counter of its key's hash slot right after the
// write it announces, see Sequenced):
//
//	[0]       version, 3
//	[1]       length n of the sequence, 1 to 20
//	[2:2+n]   the sequence, in decimal digits, no leading zero, above 0
//	[2+n:]    a version 1 message
//
// Like a position, the sequence is outside the signature: the script that
// writes learns it after the message was signed.
//
// Decode never trusts a length: every one is checked against the bytes that
// remain, so hostile input costs at most its own size.
package message

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// Version is the message version this package writes.
const Version = 1

// VersionPositioned is the version byte of a positioned message.
const VersionPositioned = 2

// VersionSequenced is the version byte of a sequenced message.
const VersionSequenced = 3

// MaxPositionLen bounds the length of a position; a Redis stream id takes
// at most 41 bytes.
const MaxPositionLen = 255

// Op is what happened.
type Op byte

// The operations.
const (
	OpSet    Op = 1 // keys were written; peers drop them or swap in Value
	OpDelete Op = 2 // keys were deleted
	OpClear  Op = 3 // the whole namespace's local tier must go
	OpTag    Op = 4 // entries with these tags (Keys holds the tags) were deleted
	OpExpire Op = 5 // keys were expired; peers keep them only as fail-safe fallbacks
	// OpFilled says that a lease holder loaded keys and stored them where
	// nothing live was: it changes nothing a peer holds, and peers waiting
	// for the keys take Value (see PackValues) or read the shared tier.
	OpFilled Op = 6
	// OpLoadFailed says that a lease holder's load of keys failed; Value
	// holds the error's text, for the peers waiting for them.
	OpLoadFailed Op = 7
	// OpNotFound says that a lease holder's load found no value for keys
	// (and none is remembered in the shared tier).
	OpNotFound Op = 8
	// OpNotStored says that a lease holder loaded keys but could not store
	// them (a value too large, or one the codec refused): peers waiting for
	// them load them by themselves.
	OpNotStored Op = 9
	// OpExtend says that the value of Keys[0] was found not modified and
	// its lifetime extended in the shared tier; Value says which value and
	// until when. Peers that hold that value extend it, others drop the
	// key. It is the one op whose Value an unsigned message carries: it
	// names no stored bytes, and a receiver with a secret takes it only
	// when Authentic.
	OpExtend Op = 10
)

// String returns the op's name: "set", "delete", "clear", "tag",
// "expire", "filled", "load_failed", "not_found", "not_stored" or
// "extend".
func (op Op) String() string {
	switch op {
	case OpSet:
		return "set"
	case OpDelete:
		return "delete"
	case OpClear:
		return "clear"
	case OpTag:
		return "tag"
	case OpExpire:
		return "expire"
	case OpFilled:
		return "filled"
	case OpLoadFailed:
		return "load_failed"
	case OpNotFound:
		return "not_found"
	case OpNotStored:
		return "not_stored"
	case OpExtend:
		return "extend"
	}
	return "unknown"
}

const (
	flagValue  = 1
	flagSigned = 2
	flagToken  = 4
	flagSent   = 8
	sentLen    = 8
	macLen     = sha256.Size
	// MaxTokenLen bounds the length of a lease token.
	MaxTokenLen = 255
	// MaxKeys bounds the keys one message may name.
	MaxKeys = 1 << 16
)

// ErrInvalid is wrapped by every error Decode returns; check with errors.Is.
var ErrInvalid = errors.New("invalid message")

// Origin identifies an instance.
type Origin [16]byte

// Message is one invalidation.
type Message struct {
	Op        Op
	Origin    Origin
	Namespace string
	Keys      []string
	// Value is the new stored envelope of Keys[0] (OpSet with one key),
	// the envelopes of Keys packed by PackValues (OpSet with more, and
	// OpFilled), the tag record (OpTag), or nil.
	Value []byte
	// Authentic reports, after Decode, that the message was signed with the
	// secret given to Decode. A Value is only to be used when it is true.
	Authentic bool
	// Position is, after Decode of a positioned message, its position in
	// the invalidation log: a valid Redis stream id. It is "" for a plain
	// message. Encode ignores it (see Positioned).
	//
	// NOTE: the signature does not cover Position; see the package doc.
	Position string
	// Seq is, after Decode of a sequenced message, the sequence counter of
	// its key's hash slot right after the write it announces (a counter
	// the shared tier bumps with every Set and Delete of a key in that
	// slot; see tier.Write.Seq); 0 for none. Encode ignores it (see
	// Sequenced).
	//
	// NOTE: the signature does not cover Seq, as it does not Position.
	Seq uint64
	// Token is the lease token of the holder that sent a filled,
	// load_failed, not_found or not_stored message, "" for none (and for
	// every other op). It is covered by the signature: it is only to be
	// trusted when Authentic, or when no secret is used at all.
	Token string
	// Sent is when the sender built the message, in Unix nanoseconds by
	// its clock, 0 for unknown (a message from a sender that predates it).
	// It is covered by the signature. Encode writes it when it is not 0.
	Sent int64
}

// Encode returns m in version 1. With a non-empty secret the message is
// signed; a Value is only carried in a signed message, or by OpExtend.
// Encode panics if m
// has a Token and is not lease news (ops 6 to 9), or its Token is longer
// than MaxTokenLen.
func Encode(m Message, secret []byte) []byte {
	if m.Token != "" && (!leaseNews(m.Op) || len(m.Token) > MaxTokenLen) {
		panic(fmt.Sprintf("message: Encode: token of %d bytes on op %v", len(m.Token), m.Op))
	}
	n := 3 + len(Origin{}) + binary.MaxVarintLen64*4 + len(m.Namespace) + len(m.Value) + len(m.Token) + sentLen + macLen
	for _, k := range m.Keys {
		n += binary.MaxVarintLen64 + len(k)
	}
	b := make([]byte, 0, n)
	var flags byte
	if len(secret) > 0 {
		flags |= flagSigned
	}
	if m.Value != nil && (len(secret) > 0 || m.Op == OpExtend) {
		flags |= flagValue
	}
	if m.Token != "" {
		flags |= flagToken
	}
	if m.Sent != 0 {
		flags |= flagSent
	}
	b = append(b, Version, byte(m.Op), flags)
	b = append(b, m.Origin[:]...)
	b = binary.AppendUvarint(b, uint64(len(m.Namespace)))
	b = append(b, m.Namespace...)
	b = binary.AppendUvarint(b, uint64(len(m.Keys)))
	for _, k := range m.Keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
	}
	if flags&flagValue != 0 {
		b = binary.AppendUvarint(b, uint64(len(m.Value)))
		b = append(b, m.Value...)
	}
	if flags&flagToken != 0 {
		b = binary.AppendUvarint(b, uint64(len(m.Token)))
		b = append(b, m.Token...)
	}
	if flags&flagSent != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(m.Sent))
	}
	if flags&flagSigned != 0 {
		mac := hmac.New(sha256.New, secret)
		mac.Write(b)
		b = mac.Sum(b)
	}
	return b
}

// Positioned returns msg, a version 1 message, wrapped as a version 2
// message at position pos in the invalidation log. Positioned panics if
// pos is empty or longer than MaxPositionLen; Decode rejects a pos that is
// not a valid stream id (see ComparePositions).
//
// l2.Store's write script builds the same bytes in Lua:
// string.char(2, #id) .. id .. msg.
func Positioned(pos string, msg []byte) []byte {
	if len(pos) == 0 || len(pos) > MaxPositionLen {
		panic(fmt.Sprintf("message: Positioned: position of %d bytes", len(pos)))
	}
	b := make([]byte, 0, 2+len(pos)+len(msg))
	b = append(b, VersionPositioned, byte(len(pos)))
	b = append(b, pos...)
	return append(b, msg...)
}

// Sequenced returns msg, a version 1 message, wrapped as a version 3
// message with sequence seq, which must be above 0.
//
// l2.Store's write script builds the same bytes in Lua:
// string.char(3, #s) .. s .. msg, where s is the counter's value.
func Sequenced(seq uint64, msg []byte) []byte {
	if seq == 0 {
		panic("message: Sequenced: sequence 0")
	}
	d := strconv.AppendUint(nil, seq, 10)
	b := make([]byte, 0, 2+len(d)+len(msg))
	b = append(b, VersionSequenced, byte(len(d)))
	b = append(b, d...)
	return append(b, msg...)
}

// OpOf returns the op of b, a message of any version (a positioned or
// sequenced one: of the message inside), without decoding or verifying
// it: 0 for anything else. It lets a receiver skip a message it has no
// use for cheaply; what it returns is not to be trusted.
func OpOf(b []byte) Op {
	if len(b) >= 2 && (b[0] == VersionPositioned || b[0] == VersionSequenced) {
		b = b[min(len(b), 2+int(b[1])):]
	}
	if len(b) < 2 || b[0] != Version {
		return 0
	}
	return Op(b[1])
}

// Decode parses b, a version 1 message, a positioned one (version 2),
// whose Position it sets, or a sequenced one (version 3), whose Seq it
// sets. A signed message whose signature does not verify
// with secret (or any signed message when secret is empty) decodes with
// Authentic false and no Value, so the caller can still drop its keys.
// Value aliases b.
func Decode(b []byte, secret []byte) (Message, error) {
	if len(b) > 0 && b[0] == VersionPositioned {
		if len(b) < 2 || len(b) < 2+int(b[1]) {
			return Message{}, fmt.Errorf("%w: positioned message of %d bytes", ErrInvalid, len(b))
		}
		pos := string(b[2 : 2+int(b[1])])
		if _, _, ok := parsePosition(pos); !ok {
			return Message{}, fmt.Errorf("%w: bad position %q", ErrInvalid, pos)
		}
		m, err := decode(b[2+len(pos):], secret)
		if err != nil {
			return Message{}, err
		}
		m.Position = pos
		return m, nil
	}
	if len(b) > 0 && b[0] == VersionSequenced {
		if len(b) < 2 || len(b) < 2+int(b[1]) {
			return Message{}, fmt.Errorf("%w: sequenced message of %d bytes", ErrInvalid, len(b))
		}
		d := b[2 : 2+int(b[1])]
		seq, ok := parseSeq(d)
		if !ok {
			return Message{}, fmt.Errorf("%w: bad sequence %q", ErrInvalid, d)
		}
		m, err := decode(b[2+len(d):], secret)
		if err != nil {
			return Message{}, err
		}
		m.Seq = seq
		return m, nil
	}
	return decode(b, secret)
}

// parseSeq parses a sequence as Sequenced writes it: 1 to 20 decimal
// digits, no leading zero, a value above 0 that fits in 64 bits.
func parseSeq(d []byte) (uint64, bool) {
	if len(d) == 0 || len(d) > 20 || d[0] == '0' {
		return 0, false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	seq, err := strconv.ParseUint(string(d), 10, 64)
	return seq, err == nil
}

// decode parses a version 1 message.
func decode(b []byte, secret []byte) (Message, error) {
	var m Message
	if len(b) < 3+len(m.Origin) {
		return m, fmt.Errorf("%w: %d bytes", ErrInvalid, len(b))
	}
	if b[0] != Version {
		return m, fmt.Errorf("%w: unknown version %d", ErrInvalid, b[0])
	}
	m.Op = Op(b[1])
	if m.Op < OpSet || m.Op > OpExtend {
		return m, fmt.Errorf("%w: unknown op %d", ErrInvalid, b[1])
	}
	flags := b[2]
	if flags&^(flagValue|flagSigned|flagToken|flagSent) != 0 || (flags&flagValue != 0 && flags&flagSigned == 0 && m.Op != OpExtend) ||
		(flags&flagToken != 0 && !leaseNews(m.Op)) {
		return m, fmt.Errorf("%w: bad flags %#x for op %d", ErrInvalid, flags, m.Op)
	}
	body := b
	if flags&flagSigned != 0 {
		if len(b) < 3+len(m.Origin)+macLen {
			return m, fmt.Errorf("%w: too short for its signature", ErrInvalid)
		}
		body = b[:len(b)-macLen]
		if len(secret) > 0 {
			mac := hmac.New(sha256.New, secret)
			mac.Write(body)
			m.Authentic = hmac.Equal(mac.Sum(nil), b[len(body):])
		}
	}
	copy(m.Origin[:], body[3:19])
	r := reader{b: body[19:]}
	m.Namespace = string(r.bytes())
	count := r.uvarint()
	if count > MaxKeys || count > uint64(len(r.b)) {
		return Message{}, fmt.Errorf("%w: %d keys", ErrInvalid, count)
	}
	if count > 0 {
		m.Keys = make([]string, 0, count)
	}
	for i := uint64(0); i < count && r.err == nil; i++ {
		m.Keys = append(m.Keys, string(r.bytes()))
	}
	if flags&flagValue != 0 {
		v := r.bytes()
		if m.Authentic || flags&flagSigned == 0 {
			m.Value = v
		}
	}
	if flags&flagToken != 0 {
		tok := r.bytes()
		if r.err == nil && (len(tok) == 0 || len(tok) > MaxTokenLen) {
			return Message{}, fmt.Errorf("%w: token of %d bytes", ErrInvalid, len(tok))
		}
		m.Token = string(tok)
	}
	if flags&flagSent != 0 {
		m.Sent = r.int64()
	}
	if r.err != nil {
		return Message{}, r.err
	}
	if len(r.b) != 0 {
		return Message{}, fmt.Errorf("%w: %d trailing bytes", ErrInvalid, len(r.b))
	}
	if m.Op != OpClear && len(m.Keys) == 0 {
		return Message{}, fmt.Errorf("%w: op %d names no key", ErrInvalid, m.Op)
	}
	return m, nil
}

// leaseNews reports whether op is a lease holder's news, which may carry
// its token.
func leaseNews(op Op) bool { return op >= OpFilled && op <= OpNotStored }

// PackValues packs one value per key of an OpFilled message, or of an
// OpSet message that names more than one key, into its Value: each as a
// uvarint length and its bytes, an empty one for a key whose value is not
// carried (too large, or not stored).
func PackValues(vals [][]byte) []byte {
	n := 0
	for _, v := range vals {
		n += binary.MaxVarintLen64 + len(v)
	}
	b := make([]byte, 0, n)
	for _, v := range vals {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// UnpackValues returns the n values packed in b by PackValues, nil for an
// empty one. They alias b.
func UnpackValues(b []byte, n int) ([][]byte, error) {
	r := reader{b: b}
	vals := make([][]byte, n)
	for i := range vals {
		if v := r.bytes(); len(v) > 0 {
			vals[i] = v
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after %d values", ErrInvalid, len(r.b), n)
	}
	return vals, nil
}

// reader reads length-prefixed fields, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad length", ErrInvalid)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// int64 reads 8 bytes, big-endian.
func (r *reader) int64() int64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < sentLen {
		r.err = fmt.Errorf("%w: %d bytes left for a time of %d", ErrInvalid, len(r.b), sentLen)
		return 0
	}
	v := int64(binary.BigEndian.Uint64(r.b))
	r.b = r.b[sentLen:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: field of %d bytes with %d left", ErrInvalid, n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}
