package main

import (
	"context"
	"fmt"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/vmihailenco/msgpack/v5"
)

const pageSize = 50

// Row names of scenario 2.
const (
	r2OursWarm       = "hybridcache GetOrCreate ×50, warm (L1)"
	r2OursManyWarm   = "hybridcache GetOrCreateMany, warm (L1)"
	r2GoCacheWarm    = "go-redis/cache Get ×50, warm (local)"
	r2RueidisWarm    = "rueidis DoMultiCache, warm (local)"
	r2CSCWarm        = "go-redis CSC Get ×50, warm (local)"
	r2OursManyCold   = "hybridcache GetOrCreateMany, cold (from L2)"
	r2OursSeqCold    = "hybridcache GetOrCreate ×50, cold (sequential)"
	r2Seq            = "go-redis GET ×50, sequential (raw)"
	r2SeqDecode      = "GET + msgpack decode ×50, sequential"
	r2MGet           = "go-redis MGET 50 keys (raw)"
	r2MGetDecode     = "MGET + msgpack decode"
	r2MGetCodec      = "MGET + decode by our msgpack codec (validates lengths first)"
	r2GoCacheSeqCold = "go-redis/cache Get ×50, cold (sequential)"
	r2GoCacheBatch   = "go-redis/cache batch read, cold"
	r2RueidisCold    = "rueidis DoMultiCache, cold"
	r2CSCCold        = "go-redis CSC MGET + decode, cold"
)

// pageReader reads one page of keys; close releases what it opened.
type pageReader struct {
	read  func(keys []string) error
	close func()
	trips func() int64 // Redis round trips so far, where known
}

type pageRow struct {
	row  string
	open func() (*pageReader, error)
}

