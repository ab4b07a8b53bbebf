package l2_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
)

var (
	_ hybrid.Remote      = (*l2.Store)(nil)
	_ hybrid.BatchRemote = (*l2.Store)(nil)
	_ hybrid.Announcer   = (*l2.Store)(nil)
)

var srv *redistest.Server

func TestMain(m *testing.M) { redistest.Main(m, &srv) }

// newStore returns a Store over a fresh client of the shared server, with a
// key prefix unique to t, and that client.
func newStore(t *testing.T) (*l2.Store, *redis.Client, string) {
	t.Helper()
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t) + ":"
	return l2.New(rdb, l2.Options{Prefix: prefix}), rdb, prefix
}

// counter is a go-redis hook that records the commands and pipelines a
// client sends, leaving out those that set up a new connection.
type counter struct {
	mu        sync.Mutex
	cmds      []string // names of single commands
	pipelines [][]string
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !connSetup(cmd.Name()) {
			c.mu.Lock()
			c.cmds = append(c.cmds, cmd.Name())
			c.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		for _, cmd := range cmds {
			if !connSetup(cmd.Name()) {
				names = append(names, cmd.Name())
			}
		}
		if names != nil {
			c.mu.Lock()
			c.pipelines = append(c.pipelines, names)
			c.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// connSetup reports whether go-redis sends the command name when it sets up
// a connection.
func connSetup(name string) bool {
	switch name {
	case "hello", "client", "auth", "select", "readonly":
		return true
	}
	return false
}

func (c *counter) reset() {
	c.mu.Lock()
	c.cmds, c.pipelines = nil, nil
	c.mu.Unlock()
}

func (c *counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("commands %v, pipelines %v", c.cmds, c.pipelines)
}

func TestGetMiss(t *testing.T) {
	s, _, _ := newStore(t)
	v, ok, err := s.Get(t.Context(), "missing")
	if err != nil || ok || v != nil {
		t.Fatalf("Get(missing) = %q, %v, %v; want nil, false, nil", v, ok, err)
	}
}

func TestSetGet(t *testing.T) {
	for _, value := range [][]byte{[]byte("hello"), {0, 1, 2, 255}, {}} {
		t.Run(fmt.Sprintf("%q", value), func(t *testing.T) {
			s, _, _ := newStore(t)
			ctx := t.Context()
			if err := s.Set(ctx, "k", value, time.Minute); err != nil {
				t.Fatalf("Set: %v", err)
			}
			got, ok, err := s.Get(ctx, "k")
			if err != nil || !ok {
				t.Fatalf("Get = %q, %v, %v; want %q, true, nil", got, ok, err, value)
			}
			if !bytes.Equal(got, value) {
				t.Errorf("Get: got %q, want %q", got, value)
			}
		})
	}
}

func TestSetTTL(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	const ttl = 10 * time.Second
	if err := s.Set(ctx, "k", []byte("v"), ttl); err != nil {
		t.Fatalf("Set: %v", err)
	}
	pttl, err := rdb.PTTL(ctx, prefix+"k").Result()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	if pttl <= ttl-2*time.Second || pttl > ttl {
		t.Errorf("PTTL: got %v, want in (%v, %v]", pttl, ttl-2*time.Second, ttl)
	}

	// A ttl that is not whole seconds goes as milliseconds.
	if err := s.Set(ctx, "k", []byte("v"), 1500*time.Millisecond); err != nil {
		t.Fatalf("Set: %v", err)
	}
	pttl, err = rdb.PTTL(ctx, prefix+"k").Result()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	if pttl <= 500*time.Millisecond || pttl > 1500*time.Millisecond {
		t.Errorf("PTTL: got %v, want in (500ms, 1.5s]", pttl)
	}
}

func TestSetNoExpiry(t *testing.T) {
	// A ttl of zero or less means no expiry, even over a key that had one
	// (go-redis would read a negative expiration as KEEPTTL).
	for _, ttl := range []time.Duration{0, -1, -time.Second} {
		t.Run(ttl.String(), func(t *testing.T) {
			s, rdb, prefix := newStore(t)
			ctx := t.Context()
			if err := s.Set(ctx, "k", []byte("old"), time.Minute); err != nil {
				t.Fatalf("Set: %v", err)
			}
			if err := s.Set(ctx, "k", []byte("new"), ttl); err != nil {
				t.Fatalf("Set: %v", err)
			}
			pttl, err := rdb.PTTL(ctx, prefix+"k").Result()
			if err != nil {
				t.Fatalf("PTTL: %v", err)
			}
			if pttl != -1 {
				t.Errorf("PTTL: got %v, want -1 (no expiry)", pttl)
			}
		})
	}
}

func TestSetIfAbsent(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	tests := []struct {
		value      string
		ttl        time.Duration
		wantStored bool
		wantValue  string
		wantPTTL   time.Duration // -1: no expiry
	}{
		{"first", 10 * time.Second, true, "first", 10 * time.Second},
		{"second", 0, false, "first", 10 * time.Second},
		{"third", time.Minute, false, "first", 10 * time.Second},
	}
	for _, tt := range tests {
		stored, err := s.SetIfAbsent(ctx, "k", []byte(tt.value), tt.ttl)
		if err != nil || stored != tt.wantStored {
			t.Errorf("SetIfAbsent(%q) = %v, %v; want %v, nil", tt.value, stored, err, tt.wantStored)
		}
		got, ok, err := s.Get(ctx, "k")
		if err != nil || !ok || string(got) != tt.wantValue {
			t.Errorf("Get after SetIfAbsent(%q) = %q, %v, %v; want %q, true, nil", tt.value, got, ok, err, tt.wantValue)
		}
		pttl, err := rdb.PTTL(ctx, prefix+"k").Result()
		if err != nil || pttl <= tt.wantPTTL-2*time.Second || pttl > tt.wantPTTL {
			t.Errorf("PTTL after SetIfAbsent(%q) = %v, %v; want in (%v, %v]", tt.value, pttl, err, tt.wantPTTL-2*time.Second, tt.wantPTTL)
		}
	}

	// ttl 0 or less: no expiry.
	for _, ttl := range []time.Duration{0, -time.Second} {
		key := "noexp" + ttl.String()
		if stored, err := s.SetIfAbsent(ctx, key, []byte("v"), ttl); err != nil || !stored {
			t.Fatalf("SetIfAbsent(%s, ttl %v) = %v, %v; want true, nil", key, ttl, stored, err)
		}
		if pttl, err := rdb.PTTL(ctx, prefix+key).Result(); err != nil || pttl != -1 {
			t.Errorf("PTTL after SetIfAbsent(ttl %v) = %v, %v; want -1, nil", ttl, pttl, err)
		}
	}

	// A deleted key can be filled again.
	if err := s.Delete(ctx, "k"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if stored, err := s.SetIfAbsent(ctx, "k", []byte("again"), time.Minute); err != nil || !stored {
		t.Errorf("SetIfAbsent after Delete = %v, %v; want true, nil", stored, err)
	}
}

func TestPrefix(t *testing.T) {
	rdb := srv.Client(t)
	ctx := t.Context()
	base := redistest.Prefix(t)
	s := l2.New(rdb, l2.Options{Prefix: base + ":app:"})
	if err := s.Set(ctx, "k", []byte("v"), time.Minute); err != nil {
		t.Fatalf("Set: %v", err)
	}
	raw, err := rdb.Get(ctx, base+":app:k").Result()
	if err != nil || raw != "v" {
		t.Errorf("raw GET %s:app:k = %q, %v; want \"v\", nil", base, raw, err)
	}

	// A Store without the prefix sees other keys.
	bare := l2.New(rdb, l2.Options{})
	if _, ok, err := bare.Get(ctx, "k"); ok || err != nil {
		t.Errorf("unprefixed Get(k): got ok %v, err %v; want false, nil", ok, err)
	}
	got, ok, err := bare.Get(ctx, base+":app:k")
	if err != nil || !ok || string(got) != "v" {
		t.Errorf("unprefixed Get(full key) = %q, %v, %v; want \"v\", true, nil", got, ok, err)
	}

	// Batches and scripts use the prefix too.
	if err := s.SetMany(ctx, []string{"m"}, [][]byte{[]byte("mv")}, []time.Duration{0}); err != nil {
		t.Fatalf("SetMany: %v", err)
	}
	if err := s.SetAndPublish(ctx, "p", []byte("pv"), 0, base+":ch", []byte("msg")); err != nil {
		t.Fatalf("SetAndPublish: %v", err)
	}
	for key, want := range map[string]string{"m": "mv", "p": "pv"} {
		if raw, err := rdb.Get(ctx, base+":app:"+key).Result(); err != nil || raw != want {
			t.Errorf("raw GET of %q = %q, %v; want %q, nil", key, raw, err, want)
		}
	}
	if err := s.Delete(ctx, "m", "p"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if n, err := rdb.Exists(ctx, base+":app:m", base+":app:p").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS after Delete = %d, %v; want 0, nil", n, err)
	}
}

func TestDelete(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	for _, k := range []string{"a", "b", "c"} {
		if err := s.Set(ctx, k, []byte(k), time.Minute); err != nil {
			t.Fatalf("Set(%s): %v", k, err)
		}
	}
	if err := s.Delete(ctx, "a", "missing", "c"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for k, want := range map[string]bool{"a": false, "b": true, "c": false} {
		_, ok, err := s.Get(ctx, k)
		if err != nil || ok != want {
			t.Errorf("Get(%s) after Delete: got ok %v, err %v; want %v, nil", k, ok, err, want)
		}
	}
	if err := s.Delete(ctx, "b"); err != nil {
		t.Fatalf("Delete(b): %v", err)
	}
	if n, err := rdb.Exists(ctx, prefix+"b").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS b = %d, %v; want 0, nil", n, err)
	}
}

func TestGetMany(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := t.Context()
	if err := s.SetMany(ctx,
		[]string{"a", "b", "empty"},
		[][]byte{[]byte("A"), []byte("B"), {}},
		[]time.Duration{time.Minute, time.Minute, time.Minute},
	); err != nil {
		t.Fatalf("SetMany: %v", err)
	}
	keys := []string{"b", "missing", "a", "b", "empty", "missing", "a"}
	want := [][]byte{[]byte("B"), nil, []byte("A"), []byte("B"), {}, nil, []byte("A")}
	got, err := s.GetMany(ctx, keys)
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("GetMany: got %d values, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) || (got[i] == nil) != (want[i] == nil) {
			t.Errorf("GetMany[%d] (%s): got %q (nil %v), want %q (nil %v)",
				i, keys[i], got[i], got[i] == nil, want[i], want[i] == nil)
		}
	}
}

func TestSetMany(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	keys := []string{"a", "b", "c"}
	values := [][]byte{[]byte("1"), []byte("2"), []byte("3")}
	ttls := []time.Duration{time.Minute, 0, 10 * time.Second}
	if err := s.SetMany(ctx, keys, values, ttls); err != nil {
		t.Fatalf("SetMany: %v", err)
	}
	for i, k := range keys {
		got, ok, err := s.Get(ctx, k)
		if err != nil || !ok || !bytes.Equal(got, values[i]) {
			t.Errorf("Get(%s) = %q, %v, %v; want %q, true, nil", k, got, ok, err, values[i])
		}
		pttl, err := rdb.PTTL(ctx, prefix+k).Result()
		if err != nil {
			t.Fatalf("PTTL(%s): %v", k, err)
		}
		if ttls[i] == 0 {
			if pttl != -1 {
				t.Errorf("PTTL(%s): got %v, want -1 (no expiry)", k, pttl)
			}
		} else if pttl <= ttls[i]-2*time.Second || pttl > ttls[i] {
			t.Errorf("PTTL(%s): got %v, want in (%v, %v]", k, pttl, ttls[i]-2*time.Second, ttls[i])
		}
	}
}

func TestSetManyLengthMismatch(t *testing.T) {
	s, rdb, _ := newStore(t)
	var c counter
	rdb.AddHook(&c)
	tests := []struct {
		name   string
		keys   []string
		values [][]byte
		ttls   []time.Duration
	}{
		{"fewer values", []string{"a", "b"}, [][]byte{nil}, []time.Duration{0, 0}},
		{"fewer ttls", []string{"a", "b"}, [][]byte{nil, nil}, []time.Duration{0}},
		{"more values", []string{"a"}, [][]byte{nil, nil}, []time.Duration{0}},
		{"no keys", nil, [][]byte{nil}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.SetMany(t.Context(), tt.keys, tt.values, tt.ttls); err == nil {
				t.Errorf("SetMany(%d keys, %d values, %d ttls): got nil error, want one",
					len(tt.keys), len(tt.values), len(tt.ttls))
			}
		})
	}
	if c.String() != "commands [], pipelines []" {
		t.Errorf("sent %v; want nothing", &c)
	}
}

func TestEmptyInputsMakeNoRoundTrip(t *testing.T) {
	s, rdb, _ := newStore(t)
	var c counter
	rdb.AddHook(&c)
	ctx := t.Context()
	got, err := s.GetMany(ctx, nil)
	if err != nil || len(got) != 0 {
		t.Errorf("GetMany(nil) = %v, %v; want no values, nil", got, err)
	}
	if got, err := s.GetMany(ctx, []string{}); err != nil || len(got) != 0 {
		t.Errorf("GetMany([]) = %v, %v; want no values, nil", got, err)
	}
	if err := s.SetMany(ctx, nil, nil, nil); err != nil {
		t.Errorf("SetMany(nil) = %v; want nil", err)
	}
	if err := s.Delete(ctx); err != nil {
		t.Errorf("Delete() = %v; want nil", err)
	}
	if c.String() != "commands [], pipelines []" {
		t.Errorf("sent %v; want nothing", &c)
	}
}

func TestOneCommandPerBatch(t *testing.T) {
	s, rdb, _ := newStore(t)
	var c counter
	rdb.AddHook(&c)
	ctx := t.Context()
	keys := []string{"a", "b", "c", "d", "e"}
	values := [][]byte{[]byte("1"), []byte("2"), []byte("3"), []byte("4"), []byte("5")}
	ttls := []time.Duration{time.Minute, time.Minute, time.Minute, time.Minute, time.Minute}

	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"SetMany", func() error { return s.SetMany(ctx, keys, values, ttls) },
			"commands [], pipelines [[set set set set set]]"},
		{"GetMany", func() error { _, err := s.GetMany(ctx, keys); return err },
			"commands [mget], pipelines []"},
		{"Delete", func() error { return s.Delete(ctx, keys...) },
			"commands [del], pipelines []"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.reset()
			if err := tt.run(); err != nil {
				t.Fatal(err)
			}
			if got := c.String(); got != tt.want {
				t.Errorf("sent %s; want %s", got, tt.want)
			}
		})
	}
}

