// Command invalidation shows cross-instance invalidation at work: three
// instances of one hybrid cache, each in its own OS process with its own
// L1, go-redis client and invalidate.Bus, hold one key in L1 while
// instance 1 changes it with Set, and the program prints when instances 2
// and 3 first serve the new version.
//
//	go run ./examples/invalidation                   # embedded Redis-compatible server
//	go run ./examples/invalidation -writes 200       # adds p50/p99/max of the delays
//	go run ./examples/invalidation -redis 127.0.0.1:6379 -writes 200
//
// newCache is the cache wiring every instance runs. The caches sign their
// messages (Options.Secret), so a Set's message carries the new value and a
// reader holding the key swaps it in without reading Redis; with
// -inline=false messages name the key only (Options.InlineMaxBytes -1), and
// readers drop it and read Redis again.
//
// The program is instance 1; it runs itself again for instances 2 and 3,
// which read the key whenever their cache has applied a message
// (Events.Invalidated), or, with -poll d, every d, spinning, as a cache user
// polling it would, and report each new version they serve (readers.go
// starts and stops them). A delay is the time from Set returning on
// instance 1 to a reader's Get returning the new version: a wall-clock
// difference between processes on one machine, negative when the message
// beat Set's reply. Without -redis the program starts miniredis in its own
// process, whose figures say little about Redis. It writes only under a
// namespace of its own and deletes its key at the end (the namespace's
// clear record and log stay, as for any namespace).
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// Product is the cached value. Version counts the changes made by Set.
type Product struct {
	ID         string
	PriceCents int
	Version    int
}

// key is the one key the program changes.
const key = "product:42"

// loadProduct stands in for the database: version 0.
func loadProduct(context.Context, string) (Product, error) {
	return Product{ID: "42", PriceCents: 999}, nil
}

// config is what every instance runs with. Readers get it on the first
// line of their stdin, which keeps the secret out of the command line and
// the environment.
type config struct {
	Redis     string
	Namespace string
	Secret    []byte // the same on every instance of the cache
	Inline    bool
	Poll      time.Duration
}

// newCache opens one instance's cache, on a client and a bus of its own,
// set up as the cache's startup advisor asks (New logs no warning).
// applied, if not nil, is called once the cache has applied another
// instance's message. closeAll closes the cache, then the bus and the
// client.
func newCache(ctx context.Context, cfg config, applied func()) (c *hybrid.Cache[Product], closeAll func(), err error) {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  cfg.Redis,
		ContextTimeoutEnabled: true,                   // l2's 250 ms read bound reaches the socket
		DialTimeout:           250 * time.Millisecond, // a dial outlives the call that started it
		DialerRetries:         1,                      // one attempt per dial, not 5
		MaxRetries:            1,
	})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("redis at %s: %w", cfg.Redis, err)
	}
	bus := invalidate.New(rdb, invalidate.Options{}) // one pub/sub connection, for every cache of the process
	o := hybrid.Options{
		Namespace: cfg.Namespace,
		Remote:    l2.New(rdb, l2.Options{}),
		Bus:       bus,
		Secret:    cfg.Secret, // signs messages, which may then carry values
		TTL:       time.Minute,
	}
	if !cfg.Inline {
		o.InlineMaxBytes = -1 // messages name the key only: peers drop their copy
	}
	if applied != nil {
		o.Events.Invalidated = func(hybrid.Op, []string) { applied() }
	}
	if c, err = hybrid.New[Product](o); err != nil {
		bus.Close()
		rdb.Close()
		return nil, nil, err
	}
	return c, func() { c.Close(); bus.Close(); rdb.Close() }, nil
}

// report is a line a reader writes: the version it first served and how
// (its first line says where GetOrCreate found the key), and, once its
// stdin ends, its Stats.
type report struct {
	Version int           `json:"v"`
	At      int64         `json:"at,omitempty"` // when Get returned it, Unix nanoseconds
	How     string        `json:"how"`
	Stats   *hybrid.Stats `json:"stats,omitempty"`
}

// How a reader came to serve a new version.
const (
	howSwapped = "swapped in from the message, no Redis read"
	howReread  = "dropped its copy, re-read Redis"
	howOther   = "in L1 without a Redis read, but no swap counted"
)

