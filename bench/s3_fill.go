package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// fillRow is one way to read all 10,000 keys once from a cold start.
type fillRow struct {
	name     string
	series   int
	baseline string
	page     int // 0: one key at a time
	na       string
	// open returns a fresh reader of pages (or single keys, page 0) and a
	// round-trip counter where one is known.
	open func() (read func([]string) error, trips func() int64, closeFn func(), err error)
}

type fillRun struct {
	total    time.Duration
	trips    float64 // -1: not counted
	commands float64 // from INFO commandstats, -1 if unavailable
	cmdMix   string
}

func scenarioFill(ctx context.Context, e *env) (*section, error) {
	d, err := e.recordSet(ctx)
	if err != nil {
		return nil, err
	}
	sec := &section{id: 3, title: "Cold instance fill"}
	sec.intro = fmt.Sprintf("A new instance starts with an empty local tier and reads each of the %s keys present in Redis once "+
		"(msgpack records): one key at a time, or in pages of 100 and 500. Each run opens fresh instances and runs the rows one "+
		"after another in a rotating order. Round trips are counted by a wrapper around l2.Store that implements "+
		"each of the Store's interfaces by delegation (our rows) or known from the calls made (raw rows); "+
		"Redis commands are INFO commandstats deltas on the harness's own server (INFO itself excluded).", fmtCount(numRecords))

	mp := fmtMsgpack
	oursOpen := func(page int) func() (func([]string) error, func() int64, func(), error) {
		return func() (func([]string) error, func() int64, func(), error) {
			o, err := openOurs[*Record](e, spec{kind: nameOurs, prefix: d.oursMsgpack, f: mp})
			if err != nil {
				return nil, nil, nil, err
			}
			read := func(keys []string) error {
				if page == 0 {
					_, err := o.c.GetOrCreate(ctx, keys[0], noLoad[*Record])
					return err
				}
				m, err := o.c.GetOrCreateMany(ctx, keys, noLoadMany[*Record])
				if err == nil && len(m) != len(keys) {
					err = fmt.Errorf("found %d of %d keys", len(m), len(keys))
				}
				return err
			}
			return read, o.remote.trips.Load, o.Close, nil
		}
	}
	peerOpen := func(s spec, page int) func() (func([]string) error, func() int64, func(), error) {
		return func() (func([]string) error, func() int64, func(), error) {
			c, err := open[*Record](e, s)
			if err != nil {
				return nil, nil, nil, err
			}
			read := func(keys []string) error {
				if page == 0 {
					_, ok, err := c.Get(ctx, keys[0])
					if err == nil && !ok {
						err = missing(keys[0], nil)
					}
					return err
				}
				n, err := c.GetPage(ctx, keys)
				if err == nil && n != len(keys) {
					err = fmt.Errorf("found %d of %d keys", n, len(keys))
				}
				return err
			}
			return read, nil, c.Close, nil
		}
	}
	rawOpen := func(page int) func() (func([]string) error, func() int64, func(), error) {
		return func() (func([]string) error, func() int64, func(), error) {
			var trips int64
			read := func(keys []string) error {
				trips++
				if page == 0 {
					b, err := e.rdb.Get(ctx, d.rawMsgpack+keys[0]).Bytes()
					if err != nil {
						return missing(keys[0], err)
					}
					var r *Record
					return msgpack.Unmarshal(b, &r)
				}
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
					var r *Record
					if err := msgpack.Unmarshal([]byte(s), &r); err != nil {
						return err
					}
				}
				return nil
			}
			return read, func() int64 { return trips }, func() {}, nil
		}
	}
	gc := spec{kind: nameGoCache, prefix: d.goCache, f: mp}
	ru := spec{kind: nameRueidis, prefix: d.rawMsgpack, f: mp}
	cs := spec{kind: nameCSC, prefix: d.rawMsgpack, f: mp}
	fills := []*fillRow{
		{name: "hybridcache GetOrCreate, one key at a time", series: 0, baseline: "GET + decode, one key at a time", page: 0, open: oursOpen(0)},
		{name: "hybridcache GetOrCreateMany, pages of 100", series: 0, baseline: "MGET + decode, pages of 100", page: 100, open: oursOpen(100)},
		{name: "hybridcache GetOrCreateMany, pages of 500", series: 0, baseline: "MGET + decode, pages of 500", page: 500, open: oursOpen(500)},
		{name: "GET + decode, one key at a time", series: 1, page: 0, open: rawOpen(0)},
		{name: "MGET + decode, pages of 100", series: 1, page: 100, open: rawOpen(100)},
		{name: "MGET + decode, pages of 500", series: 1, page: 500, open: rawOpen(500)},
		{name: "go-redis/cache Get, one key at a time", series: 2, baseline: "GET + decode, one key at a time", page: 0, open: peerOpen(gc, 0)},
		{name: "go-redis/cache, pages", series: 2, na: "no batch read"},
		{name: "rueidis DoCache, one key at a time", series: 3, baseline: "GET + decode, one key at a time", page: 0, open: peerOpen(ru, 0)},
		{name: "rueidis DoMultiCache, pages of 100", series: 3, baseline: "MGET + decode, pages of 100", page: 100, open: peerOpen(ru, 100)},
		{name: "rueidis DoMultiCache, pages of 500", series: 3, baseline: "MGET + decode, pages of 500", page: 500, open: peerOpen(ru, 500)},
		{name: "go-redis CSC Get, one key at a time", series: 4, baseline: "GET + decode, one key at a time", page: 0, open: peerOpen(cs, 0)},
		{name: "go-redis CSC MGET, pages of 100", series: 4, baseline: "MGET + decode, pages of 100", page: 100, open: peerOpen(cs, 100)},
		{name: "go-redis CSC MGET, pages of 500", series: 4, baseline: "MGET + decode, pages of 500", page: 500, open: peerOpen(cs, 500)},
	}
	runs := map[string][]fillRun{}
	for rep := range e.reps {
		e.progressf("    run %d/%d", rep+1, e.reps)
		order := e.perm(numRecords)
		keys := make([]string, numRecords)
		for i, j := range order {
			keys[i] = d.keys[j]
		}
		for k := range fills {
			f := fills[(k+rep)%len(fills)]
			if f.na != "" {
				continue
			}
			read, trips, closeFn, err := f.open()
			if err != nil {
				f.na = err.Error()
				continue
			}
			runtime.GC()
			var trips0 int64 // calls made by New (OpenLog) are not the fill's
			if trips != nil {
				trips0 = trips()
			}
			before := readServerCounters(ctx, e.rdb)
			start := time.Now()
			step := max(f.page, 1)
			for i := 0; i < len(keys) && err == nil; i += step {
				err = read(keys[i:min(i+step, len(keys))])
			}
			total := time.Since(start)
			after := readServerCounters(ctx, e.rdb)
			closeFn()
			if err != nil {
				f.na = err.Error()
				continue
			}
			fr := fillRun{total: total, trips: -1, commands: -1}
			if trips != nil {
				fr.trips = float64(trips() - trips0)
			}
			if dl := before.delta(after); dl.available && e.ownRedis {
				fr.commands = float64(dl.commands)
				fr.cmdMix = dl.describe()
			}
			runs[f.name] = append(runs[f.name], fr)
		}
	}

	totalOf := func(name string) []float64 {
		var out []float64
		for _, r := range runs[name] {
			out = append(out, float64(r.total))
		}
		return out
	}
	var t table
	t.Header = []string{"Row", "total time", "per key", "vs baseline", "baseline", "round trips", "Redis commands (mix)"}
	t.Align = []byte{'l', 'r', 'r', 'r', 'l', 'r', 'l'}
	var bars []bar
	for _, f := range fills {
		if f.na != "" {
			t.Rows = append(t.Rows, []string{f.name, "n/a: " + f.na, "", "", "", "", ""})
			bars = append(bars, bar{Label: f.name, Series: f.series, Caption: "n/a"})
			continue
		}
		tot := summarize(totalOf(f.name))
		ratio := "1 (baseline)"
		if f.baseline != "" {
			ratio = fmtSpread(summarize(ratios(totalOf(f.name), totalOf(f.baseline))), "×")
		}
		rs := runs[f.name]
		last := rs[len(rs)-1]
		trips, cmds := "n/a: not counted", "n/a: server shared"
		if last.trips >= 0 {
			trips = fmtCount(last.trips)
		}
		if last.commands >= 0 {
			cmds = fmtCount(last.commands) + " (" + last.cmdMix + ")"
		}
		t.Rows = append(t.Rows, []string{f.name, fmtSpreadDur(tot), fmtDur(tot.Median / numRecords), ratio, f.baseline, trips, cmds})
		bars = append(bars, bar{Label: f.name, Value: tot.Median, Lo: tot.Min, Hi: tot.Max, Series: f.series, Caption: fmtDur(tot.Median)})
	}
	sec.addTable(t)
	sec.add("Round trips and commands are from the last run (they do not vary). rueidis sends each cached read as " +
		"CLIENT CACHING YES, GET and PTTL inside MULTI/EXEC, hence its command counts.")
	sec.addChart("3-cold-fill.svg", barChart{
		Title: "3. Cold fill of 10,000 keys, total time (median of runs, whisker min–max)",
		Unit:  "", Log: true, Dur: true, Bars: bars,
	})
	for _, h := range []struct{ row, what string }{
		{"hybridcache GetOrCreateMany, pages of 100", "cold fill 10k keys, GetOrCreateMany pages of 100 vs MGET + decode"},
		{"hybridcache GetOrCreateMany, pages of 500", "cold fill 10k keys, GetOrCreateMany pages of 500 vs MGET + decode"},
	} {
		if f := findFill(fills, h.row); f != nil && f.na == "" {
			sec.headline(h.what, fmtSpread(summarize(ratios(totalOf(f.name), totalOf(f.baseline))), "×"), "")
		}
	}
	if f := findFill(fills, "hybridcache GetOrCreate, one key at a time"); f != nil && f.na == "" {
		g := findFill(fills, "hybridcache GetOrCreateMany, pages of 500")
		if g != nil && g.na == "" {
			sec.headline("cold fill, sequential GetOrCreate vs GetOrCreateMany pages of 500 (time)",
				fmtSpread(summarize(ratios(totalOf(f.name), totalOf(g.name))), "× longer"), "")
		}
	}
	return sec, nil
}

func findFill(fs []*fillRow, name string) *fillRow {
	for _, f := range fs {
		if f.name == name {
			return f
		}
	}
	return nil
}
