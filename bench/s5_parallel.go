package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
)

func scenarioParallel(ctx context.Context, e *env) (*section, error) {
	d, err := e.recordSet(ctx)
	if err != nil {
		return nil, err
	}
	dur := pick(e, 150*time.Millisecond, 500*time.Millisecond)
	counts := []int{1, 2, 4, 8}
	sec := &section{id: 5, title: "Multi-goroutine hit throughput"}
	sec.intro = fmt.Sprintf("Reads per second of warm entries (%s keys, random order, every read a local hit) from 1, 2, 4 and 8 "+
		"goroutines, each cell %v per run; in every run the goroutine counts and, within each, the implementations take turns. "+
		"This machine has %d logical cores, so counts above that measure contention, not parallel speed-up. "+
		"Peers that cache bytes decode msgpack on every hit.", fmtCount(numRecords), dur, e.coresHint())

	type impl5 struct {
		name   string
		series int
		na     string
		get    func(key string) bool
	}
	oc := otter.Must(&otter.Options[string, *Record]{MaximumSize: 2 * numRecords})
	defer oc.StopAllGoroutines()
	for i, k := range d.keys {
		oc.Set(k, d.recs[i])
	}
	oursC, err := openOurs[*Record](e, spec{kind: nameOurs, prefix: d.oursMsgpack, f: fmtMsgpack})
	if err != nil {
		return nil, err
	}
	defer oursC.Close()
	if err := warmPages[*Record](ctx, oursC, d.keys); err != nil {
		return nil, err
	}
	impls := []*impl5{
		{name: "otter GetIfPresent (raw)", series: 1, get: func(k string) bool { _, ok := oc.GetIfPresent(k); return ok }},
		{name: "hybridcache GetOrCreate (L1 hit)", series: 0, get: func(k string) bool {
			_, err := oursC.c.GetOrCreate(ctx, k, noLoad[*Record])
			return err == nil
		}},
	}
	for _, p := range []struct {
		name   string
		series int
		s      spec
	}{
		{"go-redis/cache Get (local hit)", 2, spec{kind: nameGoCache, prefix: d.goCache, f: fmtMsgpack}},
		{"rueidis DoCache (local hit) + decode", 3, spec{kind: nameRueidis, prefix: d.rawMsgpack, f: fmtMsgpack}},
		{"go-redis CSC Get (local hit) + decode", 4, spec{kind: nameCSC, prefix: d.rawMsgpack, f: fmtMsgpack}},
	} {
		im := &impl5{name: p.name, series: p.series}
		impls = append(impls, im)
		c, err := open[*Record](e, p.s)
		if err != nil {
			im.na = err.Error()
			continue
		}
		defer c.Close()
		if err := warmEach[*Record](ctx, c, d.keys); err != nil {
			im.na = "warm-up failed: " + err.Error()
			continue
		}
		im.get = func(k string) bool { _, ok, _ := c.Get(ctx, k); return ok }
	}

	idx := e.randomIndexes(1<<16, numRecords)
	const mask = 1<<16 - 1
	// rates[impl][goroutines] = reads/s per run
	rates := make([][][]float64, len(impls))
	for i := range rates {
		rates[i] = make([][]float64, len(counts))
	}
	var missed atomic.Int64
	for rep := range e.reps {
		e.progressf("    run %d/%d", rep+1, e.reps)
		for gi, g := range counts {
			for k := range impls {
				j := (k + rep + gi) % len(impls)
				im := impls[j]
				if im.na != "" {
					continue
				}
				var stop atomic.Bool
				var total atomic.Int64
				var wg sync.WaitGroup
				start := time.Now()
				for w := range g {
					wg.Add(1)
					go func() {
						defer wg.Done()
						n := w * 7919
						for !stop.Load() {
							for range 256 {
								if !im.get(d.keys[idx[n&mask]]) {
									missed.Add(1)
								}
								n++
							}
						}
						total.Add(int64(n - w*7919))
					}()
				}
				time.Sleep(dur)
				stop.Store(true)
				wg.Wait()
				rates[j][gi] = append(rates[j][gi], float64(total.Load())/time.Since(start).Seconds())
			}
		}
	}
	if n := missed.Load(); n > 0 {
		e.note("scenario 5: %d reads missed", n)
	}

	var t table
	t.Header = []string{"Row"}
	t.Align = []byte{'l'}
	for _, g := range counts {
		t.Header = append(t.Header, fmt.Sprintf("%d goroutine(s): reads/s", g), "vs otter")
		t.Align = append(t.Align, 'r', 'r')
	}
	var bars []bar
	for j, im := range impls {
		r := []string{im.name}
		if im.na != "" {
			r = append(r, "n/a: "+im.na)
			t.Rows = append(t.Rows, r)
			continue
		}
		for gi, g := range counts {
			s := summarize(rates[j][gi])
			r = append(r, fmt.Sprintf("%s (%s–%s)", tickLabel3(s.Median), tickLabel3(s.Min), tickLabel3(s.Max)))
			if j == 0 {
				r = append(r, "1 (baseline)")
			} else {
				r = append(r, fmtSpread(summarize(ratios(rates[j][gi], rates[0][gi])), "×"))
			}
			bars = append(bars, bar{Label: fmt.Sprintf("%s ×%d", im.name, g), Value: s.Median, Lo: s.Min, Hi: s.Max, Series: im.series,
				Caption: tickLabel3(s.Median) + "/s"})
		}
		t.Rows = append(t.Rows, r)
	}
	sec.addTable(t)
	sec.add("Published (Java): Caffeine ~400 M reads/s on 8 threads; Redis ~80 k/s.")
	sec.addChart("5-parallel-hits.svg", barChart{
		Title: "5. Hit throughput by goroutines (median of runs, whisker min–max)",
		Unit:  "reads/s", Log: true, Bars: bars,
	})
	for gi, g := range counts {
		if g == 1 || g == 8 {
			sec.headline(fmt.Sprintf("hit throughput, %d goroutine(s): ours ÷ raw otter", g), fmtSpread(summarize(ratios(rates[1][gi], rates[0][gi])), "×"), "")
		}
	}
	return sec, nil
}

// tickLabel3 prints a rate with three significant figures: 12.3M, 456k.
func tickLabel3(v float64) string {
	switch {
	case v >= 1e9:
		return sig3(v/1e9) + "G"
	case v >= 1e6:
		return sig3(v/1e6) + "M"
	case v >= 1e3:
		return sig3(v/1e3) + "k"
	default:
		return sig3(v)
	}
}

func (e *env) coresHint() int { return numCPU() }
