package invalidate_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

var _ hybrid.Bus = (*invalidate.Bus)(nil)

var srv *redistest.Server

func TestMain(m *testing.M) {
	redistest.MainCheck(m, &srv, func() error { return goleak.Find() })
}

// wait bounds every wait for something the bus should do.
const wait = 5 * time.Second

// testLogger sends the bus's log to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// newBus returns a Bus on rdb, closed when t ends.
func newBus(t *testing.T, rdb redis.UniversalClient, o invalidate.Options) *invalidate.Bus {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	b := invalidate.New(rdb, o)
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: got %v, want nil", err)
		}
	})
	return b
}

// recorder is a subscriber that records what it is told. Its callbacks
// never block: a full buffer is counted as an overflow.
type recorder struct {
	msgs     chan string
	loss     chan struct{}
	losses   atomic.Int64
	overflow atomic.Int64
}

func newRecorder() *recorder {
	return &recorder{msgs: make(chan string, 4096), loss: make(chan struct{}, 256)}
}

func (r *recorder) onMessage(msg []byte) {
	select {
	case r.msgs <- string(msg):
	default:
		r.overflow.Add(1)
	}
}

func (r *recorder) onLoss() {
	r.losses.Add(1)
	select {
	case r.loss <- struct{}{}:
	default:
		r.overflow.Add(1)
	}
}

// next returns the next message, failing t after wait.
func (r *recorder) next(t *testing.T) string {
	t.Helper()
	select {
	case m := <-r.msgs:
		return m
	case <-time.After(wait):
		t.Fatalf("no message within %v", wait)
		return ""
	}
}

// expect fails t unless the next message is want.
func (r *recorder) expect(t *testing.T, want string) {
	t.Helper()
	if got := r.next(t); got != want {
		t.Fatalf("message: got %q, want %q", got, want)
	}
}

// waitLoss waits for one onLoss call.
func (r *recorder) waitLoss(t *testing.T, what string) {
	t.Helper()
	select {
	case <-r.loss:
	case <-time.After(wait):
		t.Fatalf("%s: no onLoss within %v (losses so far: %d)", what, wait, r.losses.Load())
	}
}

// noMessage fails t if a message is waiting.
func (r *recorder) noMessage(t *testing.T) {
	t.Helper()
	select {
	case m := <-r.msgs:
		t.Fatalf("unexpected message %q", m)
	default:
	}
}

func subscribe(t *testing.T, b *invalidate.Bus, channel string, r *recorder) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	unsub, err := b.Subscribe(ctx, channel, r.onMessage, r.onLoss)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", channel, err)
	}
	return unsub
}

func publish(t *testing.T, b *invalidate.Bus, channel, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := b.Publish(ctx, channel, []byte(msg)); err != nil {
		t.Fatalf("Publish(%q, %q): %v", channel, msg, err)
	}
}

func TestPublishReachesAnotherBus(t *testing.T) {
	ch := redistest.Prefix(t)
	pub := newBus(t, srv.Client(t), invalidate.Options{})
	subBus := newBus(t, srv.Client(t), invalidate.Options{})
	r := newRecorder()
	subscribe(t, subBus, ch, r)

	publish(t, pub, ch, "hello")
	r.expect(t, "hello")
	publish(t, pub, ch+":other", "not for us")
	publish(t, pub, ch, "")
	r.expect(t, "")
}

func TestOwnPublishIsDelivered(t *testing.T) {
	ch := redistest.Prefix(t)
	b := newBus(t, srv.Client(t), invalidate.Options{})
	r := newRecorder()
	subscribe(t, b, ch, r)
	publish(t, b, ch, "mine")
	r.expect(t, "mine")
}

func TestOrderIsPreserved(t *testing.T) {
	const n = 1000
	ch := redistest.Prefix(t)
	pub := newBus(t, srv.Client(t), invalidate.Options{})
	subBus := newBus(t, srv.Client(t), invalidate.Options{})
	r := newRecorder()
	subscribe(t, subBus, ch, r)
	for i := range n {
		publish(t, pub, ch, strconv.Itoa(i))
	}
	for i := range n {
		if got, want := r.next(t), strconv.Itoa(i); got != want {
			t.Fatalf("message %d: got %q, want %q", i, got, want)
		}
	}
	if got := r.overflow.Load(); got != 0 {
		t.Fatalf("recorder overflow: got %d, want 0", got)
	}
	subBus.Close() // waits for the callback in progress, so Stats are final
	st := subBus.Stats()
	if st.Received != n || st.Delivered != n {
		t.Fatalf("Stats: got Received %d, Delivered %d, want %d, %d", st.Received, st.Delivered, n, n)
	}
}

