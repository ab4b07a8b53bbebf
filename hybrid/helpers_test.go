package hybrid_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/faultproxy"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// The shared set-up of the package's tests, in three parts: caches on the
// in-memory doubles of hybridtest (sharedTier), Redis-backed instances
// (instance), and the fault proxy and collectors of the fault-injection
// and security tests.

// srv is the Redis of the Redis-backed tests: a redis-server started for
// this package run, or the miniredis fallback.
var srv *redistest.Server

func TestMain(m *testing.M) {
	redistest.MainCheck(m, &srv, func() error { return goleak.Find() })
}

// The namespace and bus channel of the caches under test.
const (
	testNS      = "ns"
	testChannel = "hybridcache:" + testNS
)

// quiet drops the log lines of the read path, which tests provoke on purpose.
var quiet = slog.New(slog.DiscardHandler)

// sharedTier is one Remote and one Bus, shared by the caches of a test as
// the instances of a service share one Redis.
type sharedTier struct {
	remote *hybridtest.Remote
	bus    *hybridtest.Bus
}

// newSharedTier returns a Remote and a Bus that are closed when the test
// ends, after the caches created later with newTestCache. The Remote holds
// the clear record of testNS saying it was never cleared, as in a
// namespace in use: values put in the Remote by the test are not taken for
// written before a Clear.
func newSharedTier(t testing.TB) *sharedTier {
	t.Helper()
	bus := new(hybridtest.Bus)
	t.Cleanup(func() { bus.Close() })
	remote := &hybridtest.Remote{Bus: bus}
	remote.Put(testNS+":\x00clear", make([]byte, 8), 0)
	return &sharedTier{remote: remote, bus: bus}
}

// valueKeys returns the keys the Remote holds but the cache's records
// (the clear record, tag records).
func (s *sharedTier) valueKeys() []string {
	var out []string
	for _, k := range s.remote.Keys() {
		if !strings.Contains(k, ":\x00") {
			out = append(out, k)
		}
	}
	return out
}

// options returns Options for one instance using s.
func (s *sharedTier) options() hybrid.Options {
	return hybrid.Options{Namespace: testNS, Remote: s.remote, Bus: s.bus, Logger: quiet}
}

// flush waits until every message published so far has been applied.
func (s *sharedTier) flush(t testing.TB) {
	t.Helper()
	if err := s.bus.Flush(context.Background()); err != nil {
		t.Fatalf("bus flush: %v", err)
	}
}

// waitWrites waits until the Remote has seen n write calls in all, such as
// the shared-tier write a fill makes after its callers have their value.
func (s *sharedTier) waitWrites(t testing.TB, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.remote.WaitCalls(ctx, func(c hybridtest.Calls) bool {
		return writes(c) >= n
	})
	if err != nil {
		t.Fatalf("waiting for %d writes to the Remote (have %+v): %v", n, s.remote.Calls(), err)
	}
}

// waitStored waits until the Remote holds a value under each of keys
// (namespaced here), such as the write-back a fill makes after its callers
// have their value (a fill that found its key missing has made the key's
// sequence counter before that, a write call of its own).
func (s *sharedTier) waitStored(t testing.TB, keys ...string) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("the Remote to hold %q", keys), func() bool {
		for _, k := range keys {
			if _, ok := s.remote.Peek(testNS + ":" + k); !ok {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("%+v", s.remote.Calls()) })
}

// writes is the number of write calls in c.
func writes(c hybridtest.Calls) int { return c.Write }

// stored returns the string value the Remote holds for key (namespaced
// here), decoding its envelope; ok is false when the key is missing or
// does not decode.
func (s *sharedTier) stored(t testing.TB, key string) (v string, ok bool) {
	t.Helper()
	b, found := s.remote.Peek(testNS + ":" + key)
	if !found {
		return "", false
	}
	h, payload, err := envelope.Decode(b)
	if err != nil || h.Codec != codec.IDJSON {
		return "", false
	}
	if err := json.Unmarshal(payload, &v); err != nil {
		return "", false
	}
	return v, true
}

