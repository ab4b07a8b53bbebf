package main

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// meterSnap is the process's and the server's counters at one instant.
type meterSnap struct {
	at         time.Time
	cpu        time.Duration
	totalAlloc uint64
	mallocs    uint64
	pauseNs    uint64
	numGC      uint32
	srv        serverCounters
	infoBytes  int64 // size of the INFO reply read for srv
}

func takeSnap(ctx context.Context, rdb *redis.Client) meterSnap {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := meterSnap{at: time.Now(), cpu: cpuTime(), totalAlloc: ms.TotalAlloc, mallocs: ms.Mallocs, pauseNs: ms.PauseTotalNs, numGC: ms.NumGC}
	if rdb != nil {
		s.srv, s.infoBytes = readServerCountersSized(ctx, rdb)
	}
	return s
}

// usage is what the process (and the server) did between two snapshots.
type usage struct {
	wall     time.Duration
	requests int64
	cpu      time.Duration
	alloc    uint64
	mallocs  uint64
	gcPause  time.Duration
	numGC    uint32
	netOut   int64   // bytes the server sent, less the harness's INFO replies
	redisCPU float64 // seconds
	srvOK    bool
}

func between(a, b meterSnap, requests int64) usage {
	u := usage{
		wall: b.at.Sub(a.at), requests: requests, cpu: b.cpu - a.cpu,
		alloc: b.totalAlloc - a.totalAlloc, mallocs: b.mallocs - a.mallocs,
		gcPause: time.Duration(b.pauseNs - a.pauseNs), numGC: b.numGC - a.numGC,
	}
	if d := a.srv.delta(b.srv); d.available {
		u.srvOK = true
		// The reply to the second INFO is counted in b's total; the one
		// to the first is not counted in a's (the total is read before
		// the reply is sent), so it falls in the delta too.
		u.netOut = d.netOut - a.infoBytes
		u.redisCPU = d.cpu
	}
	return u
}

func (u usage) perMinute(x float64) float64 { return x / u.wall.Minutes() }

func (u usage) perRequest(x float64) float64 {
	if u.requests == 0 {
		return 0
	}
	return x / float64(u.requests)
}

// phase is one measured load phase.
type phase struct {
	total    usage
	windows  []usage
	peakHeap uint64 // max HeapInuse seen, sampled every 100 ms
	lat      hist
	errors   int64
	dropped  int64 // requests the pacer could not hand to a worker in time
	firstErr error
}

// runPaced calls op at rate per second for dur, from a pool of workers so
// that a slow call does not hold the schedule up, and measures the
// process's CPU, allocation and GC and the server's output per window.
// Requests that fall more than half a second behind the schedule are
// dropped and counted, so an implementation that cannot keep up shows a
// lower achieved rate instead of an ever-growing backlog.
func runPaced(ctx context.Context, rdb *redis.Client, rate float64, dur time.Duration, windows int, op func() error) *phase {
	const workers = 16
	ph := &phase{}
	tokens := make(chan struct{}, int(rate/2)+1)
	var done, late atomic.Int64
	var stopping atomic.Bool // the schedule is over: skip what is still queued
	var errs atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	hists := make([]hist, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := &hists[w]
			for range tokens {
				if stopping.Load() {
					late.Add(1)
					continue
				}
				t0 := time.Now()
				if err := op(); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				}
				h.record(int64(time.Since(t0)))
				done.Add(1)
			}
		}()
	}
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	snaps := make([]meterSnap, 0, windows+1)
	var peak uint64
	snaps = append(snaps, takeSnap(ctx, rdb))
	doneAt := make([]int64, 0, windows+1)
	doneAt = append(doneAt, 0)
	start := snaps[0].at
	go func() {
		defer close(samplerDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		win := dur / time.Duration(windows)
		next := start.Add(win)
		for {
			select {
			case <-stopSampler:
				return
			case now := <-tick.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
				if !now.Before(next) && len(snaps) < windows {
					doneAt = append(doneAt, done.Load())
					snaps = append(snaps, takeSnap(ctx, rdb))
					next = next.Add(win)
				}
			}
		}
	}()
	var issued int64
	for {
		el := time.Since(start)
		if el >= dur {
			break
		}
		due := int64(el.Seconds() * rate)
		if due-issued > int64(rate/2) {
			ph.dropped += due - issued - int64(rate/2)
			issued = due - int64(rate/2)
		}
		for ; issued < due; issued++ {
			select {
			case tokens <- struct{}{}:
			default:
				ph.dropped++
			}
		}
		time.Sleep(time.Millisecond)
	}
	stopping.Store(true)
	close(tokens)
	wg.Wait()
	ph.dropped += late.Load()
	close(stopSampler)
	<-samplerDone
	doneAt = append(doneAt, done.Load())
	snaps = append(snaps, takeSnap(ctx, rdb))
	for i := 1; i < len(snaps); i++ {
		ph.windows = append(ph.windows, between(snaps[i-1], snaps[i], doneAt[i]-doneAt[i-1]))
	}
	ph.total = between(snaps[0], snaps[len(snaps)-1], done.Load())
	// Each window takes out the INFO reply that started it; the total must
	// take out every one, so it is the windows' sum.
	ph.total.netOut = 0
	for _, w := range ph.windows {
		ph.total.netOut += w.netOut
	}
	ph.peakHeap = peak
	for i := range hists {
		ph.lat.merge(&hists[i])
	}
	ph.errors = errs.Load()
	if p := firstErr.Load(); p != nil {
		ph.firstErr = *p
	}
	return ph
}

// runFull calls op from goroutines in closed loops for dur and returns
// the throughput, a latency histogram (every timeEvery-th call is timed)
// and the process's usage.
func runFull(ctx context.Context, rdb *redis.Client, goroutines int, dur time.Duration, timeEvery int, op func() error) *phase {
	ph := &phase{}
	var stop atomic.Bool
	var total, errs atomic.Int64
	var firstErr atomic.Pointer[error]
	hists := make([]hist, goroutines)
	var wg sync.WaitGroup
	a := takeSnap(ctx, rdb)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := &hists[g]
			n := 0
			for !stop.Load() {
				var err error
				if n%timeEvery == 0 {
					t0 := time.Now()
					err = op()
					h.record(int64(time.Since(t0)))
				} else {
					err = op()
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				}
				n++
			}
			total.Add(int64(n))
		}()
	}
	time.Sleep(dur)
	stop.Store(true)
	wg.Wait()
	b := takeSnap(ctx, rdb)
	ph.total = between(a, b, total.Load())
	for i := range hists {
		ph.lat.merge(&hists[i])
	}
	ph.errors = errs.Load()
	if p := firstErr.Load(); p != nil {
		ph.firstErr = *p
	}
	return ph
}
