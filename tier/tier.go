// Package tier is the contract of a hybrid cache's shared second tier: the
// Remote interface that a byte store shared by every instance implements
// (l2.Store over Redis, hybridtest.Remote in memory), the optional
// HeadReader, and the types of their requests and results. Package hybrid
// takes a Remote in hybrid.Options.Remote; an implementation imports this
// package only, never hybrid, and checks itself with
// hybridtest.TestRemote.
package tier

import (
	"context"
	"time"
)

// Remote is the shared second tier: a byte store that every instance reads
// and writes, such as *l2.Store over Redis. Keys arrive namespaced; the
// Remote may prepend a prefix of its own (see Info). Implementations must
// be safe for concurrent use. hybridtest.TestRemote checks one against
// this contract.
//
// Every method is required: what a deployment cannot do is an error
// wrapping errors.ErrUnsupported (for example a log on Redis Cluster),
// never a missing method. One capability is optional, and has an
// interface of its own: HeadReader.
type Remote interface {
	// Info describes the Remote. The cache calls it once, in hybrid.New.
	Info() Info

	// Get returns the stored bytes of each key, in order, nil for a
	// missing key, in one round trip (per node) where it can. A miss is
	// not an error.
	Get(ctx context.Context, keys []string) ([][]byte, error)

	// Write makes each write of ws, in order, announcing on f, in one
	// round trip (per node) where it can; each write is atomic with its
	// message, log entry and lease release, the batch is not, but for a
	// batch announced as a whole by f.Msg where Info().AtomicBatch holds
	// (see Feed). stored[i] reports whether ws[i] stored its value. After
	// an error, the writes it reports stored were made; the others may
	// have been.
	Write(ctx context.Context, ws []Write, f Feed) (stored []bool, err error)

	// TakeLeases takes a lease under token for ttl (at least 1ms) on each
	// of keys that no one holds, in one round trip (per node) where it
	// can. guards[i] is the key that keys[i] is a lease for: a taker
	// learns what it held right after the take, so that it sees a value
	// stored by a holder that released between its read and its take. A
	// lease found held is marked as asked for, so that its holder's
	// release announces (see Write.Lease, ReleaseLeases).
	TakeLeases(ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]Lease, error)

	// ExtendLeases sets to ttl the lifetime of each lease of keys still
	// held under token, and reports which were.
	ExtendLeases(ctx context.Context, keys []string, token string, ttl time.Duration) (held []bool, err error)

	// ReleaseLeases deletes each lease of keys still held under token (one
	// taken over by another holder stays), then publishes msg on
	// f.Channel if someone may wait for one of them (it was asked for, or
	// is no longer held under token).
	ReleaseLeases(ctx context.Context, keys []string, token string, msg []byte, f Feed) error

	// ReadLog returns up to max entries of the log named log after the
	// position after, oldest first. With after empty it opens the log:
	// it creates the log if missing and returns no entries, only Last.
	// Positions compare as Redis stream ids ("<ms>-<seq>").
	ReadLog(ctx context.Context, log, after string, max int) (LogPage, error)
}

// HeadReader is the optional capability of a Remote: reading the first n
// bytes of stored values, so that the cache's background verifier
// (hybrid.Options.VerifyRate) learns a value's header without moving its
// payload. The cache looks for it once, in hybrid.New. l2.Store and
// hybridtest.Remote have it; with a Remote that has not, the verifier reads
// whole values with Remote.Get, and nothing else changes.
type HeadReader interface {
	// Heads returns the first n bytes of the value of each key (all of a
	// shorter one), in order, nil for a missing key, in one round trip
	// (per node) where it can. A miss is not an error.
	Heads(ctx context.Context, keys []string, n int) ([][]byte, error)
}

// Cond is the condition under which a Write stores its value.
type Cond uint8

const (
	// Always stores whatever the key holds.
	Always Cond = iota
	// IfAbsent stores only where the key holds nothing (SET NX).
	IfAbsent
	// IfEqual stores only where the key holds exactly Write.Old (an empty
	// Old matches an empty value only, never a missing key).
	IfEqual
	// IfNewer stores only where the key holds nothing, or a value whose
	// write time is not after Write.Value's, and reports stored also when
	// the key already holds exactly Write.Value (then nothing is written or
	// published). Write times are 8 bytes, big-endian, at byte offset
	// Write.StampAt of both values; a stored value too short to hold one
	// counts as older. Of two values with the same write time, Write.Value
	// wins.
	IfNewer
	// IfSeq stores only where the key holds nothing and the sequence
	// counter Write.Seq holds exactly Write.SeqWas: no write that bumps
	// the counter (see Write.Seq) stored since SeqWas was read, even if
	// what it stored is gone (evicted, expired). A missing counter, or an
	// empty SeqWas, never matches.
	IfSeq
)

