package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newTestServer serves a service over an embedded Redis until the test
// ends.
func newTestServer(t *testing.T) *httptest.Server {
	t.Helper()
	_, srv := serve(t, newTestRedis(t))
	return srv
}

// newTestRedis returns a client of an embedded Redis that lives as long as
// the test.
func newTestRedis(t *testing.T) *redis.Client {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := newClient(m.Addr())
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// testSecret is what every instance of a test signs with.
var testSecret = []byte("0123456789abcdef0123456789abcdef")

// testHotSetEvery is how often a test's instances record their hot set.
const testHotSetEvery = 50 * time.Millisecond

// serve starts a service on rdb and serves it until the test ends.
func serve(t *testing.T, rdb redis.UniversalClient) (*service, *httptest.Server) {
	t.Helper()
	s, err := newService(rdb, testSecret, testHotSetEvery, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

// get returns the body of path, failing the test unless the status is
// want.
func get(t *testing.T, srv *httptest.Server, path string, want int) string {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("GET %s: status %d, want %d; body %q", path, resp.StatusCode, want, body)
	}
	return string(body)
}

func TestProductsAndMetrics(t *testing.T) {
	srv := newTestServer(t)
	const reads = 5
	for i := range reads {
		var p Product
		if err := json.Unmarshal([]byte(get(t, srv, "/products/7", http.StatusOK)), &p); err != nil {
			t.Fatal(err)
		}
		if want := (Product{ID: "7", Name: "Widget 7", Price: 9.99}); p != want {
			t.Fatalf("read %d: got %+v, want %+v", i, p, want)
		}
	}
	for range 2 {
		get(t, srv, "/products/5000", http.StatusNotFound)
	}

	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(get(t, srv, "/metrics", http.StatusOK)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		// Product 7: one miss, then L1 hits; product 5000: a miss that loads
		// and is remembered, then an L1 hit.
		{"hybridcache_hits_total", map[string]string{"tier": "l1"}, reads - 1 + 1},
		{"hybridcache_hits_total", map[string]string{"tier": "l2"}, 0},
		{"hybridcache_misses_total", map[string]string{"tier": "l1"}, 2},
		{"hybridcache_loads_total", nil, 2},
		{"hybridcache_load_errors_total", nil, 0},
		{"hybridcache_operation_duration_seconds", map[string]string{"op": "load", "outcome": "ok"}, 1},
		{"hybridcache_operation_duration_seconds", map[string]string{"op": "load", "outcome": "not_found"}, 1},
	} {
		labels := map[string]string{"hybridcache_namespace": namespace}
		for k, v := range tc.labels {
			labels[k] = v
		}
		got, ok := value(families[tc.family], labels)
		if !ok {
			t.Errorf("/metrics has no %s%v", tc.family, labels)
			continue
		}
		if got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.family, labels, got, tc.want)
		}
	}

	index := get(t, srv, "/", http.StatusOK)
	if want := "hit ratio    71.4%"; !strings.Contains(index, want) { // 5 of 7
		t.Errorf("GET / = %q, want it to contain %q", index, want)
	}
}

func TestNotFound(t *testing.T) {
	srv := newTestServer(t)
	for _, path := range []string{"/products/abc", "/products/0", "/products/007", "/products/1001", "/nothing"} {
		get(t, srv, path, http.StatusNotFound)
	}
	// Only 1001 looks like an id: the others never reach the cache.
	if index, want := get(t, srv, "/", http.StatusOK), "requests     1\n"; !strings.Contains(index, want) {
		t.Errorf("GET / = %q, want it to contain %q", index, want)
	}
}

// value returns the value of the metric of f whose labels are exactly
// labels: a counter's or gauge's value, a histogram's count.
func value(f *dto.MetricFamily, labels map[string]string) (float64, bool) {
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// TestReadyAfterWarmStart: /readyz is 503 until the warm-up, 200 after; a
// second instance warms from the hot set the first recorded and answers
// those products without a lookup.
func TestReadyAfterWarmStart(t *testing.T) {
	rdb := newTestRedis(t)
	start := func() (*service, *httptest.Server) { return serve(t, rdb) }
	a, srvA := start()
	get(t, srvA, "/readyz", http.StatusServiceUnavailable)
	if n := a.warmUp(t.Context()); n != 0 {
		t.Errorf("the first instance warmed %d products from an empty hot set", n)
	}
	get(t, srvA, "/readyz", http.StatusOK)
	// Hot keys are ranked from a sample of 1 hit in 16, so each key needs
	// some dozens of hits to rank (as in selfTest's warmAnother).
	for range 200 {
		for _, id := range []string{"1", "2", "3"} {
			get(t, srvA, "/products/"+id, http.StatusOK)
		}
	}
	// a's recorder puts them in the hot set within testHotSetEvery; a new
	// instance that warms before it has finds fewer, and the next is
	// started.
	var b *service
	var srvB *httptest.Server
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, srvB = start()
		get(t, srvB, "/readyz", http.StatusServiceUnavailable)
		n := b.warmUp(t.Context())
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second instance warmed %d products, want 3", n)
		}
		time.Sleep(testHotSetEvery)
	}
	get(t, srvB, "/readyz", http.StatusOK)
	get(t, srvB, "/products/2", http.StatusOK)
	if st := b.products.Stats(); st.L1.Hits != 1 || st.Load.Calls != 0 {
		t.Errorf("after the warm start, a read: L1 hits %d, loads %d; want 1 and 0", st.L1.Hits, st.Load.Calls)
	}
}

// TestSelfTest runs the -selftest requests, the debug endpoint's and the
// warm start of a second instance included, against a service on an
// embedded Redis.
func TestSelfTest(t *testing.T) {
	rdb := newTestRedis(t)
	s, srv := serve(t, rdb)
	var out strings.Builder
	another := func() (*service, error) {
		return newService(rdb, testSecret, testHotSetEvery, slog.New(slog.DiscardHandler))
	}
	if err := selfTest(t.Context(), srv.URL, &out, s, another); err != nil {
		t.Fatalf("selfTest: %v\n%s", err, out.String())
	}
	for _, want := range []string{"GET /debug/cache/stats: ", "explain?key=5: agree", "explain?key=999: nowhere", "warmed from the hot set"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("selfTest output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestNoStartupAdvice: the service's client and cache are set up as the
// cache's startup advisor asks, so New logs nothing at warning level.
func TestNoStartupAdvice(t *testing.T) {
	var logs strings.Builder
	s, err := newService(newTestRedis(t), testSecret, testHotSetEvery, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	if logs.Len() > 0 {
		t.Errorf("newService logged:\n%s", logs.String())
	}
}
