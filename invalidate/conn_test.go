package invalidate_test

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

func TestSubscribeWhileRedisIsDown(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	rdb := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1})
	defer rdb.Close()
	b := invalidate.New(rdb, invalidate.Options{Logger: testLogger(t), ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})

	// The context ends first.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := b.Subscribe(ctx, "c", func([]byte) {}, func(bool) {})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Subscribe with Redis down: got %v, want context.DeadlineExceeded", err)
	}

	// Close ends a waiting Subscribe.
	errc := make(chan error, 1)
	go func() {
		_, err := b.Subscribe(context.Background(), "c", func([]byte) {}, func(bool) {})
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

// outages runs a Bus through a proxy whose connections are cut every
// period for d, and returns the share of d the subscriber spent told of a
// loss, its longest outage, and the connections the Bus opened meanwhile.
func outages(t *testing.T, period, d time.Duration) (down float64, longest time.Duration, conns int64) {
	t.Helper()
	p := startProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	b := newBus(t, rdb, invalidate.Options{Logger: slog.New(slog.DiscardHandler)}) // default backoff
	var (
		mu      sync.Mutex
		since   time.Time // start of the outage; zero while up
		total   time.Duration
		started bool
	)
	onLoss := func(restored bool) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if !restored {
			since = now
			return
		}
		if !since.IsZero() {
			total += now.Sub(since)
			longest = max(longest, now.Sub(since))
			since = time.Time{}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := b.Subscribe(ctx, redistest.Prefix(t), func([]byte) {}, onLoss); err != nil {
		t.Fatal(err)
	}
	begin, before := time.Now(), p.accepted.Load()
	tick := time.NewTicker(period)
	for time.Since(begin) < d {
		<-tick.C
		p.Cut()
		started = true
	}
	tick.Stop()
	end := time.Now()
	mu.Lock()
	defer mu.Unlock()
	if !started {
		t.Fatal("no connection was cut")
	}
	if !since.IsZero() {
		total += end.Sub(since)
		longest = max(longest, end.Sub(since))
	}
	return float64(total) / float64(end.Sub(begin)), longest, p.accepted.Load() - before
}

// TestBackoffUnderRepeatedKills cuts the Bus's connection every 300 ms: a
// connection that lived longer than the wait before it resets the backoff,
// so each outage lasts about ReconnectMin (50 ms), not up to ReconnectMax
// (2 s). A measured outage pattern was 65% down, in outages of up to 1.6 s, while a
// connection had to live ReconnectMax (2 s) to reset it.
func TestBackoffUnderRepeatedKills(t *testing.T) {
	down, longest, conns := outages(t, 300*time.Millisecond, 4*time.Second)
	t.Logf("cut every 300 ms for 4 s: down %.0f%%, longest outage %v, %d connections", 100*down, longest.Round(time.Millisecond), conns)
	// Generous for a loaded machine under -race: the wait is 25-50 ms.
	if down > 0.35 || longest > 600*time.Millisecond {
		t.Errorf("down %.0f%% of the time, longest outage %v; want <= 35%% and <= 600ms", 100*down, longest)
	}
}

// TestBackoffUnderFlapping cuts the Bus's connection every 5 ms, so that no
// connection outlives the wait before it: the backoff grows to
// ReconnectMax as before, and the Bus does not reconnect in a tight loop.
func TestBackoffUnderFlapping(t *testing.T) {
	_, _, conns := outages(t, 5*time.Millisecond, 3*time.Second)
	t.Logf("cut every 5 ms for 3 s: %d connections", conns)
	// Waits of 25-50, 50-100, ... up to 1-2 s: at most 9 fit in 3 s (plus
	// go-redis's own retries of a cut SUBSCRIBE); a backoff reset by every
	// connection that answered would allow about 80.
	if conns > 20 {
		t.Errorf("%d connections in 3 s of flapping, want <= 20 (backing off to ReconnectMax)", conns)
	}
}