// pause stops the shared server from answering mode ("WRITE" or "ALL")
// commands for d, and waits for it to answer again when t ends.
func pause(t *testing.T, mode string, d time.Duration) {
	t.Helper()
	admin := srv.Client(t)
	if err := admin.Do(t.Context(), "CLIENT", "PAUSE", d.Milliseconds(), mode).Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	t.Cleanup(func() {
		// Blocks until the pause is over, so later tests run unpaused.
		if err := admin.Set(context.Background(), redistest.Prefix(t), "1", time.Second).Err(); err != nil {
			t.Errorf("SET after pause: %v", err)
		}
	})
}

func TestTimeout(t *testing.T) {
	srv.NeedReal(t)
	// go-redis applies context deadlines to the socket only with
	// ContextTimeoutEnabled.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	prefix := redistest.Prefix(t) + ":"
	fast := l2.New(rdb, l2.Options{Prefix: prefix, Timeout: 50 * time.Millisecond})
	slow := l2.New(rdb, l2.Options{Prefix: prefix, Timeout: 10 * time.Second})
	if err := fast.Set(t.Context(), "k", []byte("v"), time.Minute); err != nil {
		t.Fatalf("Set: %v", err)
	}
	// Warm the pool and the script cache so no dial or NOSCRIPT is measured.
	if err := fast.SetAndPublish(t.Context(), "k", []byte("v"), time.Minute, prefix+"ch", nil); err != nil {
		t.Fatalf("SetAndPublish: %v", err)
	}

	deadline := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	tests := []struct {
		name string
		mode string
		run  func() error
	}{
		{"Get", "ALL", func() error { _, _, err := fast.Get(t.Context(), "k"); return err }},
		{"Get/caller deadline first", "ALL", func() error { _, _, err := slow.Get(deadline(), "k"); return err }},
		{"GetMany", "ALL", func() error { _, err := fast.GetMany(t.Context(), []string{"k", "x"}); return err }},
		{"Set", "WRITE", func() error { return fast.Set(t.Context(), "k", []byte("v2"), time.Minute) }},
		{"SetIfAbsent", "WRITE", func() error {
			_, err := fast.SetIfAbsent(t.Context(), "new", []byte("v"), time.Minute)
			return err
		}},
		{"SetMany", "WRITE", func() error {
			return fast.SetMany(t.Context(), []string{"k", "x"}, [][]byte{nil, nil}, []time.Duration{0, 0})
		}},
		{"Delete", "WRITE", func() error { return fast.Delete(t.Context(), "k") }},
		{"SetAndPublish", "WRITE", func() error {
			return fast.SetAndPublish(t.Context(), "k", []byte("v3"), time.Minute, prefix+"ch", []byte("m"))
		}},
		{"DeleteAndPublish", "WRITE", func() error {
			return fast.DeleteAndPublish(t.Context(), "k", prefix+"ch", []byte("m"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pause(t, tt.mode, 500*time.Millisecond)
			start := time.Now()
			err := tt.run()
			elapsed := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("got error %v, want one wrapping context.DeadlineExceeded", err)
			}
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Errorf("got error %v, want one wrapping a net.Error timeout", err)
			}
			if elapsed > 300*time.Millisecond {
				t.Errorf("failed after %v, want about 50ms (server paused for 500ms)", elapsed)
			}
		})
	}

	// Reads still work while only writes are paused.
	pause(t, "WRITE", 500*time.Millisecond)
	if _, _, err := fast.Get(t.Context(), "k"); err != nil {
		t.Errorf("Get during CLIENT PAUSE WRITE: %v", err)
	}
}

