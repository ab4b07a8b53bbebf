package l2

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/tier"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Prefix is prepended to every key the Store reads or writes, so that
	// several caches or applications can share one Redis: with Prefix
	// "app:", Get(ctx, []string{"user:1"}) reads the Redis key
	// "app:user:1". Leases and the invalidation log (Feed.Log) are keys
	// and are prefixed too; Feed.Channel is not (a cache adds the prefix,
	// which Info reports, to the channel it derives and to its messages).
	//
	// NOTE: in Redis Cluster the prefix is part of the hashed key, so a
	// prefix with a hash tag ("{app}:") puts every key in one slot, on one
	// node.
	//
	// default: "" (keys are used as given).
	Prefix string

	// ReadTimeout bounds each read (Get, and ReadLog past an open) as a
	// whole: dials, waits for a pooled connection, retries and their
	// back-off included, whatever the client's retry settings. It is
	// applied as a deadline on ctx unless ctx ends sooner. A call that runs
	// out of time returns an error for which
	// errors.Is(err, context.DeadlineExceeded) is true.
	//
	// NOTE: go-redis applies a ctx deadline to the socket only when the
	// client was built with ContextTimeoutEnabled: true. Without it, a call
	// to a stalled server lasts until the client's own ReadTimeout (see
	// Info().ReadBound and the package doc).
	//
	// default (0): 250 milliseconds, far above a healthy round trip (under
	// a millisecond on a LAN, a few across zones with TLS) yet short enough
	// that a dead Redis delays a read that the loader can answer by a
	// quarter of a second at most. Negative: no bound of the Store's own.
	ReadTimeout time.Duration

	// WriteTimeout bounds each other call (Write, TakeLeases,
	// ExtendLeases, ReleaseLeases, and ReadLog when it opens a log) as
	// ReadTimeout bounds reads. A call made of two round trips in Redis
	// Cluster (a take and the read of the keys its leases guard, a write
	// and the release of its lease) makes both within the one bound.
	//
	// default (0): 1 second, longer than reads: a failed write is returned
	// to the caller and may have been applied all the same, a script may
	// take two round trips (EVALSHA, then EVAL after NOSCRIPT) and a batch
	// carries many values. Negative: no bound of the Store's own.
	WriteTimeout time.Duration

	// Classic keeps classic pub/sub (PUBLISH) on a Redis Cluster client,
	// where a Store otherwise announces writes over sharded pub/sub
	// (SPUBLISH, on the channel's shard channel in the slot of the key
	// written: see the package doc). The Store and the bus that carries
	// its channels must agree: invalidate.Options.Classic is the same
	// choice for a Bus. No effect on other clients.
	Classic bool
}

// Defaults of Options.ReadTimeout and Options.WriteTimeout.
const (
	defaultReadTimeout  = 250 * time.Millisecond
	defaultWriteTimeout = time.Second
)

// topology says how keys of one call may be spread over commands.
type topology uint8

const (
	// single is one server (or a Sentinel-managed primary): any keys may
	// share one command or script.
	single topology = iota
	// cluster is Redis Cluster: a multi-key command or script must stay in
	// one hash slot.
	cluster
	// ring is a go-redis Ring, sharded client-side by key: one command per
	// key, since a multi-key command would go to the first key's shard only.
	ring
)

// Store is a byte store over Redis: the shared tier of a hybrid cache,
// implementing package hybrid's Remote. Create it with New; it is safe for
// concurrent use.
//
// A Store does not own its client: closing the client is the caller's job,
// and a Store needs no closing of its own.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	read   *timeout // bound of a read
	write  *timeout // bound of any other call
	topo   topology
	// sharded: messages go by SPUBLISH, each on its shard channel
	// (keyslot.Channel), on Redis Cluster unless Options.Classic.
	sharded bool
	info    tier.Info
	// hooked is set once the node clients the client had before New are
	// hooked too (see ask.go); hookMu makes one goroutine hook them.
	hooked atomic.Bool
	hookMu sync.Mutex
	// evict is read once, at the first Info (see evictionAdvice).
	evict     sync.Once
	evictions []string
}