// newTestCache returns a cache closed when the test ends. Its Logger
// defaults to quiet.
func newTestCache[V any](t testing.TB, o hybrid.Options, batch ...hybrid.RefreshBatch[V]) *hybrid.Cache[V] {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet
	}
	c, err := hybrid.New(o, batch...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// envelopeOf returns the stored form of the JSON value v, written now and
// expiring after ttl.
func envelopeOf(t testing.TB, v any, ttl time.Duration) []byte {
	t.Helper()
	payload, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	return envelope.Append(nil, envelope.Header{Codec: codec.IDJSON, Written: now, Expires: now.Add(ttl)}, payload)
}

// counter is a load function that counts its calls and returns value, err.
type counter struct {
	calls atomic.Int64
	value string
	err   error
}

func (l *counter) load(context.Context, string) (string, error) {
	l.calls.Add(1)
	return l.value, l.err
}

// getString calls c.Get and fails the test on an error.
func getString(t testing.TB, c *hybrid.Cache[string], key string) (string, bool) {
	t.Helper()
	v, ok, err := c.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return v, ok
}

// neverLoad fails the test if a load happens.
func neverLoad(t testing.TB) func(context.Context, string) (string, error) {
	return func(_ context.Context, key string) (string, error) {
		t.Errorf("load(%q) called, want no load", key)
		return "", nil
	}
}

// eachCtx runs f as two subtests: with a ctx that cannot end, for which a
// leader reads the shared tier on its own goroutine, and with one that can,
// for which the whole fill runs on a worker. Both paths must behave alike.
func eachCtx(t *testing.T, f func(t *testing.T, ctx context.Context)) {
	t.Helper()
	t.Run("background", func(t *testing.T) { f(t, context.Background()) })
	t.Run("cancelable", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		f(t, ctx)
	})
}

// loadTop is a top-level load function: a func value with no closure, as a
// caller on the hot path would pass.
func loadTop(context.Context, string) (string, error) { return "v", nil }

// result is what one GetOrCreate returned.
type result struct {
	v   string
	err error
}

// blockingLoad is a load function that counts its calls, tells started
// about each, waits for release and returns value. It records whether its
// ctx was done when it returned.
type blockingLoad struct {
	calls   atomic.Int64
	started chan struct{} // receives one value per call; may be nil
	release chan struct{}
	value   string
	ctxErr  atomic.Value // error from the load's ctx as it returned
}

func newBlockingLoad(value string) *blockingLoad {
	return &blockingLoad{release: make(chan struct{}), value: value}
}

func (l *blockingLoad) load(ctx context.Context, _ string) (string, error) {
	l.calls.Add(1)
	if l.started != nil {
		l.started <- struct{}{}
	}
	<-l.release
	l.ctxErr.Store(errBox{ctx.Err()})
	return l.value, nil
}

type errBox struct{ err error }

// loadCtxErr returns the error of the load's ctx as it returned.
func (l *blockingLoad) loadCtxErr() error {
	b, _ := l.ctxErr.Load().(errBox)
	return b.err
}

// goGetOrCreate starts GetOrCreate on a goroutine and returns where its
// result will arrive.
func goGetOrCreate(ctx context.Context, c *hybrid.Cache[string], key string, load func(context.Context, string) (string, error)) <-chan result {
	ch := make(chan result, 1)
	go func() {
		v, err := c.GetOrCreate(ctx, key, load)
		ch <- result{v, err}
	}()
	return ch
}

// missingRow is a load function for a row that does not exist.
type missingRow struct{ calls atomic.Int64 }

func (m *missingRow) load(context.Context, string) (string, error) {
	m.calls.Add(1)
	return "", fmt.Errorf("select: %w", hybrid.ErrNotFound)
}