func TestTwoSubscribersOnOneChannel(t *testing.T) {
	ch := redistest.Prefix(t)
	pub := newBus(t, srv.Client(t), invalidate.Options{})
	subBus := newBus(t, srv.Client(t), invalidate.Options{})
	r1, r2 := newRecorder(), newRecorder()
	subscribe(t, subBus, ch, r1)
	subscribe(t, subBus, ch, r2)
	for _, m := range []string{"a", "b", "c"} {
		publish(t, pub, ch, m)
	}
	for _, r := range []*recorder{r1, r2} {
		for _, want := range []string{"a", "b", "c"} {
			r.expect(t, want)
		}
	}
	subBus.Close() // so that Stats are final
	if st := subBus.Stats(); st.Received != 3 || st.Delivered != 6 {
		t.Fatalf("Stats: got Received %d, Delivered %d, want 3, 6", st.Received, st.Delivered)
	}
}

func TestMessageCopiesAreSeparate(t *testing.T) {
	ch := redistest.Prefix(t)
	b := newBus(t, srv.Client(t), invalidate.Options{})
	got := make(chan []byte, 2)
	keep := func(msg []byte) { got <- msg }
	for range 2 {
		unsub, err := b.Subscribe(context.Background(), ch, keep, func() {})
		if err != nil {
			t.Fatal(err)
		}
		defer unsub()
	}
	publish(t, b, ch, "xy")
	m1, m2 := <-got, <-got
	m1[0] = 'z'
	if string(m2) != "xy" {
		t.Fatalf("second subscriber's message after the first changed its own: got %q, want %q", m2, "xy")
	}
}

func TestUnsubscribeStopsDelivery(t *testing.T) {
	ch := redistest.Prefix(t)
	rdb := srv.Client(t)
	pub := newBus(t, srv.Client(t), invalidate.Options{})
	subBus := newBus(t, rdb, invalidate.Options{})
	gone, stay := newRecorder(), newRecorder()
	unsubGone := subscribe(t, subBus, ch, gone)
	unsubStay := subscribe(t, subBus, ch, stay)

	publish(t, pub, ch, "1")
	gone.expect(t, "1")
	stay.expect(t, "1")

	unsubGone()
	unsubGone() // idempotent
	publish(t, pub, ch, "2")
	stay.expect(t, "2") // callbacks run in order: "2" reached gone first, if at all
	gone.noMessage(t)

	// The last subscriber leaving unsubscribes the channel in Redis.
	// Confirmations come back in order, so once a later SUBSCRIBE is
	// confirmed, the UNSUBSCRIBE has been done.
	unsubStay()
	subscribe(t, subBus, ch+":barrier", newRecorder())
	n, err := rdb.PubSubNumSub(context.Background(), ch).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n[ch] != 0 {
		t.Fatalf("PUBSUB NUMSUB %s after the last unsubscribe: got %d, want 0", ch, n[ch])
	}

	// Subscribing again works.
	again := newRecorder()
	subscribe(t, subBus, ch, again)
	publish(t, pub, ch, "3")
	again.expect(t, "3")
	stay.noMessage(t)
}