// New returns a Store that keeps its entries in rdb: a *redis.Client (also
// one from redis.NewFailoverClient), a *redis.ClusterClient or a
// *redis.Ring, or any redis.UniversalClient wrapping one of them by
// embedding. New panics if rdb is nil.
func New(rdb redis.UniversalClient, o Options) *Store {
	if rdb == nil {
		panic("l2: New: nil client")
	}
	s := &Store{
		rdb:    rdb,
		prefix: o.Prefix,
		read:   newTimeout(bound(o.ReadTimeout, defaultReadTimeout)),
		write:  newTimeout(bound(o.WriteTimeout, defaultWriteTimeout)),
		topo:   topologyOf(rdb),
	}
	s.sharded = s.topo == cluster && !o.Classic
	s.info = tier.Info{Prefix: o.Prefix, Log: s.topo == single, AtomicBatch: s.topo == single, AtomicSlotBatch: s.topo == cluster, Sharded: s.sharded}
	s.info.ReadBound, s.info.Advice = readBound(rdb, s.read.d)
	s.watchAsks()
	return s
}

// Info describes the Store: Options.Prefix; whether it keeps a log and
// makes an announced batch atomically (on one server or a
// Sentinel-managed primary only); and, as ReadBound, the
// longest a Get can block (see readBound), with a line of Advice when that
// is not Options.ReadTimeout; and, read from Redis at the first call (one
// CONFIG GET, quietly left out when refused), a line of Advice when Redis
// evicts keys once full, saying which records of the cache it may evict
// and what that costs.
func (s *Store) Info() tier.Info {
	s.evict.Do(func() { s.evictions = evictionAdvice(s.rdb, bound(s.read.d, defaultReadTimeout)) })
	info := s.info
	info.Advice = append(append([]string(nil), s.info.Advice...), s.evictions...)
	return info
}

// readBound returns how long a Get can block on rdb whatever its ctx, when
// the Store asks for read (Options.ReadTimeout; 0: no bound asked), and
// advice when that is longer than read: read when ctx deadlines reach the
// client's sockets (ContextTimeoutEnabled), else the client's own
// ReadTimeout, its socket deadline (go-redis's default: 5 seconds), or 0
// when the client has none.
func readBound(rdb redis.UniversalClient, read time.Duration) (time.Duration, []string) {
	if read == 0 {
		return 0, nil
	}
	ctx, own, known := socketDeadlines(rdb)
	switch {
	case ctx:
		return read, nil
	case !known:
		return 0, []string{fmt.Sprintf("l2: the options of a %T are unknown, so reads are taken as unbounded (each read is handed to a worker goroutine); build the client with ContextTimeoutEnabled: true and pass it to l2.New as it is", rdb)}
	case own == 0:
		return 0, []string{"l2: the client has no ReadTimeout, so a read of a stalled server can block for ever; set its ReadTimeout, and ContextTimeoutEnabled: true to bound reads by l2.Options.ReadTimeout"}
	case own <= read:
		return own, nil
	}
	return own, []string{fmt.Sprintf("l2: reads are bounded by the client's ReadTimeout (%v), not l2.Options.ReadTimeout (%v): a read of a stalled server can keep a caller that long; build the client with ContextTimeoutEnabled: true", own, read)}
}

// topologyOf tells a cluster or ring client from a single-node one, also
// through types that embed the go-redis client.
func topologyOf(rdb redis.UniversalClient) topology {
	switch rdb.(type) {
	case *redis.ClusterClient:
		return cluster
	case *redis.Ring:
		return ring
	}
	if _, ok := rdb.(interface {
		MasterForKey(context.Context, string) (*redis.Client, error)
	}); ok {
		return cluster
	}
	if _, ok := rdb.(interface {
		GetShardClientForKey(string) (*redis.Client, error)
	}); ok {
		return ring
	}
	return single
}

// expiry turns a ttl into the expiration go-redis's Set takes: 0 for none
// (a negative value would mean KEEPTTL to go-redis), otherwise whole
// milliseconds, at least one.
func expiry(ttl time.Duration) time.Duration {
	switch {
	case ttl <= 0:
		return 0
	case ttl < time.Millisecond:
		return time.Millisecond
	}
	return ttl.Truncate(time.Millisecond)
}

// fullKeys returns keys with the prefix applied, or keys itself when there
// is no prefix.
func (s *Store) fullKeys(keys []string) []string {
	if s.prefix == "" {
		return keys
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = s.prefix + k
	}
	return full
}
