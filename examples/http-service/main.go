// Command http-service is a small HTTP service with a hybrid cache in front
// of a slow product lookup, and the cache's metrics in Prometheus format
// through OpenTelemetry (package hybridotel).
//
//	go run .                          # embedded Redis-compatible server, http://127.0.0.1:8080
//	go run . -redis 127.0.0.1:6379    # a real Redis
//	go run . -selftest                # serve on a free port, make some requests, print, exit
//
// Endpoints:
//
//	GET /products/{id}   the product as JSON; ids 1 to 1000, others are 404
//	GET /metrics         the hybridcache_* metrics, Prometheus text format
//	GET /                the cache's hit ratio
//	GET /readyz          503 until the warm start is done, then 200
//	GET /debug/cache/    the cache's stats, hot keys, and what it holds for a
//	                     key, as JSON (package hybridhttp):
//	                     /debug/cache/stats, /debug/cache/hotkeys?n=10,
//	                     /debug/cache/explain?key=7; behind debug
//	                     authentication in a real service
//
// At start it warms its cache from the hot set that running instances
// record in Redis every 30 seconds (hybrid.Options.HotSetEvery), and only
// then reports ready, so a restart or a new instance takes traffic warm.
// While serving, it logs the hit ratio every 10 seconds when it changed.
//
// Every instance of the service must sign its cache's messages with the
// same secret: set CACHE_SECRET (in production, from a secret store). Left
// empty, a random one is drawn, which suits a single instance.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridhttp"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
	hybridotel "github.com/hybridcache/hybridcache/otel"
)

// Product is the cached value.
type Product struct {
	ID    string  `json:"id"`
	Name  string  `json:"name"`
	Price float64 `json:"price"`
}

// lookupDelay is how long the product database takes to answer.
const lookupDelay = 20 * time.Millisecond

// lookupProduct stands in for a slow database query. Products 1 to 1000
// exist; for others it returns an error wrapping hybrid.ErrNotFound, which
// the cache remembers for Options.NegativeTTL.
func lookupProduct(ctx context.Context, id string) (Product, error) {
	t := time.NewTimer(lookupDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return Product{}, ctx.Err()
	}
	n, err := strconv.Atoi(id)
	if err != nil || n < 1 || n > 1000 {
		return Product{}, fmt.Errorf("product %q: %w", id, hybrid.ErrNotFound)
	}
	return Product{ID: id, Name: "Widget " + id, Price: 9.99}, nil
}

// namespace is the cache's namespace: every instance of the service uses
// the same one.
const namespace = "products"

// service is the HTTP service: the product cache and its telemetry.
type service struct {
	products *hybrid.Cache[Product]
	bus      *invalidate.Bus
	meters   *sdkmetric.MeterProvider
	log      *slog.Logger
	mux      *http.ServeMux
	ready    atomic.Bool // warmUp is done
}

// newClient returns a Redis client as the cache's startup advisor asks for
// it (New logs a warning otherwise).
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,                   // l2's 250 ms read bound reaches the socket
		DialTimeout:           250 * time.Millisecond, // a dial outlives the call that started it
		DialerRetries:         1,                      // one attempt per dial, not 5
		MaxRetries:            1,
	})
}

