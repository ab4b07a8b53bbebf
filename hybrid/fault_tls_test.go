package hybrid_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

// tlsNode makes clients of a TLS redis-server.
func tlsNode(ts *redistest.TLSServer) clientFactory {
	return func(t testing.TB) redis.UniversalClient {
		t.Helper()
		c := redis.NewClient(ts.Options())
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// TestFaultTLS: a redis-server that listens only for TLS (a certificate
// authority and a server certificate for 127.0.0.1 made by the test, a
// password required) serves two instances: GetOrCreate, Set and Delete go
// over TLS, and so does the bus between them. Clients that do not trust the
// test's authority, expect another name or speak plain TCP get nowhere.
func TestFaultTLS(t *testing.T) {
	ts := redistest.StartTLS(t, redistest.TLSOptions{Password: "tls-" + randomHex(16)})
	ctx := context.Background()
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns}
	a := newInstance(t, "A", tlsNode(ts), o, invalidate.Options{})
	b := newInstance(t, "B", tlsNode(ts), o, invalidate.Options{})
	raw := ts.Client(t)

	// Read path: A loads and writes back; B reads it from Redis.
	if v, err := a.c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) { return "v1", nil }); err != nil || v != "v1" {
		t.Fatalf("A: GetOrCreate over TLS: got %q, %v", v, err)
	}
	waitFor(t, 5*time.Second, "A's write-back", func() bool { return a.remote.setIfAbsents.Load() >= 1 }, nil)
	if v, ok := redisValue(t, raw, ns, "k"); !ok || v != "v1" {
		t.Fatalf("Redis holds %q, %v, want \"v1\"", v, ok)
	}
	fill(t, b, "k", "v1")

	// Write path and bus: A's Set and Delete reach B over TLS.
	setStr(t, a, "k", "v2")
	waitStat(t, b, "Received", statReceived, 1)
	if v, ok := getStr(t, b, "k"); !ok || v != "v2" {
		t.Errorf("B: Get after A's Set over TLS: got %q, %v, want \"v2\"", v, ok)
	}
	if err := a.c.Delete(ctx, "k"); err != nil {
		t.Fatalf("A: Delete over TLS: %v", err)
	}
	waitStat(t, b, "Received", statReceived, 2)
	if v, ok := getStr(t, b, "k"); ok {
		t.Errorf("B: Get after A's Delete over TLS: got %q, want a miss", v)
	}
	if _, ok := redisValue(t, raw, ns, "k"); ok {
		t.Error("Redis still holds k after the Delete")
	}
	for _, in := range []*instance{a, b} {
		st := in.c.Stats()
		t.Logf("%s over TLS: L2Hits %d, Loads %d, Published %d, Received %d, L2Errors %d, BusLosses %d",
			in.name, st.L2Hits, st.Loads, st.Published, st.Received, st.L2Errors, st.BusLosses)
		if st.L2Errors != 0 || st.BusLosses != 0 {
			t.Errorf("%s: L2Errors %d, BusLosses %d, want 0", in.name, st.L2Errors, st.BusLosses)
		}
	}
	// Clients the server must not talk to (it has no plain port), or that
	// must not trust it.
	bad := []struct {
		name  string
		tune  func(*redis.Options)
		check func(error) bool
	}{
		{"plain TCP", func(o *redis.Options) { o.TLSConfig = nil }, func(err error) bool { return err != nil }},
		{"system roots only", func(o *redis.Options) { o.TLSConfig.RootCAs = nil }, func(err error) bool {
			var ua x509.UnknownAuthorityError
			return errors.As(err, &ua)
		}},
		{"another server name", func(o *redis.Options) { o.TLSConfig.ServerName = "cache.example.com" }, func(err error) bool {
			var he x509.HostnameError
			return errors.As(err, &he)
		}},
		{"TLS 1.0 only", func(o *redis.Options) {
			o.TLSConfig.MinVersion, o.TLSConfig.MaxVersion = tls.VersionTLS10, tls.VersionTLS10
		}, func(err error) bool { return err != nil }},
	}
	for _, c := range bad {
		ro := ts.Options()
		ro.ReadTimeout, ro.DialerRetries = 500*time.Millisecond, 1
		c.tune(ro)
		cl := redis.NewClient(ro)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := cl.Ping(cctx).Err()
		cancel()
		cl.Close()
		t.Logf("%s: PING: %v", c.name, err)
		if !c.check(err) {
			t.Errorf("%s: PING got %v, want it refused", c.name, err)
		}
	}
}
