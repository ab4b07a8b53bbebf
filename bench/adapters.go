package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"sync/atomic"
	"time"

	"github.com/go-redis/cache/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// impl is one cache under test, holding values of type V (a pointer type
// such as *Record) in front of the harness's Redis. Each peer library sits
// behind one small adapter that implements it.
type impl[V any] interface {
	// Get reads key from the local tier, else from Redis; ok is false on a
	// miss in both.
	Get(ctx context.Context, key string) (v V, ok bool, err error)
	// GetOrLoad is the read-through call: local tier, Redis, then load.
	GetOrLoad(ctx context.Context, key string, load func(context.Context, string) (V, error)) (V, error)
	// GetPage reads keys with the library's batch call and returns how many
	// it found. A library without one returns an error wrapping errNA.
	GetPage(ctx context.Context, keys []string) (int, error)
	// Set writes v under key with the given lifetime in Redis.
	Set(ctx context.Context, key string, v V, ttl time.Duration) error
	Close()
}

// errNA marks a call a library does not offer.
var errNA = errors.New("n/a")

// Names of the implementations, as printed in the tables.
const (
	nameOurs    = "hybridcache"
	nameGoCache = "go-redis/cache"
	nameRueidis = "rueidis"
	nameCSC     = "go-redis CSC"
)

// spec says which implementation to open and over which keys.
type spec struct {
	kind   string // one of the names above
	prefix string // Namespace (ours) or key prefix (peers) in Redis
	f      format // the encoding peers use and our codec
	ownBus bool   // ours: its own go-redis client and bus (an independent instance)
}

// Lifetimes used by every implementation unless a scenario says otherwise:
// long enough that nothing expires during a full run.
const (
	benchTTL      = time.Hour
	benchLocalTTL = 10 * time.Minute
)

func open[V any](e *env, s spec) (impl[V], error) {
	switch s.kind {
	case nameOurs:
		return openOurs[V](e, s)
	case nameGoCache:
		return openGoCache[V](e, s), nil
	case nameRueidis:
		return openRueidis[V](e, s)
	case nameCSC:
		return openCSC[V](e, s)
	}
	return nil, fmt.Errorf("unknown implementation %q", s.kind)
}

// --- ours ---

type ours[V any] struct {
	c      *hybrid.Cache[V]
	remote *countingRemote
	rdb    *redis.Client   // own client, or nil
	bus    *invalidate.Bus // own bus, or nil
}

func oursOptions(e *env, s spec, remote *countingRemote, bus hybrid.Bus) hybrid.Options {
	return hybrid.Options{
		Namespace:     s.prefix,
		Remote:        remote,
		Bus:           bus,
		Secret:        e.secret,
		Codec:         s.f.codec,
		TTL:           benchTTL,
		LocalTTL:      benchLocalTTL,
		LocalMaxBytes: 256 << 20,
	}
}

func openOurs[V any](e *env, s spec) (*ours[V], error) {
	o := &ours[V]{}
	rdb, bus := e.rdb, e.bus
	if s.ownBus {
		o.rdb = e.newClient()
		o.bus = invalidate.New(o.rdb, invalidate.Options{})
		rdb, bus = o.rdb, o.bus
	}
	o.remote = &countingRemote{s: l2.New(rdb, l2.Options{})}
	c, err := hybrid.New[V](oursOptions(e, s, o.remote, bus))
	if err != nil {
		o.Close()
		return nil, err
	}
	o.c = c
	return o, nil
}

func (o *ours[V]) Get(ctx context.Context, key string) (V, bool, error) { return o.c.Get(ctx, key) }

func (o *ours[V]) GetOrLoad(ctx context.Context, key string, load func(context.Context, string) (V, error)) (V, error) {
	return o.c.GetOrCreate(ctx, key, load)
}

func (o *ours[V]) GetPage(ctx context.Context, keys []string) (int, error) {
	m, err := o.c.GetOrCreateMany(ctx, keys, noLoadMany[V])
	return len(m), err
}

func (o *ours[V]) Set(ctx context.Context, key string, v V, ttl time.Duration) error {
	return o.c.Set(ctx, key, v, hybrid.WithTTL(ttl), hybrid.WithLocalTTL(min(ttl, benchLocalTTL)))
}

func (o *ours[V]) Close() {
	if o.c != nil {
		o.c.Close()
	}
	if o.bus != nil {
		o.bus.Close()
	}
	if o.rdb != nil {
		o.rdb.Close()
	}
}

// errUnexpectedLoad is returned by the load functions of reads that must be
// answered from L1 or Redis.
var errUnexpectedLoad = errors.New("bench: load called for a key that should have been cached")

func noLoad[V any](context.Context, string) (V, error) {
	var zero V
	return zero, errUnexpectedLoad
}

func noLoadMany[V any](context.Context, []string) (map[string]V, error) {
	return nil, errUnexpectedLoad
}