func TestUnsubscribeWaitsForCallback(t *testing.T) {
	ch := redistest.Prefix(t)
	b := newBus(t, srv.Client(t), invalidate.Options{})
	entered := make(chan string, 10)
	release := make(chan struct{})
	unsub, err := b.Subscribe(context.Background(), ch, func(msg []byte) {
		entered <- string(msg)
		<-release
	}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	stay := newRecorder()
	subscribe(t, b, ch, stay)

	publish(t, b, ch, "1")
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("callback not called")
	}
	done := make(chan struct{})
	go func() {
		unsub()
		close(done)
	}()
	// A negative check needs a window: unsubscribe must still be waiting.
	select {
	case <-done:
		t.Fatal("unsubscribe returned while the callback was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("unsubscribe did not return after the callback did")
	}

	publish(t, b, ch, "2")
	stay.expect(t, "1")
	stay.expect(t, "2")
	select {
	case m := <-entered:
		t.Fatalf("callback called after unsubscribe returned, with %q", m)
	default:
	}
}

func TestCallbackPanicIsReportedAsLoss(t *testing.T) {
	ch := redistest.Prefix(t)
	b := newBus(t, srv.Client(t), invalidate.Options{})
	r := newRecorder()
	unsub, err := b.Subscribe(context.Background(), ch, func(msg []byte) {
		if string(msg) == "boom" {
			panic("boom")
		}
		r.onMessage(msg)
	}, r.onLoss)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	publish(t, b, ch, "boom")
	publish(t, b, ch, "after")
	r.waitLoss(t, "panic")
	r.expect(t, "after")
	b.Close() // so that Stats are final
	st := b.Stats()
	if st.Panics != 1 || st.Losses != 1 || st.Delivered != 1 {
		t.Fatalf("Stats: got Panics %d, Losses %d, Delivered %d, want 1, 1, 1", st.Panics, st.Losses, st.Delivered)
	}
}

func TestSubscribeArguments(t *testing.T) {
	b := newBus(t, srv.Client(t), invalidate.Options{})
	ctx := context.Background()
	noop := func() {}
	if _, err := b.Subscribe(ctx, "", func([]byte) {}, noop); err == nil {
		t.Error("Subscribe with an empty channel: got nil error, want one")
	}
	if _, err := b.Subscribe(ctx, "c", nil, noop); err == nil {
		t.Error("Subscribe with nil onMessage: got nil error, want one")
	}
	if _, err := b.Subscribe(ctx, "c", func([]byte) {}, nil); err == nil {
		t.Error("Subscribe with nil onLoss: got nil error, want one")
	}
}

func TestClosedBus(t *testing.T) {
	ch := redistest.Prefix(t)
	b := newBus(t, srv.Client(t), invalidate.Options{})
	r := newRecorder()
	unsub := subscribe(t, b, ch, r)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: got %v, want nil", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: got %v, want nil", err)
	}
	unsub() // after Close: a no-op that must not block

	_, err := b.Subscribe(context.Background(), ch, r.onMessage, r.onLoss)
	if !errors.Is(err, invalidate.ErrClosed) {
		t.Errorf("Subscribe after Close: got %v, want ErrClosed", err)
	}
	if err := b.Publish(context.Background(), ch, []byte("x")); !errors.Is(err, invalidate.ErrClosed) {
		t.Errorf("Publish after Close: got %v, want ErrClosed", err)
	}
	if got := r.losses.Load(); got != 0 {
		t.Errorf("onLoss calls after Close: got %d, want 0", got)
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b := invalidate.New(rdb, invalidate.Options{Logger: testLogger(t), HealthInterval: 50 * time.Millisecond})
	for i := range 3 {
		subscribe(t, b, fmt.Sprintf("%s:%d", redistest.Prefix(t), i), newRecorder())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, ignore)
}

// deadAddr returns an address where nothing listens.
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

func TestSubscribeWhileRedisIsDown(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	rdb := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1})
	defer rdb.Close()
	b := invalidate.New(rdb, invalidate.Options{Logger: testLogger(t), ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})

	// The context ends first.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := b.Subscribe(ctx, "c", func([]byte) {}, func() {})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Subscribe with Redis down: got %v, want context.DeadlineExceeded", err)
	}

	// Close ends a waiting Subscribe.
	errc := make(chan error, 1)
	go func() {
		_, err := b.Subscribe(context.Background(), "c", func([]byte) {}, func() {})
		errc <- err
	}()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, invalidate.ErrClosed) {
			t.Fatalf("Subscribe during Close: got %v, want ErrClosed", err)
		}
	case <-time.After(wait):
		t.Fatal("Subscribe did not return after Close")
	}
	if st := b.Stats(); st.Disconnects != 0 || st.Reconnects != 0 {
		t.Errorf("Stats: got Disconnects %d, Reconnects %d, want 0, 0 (never connected)", st.Disconnects, st.Reconnects)
	}
	rdb.Close()
	goleak.VerifyNone(t, ignore)
}

