package invalidate_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/invalidate"
)

func ExampleBus() {
	// An in-process Redis stands in for a real one here.
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	bus := invalidate.New(rdb, invalidate.Options{})
	defer bus.Close()

	ctx := context.Background()
	got := make(chan string, 1)
	unsubscribe, err := bus.Subscribe(ctx, "cache:users",
		func(msg []byte) { got <- string(msg) }, // drop or swap the L1 entry
		func(restored bool) {},                  // messages may be lost: reconcile L1
	)
	if err != nil {
		panic(err)
	}
	defer unsubscribe()

	if err := bus.Publish(ctx, "cache:users", []byte("user:42")); err != nil {
		panic(err)
	}
	fmt.Println(<-got)
	// Output: user:42
}