// runReader is instance 2 or 3: it reads the key until its stdin ends and
// reports each new version it serves.
func runReader(stdin io.Reader, stdout io.Writer) error {
	signal.Ignore(os.Interrupt) // the parent decides when to stop
	dec, out := json.NewDecoder(stdin), json.NewEncoder(stdout)
	var cfg config
	if err := dec.Decode(&cfg); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	ctx := context.Background()
	bell := make(chan struct{}, 1) // rings when the cache has applied a message
	c, closeAll, err := newCache(ctx, cfg, func() {
		select {
		case bell <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return err
	}
	defer closeAll()
	loads := c.Stats().Load.Calls
	p, err := c.GetOrCreate(ctx, key, loadProduct)
	if err != nil {
		return err
	}
	how := "from Redis, now in L1"
	if c.Stats().Load.Calls > loads {
		how = "from the loader, now in L1 and Redis"
	}
	if err := out.Encode(report{Version: p.Version, How: how}); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, stdin); close(done) }()
	for have, before := p.Version, c.Stats(); ; {
		select {
		case <-done:
			st := c.Stats()
			return out.Encode(report{Stats: &st})
		default:
		}
		p, ok, err := c.Get(ctx, key)
		now := time.Now()
		if err != nil {
			return err
		}
		if ok && p.Version > have {
			// Stats.Invalidations.Swapped moves just after the value does.
			after := c.Stats()
			for after.Invalidations.Swapped == before.Invalidations.Swapped && after.L2.Hits == before.L2.Hits && time.Since(now) < 100*time.Millisecond {
				runtime.Gosched()
				after = c.Stats()
			}
			r := report{Version: p.Version, At: now.UnixNano(), How: howOther}
			switch {
			case after.L2.Hits > before.L2.Hits:
				r.How = howReread
			case after.Invalidations.Swapped > before.Invalidations.Swapped:
				r.How = howSwapped
			}
			if err := out.Encode(r); err != nil {
				return err
			}
			have, before = p.Version, after
		}
		if cfg.Poll == 0 {
			select {
			case <-bell:
			case <-time.After(time.Millisecond): // in case the bell is late
			}
			continue
		}
		for next := now.Add(cfg.Poll); time.Now().Before(next); {
			runtime.Gosched() // time.Sleep cannot wait this briefly
		}
	}
}

// roleEnv marks a process the program started as a reader.
const roleEnv = "HYBRIDCACHE_EXAMPLE_INVALIDATION_ROLE"

func main() {
	log.SetFlags(0)
	if os.Getenv(roleEnv) == "reader" {
		if err := runReader(os.Stdin, os.Stdout); err != nil {
			log.Fatalf("reader: %v", err)
		}
		return
	}
	cfg := config{}
	flag.StringVar(&cfg.Redis, "redis", "", "Redis address (host:port); empty starts an embedded server")
	writes := flag.Int("writes", 1, "number of changes to make")
	flag.BoolVar(&cfg.Inline, "inline", true, "messages carry new values (false: they name the key only, and readers re-read Redis)")
	flag.DurationVar(&cfg.Poll, "poll", 0, "readers spin and call Get this often (0: when their cache has applied a message)")
	flag.Parse()
	if *writes < 1 || cfg.Poll < 0 {
		log.Fatal("-writes must be at least 1, -poll not negative")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, *writes, os.Stdout, os.Stderr); err != nil {
		if ctx.Err() != nil {
			log.Fatal("interrupted")
		}
		log.Fatal(err)
	}
}

