package hybrid_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"log/slog"
	"math"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
)

// writtenAt returns the stored form of the JSON value v as a writer whose
// write time is written would store it, expiring in a minute.
func writtenAt(t testing.TB, v any, written time.Time) []byte {
	t.Helper()
	payload, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return envelope.Append(nil, envelope.Header{Codec: codec.IDJSON, Written: written, Expires: written.Add(time.Minute)}, payload)
}

// verifierRunning reports whether a verifier goroutine is running in the
// process.
func verifierRunning() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Contains(string(buf[:n]), ").verifyLoop(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestVerifyDropsDivergent makes A's L1 copy of k older than Redis by
// writing a newer envelope to Redis directly, with no message: the
// verifier finds it divergent, drops it, logs its key, and A's next Get
// reads the new value.
func TestVerifyDropsDivergent(t *testing.T) {
	srv.NeedReal(t)
	logs := new(records)
	const window = 100 * time.Millisecond
	o := hybrid.Options{Namespace: redistest.Prefix(t), VerifyRate: 100, VerifyWindow: window, Logger: slog.New(logs)}
	a := newInstances(t, 1, singleNode(nil), o)[0]
	ctx := t.Context()
	set(t, a.c, "k", "old")
	set(t, a.c, "other", "same")

	// Later than A's copy by more than the window, by A's own clock.
	newer := time.Now().Add(2 * window)
	if err := a.rdb.Set(ctx, o.Namespace+":k", writtenAt(t, "new", newer), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if v, ok := getString(t, a.c, "k"); !ok || v != "old" {
		t.Fatalf("right after the direct write, A serves %q, %v; want its stale L1 copy \"old\"", v, ok)
	}
	waitFor(t, 10*time.Second, "the verifier to drop k", func() bool { return a.c.Stats().Verify.Dropped >= 1 },
		func() string { return fmt.Sprintf("%+v", a.c.Stats().Verify) })
	if v, ok := getString(t, a.c, "k"); !ok || v != "new" {
		t.Errorf("after the verifier's drop, A serves %q, %v; want \"new\" from Redis", v, ok)
	}
	s := a.c.Stats().Verify
	if s.Divergent != 1 || s.Dropped != 1 {
		t.Errorf("Verify = %+v; want 1 divergent, 1 dropped (only k)", s)
	}
	if s.Consistent == 0 || s.Sampled != s.Consistent+s.Divergent+s.Missing+s.Errors {
		t.Errorf("Verify = %+v; want consistent samples of \"other\", and Sampled the sum of the outcomes", s)
	}
	if c := s.Coherence(); !(c > 0 && c < 1) {
		t.Errorf("Coherence = %v, want in (0, 1)", c)
	}
	if n := logs.count("hybrid: verifier found an L1 entry older"); n != 1 {
		t.Errorf("logged the divergent entry %d times, want 1", n)
	}
	if !logs.has("key", "k") {
		t.Error("the log line does not name the key k")
	}
}

// TestVerifyOffMakesNoCalls leaves a cache with entries in L1 idle: with
// the verifier off it makes no Redis call and runs no verifier goroutine;
// on, it does, and Close stops it.
func TestVerifyOffMakesNoCalls(t *testing.T) {
	srv.NeedReal(t)
	for _, rate := range []float64{0, 50} {
		a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: redistest.Prefix(t), VerifyRate: rate})[0]
		for i := range 20 {
			set(t, a.c, string(rune('a'+i)), "v")
		}
		before := a.remote.calls().total()
		time.Sleep(time.Second) // idle time, in which only a verifier would call
		calls := a.remote.calls().total() - before
		running := verifierRunning()
		st := a.c.Stats().Verify
		if rate == 0 {
			if calls != 0 || running || st != (hybrid.VerifyStats{}) {
				t.Errorf("verifier off: %d Redis calls in 1s idle, goroutine running %v, Verify %+v; want none", calls, running, st)
			}
			continue
		}
		if calls == 0 || !running || st.Sampled == 0 {
			t.Errorf("verifier on (control): %d Redis calls in 1s idle, goroutine running %v, Verify %+v; want calls and samples", calls, running, st)
		}
		if err := a.c.Close(); err != nil {
			t.Fatal(err)
		}
		if verifierRunning() {
			t.Error("the verifier goroutine outlived Close")
		}
	}
}

