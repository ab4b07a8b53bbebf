// Command invalidation shows cross-instance invalidation at work: three
// instances of one hybrid cache, each a separate OS process with its own L1,
// its own go-redis client and its own invalidate.Bus, hold one key in L1
// while instance 1 changes it, and the program prints when instances 2 and
// 3 first serve the new version.
//
//	go run ./examples/invalidation                   # embedded Redis-compatible server
//	go run ./examples/invalidation -writes 200       # adds p50/p99/max of the delays
//	go run ./examples/invalidation -redis 127.0.0.1:6379 -writes 200
//
// With no -redis flag it starts miniredis inside this process on a free
// port of 127.0.0.1. Figures measured against miniredis say little about
// Redis: use -redis to measure a real server. The program writes only keys
// under a namespace of its own, which it deletes at the end, and never
// flushes anything.
//
// The program runs itself again (os.Executable) for each instance and drives
// them over their stdin and stdout, one JSON object per line. Before each
// write, instances 2 and 3 read the key with GetOrCreate, so that they hold
// it in L1; then they watch it while instance 1 calls Set. The caches sign
// their messages (Options.Secret), so a Set's message carries the new value
// and a reader holding the key swaps it in without reading Redis. With
// -inline=false they have no Secret: messages carry only the key, and
// readers drop it and read Redis again on the next Get.
//
// A delay is the time from Set returning on instance 1 to a reader's Get
// returning the new version. The processes share one machine and so one
// clock, but the figures are wall-clock differences between processes, and
// a reader can see the value before Set returns on the writer (a negative
// delay). A reader calls Get when its "bell" rings: a second subscriber on
// its own bus, which the bus calls after the cache has handled the message;
// it calls Get every millisecond too, in case the bell is late. With -poll d
// a reader instead spins and calls Get every d, as a cache user polling it
// would; on a machine with few cores the spinning readers then compete with
// the writer and Redis for the CPU, which shows in the figures.
//
// Closing an instance's stdin makes it close its cache, bus and client and
// exit; the parent waits for that and kills an instance (by its pid) only
// if it has not exited after a few seconds.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// roleEnv marks a process started by the parent as an instance. Instances
// read their configuration from the first line of stdin, which keeps the
// secret out of the command line and the environment.
const roleEnv = "HYBRIDCACHE_EXAMPLE_INVALIDATION_ROLE"

const (
	instances   = 3                // instance 1 writes, the others read
	shown       = 5                // writes printed in full
	key         = "product:42"     // the one key the demo changes
	watchFor    = 5 * time.Second  // how long a reader waits for a version
	replyWithin = 15 * time.Second // how long the parent waits for a reply
	exitWithin  = 10 * time.Second // how long the parent waits for an exit
)

// Product is the cached value. Version counts the changes made by Set.
type Product struct {
	ID         string
	PriceCents int
	Version    int
}

// config is the first line an instance reads from stdin.
type config struct {
	ID        int
	Redis     string
	Namespace string
	Secret    []byte
	Poll      time.Duration
}

// command is a line from the parent to an instance.
type command struct {
	Op      string `json:"op"` // load, warm, watch, set, stats, delete
	Version int    `json:"v,omitempty"`
}

// reply is a line from an instance to the parent.
type reply struct {
	Op      string        `json:"op"` // as the command, or ready, watching
	ID      int           `json:"id,omitempty"`
	PID     int           `json:"pid,omitempty"`
	Version int           `json:"v"`
	Source  string        `json:"source,omitempty"` // where a read was served from
	At      int64         `json:"at,omitempty"`     // wall clock, Unix nanoseconds
	Took    time.Duration `json:"took,omitempty"`
	Swapped uint64        `json:"swapped,omitempty"` // Stats.Invalidations.Swapped delta
	L2Hits  uint64        `json:"l2hits,omitempty"`  // Stats.L2.Hits delta
	Stats   *hybrid.Stats `json:"stats,omitempty"`   // for stats
	Err     string        `json:"err,omitempty"`
}

