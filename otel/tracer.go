package hybridotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/hybridcache/hybridcache/hybrid"
)

// scope is the instrumentation scope of the spans.
const scope = "github.com/hybridcache/hybridcache/otel"

// The attribute keys of the spans and the duration histogram.
const (
	keySpanOp  = "hybridcache.op"
	keySpanKey = "hybridcache.key"
	keyOp      = "op"
	keyOutcome = "outcome"
)

// The outcomes of an operation.
const (
	outcomeOK       = "ok"
	outcomeNotFound = "not_found"
	outcomeError    = "error"
)

// TracerOptions configures a Tracer. The zero value traces without keys.
type TracerOptions struct {
	// Namespace, if set, is added to every span and duration as the
	// attribute hybridcache.namespace; set it to the cache's
	// Options.Namespace to tell caches apart. Default: none.
	Namespace string

	// RecordKeys adds each call's key (for a tag call, the tag) to its span
	// as hybridcache.key, not to durations. NOTE: keys may be personal
	// data. Default: false.
	RecordKeys bool
}

// Tracer is a hybrid.Tracer that reports to OpenTelemetry: a span and a
// duration for each load and shared-tier call. Set it as Options.Tracer of
// one cache, or of several whose durations are to be added up. It is safe
// for concurrent use.
type Tracer struct {
	tracer   trace.Tracer            // nil: no spans
	duration metric.Float64Histogram // nil: no durations
	ns       []attribute.KeyValue    // the namespace attribute, if set
	keys     bool
}

// NewTracer returns a Tracer that starts spans with a tracer of tp and
// records the histogram hybridcache.operation.duration on meter. A nil tp
// turns spans off; a nil meter turns durations off.
func NewTracer(tp trace.TracerProvider, meter metric.Meter, o TracerOptions) (*Tracer, error) {
	t := &Tracer{keys: o.RecordKeys}
	if o.Namespace != "" {
		t.ns = []attribute.KeyValue{attribute.String(keyNamespace, o.Namespace)}
	}
	if tp != nil {
		t.tracer = tp.Tracer(scope)
	}
	if meter != nil {
		// From a Redis call on loopback (0.1 ms) to a slow load (10 s).
		bounds := []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
		h, err := meter.Float64Histogram("hybridcache.operation.duration",
			metric.WithUnit("s"),
			metric.WithDescription("Duration of the loads and shared-tier calls of a cache."),
			metric.WithExplicitBucketBoundaries(bounds...))
		if err != nil {
			return nil, fmt.Errorf("hybridotel: instrument hybridcache.operation.duration: %w", err)
		}
		t.duration = h
	}
	return t, nil
}

// Start starts a span named "hybridcache." + op under ctx and returns the
// context of that span and a function that ends it with the call's error
// and records the call's duration. An error wrapping hybrid.ErrNotFound is
// the outcome not_found, not a failure.
func (t *Tracer) Start(ctx context.Context, op hybrid.Op, key string) (context.Context, func(err error)) {
	var span trace.Span
	if t.tracer != nil {
		attrs := make([]attribute.KeyValue, 0, 3)
		attrs = append(attrs, attribute.String(keySpanOp, string(op)))
		attrs = append(attrs, t.ns...)
		if t.keys && key != "" {
			attrs = append(attrs, attribute.String(keySpanKey, key))
		}
		ctx, span = t.tracer.Start(ctx, spanName(op), trace.WithAttributes(attrs...))
	}
	start := time.Now()
	return ctx, func(err error) {
		outcome := outcomeOf(err)
		if span != nil {
			if outcome == outcomeError {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}
		if t.duration != nil {
			attrs := make([]attribute.KeyValue, 0, 3)
			attrs = append(attrs, attribute.String(keyOp, string(op)), attribute.String(keyOutcome, outcome))
			attrs = append(attrs, t.ns...)
			t.duration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attrs...))
		}
	}
}

// spanName returns "hybridcache." + op, without allocating for the ops of
// a cache's reads and writes.
func spanName(op hybrid.Op) string {
	switch op {
	case hybrid.OpLoad:
		return "hybridcache.load"
	case hybrid.OpLoadMany:
		return "hybridcache.load_many"
	case hybrid.OpGet:
		return "hybridcache.get"
	case hybrid.OpGetMany:
		return "hybridcache.get_many"
	case hybrid.OpGetTag:
		return "hybridcache.get_tag"
	case hybrid.OpGetClear:
		return "hybridcache.get_clear"
	case hybrid.OpSet:
		return "hybridcache.set"
	case hybrid.OpSetMany:
		return "hybridcache.set_many"
	case hybrid.OpDelete:
		return "hybridcache.delete"
	case hybrid.OpExpire:
		return "hybridcache.expire"
	case hybrid.OpDeleteTag:
		return "hybridcache.delete_tag"
	case hybrid.OpLease:
		return "hybridcache.lease"
	case hybrid.OpLeaseCheck:
		return "hybridcache.lease_check"
	case hybrid.OpLeaseExtend:
		return "hybridcache.lease_extend"
	case hybrid.OpLeaseRelease:
		return "hybridcache.lease_release"
	}
	return "hybridcache." + string(op)
}

func outcomeOf(err error) string {
	switch {
	case err == nil:
		return outcomeOK
	case errors.Is(err, hybrid.ErrNotFound):
		return outcomeNotFound
	}
	return outcomeError
}
