package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
)

// User is the value type of the examples.
type User struct {
	ID   string
	Name string
}

func ExampleNew() {
	// In production the shared tier is an *l2.Store and the bus an
	// *invalidate.Bus over Redis; the in-memory doubles of hybridtest stand
	// in for them here.
	bus := new(hybridtest.Bus)
	defer bus.Close()
	remote := &hybridtest.Remote{Bus: bus}

	users, err := hybrid.New[User](hybrid.Options{
		Namespace: "users",
		Remote:    remote,
		Bus:       bus,
		TTL:       10 * time.Minute,
		LocalTTL:  time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer users.Close()

	ctx := context.Background()
	if err := users.Set(ctx, "42", User{ID: "42", Name: "Ada"}); err != nil {
		log.Fatal(err)
	}
	u, ok, err := users.Get(ctx, "42")
	fmt.Println(u.Name, ok, err)
	// The value, the namespace's clear record, and the sequence counter of
	// the value's hash slot, which its write-back was conditional on.
	fmt.Printf("%q\n", remote.Keys())
	// Output:
	// Ada true <nil>
	// ["users:\x00clear" "users:\x00seq:{93u}" "users:42"]
}

func ExampleCache_GetOrCreate() {
	users, err := hybrid.New[User](hybrid.Options{}) // L1 only
	if err != nil {
		log.Fatal(err)
	}
	defer users.Close()

	load := func(ctx context.Context, id string) (User, error) {
		fmt.Println("loading", id)
		return User{ID: id, Name: "Ada"}, nil // from the database
	}
	ctx := context.Background()
	for range 3 {
		u, err := users.GetOrCreate(ctx, "42", load)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(u.Name)
	}
	st := users.Stats()
	fmt.Println("loads:", st.Load.Calls, "L1 hits:", st.L1.Hits)
	// Output:
	// loading 42
	// Ada
	// Ada
	// Ada
	// loads: 1 L1 hits: 2
}

func ExampleCache_Set() {
	bus := new(hybridtest.Bus)
	defer bus.Close()
	remote := &hybridtest.Remote{Bus: bus}
	c, err := hybrid.New[string](hybrid.Options{Namespace: "greetings", Remote: remote, Bus: bus, MaxValueBytes: 64})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	if err := c.Set(ctx, "en", "hello", hybrid.WithTTL(time.Hour)); err != nil {
		log.Fatal(err)
	}
	// Set wrote both tiers: GetOrCreate does not load.
	v, err := c.GetOrCreate(ctx, "en", func(context.Context, string) (string, error) {
		return "never called", nil
	})
	fmt.Println(v, err)

	// A value that encodes to more than MaxValueBytes is refused.
	err = c.Set(ctx, "long", string(make([]byte, 100)))
	fmt.Println(errors.Is(err, hybrid.ErrValueTooLarge))
	// Output:
	// hello <nil>
	// true
}

// Two instances of one cache share a shared tier and a bus: a Set on one
// reaches the other's L1. With a Secret, the message carries the value and
// the other instance swaps it in without reading the shared tier.
func Example_invalidation() {
	bus := new(hybridtest.Bus)
	defer bus.Close()
	remote := &hybridtest.Remote{Bus: bus}
	o := hybrid.Options{Namespace: "prices", Remote: remote, Bus: bus, Secret: []byte("shared secret")}
	a, err := hybrid.New[int](o)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := hybrid.New[int](o)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	ctx := context.Background()
	_ = a.Set(ctx, "apple", 100)
	_ = bus.Flush(ctx)             // wait until b has applied a's message
	v, _, _ := b.Get(ctx, "apple") // from the shared tier, now in b's L1
	fmt.Println("b sees", v)

	reads := remote.Calls().Get
	time.Sleep(2 * time.Millisecond) // a later write: a value is swapped in over a copy from an earlier millisecond
	_ = a.Set(ctx, "apple", 120)
	_ = bus.Flush(ctx) // wait until b has applied a's message
	v, _, _ = b.Get(ctx, "apple")
	fmt.Println("b sees", v)
	fmt.Println("swapped:", b.Stats().Invalidations.Swapped, "shared-tier reads:", remote.Calls().Get-reads)
	// Output:
	// b sees 100
	// b sees 120
	// swapped: 1 shared-tier reads: 0
}

// Values written with a tag are deleted together, on every instance, by
// one DeleteByTag.
func ExampleCache_DeleteByTag() {
	bus := new(hybridtest.Bus)
	defer bus.Close()
	remote := &hybridtest.Remote{Bus: bus}
	o := hybrid.Options{Namespace: "products", Remote: remote, Bus: bus}
	a, err := hybrid.New[string](o)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := hybrid.New[string](o)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	ctx := context.Background()
	_ = a.Set(ctx, "p1", "chair", hybrid.WithTags("shop:7"))
	_ = a.Set(ctx, "p2", "table", hybrid.WithTags("shop:7"))
	_ = a.Set(ctx, "p3", "lamp", hybrid.WithTags("shop:9"))
	found, _ := b.GetMany(ctx, []string{"p1", "p2", "p3"})
	fmt.Println("b holds", len(found))

	_ = a.DeleteByTag(ctx, "shop:7")
	_ = bus.Flush(ctx) // wait until b has applied a's message
	found, _ = b.GetMany(ctx, []string{"p1", "p2", "p3"})
	fmt.Println("b holds", len(found), found["p3"])
	// Output:
	// b holds 3
	// b holds 1 lamp
}

// Expire makes every instance load a value anew; with fail-safe on, the
// old value still answers when that load fails.
func ExampleCache_Expire() {
	bus := new(hybridtest.Bus)
	defer bus.Close()
	remote := &hybridtest.Remote{Bus: bus}
	o := hybrid.Options{Namespace: "rates", Remote: remote, Bus: bus, FailSafeMaxAge: time.Hour}
	a, err := hybrid.New[string](o)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	b, err := hybrid.New[string](o)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	ctx := context.Background()
	_ = a.Set(ctx, "eur", "1.08")
	_ = bus.Flush(ctx) // wait until b has applied a's message
	v, _, _ := b.Get(ctx, "eur")
	fmt.Println("b sees", v)

	_ = a.Expire(ctx, "eur")
	_ = bus.Flush(ctx)
	_, ok, _ := b.Get(ctx, "eur")
	fmt.Println("b finds a live value:", ok)
	v, err = b.GetOrCreate(ctx, "eur", func(context.Context, string) (string, error) {
		return "", errors.New("rates service down")
	})
	fmt.Println("b serves", v, err)
	v, _ = a.GetOrCreate(ctx, "eur", func(context.Context, string) (string, error) { return "1.09", nil })
	fmt.Println("a reloads", v)
	// Output:
	// b sees 1.08
	// b finds a live value: false
	// b serves 1.08 <nil>
	// a reloads 1.09
}

// Clear empties the namespace everywhere with one write: values written
// before it are misses on every instance, even one started after it.
func ExampleCache_Clear() {
	bus := new(hybridtest.Bus)
	defer bus.Close()
	remote := &hybridtest.Remote{Bus: bus}
	o := hybrid.Options{Namespace: "products", Remote: remote, Bus: bus}
	a, err := hybrid.New[string](o)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()

	ctx := context.Background()
	_ = a.Set(ctx, "p1", "chair")
	_ = a.Set(ctx, "p2", "table")
	_ = a.Clear(ctx)
	_ = a.Set(ctx, "p3", "lamp")

	b, err := hybrid.New[string](o)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	found, _ := b.GetMany(ctx, []string{"p1", "p2", "p3"})
	fmt.Println("b finds", len(found), found["p3"])
	// Output:
	// b finds 1 lamp
}

// A call can turn fail-safe on for itself: a value it wrote is served
// stale when its load later fails.
func ExampleWithFailSafeMaxAge() {
	c, err := hybrid.New[string](hybrid.Options{TTL: 50 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	failSafe := hybrid.WithFailSafeMaxAge(time.Hour)

	v, _ := c.GetOrCreate(ctx, "rate", func(context.Context, string) (string, error) { return "1.08", nil }, failSafe)
	fmt.Println(v)
	time.Sleep(100 * time.Millisecond) // the value's lifetime passes
	v, err = c.GetOrCreate(ctx, "rate", func(context.Context, string) (string, error) {
		return "", errors.New("rates service down")
	}, failSafe)
	fmt.Println(v, err, c.Stats().Load.StaleServed)
	// Output:
	// 1.08
	// 1.08 <nil> 1
}

// With LoadLease, a key that is cold everywhere is loaded by one instance
// of the fleet; the others wait for the value it announces.
func ExampleOptions_loadLease() {
	bus := new(hybridtest.Bus) // stand-ins for Redis, as in ExampleNew
	defer bus.Close()
	remote := &hybridtest.Remote{Bus: bus}

	var fleet []*hybrid.Cache[User]
	for range 3 {
		c, err := hybrid.New[User](hybrid.Options{
			Namespace: "users", Remote: remote, Bus: bus,
			Secret:    []byte("shared secret"), // the value travels in the message
			LoadLease: 2 * time.Second,
		})
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		fleet = append(fleet, c)
	}
	var loads atomic.Int64
	load := func(ctx context.Context, id string) (User, error) {
		loads.Add(1)
		time.Sleep(50 * time.Millisecond) // a slow query
		return User{ID: id, Name: "Ada"}, nil
	}
	var wg sync.WaitGroup
	for _, c := range fleet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.GetOrCreate(context.Background(), "42", load); err != nil {
				log.Fatal(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println("loads across 3 instances:", loads.Load())
	// Output:
	// loads across 3 instances: 1
}

func ExampleCache_SetMany() {
	bus := new(hybridtest.Bus)
	defer bus.Close()
	remote := &hybridtest.Remote{Bus: bus}
	users, err := hybrid.New[User](hybrid.Options{Namespace: "users", Remote: remote, Bus: bus, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	defer users.Close()

	ctx := context.Background()
	err = users.SetMany(ctx, map[string]User{"1": {ID: "1", Name: "Ada"}, "2": {ID: "2", Name: "Alan"}})
	fmt.Printf("%v %q\n", err, remote.Keys())
	// Before its first write, an instance makes sure the namespace's clear
	// record exists (a write of its own the first time); then one call,
	// which bumps the sequence counter of each key's hash slot.
	fmt.Println("write calls:", remote.Calls().Write)
	err = users.DeleteMany(ctx, []string{"1", ""})
	fmt.Println(errors.Is(err, hybrid.ErrEmptyKey)) // refused whole: nothing deleted
	// Output:
	// <nil> ["users:\x00clear" "users:\x00seq:{1gt}" "users:\x00seq:{1gw}" "users:1" "users:2"]
	// write calls: 2
	// true
}

func ExampleWithSkip() {
	bus := new(hybridtest.Bus)
	defer bus.Close()
	remote := &hybridtest.Remote{Bus: bus}
	o := hybrid.Options{Namespace: "users", Remote: remote, Bus: bus, Logger: slog.New(slog.DiscardHandler)}
	a, _ := hybrid.New[string](o)
	defer a.Close()
	b, _ := hybrid.New[string](o)
	defer b.Close()

	ctx := context.Background()
	_ = a.Set(ctx, "42", "Ada")
	_ = bus.Flush(ctx)
	v, _, _ := b.Get(ctx, "42") // now in b's L1
	fmt.Println(v)

	// Written to Redis, but not announced: b keeps its copy until its
	// LocalTTL ends, unless it reads past its L1.
	_ = a.Set(ctx, "42", "Ada Lovelace", hybrid.WithSkip(hybrid.SkipAnnounce))
	_ = bus.Flush(ctx)
	v, _, _ = b.Get(ctx, "42")
	fmt.Println(v)
	v, _, _ = b.Get(ctx, "42", hybrid.WithSkip(hybrid.SkipL1Read))
	fmt.Println(v)
	// Output:
	// Ada
	// Ada
	// Ada Lovelace
}

func ExampleStaleFrom() {
	remote := &hybridtest.Remote{}
	pages, err := hybrid.New[string](hybrid.Options{Namespace: "pages", Remote: remote, FailSafeMaxAge: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	defer pages.Close()
	ctx := context.Background()

	// The load asks the origin only for what changed since the version it
	// stored (an ETag here).
	load := func(ctx context.Context, key string) (string, error) {
		if s, ok := hybrid.StaleFrom[string](ctx, key); ok && s.Version == `"v7"` {
			fmt.Println("origin: 304 Not Modified")
			return "", hybrid.ErrNotModified
		}
		fmt.Println("origin: 200 OK")
		return "<html>home</html>", hybrid.SetVersion(ctx, key, `"v7"`)
	}
	if _, err := pages.GetOrCreate(ctx, "home", load); err != nil {
		log.Fatal(err)
	}
	// Expired (as at the end of its lifetime), it is kept by fail-safe:
	// the next load gets it, and its 304 makes it live again, in L1 and in
	// the shared tier, where only its expiry is rewritten.
	if err := pages.Expire(ctx, "home"); err != nil {
		log.Fatal(err)
	}
	v, err := pages.GetOrCreate(ctx, "home", load)
	if err != nil {
		log.Fatal(err)
	}
	e, _, _ := pages.GetEntry(ctx, "home")
	fmt.Println(v, e.Version, e.Stale, pages.Stats().Load.NotModified, remote.Calls().Touches)
	// Output:
	// origin: 200 OK
	// origin: 304 Not Modified
	// <html>home</html> "v7" false 1 1
}

func ExampleCache_GetEntry() {
	users, err := hybrid.New[User](hybrid.Options{Namespace: "users", Remote: &hybridtest.Remote{}, TTL: time.Hour, FailSafeMaxAge: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	defer users.Close()
	ctx := context.Background()
	if err := users.Set(ctx, "42", User{ID: "42", Name: "Ada"}, hybrid.WithTags("team:7")); err != nil {
		log.Fatal(err)
	}
	e, ok, err := users.GetEntry(ctx, "42")
	if err != nil || !ok {
		log.Fatal(ok, err)
	}
	fmt.Println(e.Value.Name, e.Tier, e.Tags, e.Stale, e.RemoteTTL > 59*time.Minute)
	// Output: Ada l1 [team:7] false true
}
