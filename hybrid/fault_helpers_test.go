package hybrid_test

// Helpers of the fault-injection and security tests (fault_*_test.go).
// They build on the integration helpers (integration_helpers_test.go):
// instance, countingRemote, waitFor, waitStat, percentile.

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/faultproxy"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

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
