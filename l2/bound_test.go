package l2_test

// Tests of the Store's per-call bounds (call.go): which deadline each call
// gets, that it holds against a dead address whatever the client's retry
// settings and against a stalled server when the client honours ctx
// deadlines, and what Info().ReadBound reports.

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
	"github.com/hybridcache/hybridcache/tier"
)

// deadlines is a go-redis hook that records the ctx deadline of every
// command and pipeline a client sends (the zero time for none).
type deadlines struct {
	mu  sync.Mutex
	got []time.Time
}

func (d *deadlines) record(ctx context.Context) {
	dl, _ := ctx.Deadline()
	d.mu.Lock()
	d.got = append(d.got, dl)
	d.mu.Unlock()
}

// take returns the deadlines recorded since the last take.
func (d *deadlines) take() []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	got := d.got
	d.got = nil
	return got
}

func (d *deadlines) DialHook(next redis.DialHook) redis.DialHook { return next }

func (d *deadlines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		d.record(ctx)
		return next(ctx, cmd)
	}
}

func (d *deadlines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		d.record(ctx)
		return next(ctx, cmds)
	}
}

// op is one call of a Store, a read or a write.
type op struct {
	name string
	read bool
	run  func(ctx context.Context, s *l2.Store) error
}

// ops returns a call of each kind a Store makes: reads of one key and of
// more, writes of each condition, announced, logged and releasing a lease,
// the lease calls, and the log's.
func ops() []op {
	return []op{
		{"Get of one key", true, func(ctx context.Context, s *l2.Store) error { _, err := s.Get(ctx, []string{"k"}); return err }},
		{"Get of two keys", true, func(ctx context.Context, s *l2.Store) error { _, err := s.Get(ctx, []string{"k", "x"}); return err }},
		{"Write", false, func(ctx context.Context, s *l2.Store) error {
			_, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute}}, tier.Feed{})
			return err
		}},
		{"Write IfAbsent", false, func(ctx context.Context, s *l2.Store) error {
			_, err := s.Write(ctx, []tier.Write{{Key: "n", Value: []byte("v"), TTL: time.Minute, If: tier.IfAbsent}}, tier.Feed{})
			return err
		}},
		{"Write of two, IfAbsent", false, func(ctx context.Context, s *l2.Store) error {
			_, err := s.Write(ctx, []tier.Write{
				{Key: "n1", TTL: time.Minute, If: tier.IfAbsent},
				{Key: "n2", TTL: time.Minute, If: tier.IfAbsent},
			}, tier.Feed{})
			return err
		}},
		{"Write IfEqual", false, func(ctx context.Context, s *l2.Store) error {
			_, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute, If: tier.IfEqual, Old: []byte("v")}}, tier.Feed{})
			return err
		}},
		{"Write with Msg", false, func(ctx context.Context, s *l2.Store) error {
			_, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute, Msg: []byte("m")}}, tier.Feed{Channel: "t:l2:bound"})
			return err
		}},
		{"Write IfEqual, KeepTTL, on a channel", false, func(ctx context.Context, s *l2.Store) error {
			_, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), If: tier.IfEqual, Old: []byte("v"),
				KeepTTL: true}}, tier.Feed{Channel: "t:l2:bound"})
			return err
		}},
		{"Write IfNewer, on a channel", false, func(ctx context.Context, s *l2.Store) error {
			_, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute, If: tier.IfNewer}}, tier.Feed{Channel: "t:l2:bound"})
			return err
		}},
		{"Write IfNewer with Log", false, func(ctx context.Context, s *l2.Store) error {
			_, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute, If: tier.IfNewer,
				Msg: []byte{}, Log: []byte{}}}, tier.Feed{Channel: "t:l2:bound", Log: "log", LogLen: 10})
			return err
		}},
		{"Write with Log", false, func(ctx context.Context, s *l2.Store) error {
			_, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute, Msg: []byte{},
				Log: []byte{}}}, tier.Feed{Channel: "t:l2:bound", Log: "log", LogLen: 10})
			return err
		}},
		{"ReadLog opening the log", false, func(ctx context.Context, s *l2.Store) error { _, err := s.ReadLog(ctx, "log", "", 0); return err }},
		{"TakeLeases", false, func(ctx context.Context, s *l2.Store) error {
			_, err := s.TakeLeases(ctx, []string{"lease"}, []string{"g:lease"}, "tok", time.Minute)
			return err
		}},
		{"ExtendLeases", false, func(ctx context.Context, s *l2.Store) error {
			_, err := s.ExtendLeases(ctx, []string{"lease"}, "tok", time.Minute)
			return err
		}},
		{"ReleaseLeases", false, func(ctx context.Context, s *l2.Store) error {
			return s.ReleaseLeases(ctx, []string{"lease"}, "tok", nil, tier.Feed{Channel: "t:l2:bound"})
		}},
		{"Write with Lease", false, func(ctx context.Context, s *l2.Store) error {
			_, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute, If: tier.IfAbsent,
				Lease: "lease", Token: "tok"}}, tier.Feed{Channel: "t:l2:bound"})
			return err
		}},
		{"ReadLog", true, func(ctx context.Context, s *l2.Store) error {
			_, err := s.ReadLog(ctx, "log", "0-0", 10)
			return err
		}},
	}
}

