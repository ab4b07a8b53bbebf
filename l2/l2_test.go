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
	"github.com/hybridcache/hybridcache/l2"
	"github.com/hybridcache/hybridcache/tier"
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
	vs, err := s.Get(t.Context(), []string{"missing"})
	if err != nil || len(vs) != 1 || vs[0] != nil {
		t.Fatalf("Get(missing) = %q, %v; want [nil], nil", vs, err)
	}
}

func TestWriteGet(t *testing.T) {
	for _, value := range [][]byte{[]byte("hello"), {0, 1, 2, 255}, {}} {
		t.Run(fmt.Sprintf("%q", value), func(t *testing.T) {
			s, _, _ := newStore(t)
			ctx := t.Context()
			if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: value, TTL: time.Minute}}, tier.Feed{}); err != nil {
				t.Fatalf("Write: %v", err)
			}
			vs, err := s.Get(ctx, []string{"k"})
			if err != nil || vs[0] == nil {
				t.Fatalf("Get = %q, %v; want [%q], nil", vs, err, value)
			}
			if !bytes.Equal(vs[0], value) {
				t.Errorf("Get: got %q, want %q", vs[0], value)
			}
		})
	}
}

func TestWriteTTL(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	const ttl = 10 * time.Second
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), TTL: ttl}}, tier.Feed{}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	pttl, err := rdb.PTTL(ctx, prefix+"k").Result()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	if pttl <= ttl-2*time.Second || pttl > ttl {
		t.Errorf("PTTL: got %v, want in (%v, %v]", pttl, ttl-2*time.Second, ttl)
	}

	// A ttl that is not whole seconds goes as milliseconds.
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), TTL: 1500 * time.Millisecond}}, tier.Feed{}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	pttl, err = rdb.PTTL(ctx, prefix+"k").Result()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	if pttl <= 500*time.Millisecond || pttl > 1500*time.Millisecond {
		t.Errorf("PTTL: got %v, want in (500ms, 1.5s]", pttl)
	}
}

func TestWriteNoExpiry(t *testing.T) {
	// A ttl of zero or less means no expiry, even over a key that had one
	// (go-redis would read a negative expiration as KEEPTTL).
	for _, ttl := range []time.Duration{0, -1, -time.Second} {
		t.Run(ttl.String(), func(t *testing.T) {
			s, rdb, prefix := newStore(t)
			ctx := t.Context()
			if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("old"), TTL: time.Minute}}, tier.Feed{}); err != nil {
				t.Fatalf("Write: %v", err)
			}
			if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("new"), TTL: ttl}}, tier.Feed{}); err != nil {
				t.Fatalf("Write: %v", err)
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

func TestWriteIfAbsent(t *testing.T) {
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
		stored, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte(tt.value), TTL: tt.ttl, If: tier.IfAbsent}}, tier.Feed{})
		if err != nil || stored[0] != tt.wantStored {
			t.Errorf("Write(%q) IfAbsent = %v, %v; want [%v], nil", tt.value, stored, err, tt.wantStored)
		}
		vs, err := s.Get(ctx, []string{"k"})
		if err != nil || string(vs[0]) != tt.wantValue {
			t.Errorf("Get after Write(%q) IfAbsent = %q, %v; want [%q], nil", tt.value, vs, err, tt.wantValue)
		}
		pttl, err := rdb.PTTL(ctx, prefix+"k").Result()
		if err != nil || pttl <= tt.wantPTTL-2*time.Second || pttl > tt.wantPTTL {
			t.Errorf("PTTL after Write(%q) IfAbsent = %v, %v; want in (%v, %v]", tt.value, pttl, err, tt.wantPTTL-2*time.Second, tt.wantPTTL)
		}
	}

	// ttl 0 or less: no expiry.
	for _, ttl := range []time.Duration{0, -time.Second} {
		key := "noexp" + ttl.String()
		if stored, err := s.Write(ctx, []tier.Write{{Key: key, Value: []byte("v"), TTL: ttl, If: tier.IfAbsent}},
			tier.Feed{}); err != nil || !stored[0] {
			t.Fatalf("Write(%s, TTL %v) IfAbsent = %v, %v; want [true], nil", key, ttl, stored, err)
		}
		if pttl, err := rdb.PTTL(ctx, prefix+key).Result(); err != nil || pttl != -1 {
			t.Errorf("PTTL after a Write IfAbsent with TTL %v = %v, %v; want -1, nil", ttl, pttl, err)
		}
	}

	// A deleted key can be filled again.
	if err := rdb.Del(ctx, prefix+"k").Err(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if stored, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("again"), TTL: time.Minute, If: tier.IfAbsent}},
		tier.Feed{}); err != nil || !stored[0] {
		t.Errorf("Write IfAbsent after DEL = %v, %v; want [true], nil", stored, err)
	}
}