func failSafeOptions(s *sharedTier) hybrid.Options {
	o := s.options()
	o.TTL = 10 * time.Second
	o.LocalTTL = 10 * time.Second
	o.FailSafeMaxAge = time.Hour
	o.FailSafeThrottle = 5 * time.Second
	return o
}

// newPeers returns n instances of one logical cache sharing s, configured
// by o (Namespace, Remote, Bus and Logger filled in when empty).
func newPeers(t testing.TB, s *sharedTier, n int, o hybrid.Options) []*hybrid.Cache[string] {
	t.Helper()
	base := s.options()
	if o.Namespace == "" {
		o.Namespace = base.Namespace
	}
	if o.Remote == nil {
		o.Remote = base.Remote
	}
	if o.Bus == nil {
		o.Bus = base.Bus
	}
	peers := make([]*hybrid.Cache[string], n)
	for i := range peers {
		peers[i] = newTestCache[string](t, o)
	}
	return peers
}

func set(t testing.TB, c *hybrid.Cache[string], key, v string) {
	t.Helper()
	if err := c.Set(context.Background(), key, v); err != nil {
		t.Fatalf("Set(%q, %q): %v", key, v, err)
	}
}

// setOrDelete sets key to "new" on c, or deletes it if del.
func setOrDelete(t testing.TB, c *hybrid.Cache[string], key string, del bool) {
	t.Helper()
	if !del {
		set(t, c, key, "new")
		return
	}
	if err := c.Delete(context.Background(), key); err != nil {
		t.Fatalf("Delete(%q): %v", key, err)
	}
}

// fillFromRemote makes c hold key, read from the shared tier.
func fillFromRemote(t testing.TB, c *hybrid.Cache[string], key, want string) {
	t.Helper()
	v, err := c.GetOrCreate(context.Background(), key, neverLoad(t))
	if err != nil || v != want {
		t.Fatalf("GetOrCreate(%q): got %q, %v, want %q from the shared tier", key, v, err, want)
	}
}

// Redis-backed instances. Each "instance" of a cache is what a service
// process would have: its own go-redis client, its own l2.Store (wrapped in
// a countingRemote), its own invalidate.Bus and its own hybrid.Cache, all in
// one namespace that no other test uses (redistest.Prefix).

var (
	_ tier.Remote = (*countingRemote)(nil)
	_ tier.Remote = (*l2.Store)(nil)
)

// countingRemote is an *l2.Store that counts the calls made to it, so a
// test can tell how often an instance went to Redis. A call is counted
// when it returns, so a count seen means the call is over. Reads are
// counted as Get (one key) or GetBatch; writes by their kind, as the cache
// makes them (see count). Gets of the cache's own records (keys
// "ns:\x00...": the clear record, tag records, leases) are counted apart
// from Gets of values, which the tests of the read path count.
type countingRemote struct {
	s *l2.Store

	gets, getBatches, getBatchKeys        atomic.Int64
	always, ifAbsents, batches, batchKeys atomic.Int64
	announced, ifEquals, keepTTLs         atomic.Int64
	newerSets                             atomic.Int64
	recordGets, recordWrites              atomic.Int64 // of the cache's records (clear, tags), in no other count
	leaseCalls                            atomic.Int64 // TakeLeases, ExtendLeases and ReleaseLeases
	releasing                             atomic.Int64 // a lease holder's writes, not in leaseCalls
	writeCalls, writeKeys                 atomic.Int64 // every Write call, and the writes they carried
	batchMsgs                             atomic.Int64 // Write calls announced as a whole (Feed.Msg)
	touches                               atomic.Int64 // writes with Touch, in no other count
	valueBytes                            atomic.Int64 // the bytes of every Write.Value sent
	heads, headKeys                       atomic.Int64 // Heads calls (the verifier's) and the keys they read

	// afterGet, when set, runs after the Store's Get returned, once per
	// key, and before the cache sees the result.
	afterGet atomic.Pointer[func(key string)]
	// beforeNewer, when set, runs before a write of Cond IfNewer (a
	// queued write's replay).
	beforeNewer atomic.Pointer[func(key string)]
}

