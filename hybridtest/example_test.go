package hybridtest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
)

// A cache keeps answering from its loader and L1 while the shared tier is
// down, and reports write failures.
func ExampleRemote_FailWith() {
	remote := new(hybridtest.Remote)
	c, err := hybrid.New[string](hybrid.Options{
		Namespace: "ns",
		Remote:    remote,
		Logger:    slog.New(slog.DiscardHandler), // the failures are expected here
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	down := errors.New("connection refused")
	remote.FailWith(down)
	ctx := context.Background()
	v, err := c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) {
		return "from the database", nil
	})
	fmt.Println(v, err)
	err = c.Set(ctx, "k", "new")
	fmt.Println(errors.Is(err, down))
	// Output:
	// from the database <nil>
	// true
}

func ExampleBus() {
	bus := new(hybridtest.Bus)
	defer bus.Close()
	ctx := context.Background()
	unsubscribe, err := bus.Subscribe(ctx, "news", func(msg []byte) {
		fmt.Printf("got %s\n", msg)
	}, func(restored bool) {
		fmt.Println("messages may have been lost")
	})
	if err != nil {
		log.Fatal(err)
	}
	defer unsubscribe()

	_ = bus.Publish(ctx, "news", []byte("one"))
	_ = bus.Publish(ctx, "news", []byte("two"))
	bus.SimulateLoss()
	_ = bus.Flush(ctx) // everything published so far has been delivered
	fmt.Printf("%+v\n", bus.Stats())
	// Output:
	// got one
	// got two
	// messages may have been lost
	// {Published:2 Delivered:2 Losses:1 Dropped:0 Subscriptions:1}
}