// pubsubClientID returns the id of the pub/sub connection named name.
func pubsubClientID(t *testing.T, rdb *redis.Client, name string) string {
	t.Helper()
	list, err := rdb.Do(context.Background(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(list))
	for sc.Scan() {
		var id string
		named := false
		for _, f := range strings.Fields(sc.Text()) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
			if f == "name="+name {
				named = true
			}
		}
		if named {
			return id
		}
	}
	t.Fatalf("no pub/sub connection named %q in CLIENT LIST", name)
	return ""
}

func TestConnectionKilledIsReported(t *testing.T) {
	srv.NeedReal(t)
	ch := redistest.Prefix(t)
	name := strings.ReplaceAll(ch, ":", "-")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ClientName: name})
	t.Cleanup(func() { rdb.Close() })
	admin := srv.Client(t)
	b := newBus(t, rdb, invalidate.Options{ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond})
	r := newRecorder()
	subscribe(t, b, ch, r)
	publish(t, b, ch, "before")
	r.expect(t, "before")

	// CLIENT KILL TYPE pubsub would also cut other packages' connections
	// on a shared server: kill only ours.
	id := pubsubClientID(t, admin, name)
	if err := admin.Do(context.Background(), "CLIENT", "KILL", "ID", id).Err(); err != nil {
		t.Fatal(err)
	}
	r.waitLoss(t, "connection lost")
	r.waitLoss(t, "connection restored")
	publish(t, b, ch, "after")
	r.expect(t, "after")

	st := b.Stats()
	if st.Disconnects != 1 || st.Reconnects != 1 || st.Losses != 2 {
		t.Fatalf("Stats: got Disconnects %d, Reconnects %d, Losses %d, want 1, 1, 2", st.Disconnects, st.Reconnects, st.Losses)
	}
}

