package hybrid_test

// Helpers of the Redis-backed integration tests (integration_*_test.go).
// Each "instance" of a cache is what a service process would have: its own
// go-redis client, its own l2.Store (wrapped in a countingRemote), its own
// invalidate.Bus and its own hybrid.Cache, all in one namespace that no
// other test uses (redistest.Prefix).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

var (
	_ hybrid.Remote      = (*countingRemote)(nil)
	_ hybrid.BatchRemote = (*countingRemote)(nil)
	_ hybrid.Announcer   = (*countingRemote)(nil)

	_ hybrid.CompareAndSetter = (*countingRemote)(nil)
	_ hybrid.BoundedReader    = (*countingRemote)(nil)
	_ hybrid.BoundedReader    = (*l2.Store)(nil)
)

// countingRemote is an *l2.Store that counts the calls made to it, so a
// test can tell how often an instance went to Redis. It implements Remote,
// BatchRemote and Announcer by delegating to the Store. A call is counted
// when it returns, so a count seen means the call is over.
type countingRemote struct {
	s *l2.Store

	gets, getManys, getManyKeys                      atomic.Int64
	sets, setIfAbsents, setManyIfAbsents, setManyKey atomic.Int64
	setAndPublishes, compareAndSets                  atomic.Int64

	// afterGet, when set, runs after the Store's Get (and GetMany, once per
	// key) returned and before the cache sees the result.
	afterGet atomic.Pointer[func(key string)]
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

// ReadBound passes the Store's on, so that the cache treats a
// countingRemote as it would the Store.
func (r *countingRemote) ReadBound() time.Duration { return r.s.ReadBound() }

func (r *countingRemote) Get(ctx context.Context, key string) ([]byte, bool, error) {
	defer r.gets.Add(1)
	v, ok, err := r.s.Get(ctx, key)
	r.hook(key)
	return v, ok, err
}

func (r *countingRemote) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	defer r.sets.Add(1)
	return r.s.Set(ctx, key, value, ttl)
}

func (r *countingRemote) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	defer r.setIfAbsents.Add(1)
	return r.s.SetIfAbsent(ctx, key, value, ttl)
}

func (r *countingRemote) GetMany(ctx context.Context, keys []string) ([][]byte, error) {
	defer r.getManys.Add(1)
	defer r.getManyKeys.Add(int64(len(keys)))
	v, err := r.s.GetMany(ctx, keys)
	for _, k := range keys {
		r.hook(k)
	}
	return v, err
}

func (r *countingRemote) SetManyIfAbsent(ctx context.Context, keys []string, values [][]byte, ttls []time.Duration) ([]bool, error) {
	defer r.setManyIfAbsents.Add(1)
	defer r.setManyKey.Add(int64(len(keys)))
	return r.s.SetManyIfAbsent(ctx, keys, values, ttls)
}

func (r *countingRemote) SetAndPublish(ctx context.Context, key string, value []byte, ttl time.Duration, channel string, msg []byte) error {
	defer r.setAndPublishes.Add(1)
	return r.s.SetAndPublish(ctx, key, value, ttl, channel, msg)
}

func (r *countingRemote) CompareAndSet(ctx context.Context, key string, old, value []byte, ttl time.Duration) (bool, error) {
	defer r.compareAndSets.Add(1)
	return r.s.CompareAndSet(ctx, key, old, value, ttl)
}

// remoteCalls is a snapshot of a countingRemote's counters.
type remoteCalls struct {
	Get, GetMany, GetManyKeys                             int64
	Set, SetIfAbsent, SetManyIfAbsent, SetManyIfAbsentKey int64
	SetAndPublish, CompareAndSet                          int64
}

func (r *countingRemote) calls() remoteCalls {
	return remoteCalls{
		Get: r.gets.Load(), GetMany: r.getManys.Load(), GetManyKeys: r.getManyKeys.Load(),
		Set: r.sets.Load(), SetIfAbsent: r.setIfAbsents.Load(),
		SetManyIfAbsent: r.setManyIfAbsents.Load(), SetManyIfAbsentKey: r.setManyKey.Load(),
		SetAndPublish: r.setAndPublishes.Load(), CompareAndSet: r.compareAndSets.Load(),
	}
}

// total is the number of calls of every method.
func (c remoteCalls) total() int64 {
	return c.Get + c.GetMany + c.Set + c.SetIfAbsent + c.SetManyIfAbsent + c.SetAndPublish + c.CompareAndSet
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
	name   string
	rdb    redis.UniversalClient
	remote *countingRemote
	bus    *invalidate.Bus
	c      *hybrid.Cache[string]
}

// newInstance builds an instance on a client from newClient. o.Namespace
// must be set; Remote, Bus and Logger are filled in. The cache is closed
// when t ends, then the bus, then the client.
func newInstance(t testing.TB, name string, newClient clientFactory, o hybrid.Options, bo invalidate.Options) *instance {
	t.Helper()
	return newInstanceOn(t, name, newClient(t), o, bo)
}

// newInstanceOn is newInstance on a given client, which the caller closes.
func newInstanceOn(t testing.TB, name string, rdb redis.UniversalClient, o hybrid.Options, bo invalidate.Options) *instance {
	t.Helper()
	return newInstanceWrapped(t, name, rdb, o, bo, nil)
}

// newInstanceWrapped is newInstanceOn with the cache's Bus wrapped by wrap
// (nil: not wrapped).
func newInstanceWrapped(t testing.TB, name string, rdb redis.UniversalClient, o hybrid.Options, bo invalidate.Options, wrap func(hybrid.Bus) hybrid.Bus) *instance {
	t.Helper()
	if o.Namespace == "" {
		t.Fatal("newInstance: empty namespace")
	}
	in := &instance{name: name, rdb: rdb, remote: &countingRemote{s: l2.New(rdb, l2.Options{})}}
	if bo.Logger == nil {
		bo.Logger = quiet
	}
	in.bus = invalidate.New(rdb, bo)
	t.Cleanup(func() { in.bus.Close() })
	o.Remote, o.Bus = in.remote, in.bus
	if wrap != nil {
		o.Bus = wrap(in.bus)
	}
	in.c = newTestCache[string](t, o)
	return in
}

// newInstances returns n instances named A, B, C, ... of one namespace.
func newInstances(t testing.TB, n int, newClient clientFactory, o hybrid.Options) []*instance {
	t.Helper()
	out := make([]*instance, n)
	for i := range out {
		out[i] = newInstance(t, string(rune('A'+i)), newClient, o, invalidate.Options{})
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

func statReceived(s hybrid.Stats) uint64   { return s.Received }
func statOwnIgnored(s hybrid.Stats) uint64 { return s.OwnIgnored }
func statInvalid(s hybrid.Stats) uint64    { return s.Invalid }
func statUnauth(s hybrid.Stats) uint64     { return s.Unauthentic }
func statBusLosses(s hybrid.Stats) uint64  { return s.BusLosses }

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