func (r *countingRemote) hook(key string) {
	if f := r.afterGet.Load(); f != nil {
		(*f)(key)
	}
}

// setAfterGet installs f as the afterGet hook (nil: none).
func (r *countingRemote) setAfterGet(f func(key string)) {
	if f == nil {
		r.afterGet.Store(nil)
		return
	}
	r.afterGet.Store(&f)
}

func (r *countingRemote) Info() tier.Info { return r.s.Info() }

func (r *countingRemote) Get(ctx context.Context, keys []string) ([][]byte, error) {
	// A fill reads its keys' sequence counters with them: only the keys
	// count.
	n := 0
	for _, k := range keys {
		if !strings.Contains(k, ":\x00") {
			n++
		}
	}
	switch {
	case n == 0:
		defer r.recordGets.Add(1)
	case n == 1:
		defer r.gets.Add(1)
	default:
		defer r.getBatches.Add(1)
		defer r.getBatchKeys.Add(int64(n))
	}
	v, err := r.s.Get(ctx, keys)
	for _, k := range keys {
		r.hook(k)
	}
	return v, err
}

// Heads counts the verifier's reads of stored headers (tier.HeadReader).
func (r *countingRemote) Heads(ctx context.Context, keys []string, n int) ([][]byte, error) {
	defer r.heads.Add(1)
	defer r.headKeys.Add(int64(len(keys)))
	return r.s.Heads(ctx, keys, n)
}

// Write counts a call by the kind of its writes: a lease holder's write, a
// replay (IfNewer), an Expire (KeepTTL), an announced write, a replacing
// fill (IfEqual), a batch of fills (more than one write), a fill
// (IfAbsent) or a plain Set.
func (r *countingRemote) Write(ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error) {
	defer r.count(ws)
	defer r.writeCalls.Add(1)
	defer r.writeKeys.Add(int64(len(ws)))
	if f.Msg != nil {
		defer r.batchMsgs.Add(1)
	}
	for _, w := range ws {
		if w.If == tier.IfNewer {
			if fn := r.beforeNewer.Load(); fn != nil {
				(*fn)(w.Key)
			}
		}
	}
	return r.s.Write(ctx, ws, f)
}

// recordWrites reports whether ws are writes of the cache's records (the
// clear and tag records, sequence counters) only, announced nowhere.
func recordWrites(ws []tier.Write) bool {
	for _, w := range ws {
		if !strings.Contains(w.Key, ":\x00") || w.Msg != nil {
			return false
		}
	}
	return true
}

func (r *countingRemote) count(ws []tier.Write) {
	if len(ws) == 0 {
		return
	}
	for _, w := range ws {
		r.valueBytes.Add(int64(len(w.Value)))
	}
	w := ws[0]
	switch {
	case recordWrites(ws):
		r.recordWrites.Add(1)
	case w.Touch:
		r.touches.Add(int64(len(ws)))
	case w.Lease != "":
		r.releasing.Add(1)
	case w.If == tier.IfNewer:
		r.newerSets.Add(1)
	case w.KeepTTL:
		r.keepTTLs.Add(1)
	case w.Msg != nil:
		r.announced.Add(1)
	case len(ws) > 1:
		r.batches.Add(1)
		r.batchKeys.Add(int64(len(ws)))
	case w.If == tier.IfEqual:
		r.ifEquals.Add(1)
	case w.If == tier.IfAbsent || w.If == tier.IfSeq:
		r.ifAbsents.Add(1)
	default:
		r.always.Add(1)
	}
}

func (r *countingRemote) TakeLeases(ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]tier.Lease, error) {
	defer r.leaseCalls.Add(1)
	return r.s.TakeLeases(ctx, keys, guards, token, ttl)
}