// shareTick is how much sooner than its bound a call's deadline may be:
// calls that start within it share one deadline.
const shareTick = 5 * time.Millisecond

// logOp reports whether op is a call of the invalidation log, which needs a
// real redis-server.
func logOp(o op) bool { return strings.Contains(o.name, "Log") }

// TestBounds: each call runs under ReadTimeout or WriteTimeout (their
// defaults when zero, none when negative), or under the caller's deadline
// when that is sooner.
func TestBounds(t *testing.T) {
	const h = time.Hour
	tests := []struct {
		name        string
		o           l2.Options
		caller      time.Duration // the caller's own deadline; 0: none
		read, write time.Duration // the deadline a call gets; -1: none
		callers     bool          // the caller's deadline is kept
	}{
		{name: "defaults", read: 250 * time.Millisecond, write: time.Second},
		{name: "set", o: l2.Options{ReadTimeout: h, WriteTimeout: 2 * h}, read: h, write: 2 * h},
		{name: "none", o: l2.Options{ReadTimeout: -1, WriteTimeout: -1}, read: -1, write: -1},
		{name: "none, caller's", o: l2.Options{ReadTimeout: -1, WriteTimeout: -1}, caller: h, callers: true},
		{name: "caller's sooner", o: l2.Options{ReadTimeout: 2 * h, WriteTimeout: 3 * h}, caller: h, callers: true},
		{name: "caller's later", o: l2.Options{ReadTimeout: h, WriteTimeout: 2 * h}, caller: 3 * h, read: h, write: 2 * h},
	}
	rdb := srv.Client(t)
	var d deadlines
	rdb.AddHook(&d)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Prefix = redistest.Prefix(t) + ":"
			s := l2.New(rdb, tt.o)
			for _, op := range ops() {
				if logOp(op) && !srv.Real() {
					continue
				}
				ctx := t.Context()
				if tt.caller > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.caller)
					defer cancel()
				}
				d.take()
				before := time.Now()
				if err := op.run(ctx, s); err != nil {
					t.Fatalf("%s: %v", op.name, err)
				}
				after := time.Now()
				want := tt.write
				if op.read {
					want = tt.read
				}
				got := d.take()
				if len(got) == 0 {
					t.Fatalf("%s: no command seen", op.name)
				}
				for _, dl := range got {
					callerDL, _ := ctx.Deadline()
					switch {
					case tt.callers:
						if !dl.Equal(callerDL) {
							t.Errorf("%s: deadline %v, want the caller's, %v", op.name, dl, callerDL)
						}
					case want < 0:
						if !dl.IsZero() {
							t.Errorf("%s: deadline in %v, want none", op.name, dl.Sub(before))
						}
					case dl.Before(before.Add(want-shareTick)) || dl.After(after.Add(want)):
						t.Errorf("%s: deadline in %v, want %v", op.name, dl.Sub(before), want)
					}
				}
			}
		})
	}
}

// deadAddr returns a loopback address that refuses connections: a port
// that was listened on and closed.
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