func main() {
	log.SetFlags(0)
	if os.Getenv(roleEnv) == "instance" {
		if err := runInstance(); err != nil {
			log.Fatalf("instance: %v", err)
		}
		return
	}
	addr := flag.String("redis", "", "Redis address (host:port); empty starts an embedded server")
	writes := flag.Int("writes", 1, "number of changes to make")
	inline := flag.Bool("inline", true, "set Options.Secret, so that messages carry new values (false: readers drop the key and re-read Redis)")
	poll := flag.Duration("poll", 0, "readers spin and call Get this often while waiting for a change (0: when their bus delivers it)")
	flag.Parse()
	if *writes < 1 {
		log.Fatal("-writes must be at least 1")
	}
	if *poll < 0 {
		log.Fatal("-poll must not be negative")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *writes, *poll, *inline); err != nil {
		if ctx.Err() != nil {
			log.Fatal("interrupted")
		}
		log.Fatal(err)
	}
}

// run is the parent: it starts the instances, drives them and prints the
// timeline.
func run(ctx context.Context, addr string, writes int, poll time.Duration, inline bool) error {
	embedded := addr == ""
	if embedded {
		m, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer m.Close()
		addr = m.Addr()
		fmt.Printf("Redis: none given, so an embedded miniredis at %s (in this process)\n", addr)
		fmt.Println("NOTE: figures measured against miniredis are not Redis figures; use -redis host:port")
	} else {
		version, err := serverVersion(ctx, addr)
		if err != nil {
			return fmt.Errorf("redis at %s: %w", addr, err)
		}
		fmt.Printf("Redis: %s at %s\n", version, addr)
	}

	cfg := config{
		Redis:     addr,
		Namespace: fmt.Sprintf("example-invalidation-%d-%d", os.Getpid(), time.Now().UnixNano()),
		Poll:      poll,
	}
	messages := "messages carry only the key (no Options.Secret)"
	if inline {
		cfg.Secret = make([]byte, 32)
		if _, err := rand.Read(cfg.Secret); err != nil {
			return err
		}
		messages = "signed messages carry the new value (Options.Secret)"
	}
	insts, err := startAll(ctx, cfg)
	defer shutdown(insts)
	if err != nil {
		return err
	}
	pids := make([]string, len(insts))
	for i, in := range insts {
		pids[i] = fmt.Sprintf("%d (pid %d)", in.id, in.pid)
	}
	fmt.Printf("instances %s: each its own process, L1, go-redis client and bus\n", strings.Join(pids, ", "))
	fmt.Printf("namespace %q, key %q, %s\n\n", cfg.Namespace, key, messages)

	writer, readers := insts[0], insts[1:]
	r, err := writer.call(ctx, command{Op: "load"})
	if err != nil {
		return err
	}
	fmt.Printf("instance %d GetOrCreate: v%d %s\n", writer.id, r.Version, sourceText(r.Source))
	for _, in := range readers {
		r, err := in.call(ctx, command{Op: "warm"})
		if err != nil {
			return err
		}
		fmt.Printf("instance %d GetOrCreate: v%d %s\n", in.id, r.Version, sourceText(r.Source))
	}
	fmt.Println()

	delays := make([][]time.Duration, len(readers))
	var sinceCall []time.Duration
	var swapped, reread, other int
	for v := 1; v <= writes; v++ {
		show := v <= shown
		seen, err := change(ctx, writer, readers, v, show)
		if err != nil {
			return err
		}
		for i, s := range seen {
			delays[i] = append(delays[i], s.delay)
			sinceCall = append(sinceCall, s.sinceCall)
			switch s.how {
			case howSwapped:
				swapped++
			case howReread:
				reread++
			default:
				other++
			}
		}
		if v == shown && writes > shown {
			fmt.Printf("  ... writes %d to %d not shown\n", shown+1, writes)
		}
	}
	fmt.Println()

	if writes > 1 {
		var all []time.Duration
		early := 0
		for _, ds := range delays {
			all = append(all, ds...)
			for _, d := range ds {
				if d < 0 {
					early++
				}
			}
		}
		fmt.Printf("propagation over %d writes, from Set returning on instance 1:\n", writes)
		fmt.Printf("  %-16s %s  (%d before Set returned)\n", fmt.Sprintf("all %d reads:", len(all)), summary(all), early)
		for i, in := range readers {
			fmt.Printf("  %-16s %s\n", fmt.Sprintf("instance %d:", in.id), summary(delays[i]))
		}
		fmt.Printf("  from Set being called instead: %s\n", summary(sinceCall))
		fmt.Printf("  %d swapped in from the message, %d re-read from Redis", swapped, reread)
		if other > 0 {
			fmt.Printf(", %d neither", other)
		}
		fmt.Println()
	}
	fmt.Println("delay: from Set returning on instance 1 to a reader's Get returning the new version,")
	fmt.Println("  a wall-clock difference between processes on one machine (negative when the")
	if poll == 0 {
		fmt.Println("  message beat Set's reply); readers call Get once their bus has handed it to the cache")
	} else {
		fmt.Printf("  message beat Set's reply); readers spin and call Get every %s, so a figure may\n", micros(poll))
		fmt.Println("  be up to that late, and spinning readers slow the writer and Redis on few cores")
	}
	fmt.Println()

	if err := printStats(ctx, insts); err != nil {
		return err
	}
	// Leave nothing behind on a shared server.
	_, err = writer.call(ctx, command{Op: "delete"})
	return err
}