// TestVerifyStaysWithinRate counts the verifier's reads and samples over
// about two seconds at a small rate: within the rate, give or take one
// round, and each round is one read of up to 32 keys.
func TestVerifyStaysWithinRate(t *testing.T) {
	srv.NeedReal(t)
	const rate = 64 // rounds of 32 keys, every 500ms
	start := time.Now()
	a := newInstances(t, 1, singleNode(nil), hybrid.Options{Namespace: redistest.Prefix(t), VerifyRate: rate})[0]
	for i := range 100 {
		set(t, a.c, string(rune('a'+i%26))+string(rune('a'+i/26)), "v")
	}
	before := a.remote.calls()
	time.Sleep(2 * time.Second)
	c := a.remote.calls()
	s := a.c.Stats().Verify
	elapsed := time.Since(start)
	rounds := int64(elapsed/(500*time.Millisecond)) + 1
	if got := c.Heads; got < 1 || got > rounds {
		t.Errorf("%d header reads in %v at %v samples/s, want 1 to %d (one per 32 samples, a round of slack)", got, elapsed, rate, rounds)
	}
	if max := uint64(rate*elapsed.Seconds()) + 32; s.Sampled < 32 || s.Sampled > max {
		t.Errorf("%d samples in %v at %v/s, want 32 to %d", s.Sampled, elapsed, rate, max)
	}
	if keys := a.remote.headKeys.Load(); uint64(keys) != s.Sampled {
		t.Errorf("the reads asked for %d keys, want one per sample (%d)", keys, s.Sampled)
	}
	if c.Get != before.Get || c.GetBatch != before.GetBatch {
		t.Errorf("the verifier read values (Get %d -> %d, GetMany %d -> %d); want headers only", before.Get, c.Get, before.GetBatch, c.GetBatch)
	}
	if s.Divergent != 0 || s.Consistent == 0 {
		t.Errorf("Verify = %+v on a cache alone; want consistent samples only", s)
	}
}