func TestCanceledContext(t *testing.T) {
	s, _, _ := newStore(t)
	if err := s.Set(t.Context(), "k", []byte("v"), time.Minute); err != nil {
		t.Fatalf("Set: %v", err) // and the pool has a connection
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name string
		run  func() error
	}{
		{"Get", func() error { _, _, err := s.Get(ctx, "k"); return err }},
		{"Set", func() error { return s.Set(ctx, "k", []byte("v"), 0) }},
		{"SetIfAbsent", func() error { _, err := s.SetIfAbsent(ctx, "new", []byte("v"), 0); return err }},
		{"Delete", func() error { return s.Delete(ctx, "k") }},
		{"Delete many", func() error { return s.Delete(ctx, "k", "x") }},
		{"GetMany", func() error { _, err := s.GetMany(ctx, []string{"k", "x"}); return err }},
		{"SetMany", func() error {
			return s.SetMany(ctx, []string{"k"}, [][]byte{nil}, []time.Duration{0})
		}},
		{"SetAndPublish", func() error { return s.SetAndPublish(ctx, "k", nil, 0, "ch", nil) }},
		{"DeleteAndPublish", func() error { return s.DeleteAndPublish(ctx, "k", "ch", nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if !errors.Is(err, context.Canceled) {
				t.Errorf("got error %v, want one wrapping context.Canceled", err)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "l2: ") {
				t.Errorf("got error %q, want it prefixed \"l2: \"", err)
			}
		})
	}
	if got, ok, err := s.Get(t.Context(), "k"); err != nil || !ok || string(got) != "v" {
		t.Errorf("Get after canceled calls = %q, %v, %v; want \"v\", true, nil", got, ok, err)
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	// A server that accepts connections and closes them at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: l.Addr().String(), Password: "s3cret-pw", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	s := l2.New(rdb, l2.Options{})
	_, _, err = s.Get(t.Context(), "user:1")
	if err == nil {
		t.Fatal("Get from a broken server: got nil error, want one")
	}
	if got, want := err.Error(), `l2: get "user:1": `; !strings.HasPrefix(got, want) {
		t.Errorf("got error %q, want prefix %q", got, want)
	}
	if strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("error %q shows the password", err)
	}
}

// received is what receive collected.
type received struct {
	msgs []string
	err  error
}

// receive collects n messages from ps in the background. The goroutine
// ends after n messages, or with an error when ps is closed.
func receive(ps *redis.PubSub, n int) <-chan received {
	out := make(chan received, 1)
	go func() {
		var r received
		for len(r.msgs) < n {
			m, err := ps.ReceiveMessage(context.Background())
			if err != nil {
				r.err = fmt.Errorf("after %d of %d messages: %w", len(r.msgs), n, err)
				break
			}
			r.msgs = append(r.msgs, m.Payload)
		}
		out <- r
	}()
	return out
}

// wait returns the messages that receive collected, or fails t if they do
// not all arrive in time.
func wait(t *testing.T, ch <-chan received) []string {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.msgs
	case <-time.After(30 * time.Second):
		t.Fatal("messages did not arrive within 30s")
		return nil
	}
}

