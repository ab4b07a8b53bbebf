package hybridtest_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"log"

	"github.com/hybridcache/hybridcache/hybridtest"
)

// A Remote fails every call while FailWith is set, and counts the calls.
func ExampleRemote_FailWith() {
	remote := new(hybridtest.Remote)
	ctx := context.Background()
	down := errors.New("connection refused")
	remote.FailWith(down)
	_, err := remote.Get(ctx, []string{"a", "b"})
	fmt.Println(errors.Is(err, down))
	remote.FailWith(nil)
	vs, err := remote.Get(ctx, []string{"a", "b"})
	fmt.Println(vs, err)
	c := remote.Calls()
	fmt.Println("round trips:", c.Get, "keys read:", c.Read)
	// Output:
	// true
	// [[] []] <nil>
	// round trips: 2 keys read: 4
}

// A write announces on the Remote's Bus, in the same step: Msg if it
// stored, Else if not.
func ExampleRemote_Write() {
	bus := new(hybridtest.Bus)
	defer bus.Close()
	remote := &hybridtest.Remote{Bus: bus}
	ctx := context.Background()
	unsubscribe, err := bus.Subscribe(ctx, "news", func(msg []byte) { fmt.Printf("got %s\n", msg) }, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer unsubscribe()

	feed := tier.Feed{Channel: "news"}
	stored, err := remote.Write(ctx, []tier.Write{
		{Key: "k", Value: []byte("v1"), If: tier.IfAbsent, Msg: []byte("k filled"), Else: []byte("k was there")},
		{Key: "k", Value: []byte("v2"), If: tier.IfAbsent, Msg: []byte("k filled"), Else: []byte("k was there")},
	}, feed)
	_ = bus.Flush(ctx) // the messages have been delivered
	fmt.Println(stored, err)
	v, _ := remote.Peek("k")
	fmt.Printf("k holds %s; %+v\n", v, remote.Calls())
	// Output:
	// got k filled
	// got k was there
	// [true false] <nil>
	// k holds v1; {Get:0 Write:1 TakeLeases:0 ExtendLeases:0 ReleaseLeases:0 ReadLog:0 Heads:0 OpenLog:0 Read:0 Writes:2 Always:0 IfAbsent:2 IfEqual:0 IfNewer:0 IfSeq:0 Releasing:0 Touches:0 Written:1}
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