// countingRemote wraps an l2.Store and counts its round trips to Redis,
// its value reads and the bytes it read, delegating every call of the
// Remote contract, so the cache runs exactly the code it runs on the Store.
type countingRemote struct {
	s         *l2.Store
	trips     atomic.Int64 // every call that reaches Redis
	reads     atomic.Int64 // Get calls
	leases    atomic.Int64 // lease calls, and writes that release a lease
	bytesRead atomic.Int64
}

var _ tier.Remote = (*countingRemote)(nil)

// Info makes no round trip.
func (r *countingRemote) Info() tier.Info { return r.s.Info() }

func (r *countingRemote) Get(ctx context.Context, keys []string) ([][]byte, error) {
	r.trips.Add(1)
	r.reads.Add(1)
	vs, err := r.s.Get(ctx, keys)
	for _, v := range vs {
		r.bytesRead.Add(int64(len(v)))
	}
	return vs, err
}

func (r *countingRemote) Write(ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error) {
	r.trips.Add(1)
	if len(ws) > 0 && ws[0].Lease != "" {
		r.leases.Add(1)
	}
	return r.s.Write(ctx, ws, f)
}

// The lease calls are passed on, each counted as a round trip (a take on
// Redis Cluster makes two when it takes a lease; counted as one).

func (r *countingRemote) TakeLeases(ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]tier.Lease, error) {
	r.trips.Add(1)
	r.leases.Add(1)
	return r.s.TakeLeases(ctx, keys, guards, token, ttl)
}

func (r *countingRemote) ExtendLeases(ctx context.Context, keys []string, token string, ttl time.Duration) ([]bool, error) {
	r.trips.Add(1)
	r.leases.Add(1)
	return r.s.ExtendLeases(ctx, keys, token, ttl)
}

func (r *countingRemote) ReleaseLeases(ctx context.Context, keys []string, token string, msg []byte, f tier.Feed) error {
	r.trips.Add(1)
	r.leases.Add(1)
	return r.s.ReleaseLeases(ctx, keys, token, msg, f)
}

func (r *countingRemote) ReadLog(ctx context.Context, log, after string, max int) (tier.LogPage, error) {
	r.trips.Add(1)
	return r.s.ReadLog(ctx, log, after, max)
}

// countingBus wraps an invalidate.Bus and counts the messages it delivers
// to this instance and their bytes (the payload, without Redis's framing
// and the channel's name), passing every call on.
type countingBus struct {
	b     *invalidate.Bus
	msgs  atomic.Int64
	bytes atomic.Int64
}

var _ hybrid.Bus = (*countingBus)(nil)

func (b *countingBus) Publish(ctx context.Context, channel string, msg []byte) error {
	return b.b.Publish(ctx, channel, msg)
}

// Sharded passes on the bus's answer, if it gives one, so that a check of
// the Remote against the Bus sees through the wrapper.
func (b *countingBus) Sharded() bool {
	s, ok := any(b.b).(interface{ Sharded() bool })
	return ok && s.Sharded()
}

func (b *countingBus) Subscribe(ctx context.Context, channel string, onMessage func(msg []byte), onLoss func(restored bool)) (func(), error) {
	return b.b.Subscribe(ctx, channel, func(msg []byte) {
		b.msgs.Add(1)
		b.bytes.Add(int64(len(msg)))
		onMessage(msg)
	}, onLoss)
}

// --- go-redis/cache ---

// goCache is github.com/go-redis/cache: a TinyLFU of encoded bytes (msgpack,
// s2-compressed above 64 bytes) in front of Redis. Every local hit decodes.
type goCache[V any] struct {
	cd     *cache.Cache
	local  *cache.TinyLFU
	prefix string
}

func openGoCache[V any](e *env, s spec) *goCache[V] {
	local := cache.NewTinyLFU(100_000, benchLocalTTL)
	return &goCache[V]{
		cd:     cache.New(&cache.Options{Redis: e.rdb, LocalCache: local}),
		local:  local,
		prefix: s.prefix,
	}
}

func (g *goCache[V]) Get(ctx context.Context, key string) (V, bool, error) {
	var v V
	err := g.cd.Get(ctx, g.prefix+key, &v)
	if errors.Is(err, cache.ErrCacheMiss) {
		return v, false, nil
	}
	return v, err == nil, err
}

func (g *goCache[V]) GetOrLoad(ctx context.Context, key string, load func(context.Context, string) (V, error)) (V, error) {
	var v V
	err := g.cd.Once(&cache.Item{
		Ctx:   ctx,
		Key:   g.prefix + key,
		Value: &v,
		TTL:   benchTTL,
		Do:    func(*cache.Item) (any, error) { return load(ctx, key) },
	})
	return v, err
}

func (g *goCache[V]) GetPage(context.Context, []string) (int, error) {
	return 0, fmt.Errorf("%w: go-redis/cache has no batch read", errNA)
}

func (g *goCache[V]) Set(ctx context.Context, key string, v V, ttl time.Duration) error {
	return g.cd.Set(&cache.Item{Ctx: ctx, Key: g.prefix + key, Value: v, TTL: ttl})
}