// How a reader came to serve a new version.
const (
	howSwapped = "swapped in from the message, no Redis read"
	howReread  = "dropped its copy, re-read Redis"
	howOther   = "in L1 without a Redis read, but no swap counted"
)

// observation is one reader's view of one write.
type observation struct {
	delay     time.Duration // from Set returning on the writer
	sinceCall time.Duration // from Set being called on the writer
	how       string
}

// change makes the readers hold the key in L1 and watch it while the writer
// sets version v, and returns what each reader saw. With show, it prints
// the timeline of the write.
func change(ctx context.Context, writer *instance, readers []*instance, v int, show bool) ([]observation, error) {
	for _, in := range readers {
		r, err := in.call(ctx, command{Op: "warm"})
		if err != nil {
			return nil, err
		}
		if r.Source != "L1" && v > 1 && show {
			fmt.Printf("  (instance %d GetOrCreate before the write: v%d %s)\n", in.id, r.Version, sourceText(r.Source))
		}
	}
	for _, in := range readers {
		if _, err := in.call(ctx, command{Op: "watch", Version: v}); err != nil {
			return nil, err
		}
	}
	set, err := writer.call(ctx, command{Op: "set", Version: v})
	if err != nil {
		return nil, err
	}
	if show {
		fmt.Printf("instance %d Set v%d (took %s)\n", writer.id, v, micros(set.Took))
	}
	obs := make([]observation, len(readers))
	for i, in := range readers {
		seen, err := in.recv(ctx, "watch")
		if err != nil {
			return nil, err
		}
		o := observation{delay: time.Duration(seen.At - set.At), how: howOther}
		o.sinceCall = o.delay + set.Took
		switch {
		case seen.L2Hits > 0:
			o.how = howReread
		case seen.Swapped > 0:
			o.how = howSwapped
		}
		obs[i] = o
		if show {
			when := "after " + micros(o.delay)
			if o.delay < 0 {
				when = micros(-o.delay) + " before Set returned on instance 1"
			}
			fmt.Printf("    instance %d serves v%d %s (%s)\n", in.id, seen.Version, when, o.how)
		}
	}
	return obs, nil
}

