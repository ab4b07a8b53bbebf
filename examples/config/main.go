// Command config shows the "config object read per request" pattern: a
// service consults a 40 KiB configuration on every request through a
// hybrid.Cache, and when an operator publishes a new version, every
// instance serves it within milliseconds, without reading Redis per
// request.
//
//	go run ./examples/config                        # embedded Redis-compatible server
//	go run ./examples/config -updates 10
//	go run ./examples/config -redis 127.0.0.1:6379
//
// The program runs several instances of one service in this process, each
// with its own go-redis client, invalidate.Bus and cache, as separate
// processes would have. Their request goroutines read the key "current" at
// a fixed rate (-rate requests per second per instance). Instance 1 then
// publishes new versions with Set. The caches sign their messages
// (Options.Secret), so a Set's message carries the new value and the other
// instances swap it into L1 without a Redis read. For each version the
// program prints when each instance applied the message and when one of its
// requests first got the new version, counted from the moment Set was
// called. Requests are spaced, so the second figure includes the wait for
// the next request.
//
// A peer's delay includes decoding the value carried by the message, once
// per version: with -codec msgpack that is about twice as fast as JSON.
//
// It then measures what one read costs, from L1 and, for comparison, as a
// Redis GET plus a decode on every request, and counts the Redis reads the
// request goroutines made (Stats.L2.Hits + Stats.L2.Misses): none after the
// first read of each instance. Figures measured against the embedded
// miniredis are not Redis figures; use -redis for those.
//
// The program writes only keys under a namespace of its own and never
// flushes anything. Its values expire within a minute; the namespace's
// clear record and log stay, as for any namespace.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// key is the one key the configuration lives under.
const key = "current"

const (
	ttl        = time.Minute     // lifetime of what the program writes to Redis
	waitFor    = 5 * time.Second // how long to wait for a version or a message
	redisCalls = 3 * time.Second // bound on each Redis call the program makes itself
)

// Config is the configuration a service consults on every request: feature
// flags and per-route rules. Version counts the operator's changes.
type Config struct {
	Version  int             `json:"version"`
	Flags    map[string]Flag `json:"flags"`
	Services []Service       `json:"services"`
}

// Flag is a feature flag rolled out to a share of users.
type Flag struct {
	On      bool     `json:"on"`
	Percent int      `json:"percent"`         // share of users, 0 to 100
	Allow   []string `json:"allow,omitempty"` // tenants that always have it
}

// Service holds the rules for one upstream service.
type Service struct {
	Name      string  `json:"name"`
	TimeoutMS int     `json:"timeout_ms"`
	Retries   int     `json:"retries"`
	Routes    []Route `json:"routes"`
}

// Route is the rule for one path of a service.
type Route struct {
	Method    string `json:"method"`
	Path      string `json:"path"`
	RateLimit int    `json:"rate_limit"` // requests per second
	Auth      string `json:"auth"`
	Cache     bool   `json:"cache"`
}

// The shape of every version: about 40 KiB as JSON, 32 KiB as msgpack.
const (
	numFlags    = 240
	numServices = 16
	numRoutes   = 14 // per service
)

// flagNames are the names of the flags, the same in every version.
var flagNames = func() []string {
	names := make([]string, numFlags)
	for i := range names {
		names[i] = fmt.Sprintf("feature.%03d.enabled", i)
	}
	return names
}()

// newConfig returns version v of the configuration. The same v always
// gives the same value; versions differ in their rollouts and rules.
func newConfig(v int) *Config {
	r := mrand.New(mrand.NewPCG(42, uint64(v)))
	c := &Config{Version: v, Flags: make(map[string]Flag, numFlags)}
	for _, name := range flagNames {
		f := Flag{On: r.IntN(4) != 0, Percent: r.IntN(101)}
		for range r.IntN(3) {
			f.Allow = append(f.Allow, fmt.Sprintf("tenant-%04d", r.IntN(10000)))
		}
		c.Flags[name] = f
	}
	methods := [...]string{"GET", "POST", "PUT", "DELETE"}
	auths := [...]string{"none", "session", "token", "mtls"}
	for s := range numServices {
		svc := Service{
			Name:      fmt.Sprintf("service-%02d", s),
			TimeoutMS: 100 + 50*r.IntN(40),
			Retries:   r.IntN(4),
		}
		for p := range numRoutes {
			svc.Routes = append(svc.Routes, Route{
				Method:    methods[r.IntN(len(methods))],
				Path:      fmt.Sprintf("/api/v%d/service-%02d/resource-%02d/{id}", 1+r.IntN(3), s, p),
				RateLimit: 10 * (1 + r.IntN(500)),
				Auth:      auths[r.IntN(len(auths))],
				Cache:     r.IntN(2) == 0,
			})
		}
		c.Services = append(c.Services, svc)
	}
	return c
}

