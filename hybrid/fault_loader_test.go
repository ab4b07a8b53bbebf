package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

// loadFault is what the load function does for a key.
type loadFault int

const (
	loadOK loadFault = iota
	loadPanic
	loadHang
	loadError
)

func (f loadFault) String() string {
	return [...]string{"ok", "panic", "hang", "error"}[f]
}

// TestFaultLoaderAtScale: two instances on real Redis, 100 keys read
// concurrently by 8 goroutines (each over every key, from a different
// start, so fills are shared and restarted). Some loads panic, some hang
// until their ctx ends (LoadTimeout), some fail, the rest succeed. Every
// caller gets its own key's answer: the value, or an error that wraps
// ErrPanic, context.DeadlineExceeded or that key's own error; no call waits
// longer than LoadTimeout allows, and no goroutine is left once the caches
// and buses are closed.
func TestFaultLoaderAtScale(t *testing.T) {
	srv.NeedReal(t)
	// Runs last, after the caches, buses and clients are closed.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })

	const (
		nkeys       = 100
		goroutines  = 8
		loadTimeout = 250 * time.Millisecond
		bound       = loadTimeout + time.Second
	)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, LoadTimeout: loadTimeout}
	p := []*instance{
		newInstance(t, "A", singleNode(nil), o, invalidate.Options{}),
		newInstance(t, "B", singleNode(nil), o, invalidate.Options{}),
	}

	keys := make([]string, nkeys)
	faults := make([]loadFault, nkeys)
	keyErrs := make([]error, nkeys)
	byKey := make(map[string]int, nkeys)
	count := map[loadFault]int{}
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
		byKey[keys[i]] = i
		switch {
		case i%10 == 0:
			faults[i] = loadPanic
		case i%10 == 1 && i < 60:
			faults[i] = loadHang
		case i%10 == 2 || i%10 == 3:
			faults[i] = loadError
			keyErrs[i] = fmt.Errorf("backend error for %s", keys[i])
		}
		count[faults[i]]++
	}
	var loads [4]atomic.Int64
	load := func(ctx context.Context, key string) (string, error) {
		i := byKey[key]
		loads[faults[i]].Add(1)
		switch faults[i] {
		case loadPanic:
			panic("loader bug for " + key)
		case loadHang:
			<-ctx.Done()
			return "", ctx.Err()
		case loadError:
			return "", keyErrs[i]
		}
		return "v:" + key, nil
	}

	var (
		ts       timings
		fails    failures
		outcomes [4]atomic.Int64
		wg       sync.WaitGroup
	)
	start := time.Now()
	for g := range goroutines {
		in := p[g%len(p)]
		wg.Go(func() {
			for j := range nkeys {
				i := (g*13 + j) % nkeys
				key := keys[i]
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				t0 := time.Now()
				v, err := in.c.GetOrCreate(ctx, key, load)
				d := time.Since(t0)
				cancel()
				ts.add(d)
				if d > bound {
					fails.addf("%s: GetOrCreate(%s) [%v] took %v, want at most %v", in.name, key, faults[i], d, bound)
				}
				ok := false
				switch faults[i] {
				case loadOK:
					ok = err == nil && v == "v:"+key
				case loadPanic:
					ok = errors.Is(err, hybrid.ErrPanic) && v == ""
				case loadHang:
					ok = errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, hybrid.ErrPanic) && v == ""
				case loadError:
					ok = errors.Is(err, keyErrs[i]) && !errors.Is(err, hybrid.ErrPanic) && v == ""
					// Never another key's error.
					for x, e := range keyErrs {
						if e != nil && x != i && errors.Is(err, e) {
							ok = false
						}
					}
				}
				if ok {
					outcomes[faults[i]].Add(1)
				} else {
					fails.addf("%s: GetOrCreate(%s) [%v] = %q, %v", in.name, key, faults[i], v, firstLine(err))
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		var sb strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&sb, 1)
		t.Fatalf("callers still waiting after 60 s: a waiter is stuck\n%s", sb.String())
	}
	elapsed := time.Since(start)
	fails.report(t)

	d := ts.sorted()
	t.Logf("%d keys (%d ok, %d panic, %d hang, %d error) x %d goroutines on 2 instances in %v: %s",
		nkeys, count[loadOK], count[loadPanic], count[loadHang], count[loadError], goroutines, elapsed.Round(time.Millisecond), summary(d))
	t.Logf("right answers: ok %d, panic %d, hang %d, error %d; loads: ok %d, panic %d, hang %d, error %d",
		outcomes[loadOK].Load(), outcomes[loadPanic].Load(), outcomes[loadHang].Load(), outcomes[loadError].Load(),
		loads[loadOK].Load(), loads[loadPanic].Load(), loads[loadHang].Load(), loads[loadError].Load())
	// Redis is up: the instances share what they loaded through it. (A
	// few shared-tier calls may still fail when a loaded machine stalls a
	// fill past LoadTimeout, which also bounds its Redis calls.)
	var l2Hits uint64
	for _, in := range p {
		st := in.c.Stats()
		l2Hits += st.L2Hits
		t.Logf("%s: Loads %d, LoadErrors %d, L1Hits %d, L2Hits %d, L2Errors %d", in.name, st.Loads, st.LoadErrors, st.L1Hits, st.L2Hits, st.L2Errors)
	}
	if l2Hits == 0 {
		t.Error("L2Hits 0 on both instances, want values loaded by one read by the other from Redis")
	}
	// A successful key loads at most once per instance (then L1 or Redis
	// answers); the faulty ones are not cached and load again.
	if n := loads[loadOK].Load(); n < int64(count[loadOK]) || n > int64(len(p)*count[loadOK]) {
		t.Errorf("loads of good keys: %d, want %d..%d", n, count[loadOK], len(p)*count[loadOK])
	}
	for _, f := range []loadFault{loadPanic, loadHang, loadError} {
		if n := loads[f].Load(); n < int64(count[f]) {
			t.Errorf("loads of %v keys: %d, want at least one per key (%d)", f, n, count[f])
		}
	}
}

// firstLine is err's message up to its first newline (a panic's error
// carries the stack after it).
func firstLine(err error) string {
	if err == nil {
		return "<nil>"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
