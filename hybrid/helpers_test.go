package hybrid_test

import (
	"context"
	"encoding/json"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"go.uber.org/goleak"
)

// srv is the Redis of the integration tests (integration_*_test.go): a
// redis-server started for this package run, or the miniredis fallback.
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
// ends, after the caches created later with newTestCache.
func newSharedTier(t testing.TB) *sharedTier {
	t.Helper()
	bus := new(hybridtest.Bus)
	t.Cleanup(func() { bus.Close() })
	return &sharedTier{remote: &hybridtest.Remote{Bus: bus}, bus: bus}
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
		return c.Set+c.SetIfAbsent+c.SetManyIfAbsent+c.SetAndPublish+c.Delete+c.DeleteAndPublish+c.CompareAndSet >= n
	})
	if err != nil {
		t.Fatalf("waiting for %d writes to the Remote (have %+v): %v", n, s.remote.Calls(), err)
	}
}

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
func newTestCache[V any](t testing.TB, o hybrid.Options) *hybrid.Cache[V] {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet
	}
	c, err := hybrid.New[V](o)
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