func (r *countingRemote) ExtendLeases(ctx context.Context, keys []string, token string, ttl time.Duration) ([]bool, error) {
	defer r.leaseCalls.Add(1)
	return r.s.ExtendLeases(ctx, keys, token, ttl)
}

func (r *countingRemote) ReleaseLeases(ctx context.Context, keys []string, token string, msg []byte, f tier.Feed) error {
	defer r.leaseCalls.Add(1)
	return r.s.ReleaseLeases(ctx, keys, token, msg, f)
}

func (r *countingRemote) ReadLog(ctx context.Context, log, after string, max int) (tier.LogPage, error) {
	return r.s.ReadLog(ctx, log, after, max)
}

// remoteCalls is a snapshot of a countingRemote's counters: Remote.Get
// calls by what they read, and Remote.Write calls by the kind of their
// writes (see count).
type remoteCalls struct {
	Get, GetBatch, GetBatchKeys                       int64 // Gets of one value, of several, and the keys of those
	WriteAlways, WriteIfAbsent, WriteBatch, BatchKeys int64 // a plain Set; a fill; a batch of fills, and their writes
	WriteAnnounced, WriteIfEqual, WriteKeepTTL        int64 // a write with a message; a replacing fill; an Expire
	WriteReleasing                                    int64 // a lease holder's write (Write.Lease)
	GetRecord                                         int64 // Gets of records, not counted in Get
	Heads                                             int64 // reads of stored headers (the verifier's)
}

func (r *countingRemote) calls() remoteCalls {
	return remoteCalls{
		Get: r.gets.Load(), GetBatch: r.getBatches.Load(), GetBatchKeys: r.getBatchKeys.Load(),
		WriteAlways: r.always.Load(), WriteIfAbsent: r.ifAbsents.Load(),
		WriteBatch: r.batches.Load(), BatchKeys: r.batchKeys.Load(),
		WriteAnnounced: r.announced.Load(), WriteIfEqual: r.ifEquals.Load(),
		WriteKeepTTL: r.keepTTLs.Load(), WriteReleasing: r.releasing.Load(),
		GetRecord: r.recordGets.Load(), Heads: r.heads.Load(),
	}
}

// total is the number of calls of every method.
func (c remoteCalls) total() int64 {
	return c.Get + c.GetBatch + c.WriteAlways + c.WriteIfAbsent + c.WriteBatch + c.WriteAnnounced + c.WriteIfEqual + c.WriteKeepTTL +
		c.WriteReleasing + c.GetRecord + c.Heads
}

// clientFactory returns a new go-redis client for one instance, closed when
// t ends.
type clientFactory func(t testing.TB) redis.UniversalClient