// TestBoundDeadAddress: go-redis's default client (3 retries; 5 dial
// attempts 100 ms apart, each refused) takes about 1.7 s to give up on a
// dead address. Every call of a Store with 300 ms bounds ends by then
// instead, with an error wrapping context.DeadlineExceeded.
func TestBoundDeadAddress(t *testing.T) {
	const timeout = 300 * time.Millisecond
	rdb := redis.NewClient(&redis.Options{Addr: deadAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	s := l2.New(rdb, l2.Options{ReadTimeout: timeout, WriteTimeout: timeout})
	for _, op := range ops() {
		start := time.Now()
		err := op.run(t.Context(), s)
		d := time.Since(start)
		t.Logf("%s: %v after %v", op.name, err, d.Round(time.Millisecond))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: got %v, want an error wrapping context.DeadlineExceeded", op.name, err)
		}
		if d > 2*timeout {
			t.Errorf("%s took %v, want at most %v (bound %v)", op.name, d, 2*timeout, timeout)
		}
	}
}

// startOwn starts a redis-server for t alone, so that t may stop it, and
// stops it by pid when t ends. It skips t when no redis-server can be
// started here.
func startOwn(t *testing.T) *redistest.Server {
	t.Helper()
	own, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Close)
	own.NeedOwned(t)
	return own
}

// TestBoundStalledServer: the server stops (SIGSTOP) with a connection to
// it open. A client built with ContextTimeoutEnabled applies the Store's
// deadline to the socket, so reads and writes end by their bound; a client
// without it waits for its own ReadTimeout, and Info().ReadBound says so.
func TestBoundStalledServer(t *testing.T) {
	own := startOwn(t)
	const (
		timeout    = 300 * time.Millisecond
		clientRead = time.Second // the unbounded client's own ReadTimeout
	)
	o := l2.Options{Prefix: redistest.Prefix(t) + ":", ReadTimeout: timeout, WriteTimeout: timeout}
	newStore := func(ro *redis.Options) *l2.Store {
		ro.Addr = own.Addr
		rdb := redis.NewClient(ro)
		t.Cleanup(func() { rdb.Close() })
		s := l2.New(rdb, o)
		// Open a connection before the server stops.
		if _, err := s.Write(t.Context(), []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute}}, tier.Feed{}); err != nil {
			t.Fatalf("Write: %v", err)
		}
		return s
	}
	bounded := newStore(&redis.Options{ContextTimeoutEnabled: true})
	unbounded := newStore(&redis.Options{ReadTimeout: clientRead})
	if got := bounded.Info().ReadBound; got != timeout {
		t.Errorf("ReadBound with ContextTimeoutEnabled: got %v, want %v", got, timeout)
	}
	if got := unbounded.Info().ReadBound; got != clientRead {
		t.Errorf("ReadBound without ContextTimeoutEnabled: got %v, want the client's ReadTimeout %v", got, clientRead)
	}

	t.Cleanup(func() { _ = own.Signal(syscall.SIGCONT) })
	if err := own.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops()[:3] { // Get of one key, of two, Write
		start := time.Now()
		err := op.run(t.Context(), bounded)
		d := time.Since(start)
		t.Logf("stalled server, ContextTimeoutEnabled: %s: %v after %v", op.name, err, d.Round(time.Millisecond))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: got %v, want an error wrapping context.DeadlineExceeded", op.name, err)
		}
		if d > 2*timeout {
			t.Errorf("%s took %v, want at most %v (bound %v)", op.name, d, 2*timeout, timeout)
		}
	}
	start := time.Now()
	_, err := unbounded.Get(t.Context(), []string{"k"})
	d := time.Since(start)
	t.Logf("stalled server, without ContextTimeoutEnabled: Get: %v after %v", err, d.Round(time.Millisecond))
	if err == nil || d < clientRead-50*time.Millisecond || d > 3*clientRead {
		t.Errorf("Get: got %v after %v, want an error after about the client's ReadTimeout, %v", err, d, clientRead)
	}

	if err := own.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if vs, err := bounded.Get(t.Context(), []string{"k"}); err != nil || string(vs[0]) != "v" {
		t.Errorf("Get after SIGCONT = %q, %v; want [\"v\"], nil", vs, err)
	}
}

// withoutOptions hides a client behind the UniversalClient interface, so
// that New cannot see its options.
type withoutOptions struct{ redis.UniversalClient }

// embeddedClient is a single-node client inside another type.
type embeddedClient struct{ *redis.Client }