func TestPrefix(t *testing.T) {
	rdb := srv.Client(t)
	ctx := t.Context()
	base := redistest.Prefix(t)
	s := l2.New(rdb, l2.Options{Prefix: base + ":app:"})
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute}}, tier.Feed{}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	raw, err := rdb.Get(ctx, base+":app:k").Result()
	if err != nil || raw != "v" {
		t.Errorf("raw GET %s:app:k = %q, %v; want \"v\", nil", base, raw, err)
	}

	// A Store without the prefix sees other keys.
	bare := l2.New(rdb, l2.Options{})
	if vs, err := bare.Get(ctx, []string{"k"}); err != nil || vs[0] != nil {
		t.Errorf("unprefixed Get(k) = %q, %v; want [nil], nil", vs, err)
	}
	vs, err := bare.Get(ctx, []string{base + ":app:k"})
	if err != nil || string(vs[0]) != "v" {
		t.Errorf("unprefixed Get(full key) = %q, %v; want [\"v\"], nil", vs, err)
	}

	// Batches and scripts use the prefix too.
	if _, err := s.Write(ctx, []tier.Write{{Key: "m", Value: []byte("mv"), If: tier.IfAbsent}}, tier.Feed{}); err != nil {
		t.Fatalf("Write IfAbsent: %v", err)
	}
	if _, err := s.Write(ctx, []tier.Write{{Key: "p", Value: []byte("pv"), Msg: []byte("msg")}}, tier.Feed{Channel: base + ":ch"}); err != nil {
		t.Fatalf("Write with Msg: %v", err)
	}
	for key, want := range map[string]string{"m": "mv", "p": "pv"} {
		if raw, err := rdb.Get(ctx, base+":app:"+key).Result(); err != nil || raw != want {
			t.Errorf("raw GET of %q = %q, %v; want %q, nil", key, raw, err, want)
		}
	}
	if stored, err := s.Write(ctx, []tier.Write{{Key: "p", Value: []byte("pv2"), If: tier.IfEqual, Old: []byte("pv")}},
		tier.Feed{}); err != nil || !stored[0] {
		t.Fatalf("Write IfEqual = %v, %v; want [true], nil", stored, err)
	}
	vals, err := s.Get(ctx, []string{"m", "p"})
	if err != nil || string(vals[0]) != "mv" || string(vals[1]) != "pv2" {
		t.Errorf("Get(m, p) = %q, %v; want [mv pv2], nil", vals, err)
	}
}

func TestGetBatch(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := t.Context()
	if _, err := s.Write(ctx, []tier.Write{
		{Key: "a", Value: []byte("A"), TTL: time.Minute, If: tier.IfAbsent},
		{Key: "b", Value: []byte("B"), TTL: time.Minute, If: tier.IfAbsent},
		{Key: "empty", Value: []byte{}, TTL: time.Minute, If: tier.IfAbsent},
	}, tier.Feed{}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	keys := []string{"b", "missing", "a", "b", "empty", "missing", "a"}
	want := [][]byte{[]byte("B"), nil, []byte("A"), []byte("B"), {}, nil, []byte("A")}
	got, err := s.Get(ctx, keys)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("Get: got %d values, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) || (got[i] == nil) != (want[i] == nil) {
			t.Errorf("Get[%d] (%s): got %q (nil %v), want %q (nil %v)",
				i, keys[i], got[i], got[i] == nil, want[i], want[i] == nil)
		}
	}
}

