package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// secretScenario is a Redis login that fails, or reaches nothing.
type secretScenario struct {
	name string
	// opts returns the client's options, and passwords in play besides
	// secrets.
	opts    func(t *testing.T) (*redis.Options, []string)
	secrets []string         // must appear in no log line and no error
	cause   func(error) bool // what the store's errors must be, so the scenario is what it says
}

// TestFaultSecretsNotLeaked: with a password that is wrong or a Redis that
// cannot be reached, everything the cache, the store and the bus log (at
// Debug level) and every error they return is free of the passwords in
// play, whether they came in redis.Options or in a URL read by
// redis.ParseURL.
func TestFaultSecretsNotLeaked(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	user, password := aclUser(t, ns)
	wrong := "wrong-" + randomHex(16)
	dead := deadAddr(t)
	isAuth := func(err error) bool { return redis.IsAuthError(err) }
	refused := func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
	fromURL := func(url string) func(t *testing.T) (*redis.Options, []string) {
		return func(t *testing.T) (*redis.Options, []string) {
			o, err := redis.ParseURL(url)
			if err != nil {
				t.Fatalf("ParseURL: %v", err)
			}
			if o.Password == "" {
				t.Fatal("ParseURL: no password in the options")
			}
			return o, nil
		}
	}

	scenarios := []secretScenario{
		{
			name: "options-wrong-password",
			opts: func(*testing.T) (*redis.Options, []string) {
				return &redis.Options{Addr: srv.Addr, Username: user, Password: wrong}, nil
			},
			secrets: []string{wrong, password},
			cause:   isAuth,
		},
		{
			name: "options-dead-address",
			opts: func(*testing.T) (*redis.Options, []string) {
				return &redis.Options{Addr: dead, Username: user, Password: password}, nil
			},
			secrets: []string{password},
			cause:   refused,
		},
		{
			name:    "url-wrong-password",
			opts:    fromURL(fmt.Sprintf("redis://%s:%s@%s/0", user, wrong, srv.Addr)),
			secrets: []string{wrong, password},
			cause:   isAuth,
		},
		{
			name:    "url-dead-address",
			opts:    fromURL(fmt.Sprintf("redis://%s:%s@%s/0", user, password, dead)),
			secrets: []string{password},
			cause:   refused,
		},
		{
			// The right password, a namespace the user may not touch:
			// Redis refuses every command (NOPERM) after a good login.
			name:    "url-right-password-no-permission",
			opts:    fromURL(fmt.Sprintf("redis://%s:%s@%s/0", user, password, srv.Addr)),
			secrets: []string{password},
			cause:   func(err error) bool { return redis.IsPermissionError(err) },
		},
		{
			name: "tls-wrong-password",
			// A TLS-only server with requirepass, and the wrong password.
			opts: func(t *testing.T) (*redis.Options, []string) {
				ts := redistest.StartTLS(t, redistest.TLSOptions{Password: "tls-" + randomHex(16)})
				o := ts.Options()
				o.Password = wrong
				return o, []string{ts.Password}
			},
			secrets: []string{wrong},
			cause:   isAuth,
		},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ro, more := sc.opts(t)
			sc.secrets = append(sc.secrets, more...)
			testSecrets(t, sc, ro)
		})
	}
}

func testSecrets(t *testing.T, sc secretScenario, ro *redis.Options) {
	ctx := context.Background()
	shortTimeouts(ro)
	rdb := redis.NewClient(ro)
	t.Cleanup(func() { rdb.Close() })
	logger, logs := captureLogger()

	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}

	// The store on its own.
	store := l2.New(rdb, l2.Options{ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	_, _, err := store.Get(ctx, "k")
	keep(err)
	if !sc.cause(err) {
		t.Fatalf("l2 Get: got %v, want the scenario's failure", err)
	}
	keep(store.Set(ctx, "k", []byte("v"), time.Minute))
	_, err = store.GetMany(ctx, []string{"a", "b"})
	keep(err)
	keep(store.SetAndPublish(ctx, "k", []byte("v"), time.Minute, "ch", []byte("m")))
	_, err = store.CompareAndSet(ctx, "k", []byte("v"), []byte("w"), time.Minute)
	keep(err)

	// The bus: Subscribe cannot succeed; the Bus logs its reconnect attempts.
	bus := invalidate.New(rdb, invalidate.Options{Logger: logger, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
	t.Cleanup(func() { bus.Close() })
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	unsub, err := bus.Subscribe(sctx, "hybridcache:secrets", func([]byte) {}, func() {})
	cancel()
	if err == nil {
		unsub()
		t.Fatal("bus Subscribe succeeded, want it to fail")
	}
	keep(err)
	keep(bus.Publish(ctx, "hybridcache:secrets", []byte("m")))

	// The cache, logging every error (LogEvery 1ns).
	c, err := hybrid.New[string](hybrid.Options{Namespace: "secrets", Remote: store, Logger: logger, LogEvery: time.Nanosecond})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	load := func(context.Context, string) (string, error) { return "loaded", nil }
	if v, err := c.GetOrCreate(ctx, "k", load); err != nil || v != "loaded" {
		t.Errorf("GetOrCreate: got %q, %v, want the loaded value", v, err)
	}
	_, _, err = c.Get(ctx, "other")
	keep(err)
	keep(c.Set(ctx, "k", "v"))
	keep(c.Delete(ctx, "k"))
	_, err = c.GetOrCreateMany(ctx, []string{"m1", "m2"}, func(_ context.Context, missing []string) (map[string]string, error) {
		out := map[string]string{}
		for _, k := range missing {
			out[k] = "loaded"
		}
		return out, nil
	})
	keep(err)
	_, err = c.GetMany(ctx, []string{"m3", "m4"})
	keep(err)

	// Let the bus log a failed reconnect, and the fills' write-backs fail.
	waitFor(t, 3*time.Second, "the bus to log its connection failure", func() bool { return strings.Contains(logs.String(), "invalidate:") }, logs.String)
	waitFor(t, 3*time.Second, "the cache to log a failed write-back", func() bool { return strings.Contains(logs.String(), "write") }, logs.String)
	c.Close()
	bus.Close()

	var all strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&all, "%v\n%+v\n%#v\n", e, e, e)
	}
	text := logs.String()
	lines := strings.Count(text, "\n")
	t.Logf("%d errors returned, %d log lines; for example:\n  error: %v\n  log: %s", len(errs), lines, errs[0], firstLogLine(text, "hybrid:"))
	if len(errs) < 5 || !strings.Contains(text, "hybrid:") {
		t.Errorf("only %d errors and no cache log line: the scenario did not exercise the failure paths\n%s", len(errs), text)
	}
	for _, s := range sc.secrets {
		if strings.Contains(text, s) {
			t.Errorf("a password appears in the logs:\n%s", text)
		}
		if strings.Contains(all.String(), s) {
			t.Errorf("a password appears in the errors:\n%s", all.String())
		}
	}
}

// firstLogLine returns the first line of logs containing s.
func firstLogLine(logs, s string) string {
	for line := range strings.Lines(logs) {
		if strings.Contains(line, s) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
