package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// The write-heavy figures (bench/RESULTS.md, "Write-heavy traffic"): two
// instances of a service read and write the same keys, a share of the
// calls being Sets, through our cache and through raw go-redis (GET +
// json.Unmarshal, json.Marshal + SET). The default run is short (one
// round of 2,000 calls per caller) and checks that both instances end up
// serving what Redis holds; HYBRID_BENCH_WRITES=1 runs the figures:
//
//	HYBRID_BENCH_WRITES=1 go test -count=1 -v -run TestFigureWriteHeavy .

const (
	whKeys    = 1_000
	whCallers = 2 // per instance
)

// whSystem is one way of serving the two instances' calls.
type whSystem interface {
	get(ctx context.Context, inst int, key string) (*Record, error)
	set(ctx context.Context, inst int, key string, v *Record) error
	close()
}

// whRaw is the baseline: each instance its own go-redis client, JSON.
type whRaw struct {
	prefix string
	rdb    [2]*redis.Client
}

func (r *whRaw) get(ctx context.Context, inst int, key string) (*Record, error) {
	b, err := r.rdb[inst].Get(ctx, r.prefix+key).Bytes()
	if err != nil {
		return nil, err
	}
	v := new(Record)
	return v, json.Unmarshal(b, v)
}

func (r *whRaw) set(ctx context.Context, inst int, key string, v *Record) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.rdb[inst].Set(ctx, r.prefix+key, b, benchTTL).Err()
}

func (r *whRaw) close() {
	for _, c := range r.rdb {
		c.Close()
	}
}

// whOurs is our cache: each instance its own client, l2.Store and
// invalidate.Bus, one Namespace and Secret, as a service runs it.
type whOurs struct {
	c   [2]*hybrid.Cache[*Record]
	bus [2]*invalidate.Bus
	rdb [2]*redis.Client
}

func openWhOurs(addr, ns string, secret []byte) (*whOurs, error) {
	o := &whOurs{}
	for i := range o.c {
		o.rdb[i] = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		o.bus[i] = invalidate.New(o.rdb[i], invalidate.Options{})
		c, err := hybrid.New[*Record](hybrid.Options{
			Namespace: ns, Remote: l2.New(o.rdb[i], l2.Options{}), Bus: o.bus[i], Secret: secret,
			TTL: benchTTL, LocalTTL: benchLocalTTL, LocalMaxBytes: 256 << 20,
		})
		if err != nil {
			o.close()
			return nil, err
		}
		o.c[i] = c
	}
	return o, nil
}

// errWhLoad is the load's error: every key is in Redis before the clock
// starts, and a Set never removes one.
var errWhLoad = errors.New("bench: load called in the write-heavy scenario")

func whNoLoad(context.Context, string) (*Record, error) { return nil, errWhLoad }

func (o *whOurs) get(ctx context.Context, inst int, key string) (*Record, error) {
	return o.c[inst].GetOrCreate(ctx, key, whNoLoad)
}

func (o *whOurs) set(ctx context.Context, inst int, key string, v *Record) error {
	return o.c[inst].Set(ctx, key, v)
}

func (o *whOurs) close() {
	for i := range o.c {
		if o.c[i] != nil {
			o.c[i].Close()
		}
		if o.bus[i] != nil {
			o.bus[i].Close()
		}
		if o.rdb[i] != nil {
			o.rdb[i].Close()
		}
	}
}

// whCell is one measured stretch: a system at a write share.
type whCell struct {
	wall               time.Duration
	calls              int
	readP50, readP99   float64 // ns
	writeP50, writeP99 float64 // ns
	cpu                time.Duration
	allocs             uint64
	commands           int64
	l1Hits, l1Reads    uint64 // ours: L1 hits and lookups, both instances
	sent               uint64 // ours: bus messages sent
	writes             int
	cmds               string  // the Redis commands, most frequent first
	redisCPU           float64 // Redis server CPU, seconds
}

