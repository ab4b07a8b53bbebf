package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/message"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
)

// TestLagRecorded sends real messages from A to B over Redis: B records one
// lag per message applied, with sane values, and A none for its own; a
// message in the format that predates send times is applied and recorded
// nowhere.
func TestLagRecorded(t *testing.T) {
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := context.Background()
			ns := redistest.Prefix(t)
			p := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns, Channel: ns + ":bus", Secret: m.secret})
			a, b := p[0], p[1]
			const sets, deletes = 30, 10
			for i := range sets {
				setStr(t, a, fmt.Sprintf("k%d", i%7), fmt.Sprint(i))
			}
			for i := range deletes {
				if err := a.c.Delete(ctx, fmt.Sprintf("k%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			waitStat(t, b, "Invalidations.Applied", statReceived, sets+deletes)
			st := b.c.Stats()
			lag := st.Invalidations.Lag
			if lag.Count != st.Invalidations.Applied || lag.Count != sets+deletes {
				t.Fatalf("B: Lag.Count %d, Applied %d; want both %d", lag.Count, st.Invalidations.Applied, sets+deletes)
			}
			if lag.P50 <= 0 || lag.P50 > lag.P90 || lag.P90 > lag.P99 || lag.P99 > lag.Max || lag.Max >= time.Second {
				t.Errorf("B: lag p50 %v, p90 %v, p99 %v, max %v; want 0 < p50 <= p90 <= p99 <= max < 1s", lag.P50, lag.P90, lag.P99, lag.Max)
			}
			if lag.Skewed != 0 {
				t.Errorf("B: Lag.Skewed %d, want 0 (one clock)", lag.Skewed)
			}
			var sum uint64
			for _, n := range lag.Buckets {
				sum += n
			}
			if len(lag.Buckets) != len(hybrid.DurationBounds())+1 || sum != lag.Count {
				t.Errorf("B: %d buckets holding %d; want %d holding %d", len(lag.Buckets), sum, len(hybrid.DurationBounds())+1, lag.Count)
			}
			if own := a.c.Stats().Invalidations.Lag.Count; own != 0 {
				t.Errorf("A: Lag.Count %d, want 0 (its own messages are ignored)", own)
			}

			// A delete from an instance that predates send times, and a
			// Set from one that leaves them out (NoSendTime).
			old := message.Encode(message.Message{Op: message.OpDelete, Origin: message.Origin{7}, Namespace: ns, Keys: []string{"k1"}}, m.secret)
			if err := b.rdb.Publish(ctx, ns+":bus", old).Err(); err != nil {
				t.Fatal(err)
			}
			c := newInstance(t, "C", singleNode(nil), hybrid.Options{Namespace: ns, Channel: ns + ":bus", Secret: m.secret, NoSendTime: true}, invalidate.Options{})
			setStr(t, c, "k2", "from C")
			waitStat(t, b, "Invalidations.Applied", statReceived, sets+deletes+2)
			if got := b.c.Stats().Invalidations.Lag.Count; got != sets+deletes {
				t.Errorf("B: Lag.Count after two messages without a send time: %d, want %d (unchanged)", got, sets+deletes)
			}
			if got := b.c.Stats().Invalidations.Invalid; got != 0 {
				t.Errorf("B: Invalidations.Invalid %d, want 0 (messages without a send time are valid)", got)
			}
		})
	}
}

// TestServedAge checks the age at serve of both tiers: a value read from
// Redis a known time after its write, and L1 hits a known time after the
// value was stored.
func TestServedAge(t *testing.T) {
	ns := redistest.Prefix(t)
	p := newInstances(t, 2, singleNode(nil), hybrid.Options{Namespace: ns})
	a, b := p[0], p[1]
	const wait = 60 * time.Millisecond
	setStr(t, a, "k", "v")
	time.Sleep(wait)

	fill(t, b, "k", "v") // from Redis, written at least wait ago
	l2 := b.c.Stats().L2
	if l2.Hits != 1 || l2.ServedAge.Count != 1 {
		t.Fatalf("B: L2.Hits %d, L2.ServedAge.Count %d; want 1, 1", l2.Hits, l2.ServedAge.Count)
	}
	if l2.ServedAge.Max < wait || l2.ServedAge.Max > 10*time.Second {
		t.Errorf("B: age of the value served from Redis %v, want at least %v (and not absurd)", l2.ServedAge.Max, wait)
	}

	// L1 hits on A, a known time after its Set stored the value; one hit
	// in 64 is recorded.
	time.Sleep(wait)
	const hits = 64 * 40
	for range hits {
		if _, ok := getStr(t, a, "k"); !ok {
			t.Fatal("A: miss")
		}
	}
	l1 := a.c.Stats().L1
	if l1.Hits < hits {
		t.Fatalf("A: L1.Hits %d, want %d", l1.Hits, hits)
	}
	// 40 expected; fewer than 8 or more than 120 is a chance below 1e-6.
	if l1.ServedAge.Count < 8 || l1.ServedAge.Count > 120 {
		t.Errorf("A: L1.ServedAge.Count %d after %d hits, want about %d (one in 64)", l1.ServedAge.Count, hits, hits/64)
	}
	// Every hit came at least 2×wait after the store: so did their
	// median, give or take the bucket it falls in (a factor of √2).
	if l1.ServedAge.Max < 2*wait || l1.ServedAge.P50 < 2*wait*10/15 || l1.ServedAge.Max > 10*time.Second {
		t.Errorf("A: L1 served age p50 %v, max %v; want both at least about %v", l1.ServedAge.P50, l1.ServedAge.Max, 2*wait)
	}
	if b.c.Stats().L1.ServedAge.Count != 0 || a.c.Stats().L2.ServedAge.Count != 0 {
		t.Errorf("B served no L1 hit and A read nothing from Redis, yet B's L1.ServedAge.Count is %d and A's L2.ServedAge.Count %d",
			b.c.Stats().L1.ServedAge.Count, a.c.Stats().L2.ServedAge.Count)
	}
}

// TestL1HitAllocatesNothingWhileSampling checks that the L1 hits whose age
// is recorded allocate nothing either: enough hits run that some are.
func TestL1HitAllocatesNothingWhileSampling(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := newSharedTier(t)
	c := newTestCache[string](t, s.options())
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(){
		"GetOrCreate": func() { _, _ = c.GetOrCreate(ctx, "k", loadTop) },
		"Get":         func() { _, _, _ = c.Get(ctx, "k") },
		"GetEntry":    func() { _, _, _ = c.GetEntry(ctx, "k") },
	} {
		before := c.Stats().L1.ServedAge.Count
		if got := testing.AllocsPerRun(64*50, f); got != 0 {
			t.Errorf("%s on an L1 hit: %v allocations, want 0", name, got)
		}
		if after := c.Stats().L1.ServedAge.Count; after == before {
			t.Errorf("%s: no L1 age recorded in %d hits", name, 64*50)
		}
	}
}