func TestServerRestart(t *testing.T) {
	srv.NeedOwned(t)
	ch := redistest.Prefix(t)
	pub := newBus(t, srv.Client(t), invalidate.Options{})
	b := newBus(t, srv.Client(t), invalidate.Options{ReconnectMin: 10 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	r := newRecorder()
	subscribe(t, b, ch, r)
	publish(t, pub, ch, "before")
	r.expect(t, "before")

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := srv.Restart(); err != nil {
				t.Errorf("Restart: %v", err)
			}
		}
	})
	r.waitLoss(t, "server killed")

	// A Subscribe while Redis is down waits for it to come back.
	late := newRecorder()
	lateErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*wait)
		defer cancel()
		_, err := b.Subscribe(ctx, ch+":late", late.onMessage, late.onLoss)
		lateErr <- err
	}()

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	r.waitLoss(t, "server restarted")
	publish(t, pub, ch, "after")
	r.expect(t, "after")
	if got := r.losses.Load(); got != 2 {
		t.Errorf("onLoss calls for one outage: got %d, want 2 (lost, restored)", got)
	}

	select {
	case err := <-lateErr:
		if err != nil {
			t.Fatalf("Subscribe during the outage: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("Subscribe made during the outage did not return after the restart")
	}
	publish(t, pub, ch+":late", "late")
	late.expect(t, "late")
	if got := late.losses.Load(); got != 0 {
		t.Errorf("onLoss calls for a subscription made during the outage: got %d, want 0", got)
	}
	if st := b.Stats(); st.Disconnects != 1 || st.Reconnects != 1 {
		t.Errorf("Stats: got Disconnects %d, Reconnects %d, want 1, 1", st.Disconnects, st.Reconnects)
	}
}

func TestHealthCheckFindsSilentConnection(t *testing.T) {
	ch := redistest.Prefix(t)
	p := startProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	pub := newBus(t, srv.Client(t), invalidate.Options{})
	b := newBus(t, rdb, invalidate.Options{HealthInterval: 100 * time.Millisecond, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond})
	r := newRecorder()
	subscribe(t, b, ch, r)
	publish(t, pub, ch, "before")
	r.expect(t, "before")

	// The connection stays open, but nothing goes through it any more.
	p.Hold()
	r.waitLoss(t, "silent connection")
	r.waitLoss(t, "new connection")
	publish(t, pub, ch, "after")
	r.expect(t, "after")
	if got := r.losses.Load(); got != 2 {
		t.Errorf("onLoss calls for one outage: got %d, want 2 (lost, restored)", got)
	}
	if st := b.Stats(); st.Disconnects < 1 || st.Reconnects < 1 {
		t.Errorf("Stats: got Disconnects %d, Reconnects %d, want at least 1, 1", st.Disconnects, st.Reconnects)
	}
}

func TestHealthCheckFindsPausedServer(t *testing.T) {
	// CLIENT PAUSE stops the whole server: only on one we own.
	srv.NeedOwned(t)
	ch := redistest.Prefix(t)
	admin := srv.Client(t)
	pub := newBus(t, srv.Client(t), invalidate.Options{})
	b := newBus(t, srv.Client(t), invalidate.Options{HealthInterval: 100 * time.Millisecond, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond})
	r := newRecorder()
	subscribe(t, b, ch, r)

	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	r.waitLoss(t, "paused server")
	r.waitLoss(t, "server resumed")
	publish(t, pub, ch, "after")
	r.expect(t, "after")
	if got := r.losses.Load(); got != 2 {
		t.Errorf("onLoss calls for one outage: got %d, want 2 (lost, restored)", got)
	}
}

func TestHealthCheckKeepsQuietConnection(t *testing.T) {
	// A healthy connection with no traffic answers its PINGs and is kept.
	ch := redistest.Prefix(t)
	b := newBus(t, srv.Client(t), invalidate.Options{HealthInterval: 100 * time.Millisecond})
	r := newRecorder()
	subscribe(t, b, ch, r)
	// Not a synchronisation: the quiet time itself is what is tested, long
	// enough for several health checks, none of which may fail.
	time.Sleep(600 * time.Millisecond)
	publish(t, b, ch, "x")
	r.expect(t, "x")
	if got := r.losses.Load(); got != 0 {
		t.Fatalf("onLoss calls on a healthy quiet connection: got %d, want 0", got)
	}
}

func TestCluster(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	ch := redistest.Prefix(t)
	newCluster := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { c.Close() })
		return c
	}
	pub := newBus(t, newCluster(), invalidate.Options{})
	b := newBus(t, newCluster(), invalidate.Options{})
	r := newRecorder()
	subscribe(t, b, ch, r)

	publish(t, pub, ch, "through the cluster client")
	r.expect(t, "through the cluster client")

	// A classic PUBLISH on any node reaches a subscriber on any node.
	var masters atomic.Int64
	err := newCluster().ForEachMaster(context.Background(), func(ctx context.Context, node *redis.Client) error {
		masters.Add(1)
		return node.Publish(ctx, ch, "from "+node.Options().Addr).Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range masters.Load() {
		seen[r.next(t)] = true
	}
	if int64(len(seen)) != masters.Load() {
		t.Fatalf("messages from distinct masters: got %d (%v), want %d", len(seen), seen, masters.Load())
	}
}

func TestSubscribeUnsubscribeChurn(t *testing.T) {
	// Subscriptions come and go on shared channels while messages flow:
	// each new subscription must be live when Subscribe returns.
	const workers, rounds = 4, 50
	prefix := redistest.Prefix(t)
	b := newBus(t, srv.Client(t), invalidate.Options{})
	pub := newBus(t, srv.Client(t), invalidate.Options{})
	errc := make(chan error, workers)
	for w := range workers {
		go func() {
			errc <- func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 4*wait)
				defer cancel()
				for i := range rounds {
					ch := fmt.Sprintf("%s:%d", prefix, (w+i)%2)
					mine := fmt.Sprintf("w%d-%d", w, i)
					got := make(chan struct{}, 1)
					unsub, err := b.Subscribe(ctx, ch, func(msg []byte) {
						if string(msg) == mine {
							got <- struct{}{}
						}
					}, func() {})
					if err != nil {
						return err
					}
					if err := pub.Publish(ctx, ch, []byte(mine)); err != nil {
						unsub()
						return err
					}
					select {
					case <-got:
					case <-time.After(wait):
						unsub()
						return fmt.Errorf("%s on %s: not delivered", mine, ch)
					}
					unsub()
				}
				return nil
			}()
		}()
	}
	for range workers {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
	if st := b.Stats(); st.Disconnects != 0 || st.Losses != 0 {
		t.Errorf("Stats: got Disconnects %d, Losses %d, want 0, 0", st.Disconnects, st.Losses)
	}
}
