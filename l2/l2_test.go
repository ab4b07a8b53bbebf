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
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/internal/tier"
	"github.com/hybridcache/hybridcache/l2"
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

// counts returns how many single commands and pipelines were recorded.
func (c *counter) counts() (cmds, pipelines int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cmds), len(c.pipelines)
}

func (c *counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("commands %v, pipelines %v", c.cmds, c.pipelines)
}

func TestGetMiss(t *testing.T) {
	s, _, _ := newStore(t)
	v, ok, err := get(t.Context(), s, "missing")
	if err != nil || ok || v != nil {
		t.Fatalf("Get(missing) = %q, %v, %v; want nil, false, nil", v, ok, err)
	}
}

func TestSetGet(t *testing.T) {
	for _, value := range [][]byte{[]byte("hello"), {0, 1, 2, 255}, {}} {
		t.Run(fmt.Sprintf("%q", value), func(t *testing.T) {
			s, _, _ := newStore(t)
			ctx := t.Context()
			if err := set(ctx, s, "k", value, time.Minute); err != nil {
				t.Fatalf("Set: %v", err)
			}
			got, ok, err := get(ctx, s, "k")
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
	if err := set(ctx, s, "k", []byte("v"), ttl); err != nil {
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
	if err := set(ctx, s, "k", []byte("v"), 1500*time.Millisecond); err != nil {
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
			if err := set(ctx, s, "k", []byte("old"), time.Minute); err != nil {
				t.Fatalf("Set: %v", err)
			}
			if err := set(ctx, s, "k", []byte("new"), ttl); err != nil {
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
		stored, err := setIfAbsent(ctx, s, "k", []byte(tt.value), tt.ttl)
		if err != nil || stored != tt.wantStored {
			t.Errorf("SetIfAbsent(%q) = %v, %v; want %v, nil", tt.value, stored, err, tt.wantStored)
		}
		got, ok, err := get(ctx, s, "k")
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
		if stored, err := setIfAbsent(ctx, s, key, []byte("v"), ttl); err != nil || !stored {
			t.Fatalf("SetIfAbsent(%s, ttl %v) = %v, %v; want true, nil", key, ttl, stored, err)
		}
		if pttl, err := rdb.PTTL(ctx, prefix+key).Result(); err != nil || pttl != -1 {
			t.Errorf("PTTL after SetIfAbsent(ttl %v) = %v, %v; want -1, nil", ttl, pttl, err)
		}
	}

	// A deleted key can be filled again.
	if err := rdb.Del(ctx, prefix+"k").Err(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if stored, err := setIfAbsent(ctx, s, "k", []byte("again"), time.Minute); err != nil || !stored {
		t.Errorf("SetIfAbsent after DEL = %v, %v; want true, nil", stored, err)
	}
}

func TestPrefix(t *testing.T) {
	rdb := srv.Client(t)
	ctx := t.Context()
	base := redistest.Prefix(t)
	s := l2.New(rdb, l2.Options{Prefix: base + ":app:"})
	if err := set(ctx, s, "k", []byte("v"), time.Minute); err != nil {
		t.Fatalf("Set: %v", err)
	}
	raw, err := rdb.Get(ctx, base+":app:k").Result()
	if err != nil || raw != "v" {
		t.Errorf("raw GET %s:app:k = %q, %v; want \"v\", nil", base, raw, err)
	}

	// A Store without the prefix sees other keys.
	bare := l2.New(rdb, l2.Options{})
	if _, ok, err := get(ctx, bare, "k"); ok || err != nil {
		t.Errorf("unprefixed Get(k): got ok %v, err %v; want false, nil", ok, err)
	}
	got, ok, err := get(ctx, bare, base+":app:k")
	if err != nil || !ok || string(got) != "v" {
		t.Errorf("unprefixed Get(full key) = %q, %v, %v; want \"v\", true, nil", got, ok, err)
	}

	// Batches and scripts use the prefix too.
	if _, err := setManyIfAbsent(ctx, s, []string{"m"}, [][]byte{[]byte("mv")}, []time.Duration{0}); err != nil {
		t.Fatalf("SetManyIfAbsent: %v", err)
	}
	if err := setAndPublish(ctx, s, "p", []byte("pv"), 0, base+":ch", []byte("msg")); err != nil {
		t.Fatalf("SetAndPublish: %v", err)
	}
	for key, want := range map[string]string{"m": "mv", "p": "pv"} {
		if raw, err := rdb.Get(ctx, base+":app:"+key).Result(); err != nil || raw != want {
			t.Errorf("raw GET of %q = %q, %v; want %q, nil", key, raw, err, want)
		}
	}
	if ok, err := compareAndSet(ctx, s, "p", []byte("pv"), []byte("pv2"), 0); err != nil || !ok {
		t.Fatalf("CompareAndSet = %v, %v; want true, nil", ok, err)
	}
	vals, err := s.Get(ctx, []string{"m", "p"})
	if err != nil || string(vals[0]) != "mv" || string(vals[1]) != "pv2" {
		t.Errorf("GetMany(m, p) = %q, %v; want [mv pv2], nil", vals, err)
	}
}

func TestGetMany(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := t.Context()
	if _, err := setManyIfAbsent(ctx, s,
		[]string{"a", "b", "empty"},
		[][]byte{[]byte("A"), []byte("B"), {}},
		[]time.Duration{time.Minute, time.Minute, time.Minute},
	); err != nil {
		t.Fatalf("SetManyIfAbsent: %v", err)
	}
	keys := []string{"b", "missing", "a", "b", "empty", "missing", "a"}
	want := [][]byte{[]byte("B"), nil, []byte("A"), []byte("B"), {}, nil, []byte("A")}
	got, err := s.Get(ctx, keys)
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

func TestSetManyIfAbsent(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	if err := set(ctx, s, "old", []byte("kept"), 0); err != nil {
		t.Fatalf("Set: %v", err)
	}
	keys := []string{"a", "old", "b", "a"}
	values := [][]byte{[]byte("A"), []byte("new"), []byte("B"), []byte("A2")}
	ttls := []time.Duration{10 * time.Second, time.Minute, 0, time.Minute}
	stored, err := setManyIfAbsent(ctx, s, keys, values, ttls)
	if err != nil {
		t.Fatalf("SetManyIfAbsent: %v", err)
	}
	if want := []bool{true, false, true, false}; !slices.Equal(stored, want) {
		t.Errorf("stored: got %v, want %v", stored, want)
	}
	for key, want := range map[string]string{"a": "A", "old": "kept", "b": "B"} {
		got, ok, err := get(ctx, s, key)
		if err != nil || !ok || string(got) != want {
			t.Errorf("Get(%s) = %q, %v, %v; want %q, true, nil", key, got, ok, err, want)
		}
	}
	if pttl, err := rdb.PTTL(ctx, prefix+"a").Result(); err != nil || pttl <= 8*time.Second || pttl > 10*time.Second {
		t.Errorf("PTTL(a) = %v, %v; want in (8s, 10s]", pttl, err)
	}
	for _, key := range []string{"old", "b"} {
		if pttl, err := rdb.PTTL(ctx, prefix+key).Result(); err != nil || pttl != -1 {
			t.Errorf("PTTL(%s) = %v, %v; want -1, nil", key, pttl, err)
		}
	}
}

// TestWriteBadArguments: a write the Store cannot make fails the whole
// batch, with an error naming it, before any round trip.
func TestWriteBadArguments(t *testing.T) {
	s, rdb, _ := newStore(t)
	var c counter
	rdb.AddHook(&c)
	good := tier.Write{Key: "good", Value: []byte("v")}
	tests := []struct {
		name string
		w    tier.Write
		f    tier.Feed
		want string // in the error
	}{
		{"unknown condition", tier.Write{Key: "k", If: tier.IfSeq + 1}, tier.Feed{}, "unknown condition"},
		{"IfSeq without Seq", tier.Write{Key: "k", If: tier.IfSeq}, tier.Feed{}, "IfSeq without Seq"},
		{"KeepTTL with Always", tier.Write{Key: "k", KeepTTL: true}, tier.Feed{}, "KeepTTL"},
		{"KeepTTL with IfAbsent", tier.Write{Key: "k", If: tier.IfAbsent, KeepTTL: true}, tier.Feed{}, "KeepTTL"},
		{"KeepTTL with IfNewer", tier.Write{Key: "k", If: tier.IfNewer, KeepTTL: true}, tier.Feed{}, "KeepTTL"},
		{"negative StampAt", tier.Write{Key: "k", If: tier.IfNewer, StampAt: -1}, tier.Feed{}, "StampAt"},
		{"Log without Feed.Log", tier.Write{Key: "k", Msg: []byte("m"), Log: []byte("e")}, tier.Feed{Channel: "ch", LogLen: 10}, "Feed.Log"},
		{"LogLen 0", tier.Write{Key: "k", Msg: []byte("m"), Log: []byte("e")}, tier.Feed{Channel: "ch", Log: "log"}, "LogLen"},
		{"LogLen negative", tier.Write{Key: "k", Msg: []byte("m"), Log: []byte("e")}, tier.Feed{Channel: "ch", Log: "log", LogLen: -1}, "LogLen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, ws := range [][]tier.Write{{tt.w}, {good, tt.w}} {
				stored, err := s.Write(t.Context(), ws, tt.f)
				if err == nil || stored != nil || !strings.HasPrefix(err.Error(), "l2: write ") || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("Write(%d writes) = %v, %v; want nil and an l2 error about %s", len(ws), stored, err, tt.want)
				}
				if len(ws) > 1 && err != nil && !strings.Contains(err.Error(), `"k"`) {
					t.Errorf("Write of a batch: error %q does not name the bad write's key", err)
				}
			}
		})
	}
	if c.String() != "commands [], pipelines []" {
		t.Errorf("sent %v; want nothing", &c)
	}
	// Feed.Log and LogLen matter only to a write with Log.
	if stored, err := s.Write(t.Context(), []tier.Write{good}, tier.Feed{Log: "log"}); err != nil || !stored[0] {
		t.Errorf("Write without Log, Feed.LogLen 0 = %v, %v; want [true], nil", stored, err)
	}
}

func TestEmptyInputsMakeNoRoundTrip(t *testing.T) {
	s, rdb, _ := newStore(t)
	var c counter
	rdb.AddHook(&c)
	ctx := t.Context()
	got, err := s.Get(ctx, nil)
	if err != nil || len(got) != 0 {
		t.Errorf("GetMany(nil) = %v, %v; want no values, nil", got, err)
	}
	if got, err := s.Get(ctx, []string{}); err != nil || len(got) != 0 {
		t.Errorf("GetMany([]) = %v, %v; want no values, nil", got, err)
	}
	if stored, err := setManyIfAbsent(ctx, s, nil, nil, nil); err != nil || len(stored) != 0 {
		t.Errorf("SetManyIfAbsent(nil) = %v, %v; want no results, nil", stored, err)
	}
	if stored, err := s.Write(ctx, []tier.Write{}, tier.Feed{Channel: "ch"}); err != nil || len(stored) != 0 {
		t.Errorf("Write([]) = %v, %v; want no results, nil", stored, err)
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
		{"SetManyIfAbsent", func() error { _, err := setManyIfAbsent(ctx, s, keys, values, ttls); return err },
			"commands [], pipelines [[set set set set set]]"},
		{"GetMany", func() error { _, err := s.Get(ctx, keys); return err },
			"commands [mget], pipelines []"},
		{"Get of one key", func() error { _, err := s.Get(ctx, keys[:1]); return err },
			"commands [get], pipelines []"},
		{"Write of one", func() error { return set(ctx, s, "a", nil, time.Minute) },
			"commands [set], pipelines []"},
		{"Write of one, if absent", func() error { _, err := setIfAbsent(ctx, s, "a", nil, 0); return err },
			"commands [set], pipelines []"},
		{"Write of plain writes, messages with no channel", func() error {
			_, err := s.Write(ctx, []tier.Write{{Key: "a", Msg: []byte("m")}, {Key: "f", If: tier.IfAbsent, Else: []byte("m")}}, tier.Feed{})
			return err
		}, "commands [], pipelines [[set set]]"},
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

func TestCanceledContext(t *testing.T) {
	s, _, _ := newStore(t)
	if err := set(t.Context(), s, "k", []byte("v"), time.Minute); err != nil {
		t.Fatalf("Set: %v", err) // and the pool has a connection
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name string
		run  func() error
	}{
		{"Get", func() error { _, _, err := get(ctx, s, "k"); return err }},
		{"Set", func() error { return set(ctx, s, "k", []byte("v"), 0) }},
		{"SetIfAbsent", func() error { _, err := setIfAbsent(ctx, s, "new", []byte("v"), 0); return err }},
		{"GetMany", func() error { _, err := s.Get(ctx, []string{"k", "x"}); return err }},
		{"SetManyIfAbsent", func() error {
			_, err := setManyIfAbsent(ctx, s, []string{"new"}, [][]byte{nil}, []time.Duration{0})
			return err
		}},
		{"CompareAndSet", func() error { _, err := compareAndSet(ctx, s, "k", []byte("v"), nil, 0); return err }},
		{"SetAndPublish", func() error { return setAndPublish(ctx, s, "k", nil, 0, "ch", nil) }},
		{"SetPublishAndLog", func() error { return setPublishAndLog(ctx, s, "k", nil, 0, "ch", nil, "log", nil, 10) }},
		{"OpenLog", func() error { _, err := openLog(ctx, s, "log"); return err }},
		{"ReadLog", func() error { _, _, _, err := readLog(ctx, s, "log", "", 10); return err }},
		{"TakeLeases", func() error {
			_, _, _, _, err := takeLeases(ctx, s, []string{"l"}, []string{"g:l"}, "tok", time.Minute)
			return err
		}},
		{"ExtendLeases", func() error { _, err := s.ExtendLeases(ctx, []string{"l"}, "tok", time.Minute); return err }},
		{"ReleaseLeases", func() error { return releaseLeases(ctx, s, []string{"l"}, "tok", "ch", nil) }},
		{"FillAndRelease", func() error {
			_, err := fillAndRelease(ctx, s, "k", nil, []byte("v"), time.Minute, "l", "tok", "ch", nil, nil)
			return err
		}},
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
	if got, ok, err := get(t.Context(), s, "k"); err != nil || !ok || string(got) != "v" {
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
	_, _, err = get(t.Context(), s, "user:1")
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

// messages streams what a subscription receives.
type messages struct {
	ch   chan string   // payloads, buffered for all that are expected
	done chan struct{} // closed when the stream ends
	err  error         // why it ended; read after done is closed
}

// receive streams the messages ps receives, up to n, in the background.
// The goroutine ends after n messages, or when ps is closed.
func receive(ps *redis.PubSub, n int) *messages {
	m := &messages{ch: make(chan string, n), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for range n {
			msg, err := ps.ReceiveMessage(context.Background())
			if err != nil {
				m.err = err
				return
			}
			m.ch <- msg.Payload
		}
	}()
	return m
}

// next returns the next message, or an error if none comes within 10s.
func (m *messages) next() (string, error) {
	select {
	case p := <-m.ch:
		return p, nil
	case <-m.done:
		select {
		case p := <-m.ch:
			return p, nil
		default:
			return "", fmt.Errorf("subscription ended: %v", m.err)
		}
	case <-time.After(10 * time.Second):
		return "", errors.New("no message within 10s")
	}
}

// wait returns the next n messages that m streams, or fails t if they do
// not all arrive in time.
func wait(t *testing.T, m *messages, n int) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		p, err := m.next()
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(got), n, err)
		}
		got = append(got, p)
	}
	return got
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

// checkOrder checks that messages about key arrive in the order of its
// writes. In each of rounds rounds, writers goroutines released together
// each make one write of key through s with SetAndPublish, whose message is
// the value written. After each round, once its messages are in, the last
// one must be what Redis holds: the writes raced, so a write and its
// message made in two steps would sometimes leave a stale last message.
// Each writer's messages must also arrive in the order it wrote.
func checkOrder(t *testing.T, s *l2.Store, ps *redis.PubSub, key, channel string, writers, rounds int) {
	t.Helper()
	ctx := t.Context()
	msgs := receive(ps, writers*rounds)
	var got []string
	for round := range rounds {
		start := make(chan struct{})
		errs := make(chan error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				<-start
				v := []byte(fmt.Sprintf("w%d-%03d", w, round))
				if err := setAndPublish(ctx, s, key, v, time.Minute, channel, v); err != nil {
					errs <- fmt.Errorf("writer %d, round %d: %w", w, round, err)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}

		for len(got) < (round+1)*writers {
			m, err := msgs.next()
			if err != nil {
				t.Fatalf("round %d, after %d messages: %v", round, len(got), err)
			}
			got = append(got, m)
		}
		final, ok, err := get(ctx, s, key)
		if err != nil {
			t.Fatalf("round %d: Get: %v", round, err)
		}
		if last := got[len(got)-1]; !ok || string(final) != last {
			t.Fatalf("round %d: last message is %q, but Redis holds %q (found %v)", round, last, final, ok)
		}
	}

	// Each writer's sets arrive in the order it made them.
	prev := make(map[string]string)
	for _, m := range got {
		w, _, _ := strings.Cut(m, "-")
		if m <= prev[w] {
			t.Fatalf("message %q after %q: out of the writer's order", m, prev[w])
		}
		prev[w] = m
	}
}

func TestSetAndPublishOrder(t *testing.T) {
	for run := range 3 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			s, _, _ := newStore(t)
			channel := redistest.Prefix(t) + ":ch"
			ps := subscribe(t, srv.Client(t), channel)
			checkOrder(t, s, ps, "k", channel, 8, 200)
		})
	}
}

func TestSetAndPublish(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	channel := prefix + "ch"
	ps := subscribe(t, srv.Client(t), channel)
	msgs := receive(ps, 2)

	if err := setAndPublish(ctx, s, "k", []byte("v1"), 10*time.Second, channel, []byte("m1")); err != nil {
		t.Fatalf("SetAndPublish: %v", err)
	}
	if pttl, err := rdb.PTTL(ctx, prefix+"k").Result(); err != nil || pttl <= 8*time.Second || pttl > 10*time.Second {
		t.Errorf("PTTL after SetAndPublish(ttl 10s) = %v, %v; want in (8s, 10s]", pttl, err)
	}
	if err := setAndPublish(ctx, s, "k", []byte("v2"), 0, channel, []byte("m2")); err != nil {
		t.Fatalf("SetAndPublish: %v", err)
	}
	if pttl, err := rdb.PTTL(ctx, prefix+"k").Result(); err != nil || pttl != -1 {
		t.Errorf("PTTL after SetAndPublish(ttl 0) = %v, %v; want -1, nil", pttl, err)
	}
	if got, ok, err := get(ctx, s, "k"); err != nil || !ok || string(got) != "v2" {
		t.Errorf("Get = %q, %v, %v; want \"v2\", true, nil", got, ok, err)
	}
	if got, want := wait(t, msgs, 2), []string{"m1", "m2"}; !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
}

func TestScriptReloaded(t *testing.T) {
	// After SCRIPT FLUSH, EVALSHA fails with NOSCRIPT and the Store falls
	// back to EVAL, for every one of its scripts.
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	for i := range 2 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
		if err := setAndPublish(ctx, s, "k", []byte("v"), 0, prefix+"ch", []byte("m")); err != nil {
			t.Errorf("SetAndPublish after SCRIPT FLUSH %d: %v", i, err)
		}
		if ok, err := compareAndSet(ctx, s, "k", []byte("v"), []byte("w"), 0); err != nil || !ok {
			t.Errorf("CompareAndSet after SCRIPT FLUSH %d = %v, %v; want true, nil", i, ok, err)
		}
		if ok, err := replaceAndPublish(ctx, s, "k", []byte("w"), []byte("v"), prefix+"ch", nil); err != nil || !ok {
			t.Errorf("ReplaceAndPublish after SCRIPT FLUSH %d = %v, %v; want true, nil", i, ok, err)
		}
		if taken, _, _, _, err := takeLeases(ctx, s, []string{"l"}, []string{"g:l"}, "tok", time.Minute); err != nil || !taken[0] {
			t.Errorf("TakeLeases after SCRIPT FLUSH %d = %v, %v; want [true], nil", i, taken, err)
		}
		if held, err := s.ExtendLeases(ctx, []string{"l"}, "tok", time.Minute); err != nil || !held[0] {
			t.Errorf("ExtendLeases after SCRIPT FLUSH %d = %v, %v; want [true], nil", i, held, err)
		}
		if err := releaseLeases(ctx, s, []string{"l"}, "tok", prefix+"ch", nil); err != nil {
			t.Errorf("ReleaseLeases after SCRIPT FLUSH %d: %v", i, err)
		}
		if ok, err := fillAndRelease(ctx, s, "k", []byte("v"), []byte("v"), time.Minute, "l", "tok", prefix+"ch", nil, nil); err != nil || !ok {
			t.Errorf("FillAndRelease after SCRIPT FLUSH %d = %v, %v; want true, nil", i, ok, err)
		}
		if !srv.Real() {
			continue
		}
		if _, err := openLog(ctx, s, "log"); err != nil {
			t.Errorf("OpenLog after SCRIPT FLUSH %d: %v", i, err)
		}
		if err := setPublishAndLog(ctx, s, "k", []byte("v"), 0, prefix+"ch", nil, "log", nil, 10); err != nil {
			t.Errorf("SetPublishAndLog after SCRIPT FLUSH %d: %v", i, err)
		}
		if _, _, _, err := readLog(ctx, s, "log", "", 10); err != nil {
			t.Errorf("ReadLog after SCRIPT FLUSH %d: %v", i, err)
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
	values[3] = []byte{} // an empty value is not a miss
	if _, err := setManyIfAbsent(ctx, s, keys, values, ttls); err != nil {
		t.Fatalf("SetManyIfAbsent: %v", err)
	}
	if len(m1.Keys()) == 0 || len(m2.Keys()) == 0 {
		t.Fatalf("keys per shard: %d and %d; want both used", len(m1.Keys()), len(m2.Keys()))
	}
	got, err := s.Get(ctx, append(keys, "missing"))
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	for i, v := range values {
		if !bytes.Equal(got[i], v) || got[i] == nil {
			t.Errorf("GetMany[%d]: got %q (nil %v), want %q", i, got[i], got[i] == nil, v)
		}
	}
	if got[len(keys)] != nil {
		t.Errorf("GetMany[missing]: got %q, want nil", got[len(keys)])
	}
	stored, err := setManyIfAbsent(ctx, s, append(keys, "new"), append(values, nil), append(ttls, 0))
	if err != nil {
		t.Fatalf("SetManyIfAbsent: %v", err)
	}
	if want := append(make([]bool, len(keys)), true); !slices.Equal(stored, want) {
		t.Errorf("SetManyIfAbsent: got %v, want %v", stored, want)
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

func TestNoGoroutinesLeft(t *testing.T) {
	// A Store starts no goroutines: once its client is closed, nothing of
	// it runs.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	s := l2.New(rdb, l2.Options{Prefix: redistest.Prefix(t) + ":"})
	ctx := t.Context()
	if _, err := setManyIfAbsent(ctx, s, []string{"a", "b"}, [][]byte{nil, nil}, []time.Duration{time.Minute, time.Minute}); err != nil {
		t.Fatalf("SetManyIfAbsent: %v", err)
	}
	if _, err := s.Get(ctx, []string{"a", "b", "c"}); err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	if err := setAndPublish(ctx, s, "a", nil, 0, redistest.Prefix(t), nil); err != nil {
		t.Fatalf("SetAndPublish: %v", err)
	}
	if srv.Real() {
		if err := setPublishAndLog(ctx, s, "a", nil, 0, redistest.Prefix(t), nil, "log", nil, 10); err != nil {
			t.Fatalf("SetPublishAndLog: %v", err)
		}
		if _, _, _, err := readLog(ctx, s, "log", "", 10); err != nil {
			t.Fatalf("ReadLog: %v", err)
		}
	}
	if err := rdb.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
