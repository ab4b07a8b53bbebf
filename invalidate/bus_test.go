package invalidate_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

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

func TestSubscribeArguments(t *testing.T) {
	b := newBus(t, srv.Client(t), invalidate.Options{})
	ctx := context.Background()
	noop := func(bool) {}
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

// TestCluster: with Options.Classic, a Bus on Redis Cluster uses classic
// pub/sub, which every node broadcasts (sharded pub/sub is the default:
// sharded_test.go).
func TestCluster(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	ch := redistest.Prefix(t)
	newCluster := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { c.Close() })
		return c
	}
	pub := newBus(t, newCluster(), invalidate.Options{Classic: true})
	b := newBus(t, newCluster(), invalidate.Options{Classic: true})
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
					}, func(bool) {})
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