// Write is one write to the shared tier: a value under a key, on a
// condition, maybe announced, logged and releasing a lease.
type Write struct {
	Key   string
	Value []byte        // the bytes to store (a cache value, a tombstone or a record)
	TTL   time.Duration // the key's lifetime; 0 or less: no expiry
	If    Cond          // when to store
	Old   []byte        // IfEqual: the bytes the key must hold
	// KeepTTL keeps the lifetime the key has left instead of TTL (SET
	// KEEPTTL); with IfEqual only.
	KeepTTL bool
	// StampAt is, with IfNewer, the byte offset of the write time in Value
	// and in the stored value.
	StampAt int
	// Seq, if not empty, is the key of a sequence counter (a decimal
	// integer, kept without expiry) that covers Key and other keys, in the
	// same Redis Cluster slot as Key. A write with Seq, other than IfSeq,
	// bumps it in the same step when it stores: by one, or, where it is
	// missing, to a value it never held (from the server's clock, in
	// microseconds times 1000), so that a counter lost and made again
	// never repeats a value read before. SeqWas is, with IfSeq, the
	// counter as read.
	Seq    string
	SeqWas []byte
	// Touch changes the stored value in place instead of replacing it:
	// Value is written over the stored bytes from byte offset TouchAt
	// (SETRANGE), and the key's lifetime is set to TTL (or kept, with
	// KeepTTL). Only with IfEqual, whose Old is then compared with the
	// first len(Old) bytes of the stored value, leaving out the bytes the
	// touch overwrites (so a value is extended without being sent): it
	// stores only where the key holds at least TouchAt+len(Value) bytes
	// (a touch never grows a value) that begin with Old but for those.
	Touch   bool
	TouchAt int

	// Msg is published on Feed.Channel if the write stored, Else if it did
	// not (nil: nothing), in the same atomic step as the write, so that
	// the order of messages is the order of writes.
	Msg, Else []byte
	// Log, when a message goes out, is appended to the log Feed.Log in the
	// same step, and the message is published positioned at the new
	// entry: byte 2, one byte holding the length of the position, the
	// position, then the message. A message that goes out without Log, of
	// a write with Seq, is published sequenced at the counter's value
	// after the write (where the counter holds one): byte 3, one byte
	// holding the length of the value in decimal, the value, then the
	// message. A receiver that tracks a slot's counter from the messages
	// of its keys learns from a step in it that it missed a write.
	Log []byte

	// Lease, if not empty, is a lease (see Remote.TakeLeases) that the
	// write releases after storing, if it is still held under Token. Then
	// Msg or Else goes out only if someone may wait for the lease: a taker
	// found it held, or it is no longer held under Token.
	Lease, Token string
}

// Feed is where a batch of writes announces: the bus channel and the log
// (with its length, kept to about LogLen entries). An empty Channel
// publishes nothing.
type Feed struct {
	Channel string
	Log     string
	LogLen  int

	// Msg, if not nil, announces the batch as a whole: it goes out on
	// Channel once, after every write of the batch (and its own message,
	// if it has one) was made, whether or not each stored, so that whoever
	// hears it finds each of them done. With Entry set, Entry is appended
	// to the log Log first, and Msg goes out positioned at the new entry
	// (as with Write.Log). Where Info.AtomicBatch holds, the writes, Entry
	// and Msg are one atomic step: no other write comes between them, so
	// that the order of messages is the order of writes across the batch.
	// Elsewhere Msg goes out in a step of its own after the writes (and
	// should then only name keys, never carry values). Msg goes out also
	// when some writes of the batch failed, unless none could be made (a
	// call that failed as a whole).
	Msg, Entry []byte
}

// Lease is one key's result of Remote.TakeLeases.
type Lease struct {
	Taken bool
	// Value is, when Taken, what the guarded key held right after the
	// lease was taken (nil: nothing).
	Value []byte
	// Left and Holder are, when not Taken, how long the holder's lease has
	// left and the token it is held under.
	Left   time.Duration
	Holder string
}

// LogPage is what Remote.ReadLog found.
type LogPage struct {
	Entries   [][]byte // oldest first
	Positions []string // of Entries
	// Complete is false when the log cannot show every entry after the
	// position asked for: it is missing, entries after it were trimmed, or
	// the position is after the newest entry.
	Complete bool
	Last     string // the position of the newest entry
}

// Info describes a Remote, for the cache to adapt to and its advisor to
// check.
type Info struct {
	// Prefix is prepended by the Remote to every key; the cache makes it
	// part of its channel and messages, so that caches kept apart by a
	// prefix take none of each other's news.
	Prefix string
	// ReadBound is the longest a Get can block whatever its ctx (0: no
	// bound). With one, the caller that leads a fill reads the shared tier
	// itself; without, the read runs on a worker so that it can leave.
	ReadBound time.Duration
	// Log reports whether the Remote keeps a log (Write.Log, ReadLog).
	Log bool
	// AtomicBatch reports whether a batch of writes announced by Feed.Msg
	// is made as one atomic step with its message (see Feed.Msg), so that
	// the message may carry the values written.
	AtomicBatch bool
	// Sharded reports that messages go over sharded pub/sub (Redis
	// Cluster's SPUBLISH): a message about a key on Feed.Channel's shard
	// channel in the key's slot, others in the slot of the channel's name
	// (named as invalidate.ShardChannel names them), so the bus that
	// carries them must subscribe every slot's shard channel
	// (invalidate.Bus does on Redis Cluster, unless told to keep classic
	// pub/sub).
	Sharded bool
	// Advice lists settings of the Remote that cost its user, for the
	// cache to log once at start.
	Advice []string
}
