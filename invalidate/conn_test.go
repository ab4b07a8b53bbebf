package invalidate_test

import (
	"bufio"
	"context"
	"errors"
	"strings"
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
