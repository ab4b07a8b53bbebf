package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/go-redis/cache/v9"
	"github.com/maypok86/otter/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// The systems scenario 10 replays a trace through, each as a fleet of N
// instances in this process: ours, and the peers of adapters.go set up for
// a byte budget, with what the scenario counts (local hits, round trips,
// messages). Each instance of a peer has its own client, as a process of a
// fleet would.

// TraceValue is a value of scenario 10: the trace key it belongs to, the
// write that made it (0: the database's first version), and its payload.
type TraceValue struct {
	ID      int32  `msgpack:"i"`
	Version uint32 `msgpack:"v"`
	Data    []byte `msgpack:"d"`
}

// traceDB is the database of a replay: it holds every key's latest
// version, and counts its loads.
type traceDB struct {
	t       *trace
	index   map[string]uint32
	version []uint32
	loads   atomic.Int64
}

func newTraceDB(t *trace) *traceDB {
	d := &traceDB{t: t, index: make(map[string]uint32, len(t.keys)), version: make([]uint32, len(t.keys))}
	for k, key := range t.keys {
		d.index[key] = uint32(k)
	}
	return d
}

// value returns key k's value at its latest version.
func (d *traceDB) value(k uint32) *TraceValue {
	return &TraceValue{ID: d.t.ids[k], Version: d.version[k], Data: payloadOf(d.t.ids[k], d.t.sizes[k])}
}

// load is the loader every system calls on a miss in all its tiers.
func (d *traceDB) load(_ context.Context, key string) (*TraceValue, error) {
	k, ok := d.index[key]
	if !ok {
		return nil, fmt.Errorf("bench: %q is not a key of trace %s", key, d.t.name)
	}
	d.loads.Add(1)
	return d.value(k), nil
}

// traceCounts is what a fleet counted over a replay, summed over its
// instances. A count a system cannot give is -1.
type traceCounts struct {
	localHits          int64 // reads answered by the local tier
	trips              int64 // calls that reached Redis
	published, applied int64 // invalidation messages sent, and received and applied
}

// traceFleet is one system's N instances.
type traceFleet interface {
	// read returns key k as instance i sees it, loading it from the
	// database on a miss in every tier.
	read(ctx context.Context, i int, k uint32) (*TraceValue, error)
	// write stores v, the database's new value of key k, through
	// instance i.
	write(ctx context.Context, i int, k uint32, v *TraceValue) error
	counts() traceCounts
	close()
}

// traceSystem is a row of scenario 10: how to open its fleet.
type traceSystem struct {
	name   string
	series int // chart colour
	open   func(e *env, c *traceCell) (traceFleet, error)
}

// Names of the rows that the scenario treats apart.
const (
	nameOtterAlone      = "otter alone"
	nameOtterAloneAsync = "otter alone, default executor"
	nameRedisAlone      = "Redis alone"
)

var traceSystems = []traceSystem{
	{nameOurs, 0, openTraceOurs},
	{nameOtterAlone, 1, func(_ *env, c *traceCell) (traceFleet, error) { return openTraceOtter(c, true) }},
	{nameOtterAloneAsync, 4, func(_ *env, c *traceCell) (traceFleet, error) { return openTraceOtter(c, false) }},
	{nameRedisAlone, 1, openTraceRedis},
	{nameGoCache, 2, openTraceGoCache},
	{nameRueidis, 3, openTraceRueidis},
}

// --- ours ---

type traceOurs struct {
	load func(context.Context, string) (*TraceValue, error)
	keys []string
	ins  []*traceInst
}

// traceInst is one of our instances: its cache, client, bus and counting
// Store.
type traceInst struct {
	c      *hybrid.Cache[*TraceValue]
	remote *countingRemote
	rdb    *redis.Client
	bus    *invalidate.Bus
}

func (in *traceInst) close() {
	if in.c != nil {
		in.c.Close()
	}
	in.bus.Close()
	in.rdb.Close()
}

func openTraceOurs(e *env, c *traceCell) (traceFleet, error) {
	f := &traceOurs{load: c.db.load, keys: c.t.keys}
	for range c.n {
		in := &traceInst{rdb: e.newClient()}
		in.bus = invalidate.New(in.rdb, invalidate.Options{})
		in.remote = &countingRemote{s: l2.New(in.rdb, l2.Options{})}
		f.ins = append(f.ins, in)
		o := oursOptions(e, spec{kind: nameOurs, prefix: c.ns, f: fmtMsgpack}, in.remote, in.bus)
		o.LocalMaxBytes = int64(c.budget)
		hc, err := hybrid.New[*TraceValue](o)
		if err != nil {
			f.close()
			return nil, err
		}
		in.c = hc
	}
	return f, nil
}

func (f *traceOurs) read(ctx context.Context, i int, k uint32) (*TraceValue, error) {
	return f.ins[i].c.GetOrCreate(ctx, f.keys[k], f.load)
}

func (f *traceOurs) write(ctx context.Context, i int, k uint32, v *TraceValue) error {
	return f.ins[i].c.Set(ctx, f.keys[k], v)
}