// Enabled reports whether the flag name is on for user.
func (c *Config) Enabled(name string, user int) bool {
	f, ok := c.Flags[name]
	return ok && f.On && user%100 < f.Percent
}

// Limit returns the rate limit of route p of service s.
func (c *Config) Limit(s, p int) int {
	svc := c.Services[s%len(c.Services)]
	return svc.Routes[p%len(svc.Routes)].RateLimit
}

// handle stands in for a request handler's use of the configuration: a flag
// and a rule for one user.
func handle(c *Config, user int) int {
	if c.Enabled(flagNames[user%len(flagNames)], user) {
		return c.Limit(user, user/7)
	}
	return 0
}

// source stands in for where the operator keeps the configuration (a
// database, a file under version control). The cache loads from it only
// when Redis has no value either.
type source struct {
	cur atomic.Pointer[Config]
}

// load is the cache's load function.
func (s *source) load(context.Context, string) (*Config, error) {
	c := s.cur.Load()
	if c == nil {
		return nil, errors.New("no configuration published yet")
	}
	return c, nil
}

// config is what the flags set.
type config struct {
	Redis     string        // Redis address; empty: an embedded miniredis
	Codec     string        // "json" or "msgpack"
	Instances int           // instances of the service
	Readers   int           // request goroutines per instance
	Rate      int           // requests per second per instance
	Updates   int           // versions published after the first
	Every     time.Duration // time between two versions
	Reads     int           // reads from L1 in the cost measurement
	GetReads  int           // Redis GETs in the cost measurement
	Timeout   time.Duration // bound on the whole run
}

// codecs are the codecs -codec names.
var codecs = map[string]hybrid.Codec{"json": codec.JSON{}, "msgpack": codec.Msgpack{}}

// errBadFlags is parse's error for a command line that errOut has already
// been told about.
var errBadFlags = errors.New("bad flags")

// parse reads the command line. Usage and flag errors go to errOut.
func parse(args []string, errOut io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&cfg.Redis, "redis", "", "Redis address (host:port); empty starts an embedded server")
	fs.StringVar(&cfg.Codec, "codec", "json", "how values are stored and sent: json or msgpack")
	fs.IntVar(&cfg.Instances, "instances", 3, "instances of the service (2 or more)")
	fs.IntVar(&cfg.Readers, "readers", 4, "request goroutines per instance")
	fs.IntVar(&cfg.Rate, "rate", 2730, "requests per second per instance")
	fs.IntVar(&cfg.Updates, "updates", 3, "new versions to publish")
	fs.DurationVar(&cfg.Every, "every", 300*time.Millisecond, "time between two versions")
	fs.IntVar(&cfg.Reads, "reads", 200000, "reads from L1 to time")
	fs.IntVar(&cfg.GetReads, "gets", 200, "Redis GETs to time, for comparison")
	fs.DurationVar(&cfg.Timeout, "timeout", 30*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, errBadFlags
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case codecs[cfg.Codec] == nil:
		return cfg, fmt.Errorf("-codec %q: want json or msgpack", cfg.Codec)
	case cfg.Instances < 2:
		return cfg, errors.New("-instances must be at least 2")
	case cfg.Readers < 1:
		return cfg, errors.New("-readers must be at least 1")
	case cfg.Rate < 1:
		return cfg, errors.New("-rate must be at least 1")
	case cfg.Updates < 1:
		return cfg, errors.New("-updates must be at least 1")
	case cfg.Every < 0:
		return cfg, errors.New("-every must not be negative")
	case cfg.Reads < 1 || cfg.GetReads < 1:
		return cfg, errors.New("-reads and -gets must be at least 1")
	case cfg.Timeout <= 0:
		return cfg, errors.New("-timeout must be positive")
	}
	return cfg, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errBadFlags):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "config:", err)
		os.Exit(1)
	}
}

