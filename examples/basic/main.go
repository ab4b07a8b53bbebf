// Command basic shows a hybrid cache in front of Redis: a slow lookup is
// loaded once, then served from L1 in nanoseconds, and a second instance
// finds it in Redis.
//
//	go run ./examples/basic                 # embedded Redis-compatible server
//	go run ./examples/basic -redis 127.0.0.1:6379
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// Product is the cached value.
type Product struct {
	ID    string
	Name  string
	Price float64
}

// loadProduct stands in for a slow database query.
func loadProduct(ctx context.Context, id string) (Product, error) {
	select {
	case <-time.After(20 * time.Millisecond):
		return Product{ID: id, Name: "Widget " + id, Price: 9.99}, nil
	case <-ctx.Done():
		return Product{}, ctx.Err()
	}
}

func main() {
	addr := flag.String("redis", "", "Redis address (host:port); empty starts an embedded server")
	flag.Parse()
	if *addr == "" {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		*addr = m.Addr()
		fmt.Printf("no -redis given: using an embedded Redis-compatible server (miniredis) at %s\n", *addr)
	} else {
		fmt.Printf("using Redis at %s\n", *addr)
	}
	// The client as the cache's startup advisor asks for it: l2's time
	// bounds reach the socket, and a dial gives up at once.
	rdb := redis.NewClient(&redis.Options{
		Addr:                  *addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           250 * time.Millisecond,
		DialerRetries:         1,
		MaxRetries:            1,
	})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		log.Fatalf("redis at %s: %v", *addr, err)
	}
	bus := invalidate.New(rdb, invalidate.Options{})
	defer bus.Close()
	// Every instance of a fleet shares one Secret (from your secret store):
	// it signs messages, so that peers swap new values in without a round
	// trip. Here both instances live in this process.
	secret := []byte(os.Getenv("CACHE_SECRET"))
	if len(secret) == 0 {
		secret = make([]byte, 32)
		rand.Read(secret)
	}

	newInstance := func() *hybrid.Cache[Product] {
		c, err := hybrid.New[Product](hybrid.Options{
			Namespace:     fmt.Sprintf("example-basic-%d", time.Now().UnixNano()/int64(time.Hour)),
			Remote:        l2.New(rdb, l2.Options{}),
			Bus:           bus,
			Codec:         codec.Msgpack{},
			TTL:           10 * time.Minute,
			LocalTTL:      time.Minute,
			LocalMaxBytes: 64 << 20,
			Secret:        secret,
		})
		if err != nil {
			log.Fatal(err)
		}
		return c
	}
	a := newInstance()
	defer a.Close()
	_ = a.Delete(ctx, "42") // start from a clean slate on a shared server

	timed := func(label string, c *hybrid.Cache[Product]) {
		start := time.Now()
		p, err := c.GetOrCreate(ctx, "42", loadProduct)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%-34s %-28s %v\n", label, fmt.Sprintf("%+v", p), time.Since(start))
	}
	timed("instance A, cold (loads):", a)
	timed("instance A, again (L1 hit):", a)

	b := newInstance()
	defer b.Close()
	timed("instance B, first read (from L2):", b)
	timed("instance B, again (L1 hit):", b)

	if err := a.Set(ctx, "42", Product{ID: "42", Name: "Widget 42 (renamed)", Price: 11.50}); err != nil {
		log.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		p, _, _ := b.Get(ctx, "42")
		if p.Price == 11.50 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	timed("instance B after A's Set:", b)

	sa, sb := a.Stats(), b.Stats()
	fmt.Printf("A: L1 hits %d, L2 hits %d, loads %d, published %d\n", sa.L1.Hits, sa.L2.Hits, sa.Load.Calls, sa.Invalidations.Sent)
	fmt.Printf("B: L1 hits %d, L2 hits %d, loads %d, received %d\n", sb.L1.Hits, sb.L2.Hits, sb.Load.Calls, sb.Invalidations.Applied)
}