// TestReadBound: Info().ReadBound is Options.ReadTimeout for every kind of
// client that applies ctx deadlines to its sockets; else the client's own
// socket ReadTimeout (5 seconds by default), with one line of Advice when
// that is longer; 0 with a line of Advice when the client has none, or its
// options cannot be seen; and 0 without advice when the Store was asked for
// no bound.
func TestReadBound(t *testing.T) {
	const timeout = 300 * time.Millisecond
	addr := deadAddr(t) // never dialled
	closing := func(c redis.UniversalClient) redis.UniversalClient {
		t.Cleanup(func() { c.Close() })
		return c
	}
	client := func(o redis.Options) redis.UniversalClient {
		o.Addr = addr
		return closing(redis.NewClient(&o))
	}
	cluster := func(o redis.ClusterOptions) redis.UniversalClient {
		o.Addrs = []string{addr}
		return closing(redis.NewClusterClient(&o))
	}
	ring := func(o redis.RingOptions) redis.UniversalClient {
		o.Addrs = map[string]string{"a": addr}
		return closing(redis.NewRing(&o))
	}
	const def = 5 * time.Second // go-redis's default ReadTimeout
	tests := []struct {
		name   string
		rdb    redis.UniversalClient
		o      l2.Options
		want   time.Duration
		advice bool
	}{
		{"Client", client(redis.Options{}), l2.Options{ReadTimeout: timeout}, def, true},
		{"Client, shorter ReadTimeout", client(redis.Options{ReadTimeout: 100 * time.Millisecond}), l2.Options{ReadTimeout: timeout}, 100 * time.Millisecond, false},
		{"Client, no ReadTimeout", client(redis.Options{ReadTimeout: -1}), l2.Options{ReadTimeout: timeout}, 0, true},
		{"Client ContextTimeoutEnabled", client(redis.Options{ContextTimeoutEnabled: true}), l2.Options{ReadTimeout: timeout}, timeout, false},
		{"Client ContextTimeoutEnabled, default ReadTimeout", client(redis.Options{ContextTimeoutEnabled: true}), l2.Options{}, 250 * time.Millisecond, false},
		{"Client ContextTimeoutEnabled, no ReadTimeout", client(redis.Options{ContextTimeoutEnabled: true}), l2.Options{ReadTimeout: -1}, 0, false},
		{"Client ContextTimeoutEnabled, no client timeout", client(redis.Options{ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1}), l2.Options{ReadTimeout: timeout}, timeout, false},
		{"Client ContextTimeoutEnabled, no read deadlines", client(redis.Options{ContextTimeoutEnabled: true, ReadTimeout: -2}), l2.Options{ReadTimeout: timeout}, 0, true},
		{"Client ContextTimeoutEnabled, no write deadlines", client(redis.Options{ContextTimeoutEnabled: true, WriteTimeout: -2}), l2.Options{ReadTimeout: timeout}, def, true},
		{"embedded Client", embeddedClient{client(redis.Options{ContextTimeoutEnabled: true}).(*redis.Client)}, l2.Options{ReadTimeout: timeout}, timeout, false},
		{"UniversalClient", closing(redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true})), l2.Options{ReadTimeout: timeout}, timeout, false},
		{"hidden options", withoutOptions{client(redis.Options{ContextTimeoutEnabled: true})}, l2.Options{ReadTimeout: timeout}, 0, true},
		{"ClusterClient", cluster(redis.ClusterOptions{}), l2.Options{ReadTimeout: timeout}, def, true},
		{"ClusterClient ContextTimeoutEnabled", cluster(redis.ClusterOptions{ContextTimeoutEnabled: true}), l2.Options{ReadTimeout: timeout}, timeout, false},
		{"ClusterClient ContextTimeoutEnabled, no client timeout", cluster(redis.ClusterOptions{ContextTimeoutEnabled: true, ReadTimeout: -1}), l2.Options{ReadTimeout: timeout}, timeout, false},
		{"ClusterClient ContextTimeoutEnabled, no read deadlines", cluster(redis.ClusterOptions{ContextTimeoutEnabled: true, ReadTimeout: -2}), l2.Options{ReadTimeout: timeout}, 0, true},
		{"embedded ClusterClient", embedded{cluster(redis.ClusterOptions{ContextTimeoutEnabled: true}).(*redis.ClusterClient)}, l2.Options{ReadTimeout: timeout}, timeout, false},
		{"Ring", ring(redis.RingOptions{}), l2.Options{ReadTimeout: timeout}, def, true},
		{"Ring ContextTimeoutEnabled", ring(redis.RingOptions{ContextTimeoutEnabled: true}), l2.Options{ReadTimeout: timeout}, timeout, false},
		{"Ring ContextTimeoutEnabled, no client timeout", ring(redis.RingOptions{ContextTimeoutEnabled: true, ReadTimeout: -1}), l2.Options{ReadTimeout: timeout}, timeout, false},
		{"Ring ContextTimeoutEnabled, no read deadlines", ring(redis.RingOptions{ContextTimeoutEnabled: true, ReadTimeout: -2}), l2.Options{ReadTimeout: timeout}, 0, true},
	}
	for _, tt := range tests {
		info := l2.New(tt.rdb, tt.o).Info()
		if info.ReadBound != tt.want {
			t.Errorf("%s (%T): Info().ReadBound = %v, want %v", tt.name, tt.rdb, info.ReadBound, tt.want)
		}
		if got := len(info.Advice) == 1 && strings.Contains(info.Advice[0], "ContextTimeoutEnabled"); got != tt.advice || len(info.Advice) > 1 {
			t.Errorf("%s (%T): Info().Advice = %q, want a line naming ContextTimeoutEnabled: %v", tt.name, tt.rdb, info.Advice, tt.advice)
		}
		for _, a := range info.Advice {
			t.Logf("%s: advice: %s", tt.name, a)
		}
	}
}