// subscribe returns a PubSub of rdb on channel, subscribed when it returns.
func subscribe(t *testing.T, rdb redis.UniversalClient, channel string) *redis.PubSub {
	t.Helper()
	ps := rdb.Subscribe(t.Context(), channel)
	t.Cleanup(func() { ps.Close() })
	if _, err := ps.Receive(t.Context()); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	return ps
}

const deleted = "<deleted>"

// checkOrder runs writers goroutines that each make perWriter writes of key
// through s, announcing each on channel: SetAndPublish whose message is the
// value written, or (when withDeletes, every third write) DeleteAndPublish
// with message "<deleted>". It checks that ps received every message, each
// writer's in its own order, and that the last one describes what Redis
// holds.
func checkOrder(t *testing.T, s *l2.Store, ps *redis.PubSub, key, channel string, writers, perWriter int, withDeletes bool) {
	t.Helper()
	ctx := t.Context()
	msgs := receive(ps, writers*perWriter)
	var wg sync.WaitGroup
	var failed atomic.Bool
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				if failed.Load() {
					return
				}
				var err error
				if withDeletes && (w+i)%3 == 0 {
					err = s.DeleteAndPublish(ctx, key, channel, []byte(deleted))
				} else {
					v := []byte(fmt.Sprintf("w%d-%03d", w, i))
					err = s.SetAndPublish(ctx, key, v, time.Minute, channel, v)
				}
				if err != nil {
					failed.Store(true)
					t.Errorf("writer %d, write %d: %v", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() {
		return
	}
	got := wait(t, msgs)

	// Each writer's sets arrive in the order it made them.
	last := make(map[string]string)
	for _, m := range got {
		if m == deleted {
			continue
		}
		w, _, _ := strings.Cut(m, "-")
		if m <= last[w] {
			t.Fatalf("message %q after %q: out of the writer's order", m, last[w])
		}
		last[w] = m
	}

	final, ok, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("final Get: %v", err)
	}
	lastMsg := got[len(got)-1]
	switch {
	case lastMsg == deleted && ok:
		t.Errorf("last message says deleted, but Redis holds %q", final)
	case lastMsg != deleted && !ok:
		t.Errorf("last message is %q, but the key is missing", lastMsg)
	case lastMsg != deleted && string(final) != lastMsg:
		t.Errorf("last message is %q, final GET is %q; want equal", lastMsg, final)
	}
}

func TestSetAndPublishOrder(t *testing.T) {
	for run := range 3 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			s, _, _ := newStore(t)
			channel := redistest.Prefix(t) + ":ch"
			ps := subscribe(t, srv.Client(t), channel)
			checkOrder(t, s, ps, "k", channel, 8, 200, false)
		})
	}
}