func scenarioPage(ctx context.Context, e *env) (*section, error) {
	d, err := e.recordSet(ctx)
	if err != nil {
		return nil, err
	}
	warmPagesN, coldPages := pick(e, 200, 1000), pick(e, 40, numRecords/pageSize)
	sec := &section{id: 2, title: "A page of 50 items"}
	sec.intro = fmt.Sprintf("One page of %d records (msgpack) read through each implementation. Warm rows: instances filled once, "+
		"then %d pages of random keys per run. Cold rows: each run opens fresh instances (empty local tier) and reads %d pages of "+
		"keys none of them has read, so every key comes from Redis; the rows take turns page by page. "+
		"Times are per page; speedups and ratios are within a run.", pageSize, warmPagesN, coldPages)

	rs := newRows()
	rs.add(&row{name: r2OursWarm, series: 0, baseline: r2Seq, published: "HybridCache 0.01 ms; target ≥500× faster than sequential"})
	rs.add(&row{name: r2OursManyWarm, series: 0, baseline: r2Seq})
	rs.add(&row{name: r2GoCacheWarm, series: 2, baseline: r2Seq})
	rs.add(&row{name: r2RueidisWarm, series: 3, baseline: r2Seq})
	rs.add(&row{name: r2CSCWarm, series: 4, baseline: r2Seq})
	rs.add(&row{name: r2OursManyCold, series: 0, baseline: r2MGetDecode, published: "9.4 ms cold; target ≤1.2× MGET + decode"})
	rs.add(&row{name: r2OursSeqCold, series: 0, baseline: r2SeqDecode, published: "12 ms sequential"})
	rs.add(&row{name: r2Seq, series: 1, published: "12 ms"})
	rs.add(&row{name: r2SeqDecode, series: 1, baseline: r2Seq})
	rs.add(&row{name: r2MGet, series: 1, baseline: r2Seq, published: "0.9 ms"})
	rs.add(&row{name: r2MGetDecode, series: 1, baseline: r2MGet})
	rs.add(&row{name: r2MGetCodec, series: 1, baseline: r2MGetDecode})
	rs.add(&row{name: r2GoCacheSeqCold, series: 2, baseline: r2SeqDecode})
	rs.add(&row{name: r2GoCacheBatch, series: 2, na: "go-redis/cache has no batch read (no MGET or pipeline API)"})
	rs.add(&row{name: r2RueidisCold, series: 3, baseline: r2MGetDecode})
	rs.add(&row{name: r2CSCCold, series: 4, baseline: r2MGetDecode})
	speedup := map[string]bool{r2OursWarm: true, r2OursManyWarm: true, r2GoCacheWarm: true, r2RueidisWarm: true, r2CSCWarm: true, r2MGet: true}

	mp := fmtMsgpack
	oursSpec := spec{kind: nameOurs, prefix: d.oursMsgpack, f: mp}
	openImpl := func(s spec, read func(impl[*Record], []string) error) func() (*pageReader, error) {
		return func() (*pageReader, error) {
			c, err := open[*Record](e, s)
			if err != nil {
				return nil, err
			}
			if _, _, err := c.Get(ctx, "absent"); err != nil { // connect before timing
				c.Close()
				return nil, err
			}
			pr := &pageReader{read: func(keys []string) error { return read(c, keys) }, close: c.Close}
			if o, ok := c.(*ours[*Record]); ok {
				pr.trips = o.remote.trips.Load
			}
			return pr, nil
		}
	}
	seqGet := func(c impl[*Record], keys []string) error {
		for _, k := range keys {
			if _, ok, err := c.Get(ctx, k); err != nil || !ok {
				return missing(k, err)
			}
		}
		return nil
	}
	oursSeq := func(c impl[*Record], keys []string) error {
		o := c.(*ours[*Record])
		for _, k := range keys {
			if _, err := o.c.GetOrCreate(ctx, k, noLoad[*Record]); err != nil {
				return err
			}
		}
		return nil
	}
	batch := func(c impl[*Record], keys []string) error {
		n, err := c.GetPage(ctx, keys)
		if err == nil && n != len(keys) {
			err = fmt.Errorf("found %d of %d keys", n, len(keys))
		}
		return err
	}
	raw := func(read func([]string) error) func() (*pageReader, error) {
		return func() (*pageReader, error) { return &pageReader{read: read, close: func() {}}, nil }
	}
	rawSeq := func(decode bool) func([]string) error {
		return func(keys []string) error {
			for _, k := range keys {
				b, err := e.rdb.Get(ctx, d.rawMsgpack+k).Bytes()
				if err != nil {
					return missing(k, err)
				}
				if decode {
					var r *Record
					if err := msgpack.Unmarshal(b, &r); err != nil {
						return err
					}
				}
			}
			return nil
		}
	}
	// rawMGet reads a page by one MGET and, if decode is not nil, decodes
	// each value into a *Record with it.
	rawMGet := func(decode func([]byte, any) error) func([]string) error {
		return func(keys []string) error {
			full := make([]string, len(keys))
			for i, k := range keys {
				full[i] = d.rawMsgpack + k
			}
			vals, err := e.rdb.MGet(ctx, full...).Result()
			if err != nil {
				return err
			}
			for i, v := range vals {
				s, ok := v.(string)
				if !ok {
					return missing(keys[i], nil)
				}
				if decode != nil {
					var r *Record
					if err := decode([]byte(s), &r); err != nil {
						return err
					}
				}
			}
			return nil
		}
	}
	warmRows := []pageRow{
		{r2OursWarm, openImpl(oursSpec, oursSeq)},
		{r2OursManyWarm, openImpl(oursSpec, batch)},
		{r2GoCacheWarm, openImpl(spec{kind: nameGoCache, prefix: d.goCache, f: mp}, seqGet)},
		{r2RueidisWarm, openImpl(spec{kind: nameRueidis, prefix: d.rawMsgpack, f: mp}, batch)},
		{r2CSCWarm, openImpl(spec{kind: nameCSC, prefix: d.rawMsgpack, f: mp}, seqGet)},
		{r2Seq, raw(rawSeq(false))}, // the warm rows' baseline, measured among them too
	}
	coldRows := []pageRow{
		{r2OursManyCold, openImpl(oursSpec, batch)},
		{r2OursSeqCold, openImpl(oursSpec, oursSeq)},
		{r2Seq, raw(rawSeq(false))},
		{r2SeqDecode, raw(rawSeq(true))},
		{r2MGet, raw(rawMGet(nil))},
		{r2MGetDecode, raw(rawMGet(msgpack.Unmarshal))},
		{r2MGetCodec, raw(rawMGet(codec.Msgpack{}.Unmarshal))},
		{r2GoCacheSeqCold, openImpl(spec{kind: nameGoCache, prefix: d.goCache, f: mp}, seqGet)},
		{r2RueidisCold, openImpl(spec{kind: nameRueidis, prefix: d.rawMsgpack, f: mp}, batch)},
		{r2CSCCold, openImpl(spec{kind: nameCSC, prefix: d.rawMsgpack, f: mp}, batch)},
	}

	// Warm instances: opened and filled once.
	warm := map[string]*pageReader{}
	for _, w := range warmRows {
		pr, err := w.open()
		if err != nil {
			rs.get(w.row).na = err.Error()
			continue
		}
		defer pr.close()
		for start := 0; start < numRecords; start += pageSize {
			if err := pr.read(d.keys[start : start+pageSize]); err != nil {
				rs.get(w.row).na = "warm-up failed: " + err.Error()
				break
			}
		}
		warm[w.row] = pr
	}
	trips := map[string][]float64{}
	for rep := range e.reps {
		e.progressf("    run %d/%d", rep+1, e.reps)
		// Warm rows; the sequential GET baseline is timed among them, and
		// again among the cold rows.
		pages := make([][]string, warmPagesN) // random pages of distinct keys
		var perm []int
		for p := range pages {
			if len(perm) < pageSize {
				perm = e.perm(numRecords)
			}
			for _, i := range perm[:pageSize] {
				pages[p] = append(pages[p], d.keys[i])
			}
			perm = perm[pageSize:]
		}
		seqWarm := &row{name: r2Seq}
		if err := runPages(rs, warmRows, warm, pages, map[string]*row{r2Seq: seqWarm}, nil); err != nil {
			return nil, err
		}
		// Cold rows: fresh instances, distinct keys.
		order := e.perm(numRecords)
		cpages := make([][]string, coldPages)
		for p := range cpages {
			for _, i := range order[p*pageSize : (p+1)*pageSize] {
				cpages[p] = append(cpages[p], d.keys[i])
			}
		}
		cold := map[string]*pageReader{}
		for _, c := range coldRows {
			if rs.get(c.row).na != "" {
				continue
			}
			pr, err := c.open()
			if err != nil {
				rs.get(c.row).na = err.Error()
				continue
			}
			cold[c.row] = pr
		}
		err := runPages(rs, coldRows, cold, cpages, nil, trips)
		for _, pr := range cold {
			pr.close()
		}
		if err != nil {
			return nil, err
		}
		// The warm rows' speedups are against the GET ×50 timed among
		// them: fold that run into the warm rows' own baseline copy.
		for _, n := range []string{r2OursWarm, r2OursManyWarm, r2GoCacheWarm, r2RueidisWarm, r2CSCWarm} {
			r := rs.get(n)
			if r.na == "" && len(seqWarm.runs) > 0 {
				r.baseRuns = append(r.baseRuns, seqWarm.runs[0])
			}
		}
	}

	var t table
	t.Header = []string{"Row", "p50 per page", "p99", "per key", "vs baseline", "baseline", "round trips / page", "published (.NET) / target"}
	t.Align = []byte{'l', 'r', 'r', 'r', 'r', 'l', 'r', 'l'}
	rs.each(func(r *row) {
		if r.na != "" {
			t.Rows = append(t.Rows, []string{r.name, "n/a: " + r.na, "", "", "", "", "", r.published})
			return
		}
		p50 := summarize(r.field(p50Of))
		rt := ""
		if tr, ok := trips[r.name]; ok {
			rt = sig3(summarize(tr).Median)
		}
		t.Rows = append(t.Rows, []string{r.name, fmtSpreadDur(p50), fmtDur(summarize(r.field(p99Of)).Median),
			fmtDur(p50.Median / pageSize), pageRatio(rs, r, speedup[r.name]), r.baseline, rt, r.published})
	})
	sec.addTable(t)
	if seq := rs.get(r2Seq); seq.na == "" && len(seq.runs) > 0 {
		perGet := summarize(seq.field(p50Of)).Median / pageSize
		sec.add(fmt.Sprintf("A sequential GET costs %s here (loopback); the published figures are from a Redis at 168 µs per GET, "+
			"about %.0f× further away. Speedups against sequential Redis reads grow in proportion.", fmtDur(perGet), 168e3/perGet))
	}
	sec.add("“N× faster” is the baseline's p50 over the row's, within each run; “×” ratios are the row's p50 over the baseline's. " +
		"Warm rows are compared with sequential GETs timed in the same rounds as they were. Round trips are counted by a wrapper " +
		"around l2.Store (our rows) or known from the commands sent (raw rows).")
	sec.addChart("2-page-of-50.svg", barChart{
		Title: "2. A page of 50 items, p50 per page (median of runs, whisker min–max)",
		Unit:  "per page", Log: true, Dur: true,
		Bars: chartBars(rs, func(r *row) string { return r.name }),
	})
	sec.headline("page of 50, warm GetOrCreate ×50 vs sequential GET ×50", pageRatio(rs, rs.get(r2OursWarm), true), "≥500× faster; published 0.01 ms vs 12 ms")
	sec.headline("page of 50, GetOrCreateMany cold vs MGET + decode", pageRatio(rs, rs.get(r2OursManyCold), false), "≤1.2×; published 9.4 ms vs 0.9 ms MGET")
	sec.headline("page of 50, MGET + our validating codec vs MGET + msgpack.Unmarshal", pageRatio(rs, rs.get(r2MGetCodec), false), "the share of the ratio above that is validation")
	sec.headline("page of 50, GetOrCreate ×50 cold vs GET + decode ×50", pageRatio(rs, rs.get(r2OursSeqCold), false), "published 12 ms sequential")
	return sec, nil
}

