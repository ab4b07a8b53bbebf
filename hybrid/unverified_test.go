package hybrid_test

import (
	"context"
	"testing"
	"time"
)

// TestUnverifiedFillDropped: a value loaded while the shared tier could not
// be reached, whose write-back failed, is served from L1 while the outage
// lasts, and leaves L1 once the shared tier answers again, so that a write
// another instance made there meanwhile (whose message never came) is what
// is served next.
func TestUnverifiedFillDropped(t *testing.T) {
	ctx := t.Context()
	s := newSharedTier(t)
	a := newTestCache[string](t, s.options())
	s.remote.FailWith(errDown)
	if v, err := a.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) { return "loaded", nil }); err != nil || v != "loaded" {
		t.Fatalf("GetOrCreate during the outage: %q, %v; want loaded", v, err)
	}
	// The write-back is tried three times, then given up; the probe tries
	// the shared tier meanwhile, and fails.
	waitFor(t, 5*time.Second, "the write-back to be given up", func() bool { return a.Stats().L2.WritesDropped == 1 }, nil)
	if v, err := a.GetOrCreate(ctx, "k", neverLoad(t)); err != nil || v != "loaded" {
		t.Fatalf("GetOrCreate while still down: %q, %v; want loaded, from L1", v, err)
	}
	// Another instance's write, made while this one could not read it.
	s.remote.Put(testNS+":k", envelopeOf(t, "other", time.Hour), time.Hour)
	s.remote.FailWith(nil)
	waitFor(t, 5*time.Second, "the shared tier's value to be served", func() bool {
		v, err := a.GetOrCreate(ctx, "k", neverLoad(t))
		return err == nil && v == "other"
	}, nil)
}