// TestVerifyNoFalsePositives runs two instances that exchange messages
// while one writes and the other reads: nothing is divergent, nothing
// dropped, in either invalidation mode.
func TestVerifyNoFalsePositives(t *testing.T) {
	srv.NeedReal(t)
	for _, m := range invalidationModes {
		t.Run(m.name, func(t *testing.T) {
			o := hybrid.Options{Namespace: redistest.Prefix(t), Secret: m.secret, VerifyRate: 500}
			ins := newInstances(t, 2, singleNode(nil), o)
			a, b := ins[0], ins[1]
			keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
			for end, i := time.Now().Add(2*time.Second), 0; time.Now().Before(end); i++ {
				key := keys[i%len(keys)]
				set(t, b.c, key, time.Now().String())
				for _, k := range keys {
					if _, err := a.c.GetOrCreate(t.Context(), k, loadTop); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			for _, in := range ins {
				s := in.c.Stats().Verify
				if s.Divergent != 0 || s.Dropped != 0 || s.Consistent == 0 {
					t.Errorf("%s: Verify = %+v; want consistent samples only", in.name, s)
				}
			}
		})
	}
}

// TestVerifyRedisDown cuts Redis away: the verifier counts errors, drops
// nothing and keeps to its pace.
func TestVerifyRedisDown(t *testing.T) {
	srv.NeedReal(t)
	p := startProxy(t, srv.Addr)
	const rate = 100 // rounds of 32 keys every 320ms
	o := hybrid.Options{Namespace: redistest.Prefix(t), VerifyRate: rate}
	a := newInstances(t, 1, via(p, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = 200 * time.Millisecond }), o)[0]
	for i := range 20 {
		set(t, a.c, string(rune('a'+i)), "v")
	}
	p.Cut()
	before := a.remote.calls().Heads
	start := time.Now()
	waitFor(t, 10*time.Second, "five rounds of verifier errors", func() bool { return a.c.Stats().Verify.Errors >= 100 }, nil)
	elapsed := time.Since(start)
	reads := a.remote.calls().Heads - before
	s := a.c.Stats().Verify
	if s.Dropped != 0 || s.Divergent != 0 {
		t.Errorf("Verify = %+v with Redis down; want nothing divergent or dropped", s)
	}
	if rounds := int64(elapsed/(320*time.Millisecond)) + 1; reads > rounds {
		t.Errorf("%d header reads in %v with Redis down, want at most %d: the verifier spins", reads, elapsed, rounds)
	}
	if st := a.c.Stats(); st.L1.Entries != 20 || st.L2.Errors == 0 {
		t.Errorf("L1 entries %d, L2 errors %d; want the 20 entries kept and the failures counted", st.L1.Entries, st.L2.Errors)
	}
}

// TestVerifyWithoutHeadReader verifies through Remote.Get when the Remote
// cannot read heads, on the in-memory Remote.
func TestVerifyWithoutHeadReader(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.Remote = struct{ tier.Remote }{s.remote} // hides Heads
	o.VerifyRate, o.VerifyWindow = 100, time.Millisecond
	c := newTestCache[string](t, o)
	set(t, c, "k", "old")
	s.remote.Put(testNS+":k", writtenAt(t, "new", time.Now().Add(50*time.Millisecond)), time.Minute)
	waitFor(t, 10*time.Second, "the verifier to drop k", func() bool { return c.Stats().Verify.Dropped == 1 },
		func() string { return fmt.Sprintf("%+v", c.Stats().Verify) })
	if calls := s.remote.Calls(); calls.Heads != 0 || calls.Get == 0 {
		t.Errorf("Calls = %+v; want the verifier's reads made with Get", calls)
	}
	if v, ok := getString(t, c, "k"); v != "new" || !ok {
		t.Errorf("after the drop, Get = %q, %v; want \"new\"", v, ok)
	}
}

// TestVerifyMissingAndCorrupt counts a key the shared tier lost as
// missing and a header that does not decode as an error, and keeps both.
func TestVerifyMissingAndCorrupt(t *testing.T) {
	s := newSharedTier(t)
	o := s.options()
	o.VerifyRate = 100
	c := newTestCache[string](t, o)
	set(t, c, "gone", "v")
	set(t, c, "bad", "v")
	s.remote.Put(testNS+":bad", []byte("not an envelope at all"), time.Minute)
	s.remote.Put(testNS+":gone", []byte("x"), time.Millisecond)
	waitFor(t, 10*time.Second, "a missing and a corrupt sample", func() bool {
		v := c.Stats().Verify
		return v.Missing > 0 && v.Errors > 0
	}, func() string { return fmt.Sprintf("%+v", c.Stats().Verify) })
	if v := c.Stats().Verify; v.Dropped != 0 || v.Divergent != 0 || c.Stats().L1.Entries != 2 {
		t.Errorf("Verify = %+v, L1 entries %d; want both entries kept", v, c.Stats().L1.Entries)
	}
}

// pausedHeads is an l2.Store whose first Heads call (the verifier's
// first round) waits, once it has read, until release is closed or its
// ctx ends; entered is closed when it starts waiting.
type pausedHeads struct {
	*l2.Store
	once             sync.Once
	entered, release chan struct{}
}

func (r *pausedHeads) Heads(ctx context.Context, keys []string, n int) ([][]byte, error) {
	vals, err := r.Store.Heads(ctx, keys, n)
	first := false
	r.once.Do(func() { first = true })
	if first {
		close(r.entered)
		select {
		case <-r.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return vals, err
}

// TestVerifySnapshotConsistent: on real Redis, a Stats snapshot taken
// while a verifier round is reading shows none of the round's samples, and
// one taken after shows them all with their outcomes: Sampled is always
// the sum of the outcomes.
func TestVerifySnapshotConsistent(t *testing.T) {
	srv.NeedReal(t)
	ns := redistest.Prefix(t)
	remote := &pausedHeads{Store: l2.New(singleNode(nil)(t), l2.Options{}), entered: make(chan struct{}), release: make(chan struct{})}
	c := newTestCache[string](t, hybrid.Options{Namespace: ns, Remote: remote, VerifyRate: 1000, Logger: quiet})
	for i := range 10 {
		set(t, c, fmt.Sprint("k", i), "v")
	}
	sum := func(v hybrid.VerifyStats) uint64 { return v.Consistent + v.Divergent + v.Missing + v.Errors }
	select {
	case <-remote.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no verifier round in 10s")
	}
	if v := c.Stats().Verify; v.Sampled != sum(v) {
		t.Errorf("during a round: Verify = %+v; want Sampled the sum of the outcomes", v)
	}
	close(remote.release)
	waitFor(t, 10*time.Second, "the first round's samples", func() bool { return c.Stats().Verify.Sampled >= 10 },
		func() string { return fmt.Sprintf("%+v", c.Stats().Verify) })
	for range 1000 { // later rounds run meanwhile
		if v := c.Stats().Verify; v.Sampled != sum(v) {
			t.Fatalf("Verify = %+v; want Sampled the sum of the outcomes", v)
		}
	}
	if v := c.Stats().Verify; v.Consistent < 10 {
		t.Errorf("Verify = %+v; want the 10 entries consistent", v)
	}
}

// TestVerifyOptions refuses rates and windows out of bounds, and a rate
// without a Remote, naming the field.
func TestVerifyOptions(t *testing.T) {
	s := newSharedTier(t)
	for _, tt := range []struct {
		name  string
		o     func(o *hybrid.Options)
		field string
	}{
		{"negative rate", func(o *hybrid.Options) { o.VerifyRate = -1 }, "VerifyRate"},
		{"NaN rate", func(o *hybrid.Options) { o.VerifyRate = math.NaN() }, "VerifyRate"},
		{"rate too high", func(o *hybrid.Options) { o.VerifyRate = 1e6 }, "VerifyRate"},
		{"rate too low", func(o *hybrid.Options) { o.VerifyRate = 1e-9 }, "VerifyRate"},
		{"infinite rate", func(o *hybrid.Options) { o.VerifyRate = math.Inf(1) }, "VerifyRate"},
		{"no Remote", func(o *hybrid.Options) { o.VerifyRate, o.Remote, o.Bus = 1, nil, nil }, "VerifyRate"},
		{"negative window", func(o *hybrid.Options) { o.VerifyRate, o.VerifyWindow = 1, -time.Second }, "VerifyWindow"},
		{"window too long", func(o *hybrid.Options) { o.VerifyRate, o.VerifyWindow = 1, 25*time.Hour }, "VerifyWindow"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := s.options()
			tt.o(&o)
			c, err := hybrid.New[string](o)
			if err == nil {
				c.Close()
				t.Fatal("New: no error")
			}
			if !strings.Contains(err.Error(), "Options."+tt.field) {
				t.Errorf("New: %v; want it to name Options.%s", err, tt.field)
			}
		})
	}
}

// records is a slog.Handler that keeps what it gets.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (w *records) Enabled(context.Context, slog.Level) bool { return true }
func (w *records) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *records) WithGroup(string) slog.Handler            { return w }
func (w *records) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recs = append(w.recs, r)
	return nil
}

