package hybrid

import (
	"context"
	"time"
)

// Remote is the shared second tier: a byte store that every instance reads
// and writes, such as *l2.Store over Redis. Keys arrive already namespaced.
//
// Get reports a missing key as ok == false with a nil error: a miss is not an
// error. SetIfAbsent stores only when the key holds nothing (SET NX): the
// cache fills with it, so a fill never overwrites another instance's write. Implementations must be safe for concurrent use.
type Remote interface {
	Get(ctx context.Context, key string) (value []byte, ok bool, err error)
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
	SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (stored bool, err error)
}

// BatchRemote is a Remote that reads and writes many keys in one round trip
// (per cluster node). GetMany returns one slot per key, in order, nil for a
// missing key. SetManyIfAbsent writes keys[i] = values[i] with lifetime
// ttls[i] where keys[i] holds nothing, and reports which it wrote.
//
// A Remote that does not implement it is called once per key.
type BatchRemote interface {
	Remote
	GetMany(ctx context.Context, keys []string) ([][]byte, error)
	SetManyIfAbsent(ctx context.Context, keys []string, values [][]byte, ttls []time.Duration) (stored []bool, err error)
}

// CompareAndSetter is a Remote that can replace a value only if it is still
// the one read (for Redis: a Lua script). A fill uses it to replace a stale,
// undecodable or deleted entry without overwriting a write that landed
// since its read; without it, such a fill overwrites unconditionally.
type CompareAndSetter interface {
	CompareAndSet(ctx context.Context, key string, old, value []byte, ttl time.Duration) (stored bool, err error)
}

// Announcer is a Remote that can make a write and its announcement one
// atomic step (for Redis: SET and PUBLISH in one script), so that the order
// of messages on channel is the order of the writes. With it, peers may swap
// in a value carried by a message; without it they only drop their copy.
// (A delete is a write too: it stores a short tombstone.)
type Announcer interface {
	SetAndPublish(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte) error
}

// BoundedReader is a Remote that bounds how long a read (Get, GetMany) can
// block, whatever the ctx it is given: ReadBound returns that bound, or 0
// when there is none (for *l2.Store: its ReadTimeout when the client applies
// ctx deadlines to its socket). With a bound, the caller that leads a fill
// makes its shared-tier read itself, which saves a hand-off to another
// goroutine; if its ctx ends during the read, it waits at most the bound.
// Without one, the read runs on a worker so that the caller can leave at once.
type BoundedReader interface {
	ReadBound() time.Duration
}

// Bus carries invalidation messages between instances, such as
// *invalidate.Bus over Redis pub/sub. It is a byte pipe: the cache owns the
// message format.
//
// Subscribe returns once the subscription is active, so that a message
// published after it returns is delivered. onMessage and onLoss run one at a
// time, in arrival order, on the bus's goroutine, and must not block. onLoss
// says that messages may have been lost (the connection dropped, or was
// restored after a drop): the subscriber must not trust what it filled before.
// After unsubscribe returns, neither is called again.
type Bus interface {
	Publish(ctx context.Context, channel string, msg []byte) error
	Subscribe(ctx context.Context, channel string, onMessage func(msg []byte), onLoss func()) (unsubscribe func(), err error)
}

// Codec turns values into bytes and back. ID is a stable byte written into
// every stored envelope, so a value written by another codec is recognised
// and treated as a miss rather than misread. The built-in codecs are
// codec.JSON (1), codec.Msgpack (2) and codec.Raw (3).
type Codec interface {
	ID() byte
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}