// run parses args, starts an embedded server unless -redis is given, and
// runs the demonstration, writing its account to w.
func run(ctx context.Context, args []string, w io.Writer) error {
	cfg, err := parse(args, os.Stderr)
	if err != nil {
		return err
	}
	if cfg.Redis == "" {
		m, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer m.Close()
		cfg.Redis = m.Addr()
		fmt.Fprintf(w, "Redis: none given, so an embedded miniredis at %s (in this process)\n", cfg.Redis)
		fmt.Fprintln(w, "NOTE: figures measured against miniredis are not Redis figures; use -redis host:port")
	} else {
		fmt.Fprintf(w, "Redis: %s\n", cfg.Redis)
	}
	_, err = demo(ctx, cfg, w)
	return err
}

// result is what a demonstration ended with.
type result struct {
	Last      int              // the version published last
	Instances []instanceResult // in instance order
	Cost      costResult       // what one read costs
}

// instanceResult is one instance's part of a result.
type instanceResult struct {
	Final    int          // the version Get returned at the end
	Requests uint64       // requests served while versions were published
	Errors   uint64       // requests whose GetOrCreate failed
	During   hybrid.Stats // counter increases over the same time
}

// RedisReads is how many reads of the shared tier the requests made.
func (r instanceResult) RedisReads() uint64 { return r.During.L2.Hits + r.During.L2.Misses }

// instance is one instance of the service: its cache, with its own client
// and bus, and what its requests saw.
type instance struct {
	id    int
	rdb   *redis.Client
	bus   *invalidate.Bus
	cache *hybrid.Cache[*Config]

	seen     []atomic.Int64 // seen[v]: when a request first got version v (see now)
	applied  atomic.Int64   // when a message from another instance was last applied
	requests atomic.Uint64
	errors   atomic.Uint64
}

// open starts instance id of the service in namespace ns.
func open(ctx context.Context, id int, cfg config, ns string, secret []byte) (*instance, error) {
	addr, versions := cfg.Redis, cfg.Updates+1
	in := &instance{id: id, seen: make([]atomic.Int64, versions+1)}
	// The client as the cache's startup advisor asks for it: l2's time
	// bounds reach the socket, and a dial gives up at once.
	in.rdb = redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           250 * time.Millisecond,
		DialerRetries:         1,
		MaxRetries:            1,
	})
	pctx, cancel := context.WithTimeout(ctx, redisCalls)
	defer cancel()
	if err := in.rdb.Ping(pctx).Err(); err != nil {
		in.rdb.Close()
		return nil, fmt.Errorf("redis at %s: %w", addr, err)
	}
	in.bus = invalidate.New(in.rdb, invalidate.Options{})
	var err error
	in.cache, err = hybrid.New[*Config](hybrid.Options{
		Namespace:   ns,
		Remote:      l2.New(in.rdb, l2.Options{ReadTimeout: redisCalls, WriteTimeout: redisCalls}),
		Bus:         in.bus,
		Secret:      secret,
		Codec:       codecs[cfg.Codec],
		TTL:         ttl,
		LoadTimeout: redisCalls,
		Events: hybrid.Events{
			Invalidated: func(hybrid.Op, []string) { in.applied.Store(now()) },
		},
	})
	if err != nil {
		in.bus.Close()
		in.rdb.Close()
		return nil, err
	}
	return in, nil
}

// close closes the cache, then the bus and the client it used.
func (in *instance) close() {
	in.cache.Close()
	in.bus.Close()
	in.rdb.Close()
}