func (f *traceOurs) counts() traceCounts {
	var n traceCounts
	for _, in := range f.ins {
		st := in.c.Stats()
		n.localHits += int64(st.L1.Hits)
		n.trips += in.remote.trips.Load()
		n.published += int64(st.Invalidations.Sent)
		n.applied += int64(st.Invalidations.Applied)
	}
	return n
}

func (f *traceOurs) close() {
	for _, in := range f.ins {
		in.close()
	}
}

// --- otter alone ---

// traceOtter is one otter cache per instance, configured as our L1
// configures it (the same byte bound and weights, a lifetime per entry),
// and no shared tier: a miss loads, and a write reaches only the instance
// that makes it. Its upkeep runs on the caller (callerRuns), as in l1's
// trace test and as our L1 runs it in a cache that writes, or on otter's default
// executor, a goroutine per upkeep, which lags a replay this tight: the
// cache then holds more than its budget until the upkeep catches up (at
// 1% of a 20,000-request prefix of orm-busy, 1.7 to 1.9 times it on
// average), which shows as hits.
type traceOtter struct {
	db   *traceDB
	keys []string
	cs   []*otter.Cache[string, *TraceValue]
	hits int64
}

func openTraceOtter(c *traceCell, callerRuns bool) (traceFleet, error) {
	f := &traceOtter{db: c.db, keys: c.t.keys}
	for range c.n {
		o := &otter.Options[string, *TraceValue]{
			MaximumWeight: c.budget,
			Weigher: func(key string, v *TraceValue) uint32 {
				return uint32(traceWeight(key, uint32(len(v.Data)), c.overhead))
			},
			// A lifetime per entry, as our L1 has: with it otter records
			// reads from the start, not only once it is half full.
			ExpiryCalculator: otter.ExpiryWriting[string, *TraceValue](benchLocalTTL),
		}
		if callerRuns {
			o.Executor = func(fn func()) { fn() }
		}
		oc, err := otter.New(o)
		if err != nil {
			return nil, err
		}
		f.cs = append(f.cs, oc)
	}
	return f, nil
}

func (f *traceOtter) read(ctx context.Context, i int, k uint32) (*TraceValue, error) {
	key := f.keys[k]
	if v, ok := f.cs[i].GetIfPresent(key); ok {
		f.hits++
		return v, nil
	}
	v, err := f.db.load(ctx, key)
	if err != nil {
		return nil, err
	}
	f.cs[i].Set(key, v)
	return v, nil
}

func (f *traceOtter) write(_ context.Context, i int, k uint32, v *TraceValue) error {
	f.cs[i].Set(f.keys[k], v)
	return nil
}

func (f *traceOtter) counts() traceCounts {
	return traceCounts{localHits: f.hits, published: -1, applied: -1}
}

func (f *traceOtter) close() {
	for _, c := range f.cs {
		c.StopAllGoroutines()
	}
}

// --- Redis alone ---

// traceRedis reads every request from Redis (GET and msgpack decode); a
// miss loads and SETs.
type traceRedis struct {
	db    *traceDB
	keys  []string // with the cell's prefix
	rdbs  []*redis.Client
	trips int64
}

func openTraceRedis(e *env, c *traceCell) (traceFleet, error) {
	f := &traceRedis{db: c.db}
	for _, k := range c.t.keys {
		f.keys = append(f.keys, c.ns+k)
	}
	for range c.n {
		f.rdbs = append(f.rdbs, e.newClient())
	}
	return f, nil
}

func (f *traceRedis) read(ctx context.Context, i int, k uint32) (*TraceValue, error) {
	f.trips++
	b, err := f.rdbs[i].Get(ctx, f.keys[k]).Bytes()
	if err == nil {
		v := new(TraceValue)
		return v, msgpack.Unmarshal(b, v)
	}
	if !errors.Is(err, redis.Nil) {
		return nil, err
	}
	v, err := f.db.load(ctx, f.db.t.keys[k])
	if err != nil {
		return nil, err
	}
	return v, f.write(ctx, i, k, v)
}

func (f *traceRedis) write(ctx context.Context, i int, k uint32, v *TraceValue) error {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return err
	}
	f.trips++
	return f.rdbs[i].Set(ctx, f.keys[k], b, benchTTL).Err()
}

func (f *traceRedis) counts() traceCounts {
	return traceCounts{trips: f.trips, published: -1, applied: -1}
}

func (f *traceRedis) close() {
	for _, c := range f.rdbs {
		c.Close()
	}
}

// --- go-redis/cache ---

// traceGoCache is go-redis/cache with its local TinyLFU, which is bounded
// by a count of entries: the budget over the mean weight of the trace's
// values. It has no invalidation: a write reaches the other instances'
// local tiers when their entries expire.
type traceGoCache struct {
	db     *traceDB
	keys   []string // with the cell's prefix
	cds    []*cache.Cache
	locals []*countingLocal
	rdbs   []*redis.Client
	trips  atomic.Int64
}

// countingLocal counts the hits of a go-redis/cache local tier.
type countingLocal struct {
	cache.LocalCache
	hits atomic.Int64
}

