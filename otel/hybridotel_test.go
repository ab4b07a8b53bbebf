package hybridotel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	hybridotel "github.com/hybridcache/hybridcache/otel"
)

var _ hybrid.Tracer = (*hybridotel.Tracer)(nil)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// quiet drops the log lines of the read path, which tests provoke on purpose.
var quiet = slog.New(slog.DiscardHandler)

// telemetry is a meter provider read by hand and a tracer provider whose
// ended spans are kept, both shut down when the test ends.
type telemetry struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	tel := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	t.Cleanup(func() {
		if err := tel.mp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		if err := tel.tp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return tel
}

// collect returns every data point now, as "name{attributes}" (attributes
// sorted by key) to its value, or to its count for a histogram.
func (tel *telemetry) collect(t *testing.T) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points := make(map[string]float64)
	add := func(name string, attrs attribute.Set, v float64) {
		k := name + "{" + attrs.Encoded(attribute.DefaultEncoder()) + "}"
		if _, dup := points[k]; dup {
			t.Errorf("two data points %s", k)
		}
		points[k] = v
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic {
					t.Errorf("%s is not monotonic", m.Name)
				}
				for _, p := range d.DataPoints {
					add(m.Name, p.Attributes, float64(p.Value))
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					add(m.Name, p.Attributes, float64(p.Value))
				}
			case metricdata.Histogram[float64]:
				if m.Unit != "s" {
					t.Errorf("%s has unit %q, want s", m.Name, m.Unit)
				}
				for _, p := range d.DataPoints {
					add(m.Name, p.Attributes, float64(p.Count))
				}
			default:
				t.Errorf("%s has data of type %T", m.Name, m.Data)
			}
		}
	}
	return points
}

// ended returns the spans ended so far as "name status" strings, sorted.
func (tel *telemetry) ended() []string {
	var out []string
	for _, s := range tel.spans.Ended() {
		out = append(out, s.Name()+" "+s.Status().Code.String())
	}
	slices.Sort(out)
	return out
}

func load(value string, err error) func(context.Context, string) (string, error) {
	return func(context.Context, string) (string, error) { return value, err }
}