// serve runs one request goroutine: rate/readers requests per second until
// stop is done. Each reads the configuration from the cache; ctx is for
// those reads.
func (in *instance) serve(ctx context.Context, stop <-chan struct{}, src *source, every time.Duration, user int) {
	load := src.load
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := 0
	for {
		select {
		case <-tick.C:
		case <-stop:
			return
		}
		c, err := in.cache.GetOrCreate(ctx, key, load)
		if err != nil {
			in.errors.Add(1)
			continue
		}
		handle(c, user)
		user += 7
		in.requests.Add(1)
		if c.Version != last && c.Version < len(in.seen) {
			last = c.Version
			in.seen[c.Version].CompareAndSwap(0, now())
		}
	}
}

// demo runs cfg.Instances instances against the Redis at cfg.Redis,
// publishes cfg.Updates new versions through the first one while requests
// read the configuration on all of them, and measures what a read costs.
func demo(ctx context.Context, cfg config, w io.Writer) (result, error) {
	var res result
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	ns, secret, err := newNamespace()
	if err != nil {
		return res, err
	}
	versions := cfg.Updates + 1
	insts := make([]*instance, 0, cfg.Instances)
	defer func() {
		for _, in := range insts {
			in.close()
		}
	}()
	for id := 1; id <= cfg.Instances; id++ {
		in, err := open(ctx, id, cfg, ns, secret)
		if err != nil {
			return res, fmt.Errorf("instance %d: %w", id, err)
		}
		insts = append(insts, in)
	}
	writer := insts[0]
	defer cleanUp(writer, ns)

	first := newConfig(1)
	raw, err := codecs[cfg.Codec].Marshal(first)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(w, "configuration: %s as %s (%d feature flags, %d services with %d route rules), key %q in namespace %q\n",
		kib(len(raw)), cfg.Codec, numFlags, numServices, numServices*numRoutes, key, ns)
	fmt.Fprintf(w, "%d instances, each with its own go-redis client, bus and cache; %d request goroutines each, %d requests/s per instance\n",
		cfg.Instances, cfg.Readers, cfg.Rate)
	fmt.Fprintln(w, "signed messages carry the new value (Options.Secret), so instances swap it in without reading Redis")
	fmt.Fprintln(w)

	// Version 1, and every instance holds it in L1.
	src := new(source)
	src.cur.Store(first)
	start := time.Now()
	if err := writer.cache.Set(ctx, key, first); err != nil {
		return res, err
	}
	warm := []string{fmt.Sprintf("instance %d Set it (%s)", writer.id, ms(time.Since(start)))}
	for _, in := range insts[1:] {
		// A fill that overlaps a message for its key is not kept in L1 (no
		// stale fill), so read only once the message of the Set is applied.
		if err := settle(ctx, in); err != nil {
			return res, err
		}
		before := in.cache.Stats()
		c, err := in.cache.GetOrCreate(ctx, key, src.load)
		if err != nil {
			return res, fmt.Errorf("instance %d: %w", in.id, err)
		}
		warm = append(warm, fmt.Sprintf("instance %d got v%d %s", in.id, c.Version, from(before, in.cache.Stats())))
	}
	fmt.Fprintf(w, "v1: %s\n", strings.Join(warm, "; "))

	// Requests from here on; the counters now should not see Redis reads.
	before := make([]hybrid.Stats, len(insts))
	for i, in := range insts {
		before[i] = in.cache.Stats()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	every := max(time.Duration(int64(time.Second)*int64(cfg.Readers)/int64(cfg.Rate)), time.Microsecond)
	for _, in := range insts {
		for r := range cfg.Readers {
			wg.Go(func() { in.serve(ctx, stop, src, every, r) })
		}
	}
	reading := time.Now()
	stopped := false
	stopReading := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopReading()

	for v := 2; v <= versions; v++ {
		if err := pause(ctx, cfg.Every); err != nil {
			return res, err
		}
		if err := update(ctx, w, insts, src, v); err != nil {
			return res, err
		}
	}
	if err := pause(ctx, cfg.Every); err != nil {
		return res, err
	}
	stopReading()
	elapsed := time.Since(reading)

	res.Last = versions
	fmt.Fprintf(w, "\nrequests while versions changed (%s):\n", ms(elapsed))
	for i, in := range insts {
		ir := instanceResult{
			Requests: in.requests.Load(),
			Errors:   in.errors.Load(),
			During:   delta(before[i], in.cache.Stats()),
		}
		c, ok, err := in.cache.Get(ctx, key)
		if err != nil {
			return res, fmt.Errorf("instance %d: %w", in.id, err)
		}
		if ok {
			ir.Final = c.Version
		}
		res.Instances = append(res.Instances, ir)
		fmt.Fprintf(w, "  instance %d: %d requests, %d Redis reads, %d loads, %d values swapped in, %d errors; serves v%d\n",
			in.id, ir.Requests, ir.RedisReads(), ir.During.Load.Calls, ir.During.Invalidations.Swapped, ir.Errors, ir.Final)
	}

	res.Cost, err = cost(ctx, w, insts[1], src, ns, raw, cfg)
	return res, err
}

// update publishes version v through the first instance and reports when
// each instance served it.
func update(ctx context.Context, w io.Writer, insts []*instance, src *source, v int) error {
	next := newConfig(v)
	before := make([]hybrid.Stats, len(insts))
	for i, in := range insts {
		before[i] = in.cache.Stats()
		in.applied.Store(0)
	}
	src.cur.Store(next) // the operator's change, then its announcement
	start := now()
	if err := insts[0].cache.Set(ctx, key, next); err != nil {
		return err
	}
	took := time.Duration(now() - start)
	fmt.Fprintf(w, "v%d: instance %d Set it (%s); from the call of Set:\n", v, insts[0].id, ms(took))

	deadline := time.Now().Add(waitFor)
	for i, in := range insts {
		for in.seen[v].Load() == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("instance %d: no request got v%d within %v", in.id, v, waitFor)
			}
			if err := pause(ctx, 100*time.Microsecond); err != nil {
				return err
			}
		}
		served := time.Duration(in.seen[v].Load() - start)
		if i == 0 {
			fmt.Fprintf(w, "  instance %d served it after %s (its own Set: read-your-writes)\n", in.id, ms(served))
			continue
		}
		// The counters move once the message is applied, a moment after
		// the value.
		if err := settle(ctx, in); err != nil {
			return err
		}
		how := "message applied after " + ms(time.Duration(in.applied.Load()-start))
		switch d := delta(before[i], in.cache.Stats()); {
		case d.Invalidations.Swapped > 0:
			how += ", value swapped in, no Redis read"
		case d.L2.Hits > 0:
			how += ", dropped and read again from Redis"
		}
		fmt.Fprintf(w, "  instance %d served it after %s (%s)\n", in.id, ms(served), how)
	}
	return nil
}