func (l *countingLocal) Get(key string) ([]byte, bool) {
	b, ok := l.LocalCache.Get(key)
	if ok {
		l.hits.Add(1)
	}
	return b, ok
}

// tripHook counts the commands and pipelines a go-redis client sends.
type tripHook struct{ n *atomic.Int64 }

func (h tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

func openTraceGoCache(e *env, c *traceCell) (traceFleet, error) {
	f := &traceGoCache{db: c.db}
	for _, k := range c.t.keys {
		f.keys = append(f.keys, c.ns+k)
	}
	entries := max(1, int(float64(c.budget)/c.meanWeight))
	for range c.n {
		rdb := e.newClient()
		rdb.AddHook(tripHook{&f.trips})
		local := &countingLocal{LocalCache: cache.NewTinyLFU(entries, benchLocalTTL)}
		f.rdbs = append(f.rdbs, rdb)
		f.locals = append(f.locals, local)
		f.cds = append(f.cds, cache.New(&cache.Options{Redis: rdb, LocalCache: local}))
	}
	return f, nil
}

func (f *traceGoCache) read(ctx context.Context, i int, k uint32) (*TraceValue, error) {
	v := new(TraceValue)
	err := f.cds[i].Once(&cache.Item{
		Ctx:   ctx,
		Key:   f.keys[k],
		Value: v,
		TTL:   benchTTL,
		Do:    func(*cache.Item) (any, error) { return f.db.load(ctx, f.db.t.keys[k]) },
	})
	return v, err
}

func (f *traceGoCache) write(ctx context.Context, i int, k uint32, v *TraceValue) error {
	return f.cds[i].Set(&cache.Item{Ctx: ctx, Key: f.keys[k], Value: v, TTL: benchTTL})
}

func (f *traceGoCache) counts() traceCounts {
	n := traceCounts{trips: f.trips.Load(), published: -1, applied: -1}
	for _, l := range f.locals {
		n.localHits += l.hits.Load()
	}
	return n
}

func (f *traceGoCache) close() {
	for _, c := range f.rdbs {
		c.Close()
	}
}

// --- rueidis ---

// traceRueidis is rueidis with server-assisted client-side caching: GET
// through DoCache, its local cache bounded to the budget in bytes
// (CacheSizeEachConn, on one pipelining connection: PipelineMultiplex -1;
// it weighs an entry by its key, command and reply, plus its bookkeeping).
// A write is a SET, after which Redis tells the other instances to drop
// the key. Applied counts the keys invalidated.
type traceRueidis struct {
	db      *traceDB
	keys    []string // with the cell's prefix
	cs      []rueidis.Client
	hits    int64
	trips   int64
	dropped atomic.Int64
}

func openTraceRueidis(e *env, c *traceCell) (traceFleet, error) {
	f := &traceRueidis{db: c.db}
	for _, k := range c.t.keys {
		f.keys = append(f.keys, c.ns+k)
	}
	for range c.n {
		rc, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress:       []string{e.addr},
			CacheSizeEachConn: int(min(c.budget, 1<<40)),
			PipelineMultiplex: -1,
			OnInvalidations: func(ms []rueidis.RedisMessage) {
				f.dropped.Add(int64(len(ms)))
			},
		})
		if err != nil {
			f.close()
			return nil, fmt.Errorf("rueidis: %w", err)
		}
		f.cs = append(f.cs, rc)
	}
	return f, nil
}

func (f *traceRueidis) read(ctx context.Context, i int, k uint32) (*TraceValue, error) {
	c := f.cs[i]
	res := c.DoCache(ctx, c.B().Get().Key(f.keys[k]).Cache(), benchLocalTTL)
	if res.IsCacheHit() {
		f.hits++
	} else {
		f.trips++
	}
	b, err := res.AsBytes()
	if err == nil {
		v := new(TraceValue)
		return v, msgpack.Unmarshal(b, v)
	}
	if !rueidis.IsRedisNil(err) {
		return nil, err
	}
	v, err := f.db.load(ctx, f.db.t.keys[k])
	if err != nil {
		return nil, err
	}
	return v, f.write(ctx, i, k, v)
}

func (f *traceRueidis) write(ctx context.Context, i int, k uint32, v *TraceValue) error {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return err
	}
	f.trips++
	c := f.cs[i]
	return c.Do(ctx, c.B().Set().Key(f.keys[k]).Value(rueidis.BinaryString(b)).PxMilliseconds(benchTTL.Milliseconds()).Build()).Error()
}

func (f *traceRueidis) counts() traceCounts {
	return traceCounts{localHits: f.hits, trips: f.trips, published: -1, applied: f.dropped.Load()}
}

func (f *traceRueidis) close() {
	for _, c := range f.cs {
		c.Close()
	}
}

// traceWeight is an entry's weight as our L1 counts it: key, encoded value
// (payload plus overhead: the msgpack framing and our envelope) and 64
// bytes of bookkeeping, all in overhead but the key and the payload.
func traceWeight(key string, size uint32, overhead uint64) uint64 {
	return uint64(len(key)) + uint64(size) + overhead
}