func TestSetAndDeleteAndPublishOrder(t *testing.T) {
	for run := range 3 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			s, _, _ := newStore(t)
			channel := redistest.Prefix(t) + ":ch"
			ps := subscribe(t, srv.Client(t), channel)
			checkOrder(t, s, ps, "k", channel, 8, 200, true)
		})
	}
}

func TestSetAndPublish(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	channel := prefix + "ch"
	ps := subscribe(t, srv.Client(t), channel)
	msgs := receive(ps, 3)

	if err := s.SetAndPublish(ctx, "k", []byte("v1"), 10*time.Second, channel, []byte("m1")); err != nil {
		t.Fatalf("SetAndPublish: %v", err)
	}
	if pttl, err := rdb.PTTL(ctx, prefix+"k").Result(); err != nil || pttl <= 8*time.Second || pttl > 10*time.Second {
		t.Errorf("PTTL after SetAndPublish(ttl 10s) = %v, %v; want in (8s, 10s]", pttl, err)
	}
	if err := s.SetAndPublish(ctx, "k", []byte("v2"), 0, channel, []byte("m2")); err != nil {
		t.Fatalf("SetAndPublish: %v", err)
	}
	if pttl, err := rdb.PTTL(ctx, prefix+"k").Result(); err != nil || pttl != -1 {
		t.Errorf("PTTL after SetAndPublish(ttl 0) = %v, %v; want -1, nil", pttl, err)
	}
	if got, ok, err := s.Get(ctx, "k"); err != nil || !ok || string(got) != "v2" {
		t.Errorf("Get = %q, %v, %v; want \"v2\", true, nil", got, ok, err)
	}
	if err := s.DeleteAndPublish(ctx, "k", channel, []byte("m3")); err != nil {
		t.Fatalf("DeleteAndPublish: %v", err)
	}
	if _, ok, err := s.Get(ctx, "k"); err != nil || ok {
		t.Errorf("Get after DeleteAndPublish: got ok %v, err %v; want false, nil", ok, err)
	}
	if got, want := wait(t, msgs), []string{"m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
}

func TestScriptReloaded(t *testing.T) {
	// After SCRIPT FLUSH, EVALSHA fails with NOSCRIPT and the Store falls
	// back to EVAL.
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	for i := range 2 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
		if err := s.SetAndPublish(ctx, "k", []byte("v"), 0, prefix+"ch", nil); err != nil {
			t.Errorf("SetAndPublish after SCRIPT FLUSH %d: %v", i, err)
		}
		if err := s.DeleteAndPublish(ctx, "k", prefix+"ch", nil); err != nil {
			t.Errorf("DeleteAndPublish after SCRIPT FLUSH %d: %v", i, err)
		}
	}
}