// costResult is what one read costs, from the cache and from Redis.
type costResult struct {
	CacheNs, CacheAllocs float64 // per GetOrCreate served from L1
	CacheRedisReads      uint64  // shared-tier reads over cfg.Reads calls
	GetNs, GetAllocs     float64 // per Redis GET and decode
}

// settle waits until in has applied a message from another instance since
// in.applied was last 0.
func settle(ctx context.Context, in *instance) error {
	deadline := time.Now().Add(waitFor)
	for in.applied.Load() == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("instance %d: no message applied within %v", in.id, waitFor)
		}
		if err := pause(ctx, 100*time.Microsecond); err != nil {
			return err
		}
	}
	return nil
}

// cost measures one read: from in's L1 and, for comparison, as a Redis GET
// of the same bytes and a decode, as a service without the cache would do
// on every request.
func cost(ctx context.Context, w io.Writer, in *instance, src *source, ns string, raw []byte, cfg config) (costResult, error) {
	var res costResult
	load, dec := src.load, codecs[cfg.Codec]
	var sink int
	before := in.cache.Stats()
	var err error
	res.CacheNs, res.CacheAllocs, err = measure(cfg.Reads, func() error {
		c, err := in.cache.GetOrCreate(ctx, key, load)
		if err == nil {
			sink += c.Version
		}
		return err
	})
	if err != nil {
		return res, err
	}
	d := delta(before, in.cache.Stats())
	res.CacheRedisReads = d.L2.Hits + d.L2.Misses

	rawKey := ns + ":raw"
	sctx, cancel := context.WithTimeout(ctx, redisCalls)
	defer cancel()
	if err := in.rdb.Set(sctx, rawKey, raw, ttl).Err(); err != nil {
		return res, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redisCalls)
		defer cancel()
		in.rdb.Del(ctx, rawKey)
	}()
	res.GetNs, res.GetAllocs, err = measure(cfg.GetReads, func() error {
		b, err := in.rdb.Get(ctx, rawKey).Bytes()
		if err != nil {
			return err
		}
		var c Config
		if err := dec.Unmarshal(b, &c); err != nil {
			return err
		}
		sink += c.Version
		return nil
	})
	if err != nil {
		return res, err
	}
	_ = sink

	fmt.Fprintf(w, "\none read on instance %d, one goroutine:\n", in.id)
	fmt.Fprintf(w, "  %-24s %10.0f ns/read  %8.2f allocs/read  %d Redis reads in %d reads\n",
		"GetOrCreate (L1 hit):", res.CacheNs, res.CacheAllocs, res.CacheRedisReads, cfg.Reads)
	fmt.Fprintf(w, "  %-24s %10.0f ns/read  %8.2f allocs/read  %s from Redis per read\n",
		"Redis GET + "+cfg.Codec+" decode:", res.GetNs, res.GetAllocs, kib(len(raw)))
	fmt.Fprintf(w, "  the cache's read is %.0fx cheaper\n", res.GetNs/res.CacheNs)
	return res, nil
}