// printStats prints each instance's counters.
func printStats(ctx context.Context, insts []*instance) error {
	fmt.Println("stats (L1.Hits include the readers' Gets while watching):")
	for _, in := range insts {
		r, err := in.call(ctx, command{Op: "stats"})
		if err != nil {
			return err
		}
		s := r.Stats
		fmt.Printf("  instance %d: L1.Hits %d  L2.Hits %d  Load.Calls %d  Sent %d  Applied %d  Own %d  Swapped %d\n",
			in.id, s.L1.Hits, s.L2.Hits, s.Load.Calls, s.Invalidations.Sent, s.Invalidations.Applied, s.Invalidations.Own, s.Invalidations.Swapped)
		if s.Invalidations.Unauthentic+s.Invalidations.Invalid+s.Bus.Losses+s.L2.Errors+s.Invalidations.PublishErrors > 0 {
			fmt.Printf("    Unauthentic %d  Invalid %d  Bus.Losses %d  L2.Errors %d  PublishErrors %d\n",
				s.Invalidations.Unauthentic, s.Invalidations.Invalid, s.Bus.Losses, s.L2.Errors, s.Invalidations.PublishErrors)
		}
	}
	return nil
}

// serverVersion pings the server at addr and returns its name and version.
func serverVersion(ctx context.Context, addr string) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return "", err
	}
	info, _ := rdb.Info(ctx, "server").Result()
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "redis-server " + v, nil
		}
	}
	return "server", nil
}

// instance is the parent's handle on one instance process.
type instance struct {
	id, pid int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	enc     *json.Encoder
	replies chan reply // closed when stdout ends
	exited  chan error // cmd.Wait's result, after replies is closed
}

// startAll starts every instance and waits until each is ready. It returns
// the instances it started even with an error, so that the caller can stop
// them.
func startAll(ctx context.Context, cfg config) ([]*instance, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var insts []*instance
	for id := 1; id <= instances; id++ {
		in, err := start(exe, id, cfg)
		if err != nil {
			return insts, err
		}
		insts = append(insts, in)
	}
	for _, in := range insts {
		r, err := in.recv(ctx, "ready")
		if err != nil {
			return insts, err
		}
		in.pid = r.PID
	}
	return insts, nil
}

// start runs exe as instance id and sends it its configuration.
func start(exe string, id int, cfg config) (*instance, error) {
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), roleEnv+"=instance")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start instance %d: %w", id, err)
	}
	in := &instance{
		id: id, pid: cmd.Process.Pid, cmd: cmd, stdin: stdin, enc: json.NewEncoder(stdin),
		replies: make(chan reply), exited: make(chan error, 1),
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r reply
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				r = reply{Op: "garbled", Err: fmt.Sprintf("%q: %v", sc.Text(), err)}
			}
			in.replies <- r
		}
		close(in.replies)
		in.exited <- cmd.Wait() // after stdout is read to its end
	}()
	cfg.ID = id
	if err := in.enc.Encode(cfg); err != nil {
		return in, fmt.Errorf("configure instance %d: %w", id, err)
	}
	return in, nil
}

// call sends c and returns the reply to it.
func (in *instance) call(ctx context.Context, c command) (reply, error) {
	if err := in.enc.Encode(c); err != nil {
		return reply{}, fmt.Errorf("instance %d: %s: %w", in.id, c.Op, err)
	}
	if c.Op == "watch" {
		return in.recv(ctx, "watching")
	}
	return in.recv(ctx, c.Op)
}

// recv returns the next reply, which must be op.
func (in *instance) recv(ctx context.Context, op string) (reply, error) {
	t := time.NewTimer(replyWithin)
	defer t.Stop()
	select {
	case r, ok := <-in.replies:
		switch {
		case !ok:
			return r, fmt.Errorf("instance %d exited while the parent waited for %s", in.id, op)
		case r.Err != "":
			return r, fmt.Errorf("instance %d: %s: %s", in.id, r.Op, r.Err)
		case r.Op != op:
			return r, fmt.Errorf("instance %d: got %q, want %q", in.id, r.Op, op)
		}
		return r, nil
	case <-t.C:
		return reply{}, fmt.Errorf("instance %d: no %s after %v", in.id, op, replyWithin)
	case <-ctx.Done():
		return reply{}, ctx.Err()
	}
}

