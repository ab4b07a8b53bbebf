package invalidate_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

// reportLatency adds the p50 and p99 of lat, in microseconds, to b's output.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(q float64) float64 {
		return float64(lat[int(q*float64(len(lat)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// BenchmarkPublishToReceive measures the time from Publish on one Bus to
// onMessage on another, each with its own client, on loopback.
func BenchmarkPublishToReceive(b *testing.B) {
	ch := redistest.Prefix(b)
	pubClient := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer pubClient.Close()
	subClient := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer subClient.Close()
	pub := invalidate.New(pubClient, invalidate.Options{})
	defer pub.Close()
	sub := invalidate.New(subClient, invalidate.Options{})
	defer sub.Close()

	got := make(chan struct{}, 1)
	ctx := context.Background()
	unsub, err := sub.Subscribe(ctx, ch, func([]byte) { got <- struct{}{} }, func(bool) {})
	if err != nil {
		b.Fatal(err)
	}
	defer unsub()
	msg := make([]byte, 64)
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if err := pub.Publish(ctx, ch, msg); err != nil {
			b.Fatal(err)
		}
		<-got
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkRawGoRedisPubSub is the baseline: the same round trip with a bare
// go-redis PubSub read in a loop, without the Bus.
func BenchmarkRawGoRedisPubSub(b *testing.B) {
	ch := redistest.Prefix(b)
	pubClient := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer pubClient.Close()
	subClient := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer subClient.Close()

	ctx := context.Background()
	ps := subClient.Subscribe(ctx, ch)
	if _, err := ps.Receive(ctx); err != nil { // the confirmation
		b.Fatal(err)
	}
	got := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := ps.ReceiveMessage(ctx); err != nil {
				return
			}
			got <- struct{}{}
		}
	}()
	defer func() {
		ps.Close()
		<-done
	}()
	msg := make([]byte, 64)
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if err := pubClient.Publish(ctx, ch, msg).Err(); err != nil {
			b.Fatal(err)
		}
		<-got
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
}
