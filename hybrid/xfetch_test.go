package hybrid_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/redistest"
)

// Probabilistic early refresh (Options.XFetchBeta, WithXFetchBeta), on real
// Redis.

// storedHeader returns the envelope header Redis holds for ns:key.
func storedHeader(t testing.TB, in *instance, ns, key string) envelope.Header {
	t.Helper()
	b, err := in.rdb.Get(context.Background(), ns+":"+key).Bytes()
	if err != nil {
		t.Fatalf("GET %s:%s: %v", ns, key, err)
	}
	h, _, err := envelope.Decode(b)
	if err != nil {
		t.Fatalf("GET %s:%s: %v", ns, key, err)
	}
	return h
}

// TestXFetchProbability: a hit r before a value's expiry starts its
// refresh with probability exp(-r / (beta * delta)), delta being how long
// its load took, which the envelope in Redis carries. Three groups of 300
// keys, each loaded in a batch that takes 300 ms (with WithXFetchBeta, beta 2),
// with lifetimes set so that one hit on each key (one GetOrCreateMany per
// group, the groups' 0.7 s apart) comes 0.25, 1 and 2.5 times beta * delta
// before expiry: the share of each group the hit refreshes is compared
// with exp(-r / (beta * delta)).
func TestXFetchProbability(t *testing.T) {
	const (
		n     = 300
		beta  = 2.0
		delay = 300 * time.Millisecond
	)
	ns := redistest.Prefix(t)
	in := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: ns, TTL: time.Minute, LocalTTL: time.Minute})[0]
	scale := beta * float64(delay)
	groups := []float64{0.25, 1, 2.5} // r / scale
	var refreshing atomic.Bool
	var mu sync.Mutex
	refreshed := map[string]int{} // keys the refresh loads asked for, by group
	stored := map[string]int64{}  // when each group's load returned, on L1's clock
	load := func(ctx context.Context, keys []string) (map[string]string, error) {
		if refreshing.Load() {
			mu.Lock()
			for _, k := range keys {
				refreshed[k[:2]]++
			}
			mu.Unlock()
			return nil, nil // the refreshed keys keep their values
		}
		time.Sleep(delay)
		out := make(map[string]string, len(keys))
		for _, k := range keys {
			out[k] = "v"
		}
		mu.Lock()
		stored[keys[0][:2]] = in.c.LocalNow() // L1 stores them next
		mu.Unlock()
		return out, nil
	}
	keys := make([][]string, len(groups))
	hit := make([]time.Time, len(groups))
	// When L1 stored each group and when its hit drew, on L1's clock, are
	// known to be between stored[g] and storedBy[g], and between hitL1[g]
	// and hitBy[g].
	hitL1, hitBy, storedBy := make([]int64, len(groups)), make([]int64, len(groups)), make([]int64, len(groups))
	ttls := make([]time.Duration, len(groups))
	hdr := make([]envelope.Header, len(groups))
	var wg sync.WaitGroup
	for g, f := range groups {
		for i := range n {
			keys[g] = append(keys[g], fmt.Sprintf("g%d.%d", g, i))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ttl := time.Duration(g+2)*700*time.Millisecond + time.Duration(f*scale) // hits 0.7 s apart
			if _, err := in.c.GetOrCreateMany(context.Background(), keys[g], load, hybrid.WithTTL(ttl), hybrid.WithXFetchBeta(beta)); err != nil {
				t.Errorf("group %d, cold: %v", g, err)
			}
			storedBy[g] = in.c.LocalNow()
			waitFor(t, 5*time.Second, "the write-back", func() bool { _, ok := redisValue(t, in.rdb, ns, keys[g][n-1]); return ok }, nil)
			h := storedHeader(t, in, ns, keys[g][0])
			hdr[g] = h
			time.Sleep(time.Until(h.Expires.Add(-time.Duration(f * beta * float64(h.LoadTime)))))
			refreshing.Store(true)
			hit[g] = time.Now()
			hitL1[g] = in.c.LocalNow()
			ttls[g] = ttl
			if m, err := in.c.GetOrCreateMany(context.Background(), keys[g], load, hybrid.WithTTL(ttl), hybrid.WithXFetchBeta(beta)); err != nil || len(m) != n {
				t.Errorf("group %d, hit: %d values, %v", g, len(m), err)
			}
			hitBy[g] = in.c.LocalNow()
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	started := int(in.c.Stats().Load.Refreshes)
	waitFor(t, 5*time.Second, "the refreshes' loads", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return refreshed["g0"]+refreshed["g1"]+refreshed["g2"] >= started
	}, nil)
	mu.Lock()
	defer mu.Unlock()
	prev := 1.0
	for g := range groups {
		h := hdr[g]
		if h.LoadTime < delay || h.LoadTime > delay+100*time.Millisecond {
			t.Errorf("group %d: the envelope says the load took %v, want about %v", g, h.LoadTime, delay)
		}
		// r is measured on L1's clock, as the cache sees it: it reads the
		// time every 10 ms, later on a loaded machine, so r is known to be
		// within bounds, and so is the share to expect.
		least := time.Duration(stored[fmt.Sprintf("g%d", g)] + int64(ttls[g]) - hitBy[g])
		most := time.Duration(storedBy[g] + int64(ttls[g]) - hitL1[g])
		p := func(r time.Duration) float64 { return math.Exp(-float64(r) / (beta * float64(h.LoadTime))) }
		got := float64(refreshed[fmt.Sprintf("g%d", g)]) / n
		t.Logf("group %d: hit %v to %v before expiry on L1's clock, %v on the envelope's (%.2f × beta × delta): refreshed %.3f, exp(-r/(beta×delta)) = %.3f to %.3f",
			g, least.Round(time.Millisecond), most.Round(time.Millisecond), h.Expires.Sub(hit[g]).Round(time.Millisecond), float64(least)/(beta*float64(h.LoadTime)), got, p(most), p(least))
		if got < p(most)-0.08 || got > p(least)+0.08 {
			t.Errorf("group %d: %.3f of the keys refreshed, want %.3f to %.3f, ± 0.08", g, got, p(most), p(least))
		}
		if got >= prev {
			t.Errorf("group %d: %.3f refreshed, want fewer than the group nearer expiry (%.3f)", g, got, prev)
		}
		prev = got
	}
}