// count is how many records begin with msg.
func (w *records) count(msg string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, r := range w.recs {
		if strings.HasPrefix(r.Message, msg) {
			n++
		}
	}
	return n
}

// has reports whether a record has the attribute key=val.
func (w *records) has(key, val string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.recs {
		found := false
		r.Attrs(func(a slog.Attr) bool {
			found = found || (a.Key == key && a.Value.String() == val)
			return !found
		})
		if found {
			return true
		}
	}
	return false
}

// BenchmarkVerifyRound measures one verifier round of 32 samples against
// real Redis (one pipeline of 32 GETRANGE), reported per sample; the
// WithGet case is a Remote without HeadReader, read with MGET of whole
// values.
func BenchmarkVerifyRound(b *testing.B) {
	srv.NeedReal(b)
	for _, tc := range []struct {
		name string
		wrap func(tier.Remote) tier.Remote
	}{
		{"Heads", func(r tier.Remote) tier.Remote { return r }},
		{"WithGet", func(r tier.Remote) tier.Remote { return struct{ tier.Remote }{r} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rdb := benchClient(b)
			c, err := hybrid.New[Record](hybrid.Options{Namespace: redistest.Prefix(b), Remote: tc.wrap(l2.New(rdb, l2.Options{})),
				Codec: codec.Msgpack{}, TTL: time.Hour, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			ctx := context.Background()
			for i := range 1024 {
				k := strconv.Itoa(i)
				r, _ := loadRecord(ctx, k)
				if err := c.Set(ctx, k, r); err != nil {
					b.Fatal(err)
				}
			}
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			cpu0 := busyCPU()
			samples := 0
			b.ReportAllocs()
			for b.Loop() {
				samples += c.VerifyRounds(ctx, 1)
			}
			cpu := busyCPU() - cpu0
			runtime.ReadMemStats(&ms1)
			if s := c.Stats().Verify; s.Consistent != uint64(samples) {
				b.Fatalf("Verify = %+v after %d samples, want all consistent", s, samples)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(samples), "ns/sample")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(samples), "allocs/sample")
			b.ReportMetric(cpu*1e9/float64(samples), "cpu-ns/sample")
		})
	}
}

// BenchmarkVerifyLoad runs a cache of 1,000 L1 entries with the verifier
// on for two seconds per op at each rate and reports the Redis commands
// (one GETRANGE per sample) and round trips it sent per second.
func BenchmarkVerifyLoad(b *testing.B) {
	srv.NeedReal(b)
	for _, rate := range []float64{10, 100, 1000} {
		b.Run(strconv.FormatFloat(rate, 'f', -1, 64), func(b *testing.B) {
			a := newInstances(b, 1, singleNode(nil), hybrid.Options{Namespace: redistest.Prefix(b), VerifyRate: rate})[0]
			for i := range 1000 {
				set(b, a.c, strconv.Itoa(i), "v")
			}
			var cmds, trips int64
			var took time.Duration
			for b.Loop() {
				k0, h0, t0 := a.remote.headKeys.Load(), a.remote.heads.Load(), time.Now()
				time.Sleep(2 * time.Second)
				cmds += a.remote.headKeys.Load() - k0
				trips += a.remote.heads.Load() - h0
				took += time.Since(t0)
			}
			b.ReportMetric(float64(cmds)/took.Seconds(), "cmds/s")
			b.ReportMetric(float64(trips)/took.Seconds(), "roundtrips/s")
		})
	}
}

// busyCPU is the CPU time the process has used, in seconds, as the Go
// runtime estimates it (total less idle, GC included).
func busyCPU() float64 {
	ss := []metrics.Sample{{Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/cpu/classes/idle:cpu-seconds"}}
	metrics.Read(ss)
	return ss[0].Value.Float64() - ss[1].Value.Float64()
}
