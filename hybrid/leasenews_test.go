package hybrid_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// Errors are shared: the waiters' callers get the holder's load error, and
// a not-found remembered by NegativeTTL, without loading again.
func TestLeaseSharesFailures(t *testing.T) {
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			srv.NeedReal(t)
			ns := redistest.Prefix(t)
			o := leaseOptions(ns, m.secret)
			o.NegativeTTL = time.Minute
			ins := newInstances(t, 3, singleNode(nil), o)
			for _, c := range []struct {
				key  string
				fail error
				want error
			}{
				{"broken", errors.New("db down"), hybrid.ErrLeaseHolderFailed},
				{"missing", hybrid.ErrNotFound, hybrid.ErrNotFound},
			} {
				db := &fleetLoad{delay: 100 * time.Millisecond, fail: c.fail}
				res := getOnAll(ins, c.key, db.load)
				if n := db.calls.Load(); n != 1 {
					t.Fatalf("%s: %d loads, want 1", c.key, n)
				}
				for i, r := range res {
					err := r.err
					if ins[i].c.Stats().Load.Calls > 0 {
						continue // the holder: its own error
					}
					if !errors.Is(err, c.want) {
						t.Errorf("%s: %s got %v, want %v", c.key, ins[i].name, err, c.want)
					}
					if c.fail != hybrid.ErrNotFound && len(m.secret) > 0 && (err == nil || !strings.Contains(err.Error(), "db down")) {
						t.Errorf("%s: %s got %v, want the holder's error text", c.key, ins[i].name, err)
					}
				}
			}
		})
	}
}

// A value the holder cannot store (over MaxValueBytes) is not waited for
// in turn: the holder says so, and the waiters load it by themselves at
// once instead of taking the lease one after another.
func TestLeaseNotStored(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	o := leaseOptions(ns, nil)
	o.MaxValueBytes = 64
	ins := newInstances(t, 3, singleNode(nil), o)
	big := strings.Repeat("x", 200)
	var loads atomic.Int64
	load := func(ctx context.Context, key string) (string, error) {
		loads.Add(1)
		time.Sleep(50 * time.Millisecond)
		return big, nil
	}
	wantAll(t, ins, getOnAll(ins, "big", load), big)
	var taken, waited uint64
	for _, in := range ins {
		s := in.c.Stats()
		taken += s.Leases.Taken
		waited += s.Leases.Waited
	}
	if n := loads.Load(); n != 3 || taken != 1 || waited != 2 {
		t.Errorf("%d loads, %d leases taken, %d waited; want 3 (nothing can be stored), 1 and 2 (no lease taken in turn)", n, taken, waited)
	}
	noLeaseLeft(t, ins[0].rdb, ns, true)
}

// A panicking holder's waiters get its panic, bounded and without the
// stack, which stays in the holder's own error.
func TestLeasePanicTextBounded(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	ins := newInstances(t, 2, singleNode(nil), leaseOptions(ns, []byte("s")))
	a, b := ins[0], ins[1]
	g, release := gate(t)
	started := make(chan struct{})
	resA := goGet(a, "k", func(context.Context, string) (string, error) {
		close(started)
		<-g
		panic(strings.Repeat("boom ", 2000))
	})
	<-started
	resB := goGet(b, "k", func(context.Context, string) (string, error) { return "from B", nil })
	waitStat(t, b, "Leases.Waited", func(s hybrid.Stats) uint64 { return s.Leases.Waited }, 1)
	release()
	if r := <-resA; !errors.Is(r.err, hybrid.ErrPanic) || !strings.Contains(r.err.Error(), "goroutine ") {
		t.Fatalf("A: got %v, want ErrPanic with the stack", r.err)
	}
	r := <-resB
	if !errors.Is(r.err, hybrid.ErrLeaseHolderFailed) || !strings.Contains(r.err.Error(), "boom") {
		t.Fatalf("B: got %v, want ErrLeaseHolderFailed with the panic's text", r.err)
	}
	if text := r.err.Error(); len(text) > 400 || strings.Contains(text, "goroutine ") {
		t.Errorf("B's error holds %d bytes (stack: %v), want the text bounded and no stack", len(text), strings.Contains(text, "goroutine "))
	}
}

// A second fill of a key on the instance whose first fill holds the lease
// (a Delete made later callers start anew) hears of the release from its
// own instance, at once, instead of waiting LeaseWait: own messages are
// not handled when they come back over the bus.
func TestLeaseHeldHere(t *testing.T) {
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			srv.NeedReal(t)
			ns := redistest.Prefix(t)
			o := leaseOptions(ns, m.secret)
			o.LoadLease = 10 * time.Second // kept alive: without news, the second fill waits LeaseWait
			a := newInstances(t, 1, singleNode(nil), o)[0]
			res1, release := holding(t, a, "k", "first")
			if err := a.c.Delete(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			res2 := goGet(a, "k", func(context.Context, string) (string, error) { return "second", nil })
			waitStat(t, a, "Leases.Waited", func(s hybrid.Stats) uint64 { return s.Leases.Waited }, 1)
			released := time.Now()
			release()
			if r := <-res1; r.err != nil || r.v != "first" {
				t.Fatalf("first fill: got %q, %v", r.v, r.err)
			}
			r := <-res2
			if r.err != nil || r.v != "second" {
				t.Fatalf("second fill: got %q, %v, want its own load (the first one's value came before the Delete)", r.v, r.err)
			}
			if took := time.Since(released); took > 2*time.Second {
				t.Errorf("second fill answered %v after the first released its lease", took)
			}
			if s := a.c.Stats(); s.Leases.TimedOut != 0 || s.Leases.Taken != 2 {
				t.Errorf("%d leases timed out, %d taken; want 0 and 2 (the second fill takes the lease once released)", s.Leases.TimedOut, s.Leases.Taken)
			}
		})
	}
}