// TestXFetchFleetLease: three instances serve one hot key under constant
// traffic, with XFetchBeta and LoadLease: the key is refreshed before it
// expires, by one instance at a time, so no caller waits for a load after
// the first, and the fleet makes about one load per lifetime.
func TestXFetchFleetLease(t *testing.T) {
	const (
		ttl   = 4 * time.Second
		delay = 50 * time.Millisecond
		run   = 9 * time.Second
		// Refreshes about beta × delta × ln(hits per second × beta ×
		// delta), 1 s here, before expiry: room for a loaded machine. A
		// larger beta refreshes as soon as a value is written when hits
		// are this many (4 made 9 loads in 9 s on a loaded machine).
		beta = 2
	)
	ns := redistest.Prefix(t)
	o := hybrid.Options{Namespace: ns, TTL: ttl, LocalTTL: ttl, XFetchBeta: beta, LoadLease: time.Second}
	ins := newInstances(t, 3, singleNode(nil), o)
	var loads, inflight, most atomic.Int64
	load := func(ctx context.Context, key string) (string, error) {
		loads.Add(1)
		now := inflight.Add(1)
		defer inflight.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(delay)
		return "v", nil
	}
	if _, err := ins[0].c.GetOrCreate(context.Background(), "hot", load); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the write-back", func() bool { _, ok := redisValue(t, ins[0].rdb, ns, "hot"); return ok }, nil)
	t0 := time.Now()
	var slowMu sync.Mutex
	var slow []string
	var waited, calls atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(run)
	for _, in := range ins {
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					start := time.Now()
					if _, err := in.c.GetOrCreate(context.Background(), "hot", load); err != nil {
						t.Errorf("%s: %v", in.name, err)
						return
					}
					calls.Add(1)
					if d := time.Since(start); d >= delay {
						waited.Add(1)
						slowMu.Lock()
						if len(slow) < 10 {
							slow = append(slow, fmt.Sprintf("%s at %v: %v", in.name, start.Sub(t0).Round(time.Millisecond), d.Round(time.Millisecond)))
						}
						slowMu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	var refreshes, deferred, misses uint64
	for _, in := range ins {
		st := in.c.Stats()
		refreshes += st.Load.Refreshes
		deferred += st.Load.RefreshesDeferred
		misses += st.L2.Misses
		t.Logf("%s: %+v", in.name, st.Load)
	}
	t.Logf("%d calls, %d loads (%d refreshes, %d left to a lease holder), %d calls took %v or more (%s)", calls.Load(), loads.Load(), refreshes, deferred, waited.Load(), delay, strings.Join(slow, "; "))
	if m := most.Load(); m != 1 {
		t.Errorf("%d loads at once, want 1", m)
	}
	// A caller that waits for a load is one whose read found neither tier
	// holding the key: only the first.
	// On a machine loaded 10 deep, a refresh has been seen to land after
	// the value's expiry once in a run (each instance then misses once):
	// plain expiry misses on every instance at every expiry, 7 or more.
	if misses < 1 || misses > 4 {
		t.Errorf("%d reads found the key in neither tier, want 1 (the first), at most one late refresh's 3 more", misses)
	}
	// Refreshed about 1 s before each expiry: a load every 3 s or so of
	// the 9 s, and the first.
	if n := loads.Load(); n < 3 || n > 8 {
		t.Errorf("%d loads in %v of a %v lifetime, want about one per lifetime", n, run, ttl)
	}
}

// TestXFetchOptionsChecked: New and the call refuse XFetch and backoff
// settings they cannot use, with an error naming them; an envelope carries
// a load time only with XFetch on, so that a cache without it writes what
// older versions read.
func TestXFetchOptionsChecked(t *testing.T) {
	s := newSharedTier(t)
	for name, tc := range map[string]struct {
		set  func(*hybrid.Options)
		name string
	}{
		"negative beta":     {func(o *hybrid.Options) { o.XFetchBeta = -1 }, "XFetchBeta"},
		"beta over 10":      {func(o *hybrid.Options) { o.XFetchBeta = 11 }, "XFetchBeta"},
		"NaN beta":          {func(o *hybrid.Options) { o.XFetchBeta = math.NaN() }, "XFetchBeta"},
		"with EagerRefresh": {func(o *hybrid.Options) { o.XFetchBeta, o.EagerRefresh = 1, 0.5 }, "EagerRefresh"},
		"negative backoff":  {func(o *hybrid.Options) { o.RefreshBackoff = -time.Second }, "RefreshBackoff"},
		"backoff over 1 h":  {func(o *hybrid.Options) { o.RefreshBackoff = 2 * time.Hour }, "RefreshBackoff"},
	} {
		o := s.options()
		tc.set(&o)
		if c, err := hybrid.New[string](o); err == nil {
			c.Close()
			t.Errorf("%s: New accepted it", name)
		} else if !strings.Contains(err.Error(), "Options."+tc.name) {
			t.Errorf("%s: error %q does not name Options.%s", name, err, tc.name)
		}
	}
	c := newTestCache[string](t, s.options())
	for _, beta := range []float64{-1, 11, math.NaN()} {
		if _, err := c.GetOrCreate(t.Context(), "k", loadTop, hybrid.WithXFetchBeta(beta)); err == nil {
			t.Errorf("WithXFetchBeta(%v): accepted", beta)
		}
	}
	if _, err := c.GetOrCreate(t.Context(), "plain", loadTop); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetOrCreate(t.Context(), "timed", loadTop, hybrid.WithXFetchBeta(1)); err != nil {
		t.Fatal(err)
	}
	s.waitStored(t, "plain", "timed")
	for key, want := range map[string]bool{"plain": false, "timed": true} {
		b, _ := s.remote.Peek(testNS + ":" + key)
		if h, _, err := envelope.Decode(b); err != nil || (h.Flags&envelope.FlagLoadTime != 0) != want {
			t.Errorf("%s: envelope flags %#x, %v; want a load time: %v", key, h.Flags, err, want)
		}
	}
}
