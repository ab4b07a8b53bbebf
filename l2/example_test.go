package l2_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/l2"
	"github.com/hybridcache/hybridcache/tier"
)

func Example() {
	// An in-process Redis stands in for a real one here.
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()

	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close() // the Store does not own the client
	s := l2.New(rdb, l2.Options{Prefix: "app:", ReadTimeout: 100 * time.Millisecond})

	ctx := context.Background()
	stored, err := s.Write(ctx, []tier.Write{
		{Key: "user:1", Value: []byte("Ada"), TTL: time.Hour},
		{Key: "user:1", Value: []byte("Bob"), TTL: time.Hour, If: tier.IfAbsent},
	}, tier.Feed{})
	fmt.Println("stored:", stored, err)

	keys := []string{"user:2", "user:1"}
	vals, err := s.Get(ctx, keys)
	if err != nil {
		panic(err)
	}
	for i, v := range vals {
		if v == nil {
			fmt.Println(keys[i], "missing")
		} else {
			fmt.Println(keys[i], string(v))
		}
	}

	fmt.Println("raw key:", rdb.Get(ctx, "app:user:1").Val())
	// Output:
	// stored: [true false] <nil>
	// user:2 missing
	// user:1 Ada
	// raw key: Ada
}

func ExampleStore_Write() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	s := l2.New(rdb, l2.Options{})
	ctx := context.Background()

	sub := rdb.Subscribe(ctx, "changes")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // wait until subscribed
		panic(err)
	}

	// Each write and its message are one atomic step. The second stores
	// only over "v1", keeping its lifetime, and announces either way.
	f := tier.Feed{Channel: "changes"}
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: []byte("v1"), TTL: time.Minute, Msg: []byte("set k=v1")}}, f); err != nil {
		panic(err)
	}
	stored, err := s.Write(ctx, []tier.Write{{
		Key: "k", Value: []byte("v2"), If: tier.IfEqual, Old: []byte("v1"), KeepTTL: true,
		Msg: []byte("replaced k=v2"), Else: []byte("k changed meanwhile"),
	}}, f)
	fmt.Println("stored:", stored, err)
	for range 2 {
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println(m.Payload)
	}
	// Output:
	// stored: [true] <nil>
	// set k=v1
	// replaced k=v2
}

func ExampleStore_TakeLeases() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	s := l2.New(rdb, l2.Options{})
	ctx := context.Background()

	// Instance A takes the lease on a cold key and loads it; B finds it
	// held and learns how long it may have to wait.
	// The take reads the key the lease guards, user:1, in the same step.
	lease, guard := []string{"lease:user:1"}, []string{"user:1"}
	ls, err := s.TakeLeases(ctx, lease, guard, "instance-a", 5*time.Second)
	fmt.Println("A took it:", ls[0].Taken, "user:1 found:", ls[0].Value != nil, err)
	ls, err = s.TakeLeases(ctx, lease, guard, "instance-b", 5*time.Second)
	fmt.Println("B took it:", ls[0].Taken, "left:", ls[0].Left, "holder:", ls[0].Holder, err)

	// A keeps it alive while it loads, then stores the value, releases the
	// lease and announces, in one step.
	held, err := s.ExtendLeases(ctx, lease, "instance-a", 5*time.Second)
	fmt.Println("A still holds it:", held[0], err)
	stored, err := s.Write(ctx, []tier.Write{{
		Key: "user:1", Value: []byte("Ada"), TTL: time.Minute, If: tier.IfAbsent,
		Lease: "lease:user:1", Token: "instance-a",
		Msg: []byte("user:1 filled"), Else: []byte("user:1 not filled"),
	}}, tier.Feed{Channel: "fills"})
	fmt.Println("stored:", stored, err, "lease left:", mr.Exists("lease:user:1"))

	// B, which missed the message, tries again once A's lease would have
	// ended: it takes the lease, and finds the value in the same step.
	ls, err = s.TakeLeases(ctx, lease, guard, "instance-b", 5*time.Second)
	fmt.Printf("B took it: %v, user:1 holds: %s, %v\n", ls[0].Taken, ls[0].Value, err)
	// Output:
	// A took it: true user:1 found: false <nil>
	// B took it: false left: 5s holder: instance-a <nil>
	// A still holds it: true <nil>
	// stored: [true] <nil> lease left: false
	// B took it: true, user:1 holds: Ada, <nil>
}
