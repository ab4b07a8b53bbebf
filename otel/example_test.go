package hybridotel_test

import (
	"context"
	"fmt"
	"log"
	"slices"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	hybridotel "github.com/hybridcache/hybridcache/otel"
)

func ExampleRegisterMetrics() {
	// In production the reader is an exporter, such as the Prometheus one
	// (see examples/http-service).
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	users, err := hybrid.New[string](hybrid.Options{Namespace: "users"})
	if err != nil {
		log.Fatal(err)
	}
	defer users.Close()
	reg, err := hybridotel.RegisterMetrics(mp.Meter("example"), users)
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Unregister()

	ctx := context.Background()
	load := func(ctx context.Context, id string) (string, error) { return "Ada", nil }
	for range 3 {
		if _, err := users.GetOrCreate(ctx, "42", load); err != nil {
			log.Fatal(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "hybridcache.hits" && m.Name != "hybridcache.misses" {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				ns, _ := p.Attributes.Value("hybridcache.namespace")
				tier, _ := p.Attributes.Value("tier")
				lines = append(lines, fmt.Sprintf("%s{namespace=%s, tier=%s} %d", m.Name, ns.AsString(), tier.AsString(), p.Value))
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// hybridcache.hits{namespace=users, tier=l1} 2
	// hybridcache.hits{namespace=users, tier=l2} 0
	// hybridcache.misses{namespace=users, tier=l1} 1
	// hybridcache.misses{namespace=users, tier=l2} 0
}

func ExampleNewTracer() {
	// In production the span processor is an exporter's batcher.
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	// No meter: spans only.
	tracer, err := hybridotel.NewTracer(tp, nil, hybridotel.TracerOptions{Namespace: "users"})
	if err != nil {
		log.Fatal(err)
	}
	bus := new(hybridtest.Bus)
	defer bus.Close()
	users, err := hybrid.New[string](hybrid.Options{
		Namespace: "users",
		Remote:    &hybridtest.Remote{Bus: bus},
		Bus:       bus,
		Tracer:    tracer,
	})
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	load := func(ctx context.Context, id string) (string, error) { return "Ada", nil }
	// New opened the shared tier's log of invalidations (open_log).
	for range 2 { // a miss, then an L1 hit, which is not traced
		if _, err := users.GetOrCreate(ctx, "42", load); err != nil {
			log.Fatal(err)
		}
	}
	// Close waits for the fill's write to the shared tier. The fill read
	// the key (get), found it missing and read its sequence counter,
	// which its write is conditional on, found that missing too in a new
	// namespace and made it (get_seq twice), before it loaded the key;
	// before its write, it read the record of the namespace's last Clear,
	// found it missing in a new namespace and wrote it (get_clear twice).
	users.Close()

	for _, s := range spans.Ended() {
		fmt.Println(s.Name())
	}
	// Output:
	// hybridcache.open_log
	// hybridcache.get
	// hybridcache.get_seq
	// hybridcache.get_seq
	// hybridcache.load
	// hybridcache.get_clear
	// hybridcache.get_clear
	// hybridcache.set
}