// runWh sends calls calls from each of the whCallers callers of both
// instances, a share of them Sets of a new value, to random keys.
func runWh(t *testing.T, sys whSystem, srv *redis.Client, share float64, calls int, seed uint64) whCell {
	ctx := t.Context()
	var mu sync.Mutex
	var reads, writes []time.Duration
	var failed error
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	sc0 := readServerCounters(ctx, srv)
	cpu0 := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	for inst := range 2 {
		for g := range whCallers {
			wg.Go(func() {
				rng := mrand.New(mrand.NewPCG(seed, uint64(inst*whCallers+g)))
				r := make([]time.Duration, 0, calls)
				w := make([]time.Duration, 0, calls)
				for i := range calls {
					k := rng.IntN(whKeys)
					key := "k" + strconv.Itoa(k)
					t0 := time.Now()
					var err error
					if rng.Float64() < share {
						v := makeRecord(k)
						v.Score = float64((inst*whCallers+g)*calls + i)
						err = sys.set(ctx, inst, key, v)
						w = append(w, time.Since(t0))
					} else {
						_, err = sys.get(ctx, inst, key)
						r = append(r, time.Since(t0))
					}
					if err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
						return
					}
				}
				mu.Lock()
				reads, writes = append(reads, r...), append(writes, w...)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	c := whCell{wall: time.Since(start), cpu: cpuTime() - cpu0}
	runtime.ReadMemStats(&ms1)
	if failed != nil {
		t.Fatal(failed)
	}
	d := sc0.delta(readServerCounters(ctx, srv))
	c.commands, c.cmds, c.redisCPU = d.commands, d.describe(), d.cpu
	c.allocs = ms1.Mallocs - ms0.Mallocs
	c.calls, c.writes = len(reads)+len(writes), len(writes)
	rq, wq := durPercentiles(reads, 0.5, 0.99), durPercentiles(writes, 0.5, 0.99)
	c.readP50, c.readP99, c.writeP50, c.writeP99 = rq[0], rq[1], wq[0], wq[1]
	return c
}

// TestFigureWriteHeavy measures, for write shares of 10% and 50%, raw
// go-redis against our cache, the cells taking turns round by round, each
// over keys of its own that Redis holds before the clock starts (and, for
// ours, both instances' L1s). After each of our cells it checks that both
// instances serve what Redis holds for every key.
func TestFigureWriteHeavy(t *testing.T) {
	calls, rounds := 2_000, 1
	if os.Getenv("HYBRID_BENCH_WRITES") == "1" {
		calls, rounds = 20_000, 3
	}
	s, err := startRedis()
	if err != nil {
		t.Skip(err) // no redis-server: the figures need one
	}
	defer s.kill()
	srv := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer srv.Close()
	secret := make([]byte, 32)
	rand.Read(secret)
	ctx := t.Context()
	shares := []float64{0.1, 0.5}
	type result struct{ raw, ours []whCell }
	results := make([]result, len(shares))
	n := 0
	for round := range rounds {
		for si, share := range shares {
			for k := range 2 {
				n++
				prefix := fmt.Sprintf("wh%d.", n)
				var sys whSystem
				var ours *whOurs
				if (round+k)%2 == 0 {
					raw := &whRaw{prefix: prefix}
					for i := range raw.rdb {
						raw.rdb[i] = redis.NewClient(&redis.Options{Addr: s.Addr})
					}
					for k := range whKeys {
						if err := raw.set(ctx, 0, "k"+strconv.Itoa(k), makeRecord(k)); err != nil {
							t.Fatal(err)
						}
					}
					sys = raw
				} else {
					if ours, err = openWhOurs(s.Addr, prefix, secret); err != nil {
						t.Fatal(err)
					}
					items := make(map[string]*Record, whKeys)
					for k := range whKeys {
						items["k"+strconv.Itoa(k)] = makeRecord(k)
					}
					if err := ours.c[0].SetMany(ctx, items); err != nil {
						t.Fatal(err)
					}
					for k := range whKeys { // warm the other instance's L1 too
						if _, err := ours.get(ctx, 1, "k"+strconv.Itoa(k)); err != nil {
							t.Fatal(err)
						}
					}
					sys = ours
				}
				var before [2]hybrid.Stats
				if ours != nil {
					before = [2]hybrid.Stats{ours.c[0].Stats(), ours.c[1].Stats()}
				}
				c := runWh(t, sys, srv, share, calls, uint64(n))
				if ours != nil {
					for i, b := range before {
						st := ours.c[i].Stats()
						c.l1Hits += st.L1.Hits - b.L1.Hits
						c.l1Reads += st.L1.Hits + st.L1.Misses - b.L1.Hits - b.L1.Misses
						c.sent += st.Invalidations.Sent - b.Invalidations.Sent
					}
					checkConverged(t, ours, s.Addr, prefix, secret)
					results[si].ours = append(results[si].ours, c)
				} else {
					results[si].raw = append(results[si].raw, c)
				}
				sys.close()
				name := "raw"
				if ours != nil {
					name = "ours"
				}
				t.Logf("round %d, %.0f%% writes, %s: %d calls in %v, %.0f calls/s; read p50 %v p99 %v; write p50 %v p99 %v; CPU %v, Redis CPU %.2f s; %.1f allocs/call; %.2f Redis commands/call; L1 hits %d of %d reads; %d messages for %d writes; Redis: %s",
					round, 100*share, name, c.calls, c.wall.Round(time.Millisecond), float64(c.calls)/c.wall.Seconds(),
					time.Duration(c.readP50), time.Duration(c.readP99), time.Duration(c.writeP50), time.Duration(c.writeP99),
					c.cpu.Round(time.Millisecond), c.redisCPU, float64(c.allocs)/float64(c.calls), float64(c.commands)/float64(c.calls),
					c.l1Hits, c.l1Reads, c.sent, c.writes, c.cmds)
			}
		}
	}
	fmt.Printf("\n%d calls per caller, %d callers per instance, 2 instances, %d keys, %d rounds\n\n", calls, whCallers, whKeys, rounds)
	fmt.Println("| writes | calls/s raw | calls/s ours | ours ÷ raw | read p50 raw, ours | read p99 raw, ours | write p50 raw, ours | write p99 raw, ours | CPU/call ours ÷ raw | Redis CPU/call ours ÷ raw | allocs/call raw, ours | Redis cmds/call raw, ours | L1 hit % of reads | messages/write |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for si, share := range shares {
		r := results[si]
		var tr, to, ratio, rp50r, rp50o, rp99r, rp99o, wp50r, wp50o, wp99r, wp99o, cpu, rcpu, ar, ao, cr, co, hit, msg []float64
		for j := range r.raw {
			a, b := r.raw[j], r.ours[j]
			tr, to = append(tr, float64(a.calls)/a.wall.Seconds()), append(to, float64(b.calls)/b.wall.Seconds())
			ratio = append(ratio, to[j]/tr[j])
			rp50r, rp50o = append(rp50r, a.readP50), append(rp50o, b.readP50)
			rp99r, rp99o = append(rp99r, a.readP99), append(rp99o, b.readP99)
			wp50r, wp50o = append(wp50r, a.writeP50), append(wp50o, b.writeP50)
			wp99r, wp99o = append(wp99r, a.writeP99), append(wp99o, b.writeP99)
			cpu = append(cpu, (b.cpu.Seconds()/float64(b.calls))/(a.cpu.Seconds()/float64(a.calls)))
			rcpu = append(rcpu, (b.redisCPU/float64(b.calls))/(a.redisCPU/float64(a.calls)))
			ar, ao = append(ar, float64(a.allocs)/float64(a.calls)), append(ao, float64(b.allocs)/float64(b.calls))
			cr, co = append(cr, float64(a.commands)/float64(a.calls)), append(co, float64(b.commands)/float64(b.calls))
			hit = append(hit, 100*float64(b.l1Hits)/float64(b.l1Reads))
			msg = append(msg, float64(b.sent)/float64(b.writes))
		}
		us := func(xs []float64) string {
			if m := medianOf(xs) / 1e3; m < 10 {
				return fmt.Sprintf("%.1f µs", m)
			}
			return fmt.Sprintf("%.0f µs", medianOf(xs)/1e3)
		}
		fmt.Printf("| %.0f%% | %.0f | %.0f | %.2f× | %s, %s | %s, %s | %s, %s | %s, %s | %.2f× | %.2f× | %.0f, %.0f | %.2f, %.2f | %.1f | %.2f |\n",
			100*share, medianOf(tr), medianOf(to), medianOf(ratio), us(rp50r), us(rp50o), us(rp99r), us(rp99o),
			us(wp50r), us(wp50o), us(wp99r), us(wp99o), medianOf(cpu), medianOf(rcpu), medianOf(ar), medianOf(ao),
			medianOf(cr), medianOf(co), medianOf(hit), medianOf(msg))
	}
}

// checkConverged waits up to 5 s for both instances of o to serve, for
// every key, the value a fresh instance reads from Redis.
func checkConverged(t *testing.T, o *whOurs, addr, ns string, secret []byte) {
	t.Helper()
	fresh, err := openWhOurs(addr, ns, secret)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.close()
	ctx := t.Context()
	deadline := time.Now().Add(5 * time.Second)
	for k := range whKeys {
		key := "k" + strconv.Itoa(k)
		want, err := fresh.get(ctx, 0, key)
		if err != nil {
			t.Fatal(err)
		}
		for inst := range 2 {
			for {
				got, err := o.get(ctx, inst, key)
				if err != nil {
					t.Fatal(err)
				}
				if got.Score == want.Score {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("instance %d serves %s with score %v, Redis holds %v", inst, key, got.Score, want.Score)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}
