package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/vmihailenco/msgpack/v5"
)

// Row names of scenario 1.
const (
	r1SyncMap    = "sync.Map Load (floor)"
	r1Otter      = "otter GetIfPresent (raw)"
	r1OtterLike  = "otter GetIfPresent (weigher + per-entry expiry, as our L1)"
	r1OursHit    = "hybridcache L1 hit (GetOrCreate)"
	r1GoCacheHit = "go-redis/cache local hit (Get)"
	r1RueidisHit = "rueidis local hit (DoCache + msgpack decode)"
	r1CSCHit     = "go-redis CSC local hit (Get + msgpack decode)"
	r1OursJSON   = "hybridcache L1 miss → L2 (JSON)"
	r1OursMP     = "hybridcache L1 miss → L2 (msgpack)"
	r1OursMPCtx  = "hybridcache L1 miss → L2 (msgpack, ctx that can end)"
	r1Get        = "go-redis GET (raw)"
	r1GetJSON    = "GET + json.Unmarshal"
	r1GetMP      = "GET + msgpack.Unmarshal"
	r1GoCacheMis = "go-redis/cache miss → Redis (Get)"
	r1RueidisMis = "rueidis miss → Redis (DoCache + decode)"
	r1CSCMis     = "go-redis CSC miss → Redis (Get + decode)"
)

// Sinks keep results alive so that reads are not optimised away.
var (
	sinkBytes  []byte
	sinkRecord *Record
)