// shutdown closes every instance's stdin, which makes it close its cache and
// exit, and waits for them; an instance still running after exitWithin is
// killed by its pid.
func shutdown(insts []*instance) {
	if len(insts) == 0 {
		return
	}
	for _, in := range insts {
		in.stdin.Close()
		go func() {
			for range in.replies { // unread replies, if the run stopped early
			}
		}()
	}
	deadline := time.NewTimer(exitWithin)
	defer deadline.Stop()
	clean := 0
	for _, in := range insts {
		var err error
		select {
		case err = <-in.exited:
		case <-deadline.C:
			fmt.Fprintf(os.Stderr, "instance %d (pid %d) did not exit: killing it\n", in.id, in.cmd.Process.Pid)
			in.cmd.Process.Kill()
			err = <-in.exited
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "instance %d (pid %d): %v\n", in.id, in.cmd.Process.Pid, err)
			continue
		}
		clean++
	}
	fmt.Printf("\n%d of %d instances closed their cache and bus and exited\n", clean, len(insts))
}

// summary formats the percentiles of ds.
func summary(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("p50 %s  p99 %s  max %s", micros(percentile(s, 50)), micros(percentile(s, 99)), micros(s[len(s)-1]))
}

// percentile returns the p-th percentile (nearest rank) of sorted s.
func percentile(s []time.Duration, p int) time.Duration {
	i := (len(s)*p+99)/100 - 1
	return s[max(i, 0)]
}

// micros formats d in whole microseconds.
func micros(d time.Duration) string {
	return fmt.Sprintf("%dµs", d.Microseconds())
}

// sourceText says where a read was served from.
func sourceText(source string) string {
	switch source {
	case "L1":
		return "from L1"
	case "Redis":
		return "from Redis, now in L1"
	case "load":
		return "from the loader, now in L1 and Redis"
	}
	return "from " + source
}

// runInstance is one instance: a cache with its own L1, client and bus, run
// by commands on stdin until stdin ends.
func runInstance() error {
	signal.Ignore(os.Interrupt) // the parent decides when to stop
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	var cfg config
	if !in.Scan() {
		return errors.New("no configuration on stdin")
	}
	if err := json.Unmarshal(in.Bytes(), &cfg); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	ctx := context.Background()

	// The client as the cache's startup advisor asks for it: l2's time
	// bounds reach the socket, and a dial gives up at once.
	rdb := redis.NewClient(&redis.Options{
		Addr:                  cfg.Redis,
		ContextTimeoutEnabled: true,
		DialTimeout:           250 * time.Millisecond,
		DialerRetries:         1,
		MaxRetries:            1,
	})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", cfg.Redis, err)
	}
	bus := invalidate.New(rdb, invalidate.Options{})
	defer bus.Close()
	channel := "hybridcache:" + cfg.Namespace
	c, err := hybrid.New[Product](hybrid.Options{
		Namespace: cfg.Namespace,
		Remote:    l2.New(rdb, l2.Options{}),
		Bus:       bus,
		Channel:   channel,
		Secret:    cfg.Secret,
		TTL:       time.Minute,
	})
	if err != nil {
		return err
	}
	defer c.Close()
	// The bell is a second subscriber on the cache's channel. The bus calls
	// subscribers in turn, so it rings once the cache has handled a message.
	bell := make(chan struct{}, 1)
	unsub, err := bus.Subscribe(ctx, channel, func([]byte) {
		select {
		case bell <- struct{}{}:
		default:
		}
	}, func(bool) {})
	if err != nil {
		return err
	}
	defer unsub()

	if err := out.Encode(reply{Op: "ready", ID: cfg.ID, PID: os.Getpid()}); err != nil {
		return err
	}
	for in.Scan() {
		var cmd command
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			return fmt.Errorf("command %q: %w", in.Text(), err)
		}
		var r reply
		if cmd.Op == "watch" {
			r, err = watch(ctx, c, cmd.Version, cfg.Poll, bell, func() error {
				return out.Encode(reply{Op: "watching"})
			})
		} else {
			r, err = handle(ctx, c, cmd)
		}
		r.Op = cmd.Op
		if err != nil {
			r.Err = err.Error()
		}
		if err := out.Encode(r); err != nil {
			return err
		}
	}
	return in.Err() // nil at the end of stdin: the deferred closes run
}