func (g *goCache[V]) Close() {}

// --- rueidis ---

// rueidisImpl is github.com/redis/rueidis with server-assisted client-side
// caching (DoCache / DoMultiCache): it caches the reply bytes, so every
// local hit decodes them.
type rueidisImpl[V any] struct {
	c      rueidis.Client
	prefix string
	f      format
}

func openRueidis[V any](e *env, s spec) (*rueidisImpl[V], error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{e.addr}})
	if err != nil {
		return nil, fmt.Errorf("rueidis: %w", err)
	}
	return &rueidisImpl[V]{c: c, prefix: s.prefix, f: s.f}, nil
}

func (r *rueidisImpl[V]) Get(ctx context.Context, key string) (V, bool, error) {
	var v V
	b, err := r.c.DoCache(ctx, r.c.B().Get().Key(r.prefix+key).Cache(), benchLocalTTL).AsBytes()
	if rueidis.IsRedisNil(err) {
		return v, false, nil
	}
	if err != nil {
		return v, false, err
	}
	if err := r.f.unmarshal(b, &v); err != nil {
		return v, false, err
	}
	return v, true, nil
}

func (r *rueidisImpl[V]) GetOrLoad(ctx context.Context, key string, load func(context.Context, string) (V, error)) (V, error) {
	return getOrLoad[V](ctx, r, key, load)
}

func (r *rueidisImpl[V]) GetPage(ctx context.Context, keys []string) (int, error) {
	cmds := make([]rueidis.CacheableTTL, len(keys))
	for i, k := range keys {
		cmds[i] = rueidis.CT(r.c.B().Get().Key(r.prefix+k).Cache(), benchLocalTTL)
	}
	n := 0
	for _, res := range r.c.DoMultiCache(ctx, cmds...) {
		b, err := res.AsBytes()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return n, err
		}
		var v V
		if err := r.f.unmarshal(b, &v); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (r *rueidisImpl[V]) Set(ctx context.Context, key string, v V, ttl time.Duration) error {
	b, err := r.f.marshal(v)
	if err != nil {
		return err
	}
	return r.c.Do(ctx, r.c.B().Set().Key(r.prefix+key).Value(rueidis.BinaryString(b)).PxMilliseconds(ttl.Milliseconds()).Build()).Error()
}

func (r *rueidisImpl[V]) Close() { r.c.Close() }

// --- go-redis client-side caching ---

// csc is go-redis v9's own client-side cache (RESP3, CLIENT TRACKING): GET
// and MGET replies are cached as bytes, so every local hit decodes them.
type csc[V any] struct {
	rdb    *redis.Client
	lc     *redis.LocalCache
	prefix string
	f      format
}

func openCSC[V any](e *env, s spec) (*csc[V], error) {
	lc := redis.NewLocalCache(redis.CacheConfig{MaxEntries: 200_000})
	rdb := redis.NewClient(&redis.Options{Addr: e.addr, Protocol: 3, ClientSideCache: lc})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("go-redis CSC: %w", err)
	}
	return &csc[V]{rdb: rdb, lc: lc, prefix: s.prefix, f: s.f}, nil
}

func (c *csc[V]) Get(ctx context.Context, key string) (V, bool, error) {
	var v V
	b, err := c.rdb.Get(ctx, c.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return v, false, nil
	}
	if err != nil {
		return v, false, err
	}
	if err := c.f.unmarshal(b, &v); err != nil {
		return v, false, err
	}
	return v, true, nil
}

func (c *csc[V]) GetOrLoad(ctx context.Context, key string, load func(context.Context, string) (V, error)) (V, error) {
	return getOrLoad[V](ctx, c, key, load)
}

func (c *csc[V]) GetPage(ctx context.Context, keys []string) (int, error) {
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = c.prefix + k
	}
	vals, err := c.rdb.MGet(ctx, full...).Result()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, x := range vals {
		s, ok := x.(string)
		if !ok {
			continue
		}
		var v V
		if err := c.f.unmarshal([]byte(s), &v); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (c *csc[V]) Set(ctx context.Context, key string, v V, ttl time.Duration) error {
	b, err := c.f.marshal(v)
	if err != nil {
		return err
	}
	return c.rdb.Set(ctx, c.prefix+key, b, ttl).Err()
}

func (c *csc[V]) Close() { c.rdb.Close() }

// getOrLoad is read-through for libraries without a loader of their own:
// Get, and on a miss load and Set. (No stampede protection: these
// libraries leave that to the caller.)
func getOrLoad[V any](ctx context.Context, c impl[V], key string, load func(context.Context, string) (V, error)) (V, error) {
	v, ok, err := c.Get(ctx, key)
	if ok || err != nil {
		return v, err
	}
	v, err = load(ctx, key)
	if err != nil {
		return v, err
	}
	return v, c.Set(ctx, key, v, benchTTL)
}