func TestRing(t *testing.T) {
	// A Ring shards by key on the client side: batches must not put keys of
	// two shards in one command.
	m1, m2 := miniredis.RunT(t), miniredis.RunT(t)
	rdb := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m1.Addr(), "b": m2.Addr()}})
	t.Cleanup(func() { rdb.Close() })
	s := l2.New(rdb, l2.Options{Prefix: "p:"})
	ctx := t.Context()
	var keys []string
	var values [][]byte
	var ttls []time.Duration
	for i := range 20 {
		keys = append(keys, fmt.Sprint("k", i))
		values = append(values, []byte(fmt.Sprint("v", i)))
		ttls = append(ttls, time.Minute)
	}
	if err := s.SetMany(ctx, keys, values, ttls); err != nil {
		t.Fatalf("SetMany: %v", err)
	}
	if len(m1.Keys()) == 0 || len(m2.Keys()) == 0 {
		t.Fatalf("keys per shard: %d and %d; want both used", len(m1.Keys()), len(m2.Keys()))
	}
	got, err := s.GetMany(ctx, append(keys, "missing"))
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	for i, v := range values {
		if !bytes.Equal(got[i], v) {
			t.Errorf("GetMany[%d]: got %q, want %q", i, got[i], v)
		}
	}
	if got[len(keys)] != nil {
		t.Errorf("GetMany[missing]: got %q, want nil", got[len(keys)])
	}
	if err := s.Delete(ctx, keys...); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if n := len(m1.Keys()) + len(m2.Keys()); n != 0 {
		t.Errorf("keys left after Delete: %d, want 0", n)
	}
}

func TestNewNilClientPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New(nil): no panic, want one")
		}
	}()
	l2.New(nil, l2.Options{})
}