// handle runs one command other than watch on c.
func handle(ctx context.Context, c *hybrid.Cache[Product], cmd command) (reply, error) {
	before := c.Stats()
	switch cmd.Op {
	case "load", "warm":
		p, err := c.GetOrCreate(ctx, key, func(context.Context, string) (Product, error) {
			return Product{ID: "42", PriceCents: 999}, nil // v0, as from a database
		})
		return reply{Version: p.Version, Source: source(before, c.Stats())}, err
	case "set":
		p := Product{ID: "42", PriceCents: 999 + cmd.Version, Version: cmd.Version}
		start := time.Now()
		err := c.Set(ctx, key, p)
		end := time.Now()
		return reply{Version: cmd.Version, At: end.UnixNano(), Took: end.Sub(start)}, err
	case "stats":
		// Let this instance's own last message come back before counting.
		for start := time.Now(); before.Invalidations.Own < before.Invalidations.Sent && time.Since(start) < time.Second; {
			time.Sleep(time.Millisecond)
			before = c.Stats()
		}
		return reply{Stats: &before}, nil
	case "delete":
		return reply{}, c.Delete(ctx, key)
	}
	return reply{}, fmt.Errorf("unknown command %q", cmd.Op)
}

// watch calls started, then Get until it returns version v or later, and
// reports when it did and how the new version got into L1. With poll 0 it
// calls Get when the bell rings, and every millisecond in case it does not.
// Otherwise it calls Get every poll and spins in between: time.Sleep cannot
// wait this briefly on most systems.
func watch(ctx context.Context, c *hybrid.Cache[Product], v int, poll time.Duration, bell <-chan struct{}, started func() error) (reply, error) {
	select {
	case <-bell: // an old ring
	default:
	}
	before := c.Stats()
	if err := started(); err != nil {
		return reply{}, err
	}
	deadline := time.Now().Add(watchFor)
	for {
		p, ok, err := c.Get(ctx, key)
		now := time.Now()
		if err != nil {
			return reply{}, err
		}
		if ok && p.Version >= v {
			// Stats.Invalidations.Swapped moves just after the value does.
			after := c.Stats()
			for after.Invalidations.Swapped == before.Invalidations.Swapped && after.L2.Hits == before.L2.Hits && time.Since(now) < 100*time.Millisecond {
				runtime.Gosched()
				after = c.Stats()
			}
			return reply{
				Version: p.Version,
				At:      now.UnixNano(),
				Swapped: after.Invalidations.Swapped - before.Invalidations.Swapped,
				L2Hits:  after.L2.Hits - before.L2.Hits,
			}, nil
		}
		if now.After(deadline) {
			return reply{}, fmt.Errorf("still no v%d after %v (have v%d)", v, watchFor, p.Version)
		}
		if poll == 0 {
			select {
			case <-bell:
			case <-time.After(time.Millisecond):
			}
			continue
		}
		for next := now.Add(poll); time.Now().Before(next); {
			runtime.Gosched()
		}
	}
}

// source says which tier answered between two snapshots of Stats.
func source(before, after hybrid.Stats) string {
	switch {
	case after.Load.Calls > before.Load.Calls:
		return "load"
	case after.L2.Hits > before.L2.Hits:
		return "Redis"
	case after.L1.Hits > before.L1.Hits:
		return "L1"
	}
	return "nowhere"
}