// newService returns the service, with its cache over rdb, signing its
// messages with secret (the same on every instance). Close releases it;
// rdb stays the caller's to close, after that.
func newService(rdb redis.UniversalClient, secret []byte, hotSetEvery time.Duration, logger *slog.Logger) (*service, error) {
	s := &service{bus: invalidate.New(rdb, invalidate.Options{Logger: logger}), log: logger}

	// The exporter is the meter provider's reader: each scrape of /metrics
	// collects, which runs RegisterMetrics' callback. A registry of our
	// own, not the global one; no target_info or scope labels, to keep the
	// output short.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo())
	if err != nil {
		s.bus.Close()
		return nil, err
	}
	s.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	meter := s.meters.Meter("github.com/hybridcache/hybridcache/examples/http-service")
	// Durations only: with a TracerProvider here, each miss would also be a
	// span.
	tracer, err := hybridotel.NewTracer(nil, meter, hybridotel.TracerOptions{Namespace: namespace})
	if err != nil {
		s.Close()
		return nil, err
	}

	s.products, err = hybrid.New[Product](hybrid.Options{
		Namespace:   namespace,
		Remote:      l2.New(rdb, l2.Options{}),
		Bus:         s.bus,
		Secret:      secret, // signs messages, which then carry new values
		Codec:       codec.Msgpack{},
		TTL:         10 * time.Minute,
		LocalTTL:    time.Minute,
		NegativeTTL: 30 * time.Second,
		LoadTimeout: 2 * time.Second,
		Logger:      logger,
		Tracer:      tracer,
		HotSetEvery: hotSetEvery, // 30 s; shorter in the selftest
		HotSetSize:  1000,
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	// The meter provider's Shutdown, in Close, ends the registration.
	if _, err := hybridotel.RegisterMetrics(meter, s.products); err != nil {
		s.Close()
		return nil, err
	}

	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /products/{id}", s.product)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	// The debug endpoint reveals keys: a real service mounts it behind its
	// debug authentication, or on a separate, internal listener.
	debug, err := hybridhttp.New(s.products)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.mux.Handle("/debug/cache/", http.StripPrefix("/debug/cache", debug))
	return s, nil
}

// warmUp warms the cache from the recorded hot set, then marks the
// service ready. A failed warm-up (Redis down) is logged and the service
// becomes ready all the same: it serves, colder. It returns how many
// products it warmed.
func (s *service) warmUp(ctx context.Context) int {
	start := time.Now()
	n, err := s.products.WarmHot(ctx)
	if err != nil {
		s.log.Warn("warm start failed; serving cold", "warmed", n, "err", err)
	} else {
		s.log.Info("warm start", "warmed", n, "took", time.Since(start).Round(time.Millisecond))
	}
	s.ready.Store(true)
	return n
}

// readyz is the readiness probe: 503 until warmUp is done.
func (s *service) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		http.Error(w, "warming up", http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ready\n")
}

// ServeHTTP serves the endpoints listed in the package comment.
func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close closes the cache, the bus and the meter provider.
func (s *service) Close() error {
	var errs []error
	if s.products != nil {
		errs = append(errs, s.products.Close())
	}
	errs = append(errs, s.bus.Close())
	if s.meters != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		errs = append(errs, s.meters.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

func (s *service) product(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	// Reject what cannot be an id before the cache, which would remember
	// each such absence in Redis.
	if n, err := strconv.Atoi(id); err != nil || n < 1 || strconv.Itoa(n) != id {
		http.NotFound(w, r)
		return
	}
	p, err := s.products.GetOrCreate(r.Context(), id, lookupProduct)
	switch {
	case errors.Is(err, hybrid.ErrNotFound):
		http.NotFound(w, r)
		return
	case r.Context().Err() != nil:
		return // the client left
	case err != nil:
		s.log.Error("product lookup failed", "id", id, "err", err)
		http.Error(w, "product lookup failed", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(p); err != nil {
		s.log.Warn("writing a response", "err", err)
	}
}

func (s *service) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, summary(s.products.Stats()))
}

// summary describes the cache's hit ratio: the share of requests answered
// from L1 or from Redis, without the lookup.
func summary(st hybrid.Stats) string {
	requests := st.L1.Hits + st.L1.Misses
	ratio := 0.0
	if requests > 0 {
		ratio = float64(st.L1.Hits+st.L2.Hits) / float64(requests)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "cache %q\n", st.Namespace)
	fmt.Fprintf(&b, "requests     %d\n", requests)
	fmt.Fprintf(&b, "L1 hits      %d\n", st.L1.Hits)
	fmt.Fprintf(&b, "Redis hits   %d\n", st.L2.Hits)
	fmt.Fprintf(&b, "lookups      %d\n", st.Load.Calls)
	fmt.Fprintf(&b, "hit ratio    %.1f%%\n", 100*ratio)
	return b.String()
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	redisAddr := flag.String("redis", "", "Redis address (host:port); empty starts an embedded server")
	selftest := flag.Bool("selftest", false, "serve on a free port, make some requests, print the hit ratio and metrics, and exit")
	flag.Parse()
	if err := run(*addr, *redisAddr, *selftest); err != nil {
		log.Fatal(err)
	}
}

func run(addr, redisAddr string, selftest bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if redisAddr == "" {
		m, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer m.Close()
		redisAddr = m.Addr()
		log.Printf("no -redis given: using an embedded Redis-compatible server (miniredis) at %s", redisAddr)
	}
	rdb := newClient(redisAddr)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", redisAddr, err)
	}
	secret := []byte(os.Getenv("CACHE_SECRET"))
	if len(secret) == 0 {
		secret = make([]byte, 32)
		rand.Read(secret)
	}
	hotSetEvery := 30 * time.Second
	if selftest {
		hotSetEvery = 100 * time.Millisecond // the second instance warms from it
	}
	s, err := newService(rdb, secret, hotSetEvery, slog.Default())
	if err != nil {
		return err
	}
	defer s.Close()

	if selftest {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	log.Printf("serving on %s: GET /products/{id}, /metrics, /", base)

	if selftest {
		err = selfTest(ctx, base, os.Stdout, s, func() (*service, error) { return newService(rdb, secret, hotSetEvery, slog.Default()) })
	} else {
		s.warmUp(ctx)
		err = wait(ctx, s, served)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := srv.Shutdown(shutdownCtx); serr != nil && err == nil {
		err = serr
	}
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// wait serves until ctx ends or the server fails, logging the hit ratio
// every 10 seconds when it changed.
func wait(ctx context.Context, s *service, served <-chan error) error {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			return err
		case <-tick.C:
			if sum := summary(s.products.Stats()); sum != last {
				log.Printf("%s", strings.Join(strings.Fields(sum), " "))
				last = sum
			}
		}
	}
}

// selfTest checks that s at base is not ready before its warm-up and is
// after, asks it for a few products, several times each, then prints the
// hit ratio and the cache's main metrics. Last it records s's hot set and
// starts a second instance (from another), which warms from it.
func selfTest(ctx context.Context, base string, out io.Writer, s *service, another func() (*service, error)) error {
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	get := func(path string, want int) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		if resp.StatusCode != want {
			return "", fmt.Errorf("GET %s: status %d, want %d", path, resp.StatusCode, want)
		}
		return string(body), nil
	}

	if _, err := get("/readyz", http.StatusServiceUnavailable); err != nil {
		return err
	}
	s.warmUp(ctx)
	if _, err := get("/readyz", http.StatusOK); err != nil {
		return err
	}
	fmt.Fprintln(out, "GET /readyz: 503 before the warm start, 200 after")

	const products, rounds = 5, 4
	for round := 1; round <= rounds; round++ {
		start := time.Now()
		for id := 1; id <= products; id++ {
			if _, err := get(fmt.Sprintf("/products/%d", id), http.StatusOK); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "round %d: %d products in %v\n", round, products, time.Since(start).Round(10*time.Microsecond))
	}
	for range 2 { // the second answer comes from the remembered absence
		if _, err := get("/products/5000", http.StatusNotFound); err != nil {
			return err
		}
	}

	index, err := get("/", http.StatusOK)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nGET /\n%s", index)
	metrics, err := get("/metrics", http.StatusOK)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nGET /metrics (some lines)")
	for line := range strings.Lines(metrics) {
		for _, prefix := range []string{"hybridcache_hits_total", "hybridcache_misses_total", "hybridcache_loads_total", "hybridcache_l1_entries", "hybridcache_operation_duration_seconds_count"} {
			if strings.HasPrefix(line, prefix) {
				fmt.Fprint(out, line)
			}
		}
	}
	if !strings.Contains(metrics, `hybridcache_hits_total{hybridcache_namespace="products",tier="l1"}`) {
		return errors.New("selftest: /metrics lacks the L1 hits of the products cache")
	}
	if err := debugCheck(get, products, out); err != nil {
		return err
	}
	return warmAnother(ctx, out, s, another, products)
}

// debugCheck asks the debug endpoint for the cache's stats and for the
// explanations of a product read above (1 to products: in L1 and in Redis,
// agreeing) and of one never read, and checks what they say.
func debugCheck(get func(path string, want int) (string, error), products int, out io.Writer) error {
	body, err := get("/debug/cache/stats?ns="+namespace, http.StatusOK)
	if err != nil {
		return err
	}
	var st hybrid.Stats
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return fmt.Errorf("selftest: /debug/cache/stats: %w", err)
	}
	if st.Namespace != namespace || st.L1.Hits == 0 || st.L1.Entries == 0 {
		return fmt.Errorf("selftest: /debug/cache/stats: namespace %q, %d L1 hits, %d entries; want %q and some", st.Namespace, st.L1.Hits, st.L1.Entries, namespace)
	}
	fmt.Fprintf(out, "\nGET /debug/cache/stats: %d L1 hits, %d entries\n", st.L1.Hits, st.L1.Entries)
	for _, tc := range []struct {
		key  string
		want hybrid.Agreement
	}{{strconv.Itoa(products), hybrid.AgreementSame}, {"999", hybrid.AgreementNowhere}} {
		path := "/debug/cache/explain?key=" + tc.key
		body, err := get(path, http.StatusOK)
		if err != nil {
			return err
		}
		var x hybrid.Explanation
		if err := json.Unmarshal([]byte(body), &x); err != nil {
			return fmt.Errorf("selftest: %s: %w", path, err)
		}
		if x.Key != tc.key || x.Agreement != tc.want || x.L1.Present != (tc.want == hybrid.AgreementSame) {
			return fmt.Errorf("selftest: %s: key %q, agreement %q (%s), in L1 %v; want %q", path, x.Key, x.Agreement, x.Detail, x.L1.Present, tc.want)
		}
		fmt.Fprintf(out, "GET %s: %s: %s\n", path, x.Agreement, x.Detail)
	}
	return nil
}

// warmAnother makes traffic on s, which its recorder (HotSetEvery) puts in
// the hot set, and warms a new instance from it, which must then hold want
// products. It starts new instances until one does, or 10 seconds pass:
// the recorder runs on its own ticker.
func warmAnother(ctx context.Context, out io.Writer, s *service, another func() (*service, error), want int) error {
	// More traffic first: hot keys are ranked from a sample of 1 in 16
	// hits, so a key needs some dozens of hits to rank.
	for range 200 {
		for id := 1; id <= want; id++ {
			if _, err := s.products.GetOrCreate(ctx, strconv.Itoa(id), lookupProduct); err != nil {
				return err
			}
		}
	}
	n, err := warmFromHotSet(ctx, another, want)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\na new instance warmed from the hot set: %d products in L1 before its first request\n", n)
	if n < want {
		return fmt.Errorf("selftest: the new instance warmed %d products, want %d", n, want)
	}
	return nil
}

// warmFromHotSet starts new instances (another), each warming from the hot
// set, until one warms want products or 10 seconds pass, and returns how
// many the last warmed.
func warmFromHotSet(ctx context.Context, another func() (*service, error), want int) (int, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		t, err := another()
		if err != nil {
			return 0, err
		}
		n := t.warmUp(ctx)
		t.Close()
		if n >= want || time.Now().After(deadline) {
			return n, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}