// singleNode makes clients of the package's Redis (srv), with options
// adjusted by tune (nil: go-redis defaults).
func singleNode(tune func(*redis.Options)) clientFactory {
	return func(t testing.TB) redis.UniversalClient {
		t.Helper()
		o := &redis.Options{Addr: srv.Addr}
		if tune != nil {
			tune(o)
		}
		c := redis.NewClient(o)
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// clusterNodes makes clients of the Redis Cluster named by
// HYBRID_REDIS_CLUSTER; without it, t is skipped.
func clusterNodes(t testing.TB) clientFactory {
	t.Helper()
	addrs := redistest.ClusterAddrs(t)
	return func(t testing.TB) redis.UniversalClient {
		t.Helper()
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// instance is one process's worth of cache: client, store, bus and cache.
type instance struct {
	name       string
	clientName string // its client's name, when it has one (see namedInstance)
	rdb        redis.UniversalClient
	remote     *countingRemote
	bus        *invalidate.Bus
	c          *hybrid.Cache[string]
}

// newInstance builds an instance on a client from newClient. o.Namespace
// must be set; Remote, Bus and Logger are filled in. The cache is closed
// when t ends, then the bus, then the client.
func newInstance(t testing.TB, name string, newClient clientFactory, o hybrid.Options, bo invalidate.Options, batch ...hybrid.RefreshBatch[string]) *instance {
	t.Helper()
	return newInstanceWrapped(t, name, newClient(t), o, bo, nil, batch...)
}

// newInstanceOn is newInstance on a given client, which the caller closes.
func newInstanceOn(t testing.TB, name string, rdb redis.UniversalClient, o hybrid.Options, bo invalidate.Options) *instance {
	t.Helper()
	return newInstanceWrapped(t, name, rdb, o, bo, nil)
}

// newInstanceWrapped is newInstanceOn with the cache's Bus wrapped by wrap
// (nil: not wrapped), and batch given to New.
func newInstanceWrapped(t testing.TB, name string, rdb redis.UniversalClient, o hybrid.Options, bo invalidate.Options, wrap func(hybrid.Bus) hybrid.Bus, batch ...hybrid.RefreshBatch[string]) *instance {
	t.Helper()
	if o.Namespace == "" {
		t.Fatal("newInstance: empty namespace")
	}
	in := &instance{name: name, rdb: rdb, remote: &countingRemote{s: l2.New(rdb, l2.Options{Classic: bo.Classic})}}
	if bo.Logger == nil {
		bo.Logger = quiet
	}
	in.bus = invalidate.New(rdb, bo)
	t.Cleanup(func() { in.bus.Close() })
	o.Remote, o.Bus = in.remote, in.bus
	if wrap != nil {
		o.Bus = wrap(in.bus)
	}
	in.c = newTestCache(t, o, batch...)
	return in
}

// eachTopology runs f for a single Redis and for the Redis Cluster of
// HYBRID_REDIS_CLUSTER (skipped without it), each in both invalidation
// modes.
func eachTopology(t *testing.T, f func(t *testing.T, newClient clientFactory, secret []byte)) {
	for _, topo := range []string{"single", "cluster"} {
		t.Run(topo, func(t *testing.T) {
			newClient := singleNode(nil)
			if topo == "cluster" {
				newClient = clusterNodes(t)
			}
			for _, m := range invalidationModes {
				t.Run(m.name, func(t *testing.T) { f(t, newClient, m.secret) })
			}
		})
	}
}

// newInstances returns n instances named A, B, C, ... of one namespace,
// each made by New with o and batch.
func newInstances(t testing.TB, n int, newClient clientFactory, o hybrid.Options, batch ...hybrid.RefreshBatch[string]) []*instance {
	t.Helper()
	out := make([]*instance, n)
	for i := range out {
		out[i] = newInstance(t, string(rune('A'+i)), newClient, o, invalidate.Options{}, batch...)
	}
	return out
}

// waitFor polls cond every millisecond until it holds, and fails t if it
// does not within d. what describes the condition; state, if not nil, is
// called for the failure message.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool, state func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			msg := ""
			if state != nil {
				msg = ": " + state()
			}
			t.Fatalf("waited %v for %s%s", d, what, msg)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitStat waits up to 5 s until the counter that field picks from in's
// Stats reaches want.
func waitStat(t testing.TB, in *instance, field string, pick func(hybrid.Stats) uint64, want uint64) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("%s: Stats.%s >= %d", in.name, field, want),
		func() bool { return pick(in.c.Stats()) >= want },
		func() string { return fmt.Sprintf("have %d (%+v)", pick(in.c.Stats()), in.c.Stats()) })
}

func statReceived(s hybrid.Stats) uint64   { return s.Invalidations.Applied }
func statOwnIgnored(s hybrid.Stats) uint64 { return s.Invalidations.Own }
func statInvalid(s hybrid.Stats) uint64    { return s.Invalidations.Invalid }
func statUnauth(s hybrid.Stats) uint64     { return s.Invalidations.Unauthentic }
func statBusLosses(s hybrid.Stats) uint64  { return s.Bus.Losses }

// getStr calls c.Get with a 5 s deadline and fails t on an error.
func getStr(t testing.TB, in *instance, key string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, ok, err := in.c.Get(ctx, key)
	if err != nil {
		t.Fatalf("%s: Get(%q): %v", in.name, key, err)
	}
	return v, ok
}

// setStr calls c.Set and fails t on an error.
func setStr(t testing.TB, in *instance, key, v string) {
	t.Helper()
	if err := in.c.Set(context.Background(), key, v); err != nil {
		t.Fatalf("%s: Set(%q, %q): %v", in.name, key, v, err)
	}
}

// fill makes in hold key in L1, read from Redis, and checks the value.
func fill(t testing.TB, in *instance, key, want string) {
	t.Helper()
	v, err := in.c.GetOrCreate(context.Background(), key, neverLoad(t))
	if err != nil || v != want {
		t.Fatalf("%s: GetOrCreate(%q): got %q, %v, want %q from Redis", in.name, key, v, err, want)
	}
}

// redisValue reads ns:key straight from Redis through rdb and decodes it as
// the cache stores it (envelope + JSON string). ok is false for a missing
// key; a value that does not decode fails t.
func redisValue(t testing.TB, rdb redis.UniversalClient, ns, key string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := rdb.Get(ctx, ns+":"+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return "", false
	}
	if err != nil {
		t.Fatalf("GET %s:%s: %v", ns, key, err)
	}
	h, payload, err := envelope.Decode(b)
	if err != nil || h.Codec != codec.IDJSON {
		t.Fatalf("GET %s:%s: not a JSON envelope (%v): %q", ns, key, err, b)
	}
	if h.Flags&envelope.FlagDeleted != 0 {
		return "", false // a delete's tombstone
	}
	var v string
	if err := json.Unmarshal(payload, &v); err != nil {
		t.Fatalf("GET %s:%s: payload %q: %v", ns, key, payload, err)
	}
	return v, true
}

// batchLoad is a GetOrCreateMany load function that records its calls.
type batchLoad struct {
	mu    sync.Mutex
	calls [][]string // the missing keys of each call, sorted
	// block, when not nil, is received from before returning; reached is
	// closed when the first call starts.
	block   chan struct{}
	reached chan struct{}
	once    sync.Once
}

func (l *batchLoad) load(_ context.Context, missing []string) (map[string]string, error) {
	keys := slices.Clone(missing)
	slices.Sort(keys)
	l.mu.Lock()
	l.calls = append(l.calls, keys)
	l.mu.Unlock()
	if l.reached != nil {
		l.once.Do(func() { close(l.reached) })
	}
	if l.block != nil {
		<-l.block
	}
	out := make(map[string]string, len(missing))
	for _, k := range missing {
		out[k] = "loaded:" + k
	}
	return out, nil
}

func (l *batchLoad) snapshot() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// gate returns a channel that is closed by release, or when t ends, so
// that a goroutine held on it never outlives a failed test (a cache's Close
// waits for its fills).
func gate(t testing.TB) (ch chan struct{}, release func()) {
	ch = make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	return ch, release
}

// clientName turns a test prefix into a valid CLIENT SETNAME argument.
func clientName(prefix string) string {
	return strings.NewReplacer(":", "-", " ", "-").Replace(prefix)
}

// percentile returns the p-th percentile (0..1) of sorted d.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(p * float64(len(d)-1))
	return d[i]
}

// goGet runs in's GetOrCreate of key in a goroutine and delivers its result.
func goGet(in *instance, key string, load func(context.Context, string) (string, error)) <-chan result {
	ch := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		v, err := in.c.GetOrCreate(ctx, key, load)
		ch <- result{v, err}
	}()
	return ch
}