// run is instance 1: it starts the readers, makes writes changes, and
// prints the timeline to out; the readers' logs go to errOut.
func run(ctx context.Context, cfg config, writes int, out, errOut io.Writer) error {
	if cfg.Redis == "" {
		m, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer m.Close()
		cfg.Redis = m.Addr()
		fmt.Fprintf(out, "Redis: none given, so an embedded miniredis at %s (in this process)\n", cfg.Redis)
		fmt.Fprintln(out, "NOTE: figures measured against miniredis are not Redis figures; use -redis host:port")
	} else {
		fmt.Fprintf(out, "Redis at %s\n", cfg.Redis)
	}
	cfg.Namespace = fmt.Sprintf("example-invalidation-%d-%d", os.Getpid(), time.Now().UnixNano())
	cfg.Secret = make([]byte, 32)
	rand.Read(cfg.Secret)
	writer, closeWriter, err := newCache(ctx, cfg, nil)
	if err != nil {
		return err
	}
	defer closeWriter()
	defer writer.Delete(context.Background(), key) // leave nothing behind on a shared server
	if _, err := writer.GetOrCreate(ctx, key, loadProduct); err != nil {
		return err
	}
	fmt.Fprintf(out, "instance 1 (pid %d) GetOrCreate: v0 from the loader, now in L1 and Redis\n", os.Getpid())
	readers, err := startReaders(ctx, cfg, errOut)
	defer stopReaders(readers, out, errOut)
	if err != nil {
		return err
	}
	for i, r := range readers {
		first, err := r.next()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "instance %d (pid %d) GetOrCreate: v%d %s\n", i+2, r.cmd.Process.Pid, first.Version, first.How)
	}
	messages := "signed messages carry the new value"
	if !cfg.Inline {
		messages = "signed messages name the key only"
	}
	fmt.Fprintf(out, "namespace %q, key %q, %s\n\n", cfg.Namespace, key, messages)

	const shown = 5 // writes printed in full
	var delays []time.Duration
	hows := map[string]int{}
	for v := 1; v <= writes; v++ {
		// A reader swaps a value in over a copy from an earlier
		// millisecond than its write: writes a few milliseconds apart, as
		// a product's price changes, are each swapped in.
		time.Sleep(3 * time.Millisecond)
		start := time.Now()
		if err := writer.Set(ctx, key, Product{ID: "42", PriceCents: 999 + v, Version: v}); err != nil {
			return err
		}
		set := time.Now()
		if v <= shown {
			fmt.Fprintf(out, "instance 1 Set v%d (took %s)\n", v, micros(set.Sub(start)))
		}
		for i, r := range readers {
			seen, err := r.next()
			if err != nil {
				return err
			}
			if seen.Version != v {
				return fmt.Errorf("instance %d served v%d after the Set of v%d", i+2, seen.Version, v)
			}
			d := time.Duration(seen.At - set.UnixNano())
			delays = append(delays, d)
			hows[seen.How]++
			if v <= shown {
				when := "after " + micros(d)
				if d < 0 {
					when = micros(-d) + " before Set returned on instance 1"
				}
				fmt.Fprintf(out, "    instance %d serves v%d %s (%s)\n", i+2, v, when, seen.How)
			}
		}
		if v == shown && writes > shown {
			fmt.Fprintf(out, "  ... writes %d to %d not shown\n", shown+1, writes)
		}
	}
	if writes > 1 {
		s := slices.Sorted(slices.Values(delays))
		at := func(p int) time.Duration { return s[max((len(s)*p+99)/100-1, 0)] } // nearest rank
		fmt.Fprintf(out, "\npropagation over %d writes to 2 readers: p50 %s  p99 %s  max %s\n", writes, micros(at(50)), micros(at(99)), micros(s[len(s)-1]))
		fmt.Fprintf(out, "  %d swapped in from the message, %d re-read from Redis, %d neither\n", hows[howSwapped], hows[howReread], hows[howOther])
	}
	fmt.Fprintln(out, "\ndelay: from Set returning on instance 1 to a reader's Get returning the new version,")
	fmt.Fprintln(out, "  a wall-clock difference between processes on one machine (negative when the message beat Set's reply)")
	if cfg.Poll > 0 {
		fmt.Fprintf(out, "  readers spin and call Get every %s, so a figure may be up to that late\n", micros(cfg.Poll))
	}
	// Let instance 1's own last message come back before counting.
	st := writer.Stats()
	for start := time.Now(); st.Invalidations.Own < st.Invalidations.Sent && time.Since(start) < time.Second; st = writer.Stats() {
		time.Sleep(time.Millisecond)
	}
	fmt.Fprintln(out, "\nstats (the readers' L1.Hits include their Gets while waiting):")
	printStats(out, 1, st)
	return nil
}