func scenarioReads(ctx context.Context, e *env) (*section, error) {
	d, err := e.recordSet(ctx)
	if err != nil {
		return nil, err
	}
	sec := &section{id: 1, title: "Per-read cost"}
	missOps := pick(e, 2_000, numRecords)
	batches, batchSize := pick(e, 100, 400), 2_000
	sec.intro = fmt.Sprintf("%s records of {ID int; Name, Email string; Score float64}, read at random existing keys. "+
		"In-process rows: %d rounds per run in which every row runs one batch (%s reads; 100 for the peers, whose hits decode), "+
		"timed and divided, the rows taking turns; p50/p99 are over batches, B/op and allocs/op come from a separate pass per row "+
		"(runtime.MemStats deltas). Redis rows: %s reads per row and run, each timed on its own, the rows taking turns read by read; "+
		"every read is a miss in the local tier, because each run opens fresh instances (empty L1 / local cache / client-side "+
		"cache) and reads distinct keys in a random order: the real miss path (L1 miss, one GET, decode, fill L1), not a cache "+
		"made artificially small. Our rows use codec.JSON or codec.Msgpack; peers that cache bytes decode msgpack on every read, "+
		"local hits included.",
		fmtCount(numRecords), batches, fmtCount(float64(batchSize)), fmtCount(float64(missOps)))

	rs := newRows()
	rs.add(&row{name: r1SyncMap, series: 1, baseline: r1Otter, published: "Dictionary 0.06 µs"})
	rs.add(&row{name: r1Otter, series: 1, published: "IMemoryCache 0.21 µs"})
	rs.add(&row{name: r1OtterLike, series: 1, baseline: r1Otter})
	rs.add(&row{name: r1OursHit, series: 0, baseline: r1Otter, published: "HybridCache L1 hit 0.34 µs, 24 B"})
	rs.add(&row{name: r1GoCacheHit, series: 2, baseline: r1Otter})
	rs.add(&row{name: r1RueidisHit, series: 3, baseline: r1Otter})
	rs.add(&row{name: r1CSCHit, series: 4, baseline: r1Otter})
	rs.add(&row{name: r1OursJSON, series: 0, baseline: r1GetJSON, published: "HybridCache L1 miss 187 µs"})
	rs.add(&row{name: r1OursMP, series: 0, baseline: r1GetMP})
	rs.add(&row{name: r1OursMPCtx, series: 0, baseline: r1GetMP})
	rs.add(&row{name: r1Get, series: 1, published: "Redis GET 168 µs"})
	rs.add(&row{name: r1GetJSON, series: 1, baseline: r1Get, published: "GET + deserialize 241 µs"})
	rs.add(&row{name: r1GetMP, series: 1, baseline: r1Get})
	rs.add(&row{name: r1GoCacheMis, series: 2, baseline: r1GetMP})
	rs.add(&row{name: r1RueidisMis, series: 3, baseline: r1GetMP})
	rs.add(&row{name: r1CSCMis, series: 4, baseline: r1GetMP})

	// The hit rows' instances are warmed once and read in every run.
	var sm sync.Map
	oc := otter.Must(&otter.Options[string, *Record]{MaximumSize: 2 * numRecords})
	defer oc.StopAllGoroutines()
	// Configured as our L1 is: bounded by weight, a lifetime per entry on a
	// coarse clock. These features cost otter itself time on every hit.
	clock := otter.NewCoarseClock(10 * time.Millisecond)
	defer clock.Stop()
	ol := otter.Must(&otter.Options[string, *Record]{
		MaximumWeight:    64 << 20,
		Weigher:          func(string, *Record) uint32 { return 128 },
		ExpiryCalculator: otter.ExpiryWritingFunc(func(otter.Entry[string, *Record]) time.Duration { return time.Hour }),
		Clock:            clock,
	})
	defer ol.StopAllGoroutines()
	for i, k := range d.keys {
		sm.Store(k, d.recs[i])
		oc.Set(k, d.recs[i])
		ol.Set(k, d.recs[i])
	}
	oursHit, err := openOurs[*Record](e, spec{kind: nameOurs, prefix: d.oursMsgpack, f: fmtMsgpack})
	if err != nil {
		return nil, err
	}
	defer oursHit.Close()
	if err := warmPages[*Record](ctx, oursHit, d.keys); err != nil {
		return nil, fmt.Errorf("warm ours: %w", err)
	}
	hitPeers := map[string]impl[*Record]{}
	for _, p := range []struct {
		row string
		s   spec
	}{
		{r1GoCacheHit, spec{kind: nameGoCache, prefix: d.goCache, f: fmtMsgpack}},
		{r1RueidisHit, spec{kind: nameRueidis, prefix: d.rawMsgpack, f: fmtMsgpack}},
		{r1CSCHit, spec{kind: nameCSC, prefix: d.rawMsgpack, f: fmtMsgpack}},
	} {
		c, err := open[*Record](e, p.s)
		if err != nil {
			rs.get(p.row).na = err.Error()
			continue
		}
		defer c.Close()
		if err := warmEach[*Record](ctx, c, d.keys); err != nil {
			rs.get(p.row).na = "warm-up failed: " + err.Error()
			continue
		}
		hitPeers[p.row] = c
	}

	idx := e.randomIndexes(1<<16, numRecords)
	const mask = 1<<16 - 1
	var misses atomic.Int64 // reads on the hit rows that missed
	hitOps := []struct {
		row  string
		size int
		f    func(i int)
	}{
		{r1SyncMap, batchSize, func(i int) {
			if v, ok := sm.Load(d.keys[idx[i&mask]]); !ok || v == nil {
				misses.Add(1)
			}
		}},
		{r1Otter, batchSize, func(i int) {
			if _, ok := oc.GetIfPresent(d.keys[idx[i&mask]]); !ok {
				misses.Add(1)
			}
		}},
		{r1OtterLike, batchSize, func(i int) {
			if _, ok := ol.GetIfPresent(d.keys[idx[i&mask]]); !ok {
				misses.Add(1)
			}
		}},
		{r1OursHit, batchSize, func(i int) {
			if _, err := oursHit.c.GetOrCreate(ctx, d.keys[idx[i&mask]], noLoad[*Record]); err != nil {
				misses.Add(1)
			}
		}},
	}
	for _, name := range []string{r1GoCacheHit, r1RueidisHit, r1CSCHit} {
		if c, ok := hitPeers[name]; ok {
			hitOps = append(hitOps, struct {
				row  string
				size int
				f    func(i int)
			}{name, batchSize / 20, func(i int) {
				if _, ok, _ := c.Get(ctx, d.keys[idx[i&mask]]); !ok {
					misses.Add(1)
				}
			}})
		}
	}
	cancelable, cancel := context.WithCancel(ctx)
	defer cancel()
	missRows := s1MissRows(ctx, cancelable, e, d, rs)
	for rep := range e.reps {
		e.progressf("    run %d/%d", rep+1, e.reps)
		// In-process rows: interleaved batches, then allocations row by row.
		ops := make([]batchOp, len(hitOps))
		for k, h := range hitOps {
			ops[k] = batchOp{h.size, h.f}
		}
		res := interleaveBatches(batches, ops)
		for k, h := range hitOps {
			b, a, _ := allocsPerOp(20*h.size, func(i int) error { h.f(i); return nil })
			rs.get(h.row).runs = append(rs.get(h.row).runs, statsOf(res[k], b, a))
		}

		// Redis rows: fresh instances, distinct keys in random order, one
		// read of each row in turn.
		order := e.perm(numRecords)
		var live []*s1Instance
		var funcs []func(int) error
		for _, m := range missRows {
			r := rs.get(m.row)
			if r.na != "" {
				continue
			}
			in, err := m.open()
			if err != nil {
				r.na = err.Error()
				continue
			}
			in.row = r
			live = append(live, in)
			funcs = append(funcs, func(i int) error { return in.read(d.keys[order[i]]) })
		}
		res2, err := interleaveEach(missOps, funcs)
		for _, in := range live {
			in.close()
		}
		if err != nil {
			return nil, err
		}
		// Allocations, row by row, each with a fresh instance.
		allocOps := pick(e, 300, 1000)
		for k, in := range live {
			a, err := func() (opStats, error) {
				m := missRows[slicesIndex(missRows, in.row.name)]
				fresh, err := m.open()
				if err != nil {
					return opStats{}, err
				}
				defer fresh.close()
				b, a, err := allocsPerOp(allocOps, func(i int) error { return fresh.read(d.keys[order[i]]) })
				return opStats{bytes: b, allocs: a}, err
			}()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", in.row.name, err)
			}
			in.row.runs = append(in.row.runs, statsOf(res2[k], a.bytes, a.allocs))
		}
	}
	if n := misses.Load(); n > 0 {
		e.note("scenario 1: %d reads on the hit rows were misses", n)
	}
	if c, ok := hitPeers[r1CSCHit].(*csc[*Record]); ok {
		st := c.lc.Stats()
		if st.Hits == 0 {
			rs.get(r1CSCHit).na = "go-redis CSC served no read from its cache (0 hits)"
		}
	}

	var t table
	t.Header = []string{"Row", "p50 ns/op", "p99", "B/op", "allocs/op", "p50 vs baseline", "baseline", "published (.NET)"}
	t.Align = []byte{'l', 'r', 'r', 'r', 'r', 'r', 'l', 'l'}
	rs.each(func(r *row) {
		if r.na != "" {
			t.Rows = append(t.Rows, []string{r.name, "n/a: " + r.na, "", "", "", "", r.baseline, r.published})
			return
		}
		ratio := "1 (baseline)"
		if r.baseline != "" {
			ratio = fmtSpread(rs.ratio(r), "×")
		}
		t.Rows = append(t.Rows, []string{
			r.name,
			fmtSpreadDur(summarize(r.field(p50Of))),
			fmtDur(summarize(r.field(p99Of)).Median),
			sig3(summarize(r.field(bytesOf)).Median),
			sig3(summarize(r.field(allocsOf)).Median),
			ratio, r.baseline, r.published,
		})
	})
	sec.addTable(t)
	sec.add("p50 is the median over runs of each run's p50 (min–max over runs in parentheses); p99 is the median of the runs' p99. " +
		"The ratio is taken within each run, then summarised the same way.")
	sec.addChart("1-per-read.svg", barChart{
		Title: "1. Per-read cost, p50 (median of runs, whisker min–max)",
		Unit:  "per read", Log: true, Dur: true,
		Bars: chartBars(rs, func(r *row) string { return r.name }),
	})
	sec.headline("L1 hit vs raw otter (p50 ratio)", fmtSpread(rs.ratio(rs.get(r1OursHit)), "×"),
		"published HybridCache 0.34 µs vs IMemoryCache 0.21 µs = 1.6×")
	sec.headline("L1 hit vs otter configured as our L1 (p50 ratio)", fmtSpread(rs.ratioTo(rs.get(r1OursHit), r1OtterLike), "×"), "")
	sec.headline("L1 hit, p50 and allocs", fmt.Sprintf("%s, %s allocs", fmtDur(summarize(rs.get(r1OursHit).field(p50Of)).Median),
		sig3(summarize(rs.get(r1OursHit).field(allocsOf)).Median)), "0.34 µs, 24 B published; zero allocations promised")
	sec.headline("L1 miss → L2 vs GET + json.Unmarshal", fmtSpread(rs.ratio(rs.get(r1OursJSON)), "×"), "published 187 / 241 µs = 0.78×")
	sec.headline("L1 miss → L2 vs GET + msgpack.Unmarshal", fmtSpread(rs.ratio(rs.get(r1OursMP)), "×"), "")
	sec.headline("L1 miss → L2 vs GET + msgpack.Unmarshal, ctx that can end", fmtSpread(rs.ratio(rs.get(r1OursMPCtx)), "×"), "")
	return sec, nil
}