// TestMetricsAndSpans runs two instances of one cache over an in-memory
// shared tier, and an L1-only cache, through a miss, hits, a failing load,
// a shared-tier failure and a Set, and checks every series reported.
func TestMetricsAndSpans(t *testing.T) {
	tel := newTelemetry(t)
	meter := tel.mp.Meter("test")
	tracer, err := hybridotel.NewTracer(tel.tp, meter, hybridotel.TracerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bus := new(hybridtest.Bus)
	t.Cleanup(func() { bus.Close() }) // after the caches' Close
	remote := &hybridtest.Remote{Bus: bus}
	newCache := func(o hybrid.Options) *hybrid.Cache[string] {
		t.Helper()
		o.Logger = quiet
		c, err := hybrid.New[string](o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	shared := hybrid.Options{Namespace: "catalog", Remote: remote, Bus: bus, Tracer: tracer}
	a, b := newCache(shared), newCache(shared)
	users := newCache(hybrid.Options{Namespace: "users"})
	reg, err := hybridotel.RegisterMetrics(meter, a, b, users)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	ctx := context.Background()

	// a: a miss in both tiers, then an L1 hit; b: an L2 hit.
	for i, c := range []*hybrid.Cache[string]{a, a, b} {
		if v, err := c.GetOrCreate(ctx, "k1", load("v1", nil)); v != "v1" || err != nil {
			t.Fatalf("read %d: got %q, %v, want v1", i, v, err)
		}
		if i == 0 {
			// The fill writes to the shared tier after it answers: first
			// the record of the last Clear, missing in a new namespace,
			// then k1.
			if err := remote.WaitCalls(ctx, func(c hybridtest.Calls) bool { return c.IfAbsent == 2 }); err != nil {
				t.Fatal(err)
			}
		}
	}
	errDB := errors.New("db down")
	if _, err := a.GetOrCreate(ctx, "k2", load("", errDB)); !errors.Is(err, errDB) {
		t.Fatalf("failing load: got %v, want %v", err, errDB)
	}
	errRedis := errors.New("redis down")
	remote.FailWith(errRedis)
	if _, ok, err := a.Get(ctx, "k3"); ok || err != nil {
		t.Fatalf("Get with the shared tier down: got ok %v, %v, want a miss", ok, err)
	}
	remote.FailWith(nil)
	// Announced to b, which drops its copy, and back to a, which ignores it.
	if err := a.Set(ctx, "k1", "v2"); err != nil {
		t.Fatal(err)
	}
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := users.Set(ctx, "u", "ada"); err != nil {
		t.Fatal(err)
	}
	if _, err := users.GetOrCreate(ctx, "u", load("", errDB)); err != nil { // an L1 hit: load is not called
		t.Fatal(err)
	}

	// Close waits for fills: the write-back of k1's fill has ended its span
	// and recorded its duration.
	a.Close()
	b.Close()

	got := tel.collect(t)
	want := make(map[string]float64)
	for _, w := range []struct {
		name, attr     string
		catalog, users float64
	}{
		{"hits", "tier=l1", 1, 1},
		{"hits", "tier=l2", 1, 0},
		{"misses", "tier=l1", 4, 0}, // a: k1, k2, k3; b: k1
		{"misses", "tier=l2", 2, 0}, // k1, k2 (k3 failed)
		{"loads", "", 2, 0},
		{"load.errors", "", 1, 0},
		{"load.soft_timeouts", "", 0, 0},
		{"load.queued", "", 0, 0},
		{"refreshes", "", 0, 0},
		{"load.not_cached", "", 0, 0},
		{"load.not_modified", "", 0, 0},
		{"refreshes.backed_off", "", 0, 0},
		{"refreshes.coalesced", "", 0, 0},
		{"refreshes.deferred", "", 0, 0},
		{"errors", "kind=l2", 1, 0},
		{"errors", "kind=decode", 0, 0},
		{"errors", "kind=encode", 0, 0},
		{"errors", "kind=oversized", 0, 0},
		{"errors", "kind=publish", 0, 0},
		{"errors", "kind=options", 0, 0},
		{"stale.served", "", 0, 0},
		{"stale.reads", "", 0, 0},
		{"fills.discarded", "", 0, 0},
		{"l1.entries", "", 1, 1}, // a: k1; b dropped k1 on a's Set
		{"l1.evictions", "reason=size", 0, 0},
		{"l1.evictions", "reason=expired", 0, 0},
		{"l2.skipped", "", 0, 0},
		{"l2.write.retries", "", 0, 0},
		{"l2.writes.dropped", "", 0, 0},
		{"breaker.opens", "", 0, 0},
		{"invalidations.sent", "", 1, 0},
		{"invalidations.received", "result=applied", 1, 0},
		{"invalidations.received", "result=own", 1, 0},
		{"invalidations.received", "result=invalid", 0, 0},
		{"invalidations.unauthentic", "", 0, 0},
		{"invalidations.swapped", "", 0, 0},
		{"invalidations.extended", "", 0, 0},
		{"bus.losses", "", 0, 0},
		{"bus.replays", "result=replayed", 0, 0},
		{"bus.replays", "result=caught_up", 0, 0},
		{"bus.replays", "result=flushed", 0, 0},
		{"bus.catchup.dropped", "", 0, 0},
		{"bus.seq_regressions", "", 0, 0},
		{"bus.replayed", "", 0, 0},
		{"held.served", "", 0, 0},
		{"queue.writes", "result=queued", 0, 0},
		{"queue.writes", "result=refused", 0, 0},
		{"queue.writes", "result=replayed", 0, 0},
		{"queue.writes", "result=stale", 0, 0},
		{"queue.writes", "result=dropped_on_close", 0, 0},
		{"queue.length", "", 0, 0},
		{"leases", "result=taken", 0, 0},
		{"leases", "result=waited", 0, 0},
		{"leases", "result=answered", 0, 0},
		{"leases", "result=taken_over", 0, 0},
		{"leases", "result=timed_out", 0, 0},
		{"leases", "result=skipped", 0, 0},
		{"skipped", "kind=l1_read", 0, 0},
		{"skipped", "kind=l1_write", 0, 0},
		{"skipped", "kind=l2_read", 0, 0},
		{"skipped", "kind=l2_write", 0, 0},
		{"skipped", "kind=announce", 0, 0},
		{"invalidation.lag.skewed", "", 0, 0},
		{"served.age.skewed", "tier=l1", 0, 0},
		{"served.age.skewed", "tier=l2", 0, 0},
		{"verify.sampled", "", 0, 0},
		{"verify.outcomes", "result=consistent", 0, 0},
		{"verify.outcomes", "result=divergent", 0, 0},
		{"verify.outcomes", "result=missing", 0, 0},
		{"verify.outcomes", "result=error", 0, 0},
		{"verify.dropped", "", 0, 0},
	} {
		want[point(w.name, "catalog", w.attr)] = w.catalog
		want[point(w.name, "users", w.attr)] = w.users
	}
	// Durations (counts): the fill's get, get_seq twice (a read of the
	// key's sequence counter before its load, and its write: missing in a
	// new namespace), load and set of k1 (before its set, a read and a
	// write of the clear record, missing too), b's get of k1 (its first
	// hit, which reads the clear record too), the get, get_seq twice and
	// failed load of k2, the failed get of k3, a's Set.
	for k, n := range map[string]float64{
		"op=get,outcome=ok":       3,
		"op=get,outcome=error":    1,
		"op=get_clear,outcome=ok": 3,
		"op=get_seq,outcome=ok":   4,
		"op=load,outcome=ok":      1,
		"op=load,outcome=error":   1,
		"op=set,outcome=ok":       2,
		"op=open_log,outcome=ok":  2, // New of each cache
	} {
		want["hybridcache.operation.duration{"+k+"}"] = n
	}
	// Histograms (counts): b applied a's Set and read k1 from the shared
	// tier; L1 hits are sampled, one in 64: as many as Stats says.
	want[point("invalidation.lag", "catalog", "")] = 1
	want[point("served.age", "catalog", "tier=l2")] = 1
	for _, c := range []struct {
		ns string
		n  uint64
	}{{"catalog", a.Stats().L1.ServedAge.Count + b.Stats().L1.ServedAge.Count}, {"users", users.Stats().L1.ServedAge.Count}} {
		if c.n > 0 {
			want[point("served.age", c.ns, "tier=l1")] = float64(c.n)
		}
	}
	// L1's weight is the encoded size, and otter counts it after a delay:
	// only check that it is reported.
	for _, ns := range []string{"catalog", "users"} {
		k := point("l1.size", ns, "")
		if _, ok := got[k]; !ok {
			t.Errorf("%s missing", k)
		}
		delete(got, k)
	}
	keys := slices.AppendSeq(slices.Collect(maps.Keys(got)), maps.Keys(want))
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !gok:
			t.Errorf("%s missing, want %v", k, w)
		case !wok:
			t.Errorf("%s = %v, not expected", k, g)
		case g != w:
			t.Errorf("%s = %v, want %v", k, g, w)
		}
	}

	// Spans.
	wantSpans := []string{
		"hybridcache.get Error",
		"hybridcache.get Unset", "hybridcache.get Unset", "hybridcache.get Unset",
		"hybridcache.get_clear Unset", "hybridcache.get_clear Unset", "hybridcache.get_clear Unset",
		"hybridcache.get_seq Unset", "hybridcache.get_seq Unset", "hybridcache.get_seq Unset", "hybridcache.get_seq Unset",
		"hybridcache.load Error", "hybridcache.load Unset",
		"hybridcache.open_log Unset", "hybridcache.open_log Unset",
		"hybridcache.set Unset", "hybridcache.set Unset",
	}
	if spans := tel.ended(); !slices.Equal(spans, wantSpans) {
		t.Errorf("spans:\n got %q\nwant %q", spans, wantSpans)
	}
	for _, s := range tel.spans.Ended() {
		op, _ := attrValue(s.Attributes(), "hybridcache.op")
		if want := strings.TrimPrefix(s.Name(), "hybridcache."); op != want {
			t.Errorf("span %s: hybridcache.op = %q, want %q", s.Name(), op, want)
		}
		if key, ok := attrValue(s.Attributes(), "hybridcache.key"); ok {
			t.Errorf("span %s carries the key %q without RecordKeys", s.Name(), key)
		}
		if s.Status().Code != codes.Error {
			continue
		}
		if s.Status().Description == "" {
			t.Errorf("span %s: status Error without a description", s.Name())
		}
		if n := len(s.Events()); n != 1 || s.Events()[0].Name != "exception" {
			t.Errorf("span %s: events %v, want one exception", s.Name(), s.Events())
		}
	}
}

// point names a data point of RegisterMetrics as collect does.
func point(name, ns, attr string) string {
	k := "hybridcache." + name + "{hybridcache.namespace=" + ns
	if attr != "" {
		k += "," + attr
	}
	return k + "}"
}

// attrValue returns the value of key among attrs as a string.
func attrValue(attrs []attribute.KeyValue, key attribute.Key) (string, bool) {
	for _, kv := range attrs {
		if kv.Key == key {
			return kv.Value.Emit(), true
		}
	}
	return "", false
}

// TestMetricsQueue checks the series of the queue of failed writes with a
// write queued, one refused, one replayed and one dropped at Close.
func TestMetricsQueue(t *testing.T) {
	tel := newTelemetry(t)
	bus := new(hybridtest.Bus)
	defer bus.Close()
	remote := &hybridtest.Remote{Bus: bus}
	c, err := hybrid.New[string](hybrid.Options{Namespace: "q", Remote: remote, Bus: bus, QueueWrites: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, err := hybridotel.RegisterMetrics(tel.mp.Meter("test"), c)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	ctx := context.Background()
	errRedis := errors.New("redis down")
	remote.FailWith(errRedis)
	if err := c.Set(ctx, "a", "v"); !errors.Is(err, hybrid.ErrQueued) {
		t.Fatalf("Set: got %v, want ErrQueued", err)
	}
	if err := c.Set(ctx, "b", "v"); !errors.Is(err, errRedis) || errors.Is(err, hybrid.ErrQueued) {
		t.Fatalf("Set with the queue full: got %v, want the failure", err)
	}
	got := tel.collect(t)
	for k, want := range map[string]float64{
		point("queue.writes", "q", "result=queued"):   1,
		point("queue.writes", "q", "result=refused"):  1,
		point("queue.writes", "q", "result=replayed"): 0,
		point("queue.length", "q", ""):                1,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	remote.FailWith(nil)
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Queue.Replayed != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the queued write was not replayed")
		}
		time.Sleep(time.Millisecond)
	}
	got = tel.collect(t)
	for k, want := range map[string]float64{
		point("queue.writes", "q", "result=replayed"): 1,
		point("queue.writes", "q", "result=stale"):    0,
		point("queue.length", "q", ""):                0,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	remote.FailWith(errRedis)
	if err := c.Set(ctx, "c", "v"); !errors.Is(err, hybrid.ErrQueued) {
		t.Fatalf("Set: got %v, want ErrQueued", err)
	}
	c.Close()
	got = tel.collect(t)
	for k, want := range map[string]float64{
		point("queue.writes", "q", "result=dropped_on_close"): 1,
		point("queue.length", "q", ""):                        0,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
}

// TestMetricsSkipped checks the series of the steps left out by per-call
// flags (WithSkip), one call of each, key by key.
func TestMetricsSkipped(t *testing.T) {
	tel := newTelemetry(t)
	bus := new(hybridtest.Bus)
	t.Cleanup(func() { bus.Close() })
	c, err := hybrid.New[string](hybrid.Options{Namespace: "s", Remote: &hybridtest.Remote{Bus: bus}, Bus: bus, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, err := hybridotel.RegisterMetrics(tel.mp.Meter("test"), c)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	ctx := context.Background()
	for _, call := range []func() error{
		func() error { _, _, err := c.Get(ctx, "a", hybrid.WithSkip(hybrid.SkipL1Read)); return err },
		func() error { _, _, err := c.Get(ctx, "b", hybrid.WithSkip(hybrid.SkipRemoteRead)); return err },
		func() error { return c.Set(ctx, "c", "v", hybrid.WithSkip(hybrid.SkipL1Write)) },
		func() error {
			return c.SetMany(ctx, map[string]string{"d": "v", "e": "v"}, hybrid.WithSkip(hybrid.SkipAnnounce))
		},
		func() error {
			return c.DeleteMany(ctx, []string{"d", "e", "f"}, hybrid.WithSkip(hybrid.SkipRemoteWrite))
		},
	} {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	got := tel.collect(t)
	for k, want := range map[string]float64{
		point("skipped", "s", "kind=l1_read"):  1,
		point("skipped", "s", "kind=l2_read"):  1,
		point("skipped", "s", "kind=l1_write"): 1,
		point("skipped", "s", "kind=announce"): 2,
		point("skipped", "s", "kind=l2_write"): 3,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
}

func TestTracerKeysAndNotFound(t *testing.T) {
	tel := newTelemetry(t)
	tracer, err := hybridotel.NewTracer(tel.tp, tel.mp.Meter("test"), hybridotel.TracerOptions{Namespace: "users", RecordKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := hybrid.New[string](hybrid.Options{Namespace: "users", Tracer: tracer})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	missing := fmt.Errorf("no such user: %w", hybrid.ErrNotFound)
	if _, err := c.GetOrCreate(context.Background(), "alice", load("", missing)); !errors.Is(err, hybrid.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}

	spans := tel.spans.Ended()
	if len(spans) != 1 {
		t.Fatalf("got %d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Name() != "hybridcache.load" || s.Status().Code != codes.Unset {
		t.Errorf("got span %s with status %v, want hybridcache.load Unset", s.Name(), s.Status().Code)
	}
	for key, want := range map[attribute.Key]string{"hybridcache.key": "alice", "hybridcache.namespace": "users", "hybridcache.op": "load"} {
		if got, _ := attrValue(s.Attributes(), key); got != want {
			t.Errorf("span attribute %s = %q, want %q", key, got, want)
		}
	}
	got := tel.collect(t)
	if k := "hybridcache.operation.duration{hybridcache.namespace=users,op=load,outcome=not_found}"; got[k] != 1 {
		t.Errorf("durations %v, want 1 of %s", got, k)
	}
}

// TestTracerParts checks that a nil TracerProvider or Meter turns that
// part off and leaves the other on.
func TestTracerParts(t *testing.T) {
	for _, tc := range []struct {
		name          string
		spans, meters bool
	}{
		{"both", true, true},
		{"spans only", true, false},
		{"durations only", false, true},
		{"neither", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tel := newTelemetry(t)
			var tp trace.TracerProvider
			var meter metric.Meter
			if tc.spans {
				tp = tel.tp
			}
			if tc.meters {
				meter = tel.mp.Meter("test")
			}
			tracer, err := hybridotel.NewTracer(tp, meter, hybridotel.TracerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			_, end := tracer.Start(ctx, hybrid.OpGet, "k")
			end(errors.New("down"))

			wantSpans := 0
			if tc.spans {
				wantSpans = 1
			}
			if n := len(tel.spans.Ended()); n != wantSpans {
				t.Errorf("got %d spans, want %d", n, wantSpans)
			}
			wantPoints := map[string]float64{}
			if tc.meters {
				wantPoints["hybridcache.operation.duration{op=get,outcome=error}"] = 1
			}
			if got := tel.collect(t); !maps.Equal(got, wantPoints) {
				t.Errorf("got data points %v, want %v", got, wantPoints)
			}
		})
	}
}

func TestRegisterMetricsArguments(t *testing.T) {
	tel := newTelemetry(t)
	c, err := hybrid.New[string](hybrid.Options{Namespace: "users"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		name   string
		meter  bool
		caches []hybridotel.StatsSource
	}{
		{"nil meter", false, []hybridotel.StatsSource{c}},
		{"no cache", true, nil},
		{"nil cache", true, []hybridotel.StatsSource{c, nil}},
	} {
		meter := tel.mp.Meter("test")
		if !tc.meter {
			meter = nil
		}
		if reg, err := hybridotel.RegisterMetrics(meter, tc.caches...); err == nil {
			reg.Unregister()
			t.Errorf("%s: got no error", tc.name)
		}
	}
}

func TestUnregister(t *testing.T) {
	tel := newTelemetry(t)
	c, err := hybrid.New[string](hybrid.Options{Namespace: "users"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, err := hybridotel.RegisterMetrics(tel.mp.Meter("test"), c)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tel.collect(t)[point("hits", "users", "tier=l1")]; !ok {
		t.Fatal("before Unregister: no hits of users")
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if got := tel.collect(t); len(got) != 0 {
		t.Errorf("after Unregister: got %v, want nothing", got)
	}
}

// TestMetricsAdaptive checks the series of adaptive entries: a load that
// says DoNotCache, and one whose options are refused.
func TestMetricsAdaptive(t *testing.T) {
	tel := newTelemetry(t)
	c, err := hybrid.New[string](hybrid.Options{Namespace: "a", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg, err := hybridotel.RegisterMetrics(tel.mp.Meter("test"), c)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	ctx := context.Background()
	for key, set := range map[string]func(*hybrid.LoadSettings){
		"volatile": (*hybrid.LoadSettings).DoNotCache,
		"bad":      func(e *hybrid.LoadSettings) { e.SetTTL(-time.Second) },
	} {
		v, err := c.GetOrCreate(ctx, key, func(ctx context.Context, _ string) (string, error) {
			set(hybrid.SettingsFrom(ctx))
			return "v", nil
		})
		if v != "v" || err != nil {
			t.Fatalf("GetOrCreate(%q): got %q, %v, want v", key, v, err)
		}
	}
	got := tel.collect(t)
	for k, want := range map[string]float64{
		point("load.not_cached", "a", ""):    1,
		point("errors", "a", "kind=options"): 1,
		point("loads", "a", ""):              2,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
}

// TestMetricsVerify reports the verifier's counts: a has k in L1 when b,
// which sends no message, writes it anew; a's verifier drops it.
func TestMetricsVerify(t *testing.T) {
	tel := newTelemetry(t)
	bus := new(hybridtest.Bus)
	t.Cleanup(func() { bus.Close() })
	r := &hybridtest.Remote{Bus: bus}
	a, err := hybrid.New[string](hybrid.Options{Namespace: "v", Remote: r, Bus: bus, Logger: quiet, VerifyRate: 1000, VerifyWindow: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := hybrid.New[string](hybrid.Options{Namespace: "v", Remote: r, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	reg, err := hybridotel.RegisterMetrics(tel.mp.Meter("test"), a)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	ctx := context.Background()
	if err := a.Set(ctx, "k", "old"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // b's write is later than a's copy by more than the window
	if err := b.Set(ctx, "k", "new"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Stats().Verify.Dropped == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the verifier dropped nothing: %+v", a.Stats().Verify)
		}
		time.Sleep(time.Millisecond)
	}
	v := a.Stats().Verify
	got := tel.collect(t)
	for k, want := range map[string]float64{
		point("verify.dropped", "v", ""):                   1,
		point("verify.outcomes", "v", "result=divergent"):  1,
		point("verify.outcomes", "v", "result=consistent"): float64(v.Consistent),
		point("verify.sampled", "v", ""):                   float64(v.Sampled),
	} {
		if got[k] < want {
			t.Errorf("%s = %v, want at least %v", k, got[k], want)
		}
	}
}

// TestMetricsHistograms checks that the histograms exported count what the
// cache's own buckets count, with the same bounds, across collections
// (each records only what its buckets gained since the last).
func TestMetricsHistograms(t *testing.T) {
	tel := newTelemetry(t)
	bus := new(hybridtest.Bus)
	t.Cleanup(func() { bus.Close() })
	remote := &hybridtest.Remote{Bus: bus}
	o := hybrid.Options{Namespace: "catalog", Remote: remote, Bus: bus, Logger: quiet}
	a, err := hybrid.New[string](o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := hybrid.New[string](o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	reg, err := hybridotel.RegisterMetrics(tel.mp.Meter("test"), a, b)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	ctx := context.Background()
	bounds := hybrid.DurationBounds()
	for round, sets := range []int{25, 40} {
		for i := range sets {
			if err := a.Set(ctx, fmt.Sprintf("k%d", i), "v"); err != nil {
				t.Fatal(err)
			}
		}
		if err := bus.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		lag := b.Stats().Invalidations.Lag
		var rm metricdata.ResourceMetrics
		if err := tel.reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "hybridcache.invalidation.lag" {
					continue
				}
				found = true
				d := m.Data.(metricdata.Histogram[float64])
				if len(d.DataPoints) != 1 {
					t.Fatalf("round %d: %d data points, want 1", round, len(d.DataPoints))
				}
				p := d.DataPoints[0]
				if p.Count != lag.Count || !slices.Equal(p.BucketCounts, lag.Buckets) {
					t.Errorf("round %d: exported count %d, buckets %v; want %d, %v (as Stats)", round, p.Count, p.BucketCounts, lag.Count, lag.Buckets)
				}
				if len(p.Bounds) != len(bounds) || p.Bounds[0] != bounds[0].Seconds() || p.Bounds[len(bounds)-1] != bounds[len(bounds)-1].Seconds() {
					t.Errorf("round %d: bounds %v, want those of hybrid.DurationBounds in seconds", round, p.Bounds)
				}
				if max, ok := p.Max.Value(); !ok || max <= 0 || max > 2*lag.Max.Seconds()+bounds[0].Seconds() {
					t.Errorf("round %d: exported max %v, want within the bucket of Stats' %v", round, max, lag.Max)
				}
			}
		}
		if !found || lag.Count != uint64(25+sets*round) {
			t.Errorf("round %d: histogram found %v, Stats count %d; want true, %d", round, found, lag.Count, 25+sets*round)
		}
	}
}
