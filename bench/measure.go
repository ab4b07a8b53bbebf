package main

import (
	"fmt"
	"runtime"
	"syscall"
	"time"
)

// opStats is one run of one row: latency percentiles in ns per operation
// and allocation per operation.
type opStats struct {
	p50, p99, bytes, allocs float64
}

// batchOp is one row of an interleaved batch measurement: size calls of
// f make one batch.
type batchOp struct {
	size int
	f    func(i int)
}

// interleaveBatches times operations too short to time one by one: in
// each of rounds rounds, every op runs one batch, and the batch's time is
// divided by its size. The ops take turns within a round, starting from a
// different one each round, so that noise from the rest of the machine
// falls on all of them alike. It returns, per op, the ns/op of each batch.
// One untimed round runs first as a warm-up.
func interleaveBatches(rounds int, ops []batchOp) [][]time.Duration {
	out := make([][]time.Duration, len(ops))
	next := make([]int, len(ops)) // index passed to f, per op
	for r := -1; r < rounds; r++ {
		for k := range ops {
			j := (k + max(r, 0)) % len(ops)
			op := ops[j]
			start := time.Now()
			for range op.size {
				op.f(next[j])
				next[j]++
			}
			d := time.Since(start) / time.Duration(op.size)
			if r >= 0 {
				out[j] = append(out[j], max(d, 1))
			}
		}
	}
	return out
}

// interleaveEach times n calls of each op one by one: call i of every op,
// in a rotating order, then call i+1, and so on. It stops at the first
// error and returns, per op, the duration of each call.
func interleaveEach(n int, ops []func(i int) error) ([][]time.Duration, error) {
	out := make([][]time.Duration, len(ops))
	for j := range out {
		out[j] = make([]time.Duration, n)
	}
	for i := range n {
		for k := range ops {
			j := (k + i) % len(ops)
			start := time.Now()
			if err := ops[j](i); err != nil {
				return nil, fmt.Errorf("op %d, call %d: %w", j, i, err)
			}
			out[j][i] = time.Since(start)
		}
	}
	return out, nil
}

// allocsPerOp runs n calls of f alone and returns the bytes and the number
// of heap allocations per call (runtime.MemStats deltas, so allocations
// by other goroutines of the process in the meantime count too).
func allocsPerOp(n int, f func(i int) error) (bytes, allocs float64, err error) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for i := range n {
		if err := f(i); err != nil {
			return 0, 0, err
		}
	}
	runtime.ReadMemStats(&m1)
	return float64(m1.TotalAlloc-m0.TotalAlloc) / float64(n), float64(m1.Mallocs-m0.Mallocs) / float64(n), nil
}

// stats summarises one run of one row.
func statsOf(ds []time.Duration, bytes, allocs float64) opStats {
	q := durPercentiles(ds, 0.5, 0.99)
	return opStats{p50: q[0], p99: q[1], bytes: bytes, allocs: allocs}
}

// cpuTime is the process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// row collects the runs of one line of a table.
type row struct {
	name      string
	series    int    // chart colour: 0 ours, 1 baseline, 2+ peers
	baseline  string // the row this one is compared with, "" for none
	na        string // why the row could not be measured, if it was not
	published string // the published (.NET) figure this row corresponds to
	runs      []opStats
	baseRuns  []opStats // the baseline's runs, when measured apart from its own row
}

// rows is an ordered set of rows.
type rows struct {
	order []string
	by    map[string]*row
}

func newRows() *rows { return &rows{by: map[string]*row{}} }

func (rs *rows) add(r *row) *row {
	if old, ok := rs.by[r.name]; ok {
		return old
	}
	rs.order = append(rs.order, r.name)
	rs.by[r.name] = r
	return r
}

func (rs *rows) get(name string) *row { return rs.by[name] }

func (rs *rows) each(f func(*row)) {
	for _, n := range rs.order {
		f(rs.by[n])
	}
}

// field extracts one figure from every run of a row.
func (r *row) field(f func(opStats) float64) []float64 {
	out := make([]float64, len(r.runs))
	for i, s := range r.runs {
		out[i] = f(s)
	}
	return out
}

func p50Of(s opStats) float64    { return s.p50 }
func p99Of(s opStats) float64    { return s.p99 }
func bytesOf(s opStats) float64  { return s.bytes }
func allocsOf(s opStats) float64 { return s.allocs }

// ratio is row r's p50 over its baseline's, run by run.
func (rs *rows) ratio(r *row) spread { return rs.ratioTo(r, r.baseline) }

// ratioTo is ratio against the row named base instead of r's baseline.
func (rs *rows) ratioTo(r *row, base string) spread {
	b := rs.get(base)
	if b == nil || r.na != "" || b.na != "" {
		return spread{}
	}
	return summarize(ratios(r.field(p50Of), b.field(p50Of)))
}