// warmPages fills a cache in pages of 500 through its batch call.
func warmPages[V any](ctx context.Context, c impl[V], keys []string) error {
	for start := 0; start < len(keys); start += 500 {
		page := keys[start:min(start+500, len(keys))]
		n, err := c.GetPage(ctx, page)
		if err != nil {
			return err
		}
		if n != len(page) {
			return fmt.Errorf("found %d of %d keys", n, len(page))
		}
	}
	return nil
}

// warmEach fills a cache by reading every key once, from 8 goroutines.
func warmEach[V any](ctx context.Context, c impl[V], keys []string) error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys); i += 8 {
				if _, ok, err := c.Get(ctx, keys[i]); err != nil || !ok {
					if err == nil {
						err = fmt.Errorf("key %s missing", keys[i])
					}
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// s1Instance is one open implementation on a Redis row of scenario 1.
type s1Instance struct {
	row   *row
	read  func(key string) error
	close func()
}

type s1MissRow struct {
	row  string
	open func() (*s1Instance, error)
}

func slicesIndex(rows []s1MissRow, name string) int {
	for i, r := range rows {
		if r.row == name {
			return i
		}
	}
	return -1
}

// s1MissRows lists the Redis rows of scenario 1 and how to open a fresh,
// connected instance for each. Opening reads one absent key first, so that
// connection set-up is not timed.
func s1MissRows(ctx, cancelable context.Context, e *env, d *recordData, rs *rows) []s1MissRow {
	// The ours rows read with context.Background, whose reads the cache
	// makes on the caller's goroutine, except the "ctx that can end" row,
	// whose ctx has a cancel func as a request's has: the cache then hands
	// the read to a worker goroutine, so that the caller could leave.
	oursRow := func(name string, s spec, ctx context.Context) s1MissRow {
		return s1MissRow{name, func() (*s1Instance, error) {
			o, err := openOurs[*Record](e, s)
			if err != nil {
				return nil, err
			}
			if _, _, err := o.c.Get(ctx, "absent"); err != nil {
				o.Close()
				return nil, err
			}
			reads := 0
			return &s1Instance{
				read: func(k string) error {
					reads++
					_, err := o.c.GetOrCreate(ctx, k, noLoad[*Record])
					return err
				},
				close: func() {
					if h := o.c.Stats().L2.Hits; h != uint64(reads) {
						e.note("scenario 1, %s: %d of %d reads were L2 hits (want all)", name, h, reads)
					}
					o.Close()
				},
			}, nil
		}}
	}
	raw := func(name, prefix string, decode func([]byte, any) error) s1MissRow {
		return s1MissRow{name, func() (*s1Instance, error) {
			return &s1Instance{
				read: func(k string) error {
					b, err := e.rdb.Get(ctx, prefix+k).Bytes()
					if err != nil || decode == nil {
						sinkBytes = b
						return err
					}
					var r *Record
					if err := decode(b, &r); err != nil {
						return err
					}
					sinkRecord = r
					return nil
				},
				close: func() {},
			}, nil
		}}
	}
	peer := func(name string, s spec) s1MissRow {
		return s1MissRow{name, func() (*s1Instance, error) {
			c, err := open[*Record](e, s)
			if err != nil {
				return nil, err
			}
			if _, _, err := c.Get(ctx, "absent"); err != nil {
				c.Close()
				return nil, err
			}
			return &s1Instance{
				read: func(k string) error {
					_, ok, err := c.Get(ctx, k)
					if err == nil && !ok {
						err = fmt.Errorf("key %s missing", k)
					}
					return err
				},
				close: c.Close,
			}, nil
		}}
	}
	return []s1MissRow{
		oursRow(r1OursJSON, spec{kind: nameOurs, prefix: d.oursJSON, f: fmtJSON}, ctx),
		oursRow(r1OursMP, spec{kind: nameOurs, prefix: d.oursMsgpack, f: fmtMsgpack}, ctx),
		oursRow(r1OursMPCtx, spec{kind: nameOurs, prefix: d.oursMsgpack, f: fmtMsgpack}, cancelable),
		raw(r1Get, d.rawMsgpack, nil),
		raw(r1GetJSON, d.rawJSON, json.Unmarshal),
		raw(r1GetMP, d.rawMsgpack, msgpack.Unmarshal),
		peer(r1GoCacheMis, spec{kind: nameGoCache, prefix: d.goCache, f: fmtMsgpack}),
		peer(r1RueidisMis, spec{kind: nameRueidis, prefix: d.rawMsgpack, f: fmtMsgpack}),
		peer(r1CSCMis, spec{kind: nameCSC, prefix: d.rawMsgpack, f: fmtMsgpack}),
	}
}