// pause stops the shared server from answering mode ("WRITE" or "ALL")
// commands for d. When t ends it lifts the pause and waits until the server
// answers again, so later tests run unpaused.
func pause(t *testing.T, mode string, d time.Duration) {
	t.Helper()
	admin := srv.Client(t)
	if err := admin.Do(t.Context(), "CLIENT", "PAUSE", d.Milliseconds(), mode).Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	t.Cleanup(func() {
		// Under PAUSE ALL this too waits for the pause to end.
		if err := admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); err != nil {
			t.Errorf("CLIENT UNPAUSE: %v", err)
		}
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
	const timeout = 50 * time.Millisecond
	fast := l2.New(rdb, l2.Options{Prefix: prefix, ReadTimeout: timeout, WriteTimeout: timeout})
	slow := l2.New(rdb, l2.Options{Prefix: prefix, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	// Set up with the patient Store: a busy machine may take more than 50ms
	// to dial. This also loads the scripts, so no NOSCRIPT round trip is
	// measured.
	if _, err := slow.Write(t.Context(), []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute}},
		tier.Feed{Channel: prefix + "ch"}); err != nil {
		t.Fatalf("Write on a channel: %v", err)
	}
	if _, err := slow.Write(t.Context(), []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute, If: tier.IfEqual,
		Old: []byte("v")}}, tier.Feed{}); err != nil {
		t.Fatalf("Write IfEqual: %v", err)
	}
	if _, err := slow.Write(t.Context(), []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute, Msg: []byte{},
		Log: []byte{}}}, tier.Feed{Channel: prefix + "ch", Log: "log", LogLen: 10}); err != nil {
		t.Fatalf("Write with Log: %v", err)
	}
	if _, err := slow.ReadLog(t.Context(), "log", "", 0); err != nil {
		t.Fatalf("ReadLog opening the log: %v", err)
	}
	if _, err := slow.ReadLog(t.Context(), "log", "0-0", 10); err != nil {
		t.Fatalf("ReadLog: %v", err)
	}
	if _, err := slow.TakeLeases(t.Context(), []string{"lease"}, []string{"g:lease"}, "tok", time.Minute); err != nil {
		t.Fatalf("TakeLeases: %v", err)
	}
	if _, err := slow.ExtendLeases(t.Context(), []string{"lease"}, "tok", time.Minute); err != nil {
		t.Fatalf("ExtendLeases: %v", err)
	}
	if err := slow.ReleaseLeases(t.Context(), []string{"lease"}, "tok", nil, tier.Feed{Channel: prefix + "ch"}); err != nil {
		t.Fatalf("ReleaseLeases: %v", err)
	}
	if _, err := slow.Write(t.Context(), []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute,
		If: tier.IfAbsent, Lease: "lease", Token: "tok"}}, tier.Feed{Channel: prefix + "ch"}); err != nil {
		t.Fatalf("Write with Lease: %v", err)
	}
	callerDeadline := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		t.Cleanup(cancel)
		return ctx
	}

	type call struct {
		name string
		run  func() error
	}
	// check runs the calls one after another during one pause of the
	// server; each must fail with the deadline long before the pause ends.
	check := func(t *testing.T, mode string, calls []call) {
		const paused = 3 * time.Second
		pause(t, mode, paused)
		for _, c := range calls {
			start := time.Now()
			err := c.run()
			elapsed := time.Since(start)
			// go-redis reports a network timeout; the Store adds the
			// context's error.
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: got error %v, want one wrapping context.DeadlineExceeded", c.name, err)
			}
			// Without the timeout the call would succeed once the pause
			// ends. The bound is generous: the machine may be busy.
			if elapsed > paused/2 {
				t.Errorf("%s: failed after %v, want about %v (server paused for %v)", c.name, elapsed, timeout, paused)
			}
		}
	}

	t.Run("ALL", func(t *testing.T) {
		check(t, "ALL", []call{
			{"Get of one key", func() error { _, err := fast.Get(t.Context(), []string{"k"}); return err }},
			{"Get with an earlier caller deadline", func() error { _, err := slow.Get(callerDeadline(), []string{"k"}); return err }},
			{"Get of two keys", func() error { _, err := fast.Get(t.Context(), []string{"k", "x"}); return err }},
			{"ReadLog", func() error { _, err := fast.ReadLog(t.Context(), "log", "0-0", 10); return err }},
		})
	})
	t.Run("WRITE", func(t *testing.T) {
		check(t, "WRITE", []call{
			{"Write", func() error {
				_, err := fast.Write(t.Context(), []tier.Write{{Key: "k", Value: []byte("v2"), TTL: time.Minute}}, tier.Feed{})
				return err
			}},
			{"Write with an earlier caller deadline", func() error {
				_, err := slow.Write(callerDeadline(), []tier.Write{{Key: "k", Value: []byte("v2")}}, tier.Feed{})
				return err
			}},
			{"Write IfAbsent", func() error {
				_, err := fast.Write(t.Context(), []tier.Write{{Key: "new", Value: []byte("v"), TTL: time.Minute, If: tier.IfAbsent}}, tier.Feed{})
				return err
			}},
			{"Write of two, IfAbsent", func() error {
				_, err := fast.Write(t.Context(), []tier.Write{{Key: "n1", If: tier.IfAbsent}, {Key: "n2", If: tier.IfAbsent}}, tier.Feed{})
				return err
			}},
			{"Write IfEqual", func() error {
				_, err := fast.Write(t.Context(), []tier.Write{{Key: "k", Value: []byte("v2"), TTL: time.Minute,
					If: tier.IfEqual, Old: []byte("v")}}, tier.Feed{})
				return err
			}},
			{"Write with Msg", func() error {
				_, err := fast.Write(t.Context(), []tier.Write{{Key: "k", Value: []byte("v3"), TTL: time.Minute,
					Msg: []byte("m")}}, tier.Feed{Channel: prefix + "ch"})
				return err
			}},
			{"Write with Log", func() error {
				_, err := fast.Write(t.Context(), []tier.Write{{Key: "k", Value: []byte("v3"), TTL: time.Minute,
					Msg: []byte("m"), Log: []byte("e")}}, tier.Feed{Channel: prefix + "ch", Log: "log", LogLen: 10})
				return err
			}},
			{"ReadLog opening a log", func() error { _, err := fast.ReadLog(t.Context(), "log2", "", 0); return err }},
			{"TakeLeases", func() error {
				_, err := fast.TakeLeases(t.Context(), []string{"lease2"}, []string{"g:lease2"}, "tok", time.Minute)
				return err
			}},
			{"ExtendLeases", func() error {
				_, err := fast.ExtendLeases(t.Context(), []string{"lease"}, "tok", time.Minute)
				return err
			}},
			{"ReleaseLeases", func() error {
				return fast.ReleaseLeases(t.Context(), []string{"lease"}, "tok", []byte("m"), tier.Feed{Channel: prefix + "ch"})
			}},
			{"Write with Lease", func() error {
				_, err := fast.Write(t.Context(), []tier.Write{{Key: "k", Value: []byte("v4"), TTL: time.Minute,
					If: tier.IfEqual, Old: []byte("v"), Lease: "lease", Token: "tok"}}, tier.Feed{Channel: prefix + "ch"})
				return err
			}},
		})
		// Reads still work while only writes are paused.
		start := time.Now()
		if vs, err := slow.Get(t.Context(), []string{"k"}); err != nil || string(vs[0]) != "v" {
			t.Errorf("Get during CLIENT PAUSE WRITE = %q, %v; want [\"v\"], nil", vs, err)
		}
		if elapsed := time.Since(start); elapsed > time.Second {
			t.Errorf("Get during CLIENT PAUSE WRITE took %v, want it not paused", elapsed)
		}
	})
	// Once the pause is over, the client works again.
	if _, err := slow.Write(t.Context(), []tier.Write{{Key: "k", Value: []byte("after"), TTL: time.Minute}}, tier.Feed{}); err != nil {
		t.Errorf("Write after the pause: %v", err)
	}
}