// runPages reads every page through every row that has a reader, the rows
// taking turns page by page (from a rotating first row), and appends one
// run to each row: to rs's row, or to extra's row of that name if there is
// one. trips, if not nil, receives round trips per page for rows that
// count them.
func runPages(rs *rows, prs []pageRow, open map[string]*pageReader, pages [][]string, extra map[string]*row, trips map[string][]float64) error {
	var names []string
	var funcs []func(int) error
	before := map[string]int64{}
	for _, p := range prs {
		pr, ok := open[p.row]
		if !ok {
			continue
		}
		names = append(names, p.row)
		funcs = append(funcs, func(i int) error { return pr.read(pages[i]) })
		if pr.trips != nil {
			before[p.row] = pr.trips()
		}
	}
	res, err := interleaveEach(len(pages), funcs)
	if err != nil {
		return err
	}
	for k, n := range names {
		r := rs.get(n)
		if x, ok := extra[n]; ok {
			r = x
		}
		r.runs = append(r.runs, statsOf(res[k], 0, 0))
		if pr := open[n]; trips != nil && pr.trips != nil {
			trips[n] = append(trips[n], float64(pr.trips()-before[n])/float64(len(pages)))
		}
	}
	return nil
}

// pageRatio formats a row against its baseline: "N× faster" (baseline over
// row) or "N×" (row over baseline), median over runs with min–max. A row
// with baseRuns is compared with those runs instead of its baseline row's.
func pageRatio(rs *rows, r *row, faster bool) string {
	if r == nil || r.na != "" || r.baseline == "" {
		if r != nil && r.baseline == "" && r.na == "" {
			return "1 (baseline)"
		}
		return ""
	}
	base := r.baseRuns
	if base == nil {
		b := rs.get(r.baseline)
		if b == nil || b.na != "" {
			return ""
		}
		base = b.runs
	}
	bs := make([]float64, len(base))
	for i, s := range base {
		bs[i] = s.p50
	}
	x := r.field(p50Of)
	if faster {
		return fmtSpread(summarize(ratios(bs, x)), "× faster")
	}
	return fmtSpread(summarize(ratios(x, bs)), "×")
}

func missing(key string, err error) error {
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	return fmt.Errorf("key %s missing", key)
}