func TestWriteIfAbsentBatch(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	if _, err := s.Write(ctx, []tier.Write{{Key: "old", Value: []byte("kept")}}, tier.Feed{}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	stored, err := s.Write(ctx, []tier.Write{
		{Key: "a", Value: []byte("A"), TTL: 10 * time.Second, If: tier.IfAbsent},
		{Key: "old", Value: []byte("new"), TTL: time.Minute, If: tier.IfAbsent},
		{Key: "b", Value: []byte("B"), If: tier.IfAbsent},
		{Key: "a", Value: []byte("A2"), TTL: time.Minute, If: tier.IfAbsent},
	}, tier.Feed{})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if want := []bool{true, false, true, false}; !slices.Equal(stored, want) {
		t.Errorf("stored: got %v, want %v", stored, want)
	}
	for key, want := range map[string]string{"a": "A", "old": "kept", "b": "B"} {
		vs, err := s.Get(ctx, []string{key})
		if err != nil || string(vs[0]) != want {
			t.Errorf("Get(%s) = %q, %v; want [%q], nil", key, vs, err, want)
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
		t.Errorf("Get(nil) = %v, %v; want no values, nil", got, err)
	}
	if got, err := s.Get(ctx, []string{}); err != nil || len(got) != 0 {
		t.Errorf("Get([]) = %v, %v; want no values, nil", got, err)
	}
	if stored, err := s.Write(ctx, []tier.Write{}, tier.Feed{}); err != nil || len(stored) != 0 {
		t.Errorf("Write([]) = %v, %v; want no results, nil", stored, err)
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
	var ifAbsent []tier.Write
	for i, k := range keys {
		ifAbsent = append(ifAbsent, tier.Write{Key: k, Value: []byte(fmt.Sprint(i + 1)), TTL: time.Minute, If: tier.IfAbsent})
	}

	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"Write of many, if absent", func() error { _, err := s.Write(ctx, ifAbsent, tier.Feed{}); return err },
			"commands [], pipelines [[set set set set set]]"},
		{"Get of many keys", func() error { _, err := s.Get(ctx, keys); return err },
			"commands [mget], pipelines []"},
		{"Get of one key", func() error { _, err := s.Get(ctx, keys[:1]); return err },
			"commands [get], pipelines []"},
		{"Write of one", func() error {
			_, err := s.Write(ctx, []tier.Write{{Key: "a", TTL: time.Minute}}, tier.Feed{})
			return err
		},
			"commands [set], pipelines []"},
		{"Write of one, if absent", func() error {
			_, err := s.Write(ctx, []tier.Write{{Key: "a", If: tier.IfAbsent}}, tier.Feed{})
			return err
		},
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
	if _, err := s.Write(t.Context(), []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute}}, tier.Feed{}); err != nil {
		t.Fatalf("Write: %v", err) // and the pool has a connection
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name string
		run  func() error
	}{
		{"Get", func() error { _, err := s.Get(ctx, []string{"k"}); return err }},
		{"Write", func() error {
			_, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v")}}, tier.Feed{})
			return err
		}},
		{"Write IfAbsent", func() error {
			_, err := s.Write(ctx, []tier.Write{{Key: "new", Value: []byte("v"), If: tier.IfAbsent}}, tier.Feed{})
			return err
		}},
		{"Get of two keys", func() error { _, err := s.Get(ctx, []string{"k", "x"}); return err }},
		{"Write IfAbsent of no value", func() error {
			_, err := s.Write(ctx, []tier.Write{{Key: "new", If: tier.IfAbsent}}, tier.Feed{})
			return err
		}},
		{"Write IfEqual", func() error {
			_, err := s.Write(ctx, []tier.Write{{Key: "k", If: tier.IfEqual, Old: []byte("v")}}, tier.Feed{})
			return err
		}},
		{"Write on a channel", func() error { _, err := s.Write(ctx, []tier.Write{{Key: "k"}}, tier.Feed{Channel: "ch"}); return err }},
		{"Write with Log", func() error {
			_, err := s.Write(ctx, []tier.Write{{Key: "k", Msg: []byte{}, Log: []byte{}}}, tier.Feed{Channel: "ch", Log: "log", LogLen: 10})
			return err
		}},
		{"ReadLog opening the log", func() error { _, err := s.ReadLog(ctx, "log", "", 0); return err }},
		{"ReadLog", func() error { _, err := s.ReadLog(ctx, "log", "0-0", 10); return err }},
		{"TakeLeases", func() error {
			_, err := s.TakeLeases(ctx, []string{"l"}, []string{"g:l"}, "tok", time.Minute)
			return err
		}},
		{"ExtendLeases", func() error { _, err := s.ExtendLeases(ctx, []string{"l"}, "tok", time.Minute); return err }},
		{"ReleaseLeases", func() error { return s.ReleaseLeases(ctx, []string{"l"}, "tok", nil, tier.Feed{Channel: "ch"}) }},
		{"Write with Lease", func() error {
			_, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute, If: tier.IfAbsent,
				Lease: "l", Token: "tok"}}, tier.Feed{Channel: "ch"})
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
	if vs, err := s.Get(t.Context(), []string{"k"}); err != nil || string(vs[0]) != "v" {
		t.Errorf("Get after canceled calls = %q, %v; want [\"v\"], nil", vs, err)
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
	_, err = s.Get(t.Context(), []string{"user:1"})
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
// each make one write of key through s, whose message (Msg) is
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
				if _, err := s.Write(ctx, []tier.Write{{Key: key, Value: v, TTL: time.Minute, Msg: v}}, tier.Feed{Channel: channel}); err != nil {
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
		final, err := s.Get(ctx, []string{key})
		if err != nil {
			t.Fatalf("round %d: Get: %v", round, err)
		}
		if last := got[len(got)-1]; final[0] == nil || string(final[0]) != last {
			t.Fatalf("round %d: last message is %q, but Redis holds %q (found %v)", round, last, final[0], final[0] != nil)
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

func TestWriteAnnouncedOrder(t *testing.T) {
	for run := range 3 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			s, _, _ := newStore(t)
			channel := redistest.Prefix(t) + ":ch"
			ps := subscribe(t, srv.Client(t), channel)
			checkOrder(t, s, ps, "k", channel, 8, 200)
		})
	}
}

func TestWriteAnnounced(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	channel := prefix + "ch"
	ps := subscribe(t, srv.Client(t), channel)
	msgs := receive(ps, 2)

	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v1"), TTL: 10 * time.Second, Msg: []byte("m1")}},
		tier.Feed{Channel: channel}); err != nil {
		t.Fatalf("Write with Msg: %v", err)
	}
	if pttl, err := rdb.PTTL(ctx, prefix+"k").Result(); err != nil || pttl <= 8*time.Second || pttl > 10*time.Second {
		t.Errorf("PTTL after a Write with Msg, TTL 10s = %v, %v; want in (8s, 10s]", pttl, err)
	}
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v2"), Msg: []byte("m2")}}, tier.Feed{Channel: channel}); err != nil {
		t.Fatalf("Write with Msg: %v", err)
	}
	if pttl, err := rdb.PTTL(ctx, prefix+"k").Result(); err != nil || pttl != -1 {
		t.Errorf("PTTL after a Write with Msg, TTL 0 = %v, %v; want -1, nil", pttl, err)
	}
	if vs, err := s.Get(ctx, []string{"k"}); err != nil || string(vs[0]) != "v2" {
		t.Errorf("Get = %q, %v; want [\"v2\"], nil", vs, err)
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
		if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), Msg: []byte("m")}}, tier.Feed{Channel: prefix + "ch"}); err != nil {
			t.Errorf("Write with Msg after SCRIPT FLUSH %d: %v", i, err)
		}
		if stored, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("w"), If: tier.IfEqual, Old: []byte("v")}},
			tier.Feed{}); err != nil || !stored[0] {
			t.Errorf("Write IfEqual after SCRIPT FLUSH %d = %v, %v; want [true], nil", i, stored, err)
		}
		if stored, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), If: tier.IfEqual, Old: []byte("w"),
			KeepTTL: true}}, tier.Feed{Channel: prefix + "ch"}); err != nil || !stored[0] {
			t.Errorf("Write IfEqual, KeepTTL, on a channel after SCRIPT FLUSH %d = %v, %v; want [true], nil", i, stored, err)
		}
		if ls, err := s.TakeLeases(ctx, []string{"l"}, []string{"g:l"}, "tok", time.Minute); err != nil || !ls[0].Taken {
			t.Errorf("TakeLeases after SCRIPT FLUSH %d = %v, %v; want [true], nil", i, takenOf(ls), err)
		}
		if held, err := s.ExtendLeases(ctx, []string{"l"}, "tok", time.Minute); err != nil || !held[0] {
			t.Errorf("ExtendLeases after SCRIPT FLUSH %d = %v, %v; want [true], nil", i, held, err)
		}
		if err := s.ReleaseLeases(ctx, []string{"l"}, "tok", nil, tier.Feed{Channel: prefix + "ch"}); err != nil {
			t.Errorf("ReleaseLeases after SCRIPT FLUSH %d: %v", i, err)
		}
		if stored, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute, If: tier.IfEqual,
			Old: []byte("v"), Lease: "l", Token: "tok"}}, tier.Feed{Channel: prefix + "ch"}); err != nil || !stored[0] {
			t.Errorf("Write with Lease after SCRIPT FLUSH %d = %v, %v; want [true], nil", i, stored, err)
		}
		if !srv.Real() {
			continue
		}
		if _, err := s.ReadLog(ctx, "log", "", 0); err != nil {
			t.Errorf("ReadLog opening the log after SCRIPT FLUSH %d: %v", i, err)
		}
		if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), Msg: []byte{}, Log: []byte{}}},
			tier.Feed{Channel: prefix + "ch", Log: "log", LogLen: 10}); err != nil {
			t.Errorf("Write with Log after SCRIPT FLUSH %d: %v", i, err)
		}
		if _, err := s.ReadLog(ctx, "log", "0-0", 10); err != nil {
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
	var ws []tier.Write
	for i := range 20 {
		keys = append(keys, fmt.Sprint("k", i))
		ws = append(ws, tier.Write{Key: keys[i], Value: []byte(fmt.Sprint("v", i)), TTL: time.Minute, If: tier.IfAbsent})
	}
	ws[3].Value = []byte{} // an empty value is not a miss
	if _, err := s.Write(ctx, ws, tier.Feed{}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if len(m1.Keys()) == 0 || len(m2.Keys()) == 0 {
		t.Fatalf("keys per shard: %d and %d; want both used", len(m1.Keys()), len(m2.Keys()))
	}
	got, err := s.Get(ctx, append(keys, "missing"))
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	for i, w := range ws {
		if !bytes.Equal(got[i], w.Value) || got[i] == nil {
			t.Errorf("Get[%d]: got %q (nil %v), want %q", i, got[i], got[i] == nil, w.Value)
		}
	}
	if got[len(keys)] != nil {
		t.Errorf("Get[missing]: got %q, want nil", got[len(keys)])
	}
	stored, err := s.Write(ctx, append(ws, tier.Write{Key: "new", If: tier.IfAbsent}), tier.Feed{})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if want := append(make([]bool, len(keys)), true); !slices.Equal(stored, want) {
		t.Errorf("Write: got %v, want %v", stored, want)
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
	if _, err := s.Write(ctx, []tier.Write{
		{Key: "a", TTL: time.Minute, If: tier.IfAbsent},
		{Key: "b", TTL: time.Minute, If: tier.IfAbsent},
	}, tier.Feed{}); err != nil {
		t.Fatalf("Write IfAbsent: %v", err)
	}
	if _, err := s.Get(ctx, []string{"a", "b", "c"}); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if _, err := s.Write(ctx, []tier.Write{{Key: "a"}}, tier.Feed{Channel: redistest.Prefix(t)}); err != nil {
		t.Fatalf("Write on a channel: %v", err)
	}
	if srv.Real() {
		if _, err := s.Write(ctx, []tier.Write{{Key: "a", Msg: []byte{}, Log: []byte{}}},
			tier.Feed{Channel: redistest.Prefix(t), Log: "log", LogLen: 10}); err != nil {
			t.Fatalf("Write with Log: %v", err)
		}
		if _, err := s.ReadLog(ctx, "log", "0-0", 10); err != nil {
			t.Fatalf("ReadLog: %v", err)
		}
	}
	if err := rdb.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