// TestHooksSeeCalls: the Store sends every command through the client it
// was given, so that hooks added to that client (tracing, metrics), before
// New or after it, see every call: a Get of one key or more, and a write.
func TestHooksSeeCalls(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr}) // not ContextTimeoutEnabled
	t.Cleanup(func() { rdb.Close() })
	var before, after counter
	rdb.AddHook(&before)
	s := l2.New(rdb, l2.Options{Prefix: redistest.Prefix(t) + ":", ReadTimeout: time.Second})
	rdb.AddHook(&after)
	ctx := t.Context()
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v"), TTL: time.Minute}}, tier.Feed{}); err != nil {
		t.Fatal(err)
	}
	if vs, err := s.Get(ctx, []string{"k"}); err != nil || string(vs[0]) != "v" {
		t.Fatalf("Get = %q, %v; want [\"v\"]", vs, err)
	}
	if _, err := s.Get(ctx, []string{"k", "x"}); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*counter{"before New": &before, "after New": &after} {
		if got, want := c.String(), "commands [set get mget], pipelines []"; got != want {
			t.Errorf("hook added %s saw %s; want %s", name, got, want)
		}
	}
}

// TestWithTimeoutCloneDropsHooks records why the Store does not read
// through rdb.WithTimeout(ReadTimeout), which would bound the socket of a
// read whatever the client's options: in go-redis v9.23 the clone runs
// none of the hooks added to the client, before it was made or after (and
// TestHooksSeeCalls wants them all). If this test fails, go-redis changed,
// and reading through a clone may have become sound.
func TestWithTimeoutCloneDropsHooks(t *testing.T) {
	rdb := srv.Client(t)
	var before, after counter
	rdb.AddHook(&before)
	clone := rdb.WithTimeout(time.Second)
	rdb.AddHook(&after)
	if err := clone.Get(t.Context(), redistest.Prefix(t)).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET through the clone: %v, want redis.Nil", err)
	}
	if b, a := before.String(), after.String(); b != "commands [], pipelines []" || a != b {
		t.Errorf("hooks of the client saw, through its WithTimeout clone: added before it %s, after it %s; "+
			"the clone runs them now: l2 could read through one (see Info().ReadBound)", b, a)
	}
}

// TestInfo: Info reports the prefix, and a log on one server only.
func TestInfo(t *testing.T) {
	s := l2.New(srv.Client(t), l2.Options{Prefix: "p:"})
	if info := s.Info(); info.Prefix != "p:" || !info.Log {
		t.Errorf("Info() on one server = %+v; want Prefix \"p:\", Log true", info)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": deadAddr(t)}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { ring.Close() })
	if info := l2.New(ring, l2.Options{}).Info(); info.Log || info.ReadBound != 250*time.Millisecond || len(info.Advice) != 0 {
		t.Errorf("Info() with a Ring = %+v; want Log false, ReadBound 250ms, no advice", info)
	}
	// The Advice is the caller's copy.
	unbounded := l2.New(srv.Client(t), l2.Options{})
	info := unbounded.Info()
	info.Advice[0] = "changed"
	if got := unbounded.Info().Advice[0]; got == "changed" {
		t.Error("Info().Advice shares its array with the Store")
	}
}
