package l2_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/l2"
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
	if err := s.Set(ctx, "user:1", []byte("Ada"), time.Hour); err != nil {
		panic(err)
	}
	v, ok, err := s.Get(ctx, "user:1")
	fmt.Printf("%s %v %v\n", v, ok, err)

	_, ok, err = s.Get(ctx, "user:2")
	fmt.Println("user:2 found:", ok, err)

	keys := []string{"user:2", "user:1"}
	vals, err := s.GetMany(ctx, keys)
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
	// Ada true <nil>
	// user:2 found: false <nil>
	// user:2 missing
	// user:1 Ada
	// raw key: Ada
}

func ExampleStore_SetAndPublish() {
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

	// Each write and its message are one atomic step.
	for _, v := range []string{"v1", "v2"} {
		if err := s.SetAndPublish(ctx, "k", []byte(v), time.Minute, "changes", []byte("set k="+v)); err != nil {
			panic(err)
		}
	}
	for range 2 {
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println(m.Payload)
	}
	// Output:
	// set k=v1
	// set k=v2
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
	taken, _, values, _, err := s.TakeLeases(ctx, lease, guard, "instance-a", 5*time.Second)
	fmt.Println("A took it:", taken[0], "user:1 found:", values[0] != nil, err)
	taken, left, _, holders, err := s.TakeLeases(ctx, lease, guard, "instance-b", 5*time.Second)
	fmt.Println("B took it:", taken[0], "left:", left[0], "holder:", holders[0], err)

	// A keeps it alive while it loads, then stores the value, releases the
	// lease and announces, in one step.
	held, err := s.ExtendLeases(ctx, lease, "instance-a", 5*time.Second)
	fmt.Println("A still holds it:", held[0], err)
	wrote, err := s.FillAndRelease(ctx, "user:1", nil, []byte("Ada"), time.Minute, "lease:user:1", "instance-a",
		"fills", []byte("user:1 filled"), []byte("user:1 not filled"))
	fmt.Println("wrote:", wrote, err, "lease left:", mr.Exists("lease:user:1"))

	// B, which missed the message, tries again once A's lease would have
	// ended: it takes the lease, and finds the value in the same step.
	taken, _, values, _, err = s.TakeLeases(ctx, lease, guard, "instance-b", 5*time.Second)
	fmt.Printf("B took it: %v, user:1 holds: %s, %v\n", taken[0], values[0], err)
	// Output:
	// A took it: true user:1 found: false <nil>
	// B took it: false left: 5s holder: instance-a <nil>
	// A still holds it: true <nil>
	// wrote: true <nil> lease left: false
	// B took it: true, user:1 holds: Ada, <nil>
}