// invalidationModes are the two ways peers learn of a Set: without a Secret
// they drop their copy; with one the message carries the value and peers
// holding the key swap it in.
var invalidationModes = []struct {
	name   string
	secret []byte
}{
	{"drop", nil},
	{"swap", []byte("integration-secret")},
}

// shortTimeouts makes a client that gives up on a dead server quickly and
// does not retry.
func shortTimeouts(o *redis.Options) {
	o.DialTimeout = 200 * time.Millisecond
	o.ReadTimeout = 200 * time.Millisecond
	o.WriteTimeout = 200 * time.Millisecond
	o.PoolTimeout = 200 * time.Millisecond
	o.MaxRetries = -1
	o.DialerRetries = 1
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Fault injection and security: a TCP proxy (internal/faultproxy) between
// an instance and Redis, built on the instances above, and collectors of
// what many goroutines saw.

// startProxy starts a fault proxy to target, closed when t ends (after
// everything created later in t, since cleanups run last-in first-out).
func startProxy(t testing.TB, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// setFault applies a fault through one of the proxy's setters and fails t
// on an error.
func setFault(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("fault proxy: %v", err)
	}
}

// via makes clients that reach the package's Redis through p, with options
// adjusted by tune (nil: go-redis defaults).
func via(p *faultproxy.Proxy, tune func(*redis.Options)) clientFactory {
	return func(t testing.TB) redis.UniversalClient {
		t.Helper()
		o := &redis.Options{Addr: p.Addr()}
		if tune != nil {
			tune(o)
		}
		c := redis.NewClient(o)
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// newSplitInstance is an instance whose store uses storeRDB (with store
// options so) and whose bus uses busRDB, so that a fault can hit one path
// and not the other. busRDB nil: no bus. The callers own both clients.
func newSplitInstance(t testing.TB, name string, storeRDB, busRDB redis.UniversalClient, so l2.Options, o hybrid.Options, bo invalidate.Options) *instance {
	t.Helper()
	if o.Namespace == "" {
		t.Fatal("newSplitInstance: empty namespace")
	}
	in := &instance{name: name, rdb: storeRDB, remote: &countingRemote{s: l2.New(storeRDB, so)}}
	o.Remote = in.remote
	if busRDB != nil {
		if bo.Logger == nil {
			bo.Logger = quiet
		}
		in.bus = invalidate.New(busRDB, bo)
		t.Cleanup(func() { in.bus.Close() })
		o.Bus = in.bus
	}
	in.c = newTestCache[string](t, o)
	return in
}

// timings collects call durations from many goroutines.
type timings struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *timings) add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

// sorted returns the durations, shortest first.
func (s *timings) sorted() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := slices.Clone(s.d)
	slices.Sort(d)
	return d
}

// summary is "n calls: p50 .., p99 .., max ..".
func summary(d []time.Duration) string {
	if len(d) == 0 {
		return "0 calls"
	}
	r := func(x time.Duration) time.Duration { return x.Round(10 * time.Microsecond) }
	return fmt.Sprintf("%d calls: p50 %v, p99 %v, max %v", len(d), r(percentile(d, 0.5)), r(percentile(d, 0.99)), r(d[len(d)-1]))
}

// failures collects at most a few failure messages from many goroutines.
type failures struct {
	mu   sync.Mutex
	msgs []string
	n    int
}

func (f *failures) addf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if len(f.msgs) < 10 {
		f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
	}
}

// report fails t with the collected messages.
func (f *failures) report(t testing.TB) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.msgs {
		t.Error(m)
	}
	if f.n > len(f.msgs) {
		t.Errorf("... and %d more failures", f.n-len(f.msgs))
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of loggers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// captureLogger returns a Debug-level text logger writing to a buffer.
func captureLogger() (*slog.Logger, *syncBuffer) {
	buf := new(syncBuffer)
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// randomHex returns n random bytes in hex, for passwords and user names.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// waitPing waits up to d until admin answers PING, as after a CLIENT PAUSE
// (whose end cannot be hastened: CLIENT UNPAUSE is itself paused).
func waitPing(t testing.TB, admin *redis.Client, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return admin.Ping(ctx).Err()
}