// measure calls f n times and returns the mean time per call, then calls
// it n times more with GOMAXPROCS 1, as testing.AllocsPerRun does, and
// returns the mean number of heap allocations per call. Allocations made
// meanwhile by other goroutines count too.
func measure(n int, f func() error) (nsPerOp, allocsPerOp float64, err error) {
	if err := f(); err != nil { // warm up
		return 0, 0, err
	}
	start := time.Now()
	for range n {
		if err := f(); err != nil {
			return 0, 0, err
		}
	}
	nsPerOp = float64(time.Since(start).Nanoseconds()) / float64(n)

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range n {
		if err := f(); err != nil {
			return 0, 0, err
		}
	}
	runtime.ReadMemStats(&m1)
	return nsPerOp, float64(m1.Mallocs-m0.Mallocs) / float64(n), nil
}

// cleanUp deletes the configuration, which leaves a tombstone in Redis
// until it expires.
func cleanUp(in *instance, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), redisCalls)
	defer cancel()
	if err := in.cache.Delete(ctx, key); err != nil {
		fmt.Fprintf(os.Stderr, "config: delete %s:%s: %v\n", ns, key, err)
	}
}

// newNamespace returns a namespace of this run's own and a secret to sign
// its messages with.
func newNamespace() (string, []byte, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", nil, err
	}
	var id [4]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", nil, err
	}
	return "example-config-" + hex.EncodeToString(id[:]), secret, nil
}

// epoch is the origin of now.
var epoch = time.Now()

// now is the time since the program started on the monotonic clock, in
// nanoseconds; never 0.
func now() int64 { return int64(time.Since(epoch)) + 1 }

// pause waits for d or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// delta returns the counters of after less those of before, for the
// counters the program reports.
func delta(before, after hybrid.Stats) hybrid.Stats {
	var d hybrid.Stats
	d.L1.Hits = after.L1.Hits - before.L1.Hits
	d.L2.Hits = after.L2.Hits - before.L2.Hits
	d.L2.Misses = after.L2.Misses - before.L2.Misses
	d.Load.Calls = after.Load.Calls - before.Load.Calls
	d.Invalidations.Swapped = after.Invalidations.Swapped - before.Invalidations.Swapped
	d.Invalidations.Applied = after.Invalidations.Applied - before.Invalidations.Applied
	return d
}

// from says which tier answered between two snapshots of Stats.
func from(before, after hybrid.Stats) string {
	switch d := delta(before, after); {
	case d.Load.Calls > 0:
		return "from the source (a load)"
	case d.L2.Hits > 0:
		return "from Redis (one read)"
	case d.L1.Hits > 0:
		return "from L1"
	}
	return "from nowhere"
}

// ms formats d in milliseconds, to the microsecond.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d.Microseconds())/1000)
}

// kib formats n bytes in KiB.
func kib(n int) string {
	return fmt.Sprintf("%.1f KiB", float64(n)/1024)
}
