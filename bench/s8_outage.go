package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// Scenario 8: what a pub/sub blip, a Redis pause and a Redis restart cost
// three instances under a steady read load, when they keep L1 through a
// bus loss (the default) and when they flush it (StrictLoss, the behaviour
// before LossGrace and the replay log).

const (
	outageKeys   = 1000
	outageWrites = 10                     // keys A writes while the pub/sub connections are down
	outageLead   = 300 * time.Millisecond // reads before the event
	outageAfter  = 2 * time.Second        // the window after the event
	outageWait   = 5 * time.Second        // longest wait for reconciliation past that window
	outagePoll   = time.Millisecond       // how often the monitor reads Stats
	outageMaxIn  = 20_000                 // reads in flight beyond which the pacer drops
)

// The instances' settings: the recommended client options, and a bus that
// stays away about 100 ms after a drop and notices a silent server within
// 2-3 health intervals.
var (
	outageClient = redis.Options{ContextTimeoutEnabled: true, DialTimeout: 250 * time.Millisecond, DialerRetries: 1, MaxRetries: 1}
	outageBus    = invalidate.Options{ReconnectMin: 100 * time.Millisecond, ReconnectMax: 100 * time.Millisecond, HealthInterval: 250 * time.Millisecond}
)

type outageMode struct {
	name   string
	strict bool
}

var outageModes = []outageMode{{"keep (default)", false}, {"strict (as before)", true}}

// outageEvent is one event of the scenario. run produces it and returns
// when it is over, with a remark for the table if any.
type outageEvent struct {
	short string
	run   func(ctx context.Context, e *env, s *outageSet) (remark string, err error)
	// fromBus: an instance's time to reconcile runs from when its own bus
	// was back (the pub/sub blip, whose end is when both are back), not
	// from the event's end.
	fromBus bool
}

func scenarioOutage(ctx context.Context, e *env) (*section, error) {
	pause := pick(e, 2*time.Second, 5*time.Second)
	rate := pick(e, 1000.0, 2000.0)
	sec := &section{id: 8, title: "Outages: pub/sub blip, Redis paused, Redis restarted empty"}
	sec.intro = fmt.Sprintf("Three instances in this process (A writes, B and C read), each with its own go-redis client "+
		"(ContextTimeoutEnabled, DialTimeout 250 ms, DialerRetries 1, MaxRetries 1), its own l2.Store (default bounds: reads 250 ms, "+
		"writes 1 s) and its own invalidate.Bus (ReconnectMin = ReconnectMax = 100 ms, HealthInterval 250 ms), same Namespace, "+
		"Options.Secret set, LocalTTL 1 minute (no key expires during the scenario), msgpack records. "+
		"The \"database\" is a version per key and a load function that counts its calls and returns at once. "+
		"Each cell starts from a warm state: fresh instances, A sets the %s keys, B and C read every one into L1. "+
		"B and C then read at %s reads/s each (GetOrCreate, keys in a shuffled cycle, each read on its own goroutine: an open loop) "+
		"from %s before the event until %s after its end. "+
		"Mode keep is the default Options (LossGrace 1 s, the replay log); strict is StrictLoss: true, which flushes L1 when the bus "+
		"drops and again when it is back, and reads through to Redis while the bus is down (while Redis answers). "+
		"Runs from before 2026-12-02 measured an older strict mode that only flushed.\n\n"+
		"Events: (1) pub/sub blip: `CLIENT KILL TYPE pubsub` on the harness's own redis-server, then A sets %d keys (every 100th) "+
		"at once, while the buses wait out their 100 ms; the event ends when B's and C's buses are both back. "+
		"(2) Redis paused %s: SIGSTOP to the harness's redis-server, SIGCONT after %s. "+
		"(3) Redis killed and restarted empty: SIGKILL, then the same command line (persistence off) on the same port; the event "+
		"ends when it answers the harness's PING (tried every 20 ms), so a bus may be back, and an instance reconciled, a little "+
		"before.\n\n"+
		"Columns, summed over B and C: reads made; database loads; Redis value reads (Get and GetMany calls, from the counting "+
		"wrapper); stale reads, a read returning another version than the database's (what A last wrote), before and after the "+
		"instance reconciled; after reconciling, the reads of the window after the event plus one read of every key on B and C "+
		"at its end. Reconciled is when the instance's Stats show the loss dealt with (Bus.Losses up by two: the drop, then the "+
		"replay, the fallback flush or, in strict mode, the second flush), from the end of the event (for the blip: from when "+
		"the instance's own bus was back); loss seen is when the "+
		"first of those showed, from its start (Stats polled every %s). Replays and flushes are the Stats deltas: Bus.Replays (Bus.Replayed "+
		"messages), and flushes: Bus.Flushed in keep mode, Bus.Losses in strict mode (each flushes L1). Held is Bus.HeldServed: entries "+
		"from before the loss served as they were because Redis could not be reached. One run per cell: counts, not ratios. "+
		"The instances' expected warnings are not logged.",
		fmtCount(outageKeys), fmtCount(rate), fmtDur(float64(outageLead)), fmtDur(float64(outageAfter)), outageWrites,
		fmtDur(float64(pause)), fmtDur(float64(pause)), fmtDur(float64(outagePoll)))
	if !e.ownRedis || e.srv == nil {
		sec.add("n/a: this scenario kills pub/sub connections, pauses and restarts Redis, which only the redis-server the harness " +
			"started may suffer: skipped with -redis.")
		return sec, nil
	}
	// go-redis logs every failed dial: hundreds of lines, all expected.
	logging.Disable()
	defer logging.Enable()
	events := []outageEvent{
		{short: "pub/sub blip", run: outageBlip, fromBus: true},
		{short: "Redis paused " + fmtDur(float64(pause)), run: func(ctx context.Context, e *env, _ *outageSet) (string, error) {
			return outagePause(e, pause)
		}},
		{short: "Redis restarted empty", run: outageRestart},
	}
	var t table
	t.Header = []string{"Event", "Mode", "reads during / after", "DB loads during / after", "Redis reads during / after",
		"stale before reconciling", "stale after reconciling", "replays (messages) / flushes", "held", "loss seen (B / C)",
		"reconciled (B / C)", "p99 read during / after"}
	t.Align = []byte{'l', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'}
	var remarks []string
	res := map[string]*outageResult{}
	for _, ev := range events {
		for _, m := range outageModes {
			e.progressf("    %s, %s", ev.short, m.name)
			settle()
			r, err := runOutageCell(ctx, e, ev, m, rate)
			if err != nil {
				return sec, fmt.Errorf("%s, %s: %w", ev.short, m.name, err)
			}
			res[ev.short+"/"+m.name] = r
			label := fmt.Sprintf("%s (%s)", ev.short, fmtDur(float64(r.took)))
			t.Rows = append(t.Rows, []string{label, m.name,
				pair(r.tally.during, r.tally.after),
				pair(r.loadsDuring, r.loadsAfter),
				pair(r.redisDuring, r.redisAfter),
				fmtCount(float64(r.tally.staleBefore)),
				fmt.Sprintf("%s of %s", fmtCount(float64(r.tally.staleAfter+r.sweepStale)), fmtCount(float64(r.tally.checkedAfter+r.sweepReads))),
				fmt.Sprintf("%s (%s) / %s", fmtCount(float64(r.replays)), fmtCount(float64(r.replayed)), fmtCount(float64(r.flushes))),
				fmtCount(float64(r.held)),
				fmtSince(r.seen[0], outagePoll) + " / " + fmtSince(r.seen[1], outagePoll),
				fmtSince(r.reconciled[0], outagePoll) + " / " + fmtSince(r.reconciled[1], outagePoll),
				fmtDur(percentile(r.tally.latDuring, 0.99)) + " / " + fmtDur(percentile(r.tally.latAfter, 0.99)),
			})
			if r.remark != "" {
				remarks = append(remarks, fmt.Sprintf("%s, %s: %s.", ev.short, m.name, r.remark))
			}
		}
	}
	sec.addTable(t)
	sec.add("The event's length is in parentheses. During is from the event's start to its end, after the " + fmtDur(float64(outageAfter)) +
		" that follow; reads are placed by when they started, loads and Redis reads by when the counters moved. " +
		"p99 is over the reads that started in the window. A \"–\" is a loss the instance's Stats never showed, or " +
		"a reconciliation not seen within " + fmtDur(float64(outageAfter+outageWait)) + " of the end.")
	for _, rm := range remarks {
		sec.add(rm)
	}
	for i, ev := range events {
		k, s := res[ev.short+"/"+outageModes[0].name], res[ev.short+"/"+outageModes[1].name]
		if k == nil || s == nil {
			continue
		}
		target := ""
		switch i {
		case 0:
			target = "0 reloads and 0 stale reads"
		case 1:
			target = "no loads for keys within their L1 lifetime"
		}
		sec.headline(ev.short+": DB loads / Redis reads / stale after reconciling, keep vs strict",
			fmt.Sprintf("%s / %s / %s vs %s / %s / %s",
				fmtCount(float64(k.loadsDuring+k.loadsAfter)), fmtCount(float64(k.redisDuring+k.redisAfter)), fmtCount(float64(k.tally.staleAfter+k.sweepStale)),
				fmtCount(float64(s.loadsDuring+s.loadsAfter)), fmtCount(float64(s.redisDuring+s.redisAfter)), fmtCount(float64(s.tally.staleAfter+s.sweepStale))),
			target)
	}
	return sec, nil
}

// pair formats two counts as "a / b".
func pair[T int | int64](a, b T) string {
	return fmtCount(float64(a)) + " / " + fmtCount(float64(b))
}

// fmtSince formats a time offset measured by polling every poll: "–" for
// a negative one (not seen), "< poll" below the polling's resolution.
func fmtSince(d, poll time.Duration) string {
	switch {
	case d < 0:
		return "–"
	case d < poll:
		return "< " + fmtDur(float64(poll))
	}
	return fmtDur(float64(d))
}

// --- instances and the database ---

// outageInst is one instance: its cache and what it is built from.
type outageInst struct {
	c      *hybrid.Cache[*Record]
	remote *countingRemote
	rdb    *redis.Client
	bus    *invalidate.Bus
}

func (in *outageInst) close() {
	if in.c != nil {
		in.c.Close()
	}
	in.bus.Close()
	in.rdb.Close()
}

// outageSet is the three instances of one cell and its database.
type outageSet struct {
	a    *outageInst
	r    [2]*outageInst // B and C
	db   *outageDB
	keys []string
}

func (s *outageSet) close() {
	for _, in := range []*outageInst{s.a, s.r[0], s.r[1]} {
		if in != nil {
			in.close()
		}
	}
}

func openOutageSet(e *env, ns string, strict bool) (*outageSet, error) {
	s := &outageSet{db: &outageDB{}}
	for i := range outageKeys {
		s.keys = append(s.keys, outageKey(i))
	}
	quiet := slog.New(slog.DiscardHandler)
	for i := range 3 {
		co := outageClient
		co.Addr = e.addr
		in := &outageInst{rdb: redis.NewClient(&co)}
		bo := outageBus
		bo.Logger = quiet
		in.bus = invalidate.New(in.rdb, bo)
		in.remote = &countingRemote{s: l2.New(in.rdb, l2.Options{})}
		o := oursOptions(e, spec{kind: nameOurs, prefix: ns, f: fmtMsgpack}, in.remote, in.bus)
		o.LocalTTL = time.Minute
		o.StrictLoss = strict
		o.Logger = quiet
		if i == 0 {
			s.a = in
		} else {
			s.r[i-1] = in
		}
		c, err := hybrid.New[*Record](o)
		if err != nil {
			s.close()
			return nil, err
		}
		in.c = c
	}
	return s, nil
}

// outageDB is the scenario's database: a version per key, and a count of
// the loads that read it.
type outageDB struct {
	ver   [outageKeys]atomic.Int64
	loads atomic.Int64
}

func (d *outageDB) load(_ context.Context, key string) (*Record, error) {
	i, err := outageIndex(key)
	if err != nil {
		return nil, err
	}
	d.loads.Add(1)
	return outageValue(i, d.ver[i].Load()), nil
}

func outageKey(i int) string { return "k" + strconv.Itoa(i) }

// outageIndex returns the index of a key made by outageKey.
func outageIndex(key string) (int, error) {
	if len(key) < 2 || key[0] != 'k' {
		return 0, fmt.Errorf("bench: %q is not an outage key", key)
	}
	i, err := strconv.Atoi(key[1:])
	if err != nil || i < 0 || i >= outageKeys || outageKey(i) != key {
		return 0, fmt.Errorf("bench: %q is not an outage key", key)
	}
	return i, nil
}

// outageValue is version ver of key i's value; the version is its Score.
func outageValue(i int, ver int64) *Record {
	return &Record{ID: i, Name: "v" + strconv.FormatInt(ver, 10), Score: float64(ver)}
}

// warm sets every key through A and reads each into B's and C's L1.
func (s *outageSet) warm(ctx context.Context) error {
	for i, k := range s.keys {
		s.db.ver[i].Store(1)
		if err := s.a.c.Set(ctx, k, outageValue(i, 1)); err != nil {
			return fmt.Errorf("warm: %w", err)
		}
	}
	for _, r := range s.r {
		for i, k := range s.keys {
			v, err := r.c.GetOrCreate(ctx, k, s.db.load)
			if err != nil {
				return fmt.Errorf("warm: %w", err)
			}
			if int64(v.Score) != s.db.ver[i].Load() {
				return fmt.Errorf("warm: %s read version %v, want %d", k, v.Score, s.db.ver[i].Load())
			}
		}
	}
	return nil
}

// --- the events ---

// outageBlip kills every pub/sub connection of the harness's redis-server
// and has A write outageWrites keys while the buses stay away; it returns
// when B's and C's buses are back.
func outageBlip(ctx context.Context, e *env, s *outageSet) (string, error) {
	var recv, back [2]uint64
	for i, r := range s.r {
		recv[i], back[i] = r.c.Stats().Invalidations.Applied, r.bus.Stats().Reconnects
	}
	if err := e.rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		return "", fmt.Errorf("CLIENT KILL TYPE pubsub: %w", err)
	}
	for j := range outageWrites {
		i := j * (outageKeys / outageWrites)
		v := s.db.ver[i].Add(1)
		if err := s.a.c.Set(ctx, s.keys[i], outageValue(i, v)); err != nil {
			return "", fmt.Errorf("A's write in the gap: %w", err)
		}
	}
	var remark string
	for i, r := range s.r {
		if n := r.c.Stats().Invalidations.Applied - recv[i]; n > 0 {
			remark = fmt.Sprintf("%s received %d message(s) before A's writes in the gap were done: its bus was back too soon", "BC"[i:i+1], n)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for i, r := range s.r {
		for r.bus.Stats().Reconnects == back[i] {
			if time.Now().After(deadline) {
				return remark, fmt.Errorf("%s's bus not back 5 s after CLIENT KILL", "BC"[i:i+1])
			}
			time.Sleep(outagePoll)
		}
	}
	return remark, nil
}

// outagePause stops the harness's redis-server with SIGSTOP for d.
func outagePause(e *env, d time.Duration) (string, error) {
	if err := e.srv.signal(syscall.SIGSTOP); err != nil {
		return "", fmt.Errorf("SIGSTOP: %w", err)
	}
	time.Sleep(d)
	if err := e.srv.signal(syscall.SIGCONT); err != nil {
		return "", fmt.Errorf("SIGCONT: %w", err)
	}
	return "", nil
}

// outageRestart kills the harness's redis-server with SIGKILL and starts it
// again, empty, on the same port.
func outageRestart(_ context.Context, e *env, _ *outageSet) (string, error) {
	t0 := time.Now()
	if err := e.srv.crash(); err != nil {
		return "", err
	}
	e.records = nil // the record data set went with it; a later scenario seeds it again
	if err := e.srv.restart(); err != nil {
		return "", fmt.Errorf("restart redis-server: %w", err)
	}
	return fmt.Sprintf("Redis was down %s (SIGKILL to PONG)", fmtDur(float64(time.Since(t0)))), nil
}

// --- one cell ---

// outageRead is one read by B or C.
type outageRead struct {
	reader int           // 0: B, 1: C
	at     time.Duration // when it started, since the cell's start
	took   time.Duration
	stale  bool // returned another version than the database held when it started
	failed bool
}

// outageResult is what one cell measured, B and C together.
type outageResult struct {
	took                    time.Duration // the event's length
	tally                   readTally
	loadsDuring, loadsAfter int64
	redisDuring, redisAfter int64
	sweepReads, sweepStale  int
	replays, replayed       uint64
	flushes, held           uint64
	seen, reconciled        [2]time.Duration // from the event's start and end; -1: not seen
	remark                  string
}

func runOutageCell(ctx context.Context, e *env, ev outageEvent, m outageMode, rate float64) (*outageResult, error) {
	ns := e.k(fmt.Sprintf("outage-%d", time.Now().UnixNano()))
	s, err := openOutageSet(e, ns, m.strict)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if err := s.warm(ctx); err != nil {
		return nil, err
	}
	res := &outageResult{}
	t0 := time.Now()

	// Readers: an open loop per reader instance.
	var (
		mu       sync.Mutex
		reads    []outageRead
		inflight sync.WaitGroup
		pacers   sync.WaitGroup
		stop     atomic.Bool
		busy     atomic.Int64
		dropped  atomic.Int64
	)
	read := func(r int, in *outageInst, i int) {
		defer inflight.Done()
		defer busy.Add(-1)
		at := time.Since(t0)
		want := s.db.ver[i].Load()
		v, err := in.c.GetOrCreate(ctx, s.keys[i], s.db.load)
		rd := outageRead{reader: r, at: at, took: time.Since(t0) - at, failed: err != nil}
		rd.stale = err == nil && int64(v.Score) != want
		mu.Lock()
		reads = append(reads, rd)
		mu.Unlock()
	}
	for r, in := range s.r {
		order := e.perm(outageKeys)
		pacers.Add(1)
		go func() {
			defer pacers.Done()
			issued := 0
			for !stop.Load() {
				due := int(time.Since(t0).Seconds() * rate)
				for ; issued < due; issued++ {
					if busy.Load() >= outageMaxIn {
						dropped.Add(1)
						continue
					}
					busy.Add(1)
					inflight.Add(1)
					go read(r, in, order[issued%outageKeys])
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}

	time.Sleep(outageLead)

	// The event, watched.
	counters := func() (loads, redisReads int64) {
		for _, in := range s.r {
			redisReads += in.remote.reads.Load()
		}
		return s.db.loads.Load(), redisReads
	}
	var before [2]hybrid.Stats
	for i, in := range s.r {
		before[i] = in.c.Stats()
	}
	loads0, redis0 := counters()
	start := time.Since(t0)
	var backs [2]uint64
	for i, in := range s.r {
		backs[i] = in.bus.Stats().Reconnects
	}
	var seenAt, backAt, doneAt [2]atomic.Int64 // since t0; 0: not yet
	watchStop := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			all := true
			for i, in := range s.r {
				if doneAt[i].Load() != 0 {
					continue
				}
				back := in.bus.Stats().Reconnects > backs[i]
				seen, done := lossProgress(before[i], in.c.Stats())
				now := int64(time.Since(t0))
				if seen && seenAt[i].Load() == 0 {
					seenAt[i].Store(now)
				}
				if back && backAt[i].Load() == 0 {
					backAt[i].Store(now)
				}
				if done {
					doneAt[i].Store(now)
				} else {
					all = false
				}
			}
			if all {
				return
			}
			select {
			case <-watchStop:
				return
			case <-time.After(outagePoll):
			}
		}
	}()
	remark, evErr := ev.run(ctx, e, s)
	end := time.Since(t0)
	loads1, redis1 := counters()
	res.took = end - start
	if evErr == nil {
		time.Sleep(outageAfter)
	}
	loads2, redis2 := counters()
	after := time.Since(t0)
	stop.Store(true)
	pacers.Wait()
	inflight.Wait()
	if evErr != nil {
		close(watchStop)
		<-watchDone
		return nil, evErr
	}
	// Wait a bounded time for an instance that has not reconciled yet.
	select {
	case <-watchDone:
	case <-time.After(outageWait):
		close(watchStop)
		<-watchDone
	}
	res.loadsDuring, res.loadsAfter = loads1-loads0, loads2-loads1
	res.redisDuring, res.redisAfter = redis1-redis0, redis2-redis1

	var recon [2]time.Duration
	var notes []string
	if remark != "" {
		notes = append(notes, remark)
	}
	for i, in := range s.r {
		st := in.c.Stats()
		b := before[i]
		res.replays += st.Bus.Replays - b.Bus.Replays
		res.replayed += st.Bus.Replayed - b.Bus.Replayed
		res.held += st.Bus.HeldServed - b.Bus.HeldServed
		if m.strict {
			res.flushes += st.Bus.Losses - b.Bus.Losses
		} else {
			res.flushes += st.Bus.Flushed - b.Bus.Flushed
		}
		if n := st.Bus.Losses - b.Bus.Losses; n > 2 {
			notes = append(notes, fmt.Sprintf("%s counted %d bus losses (Bus.Losses), where one outage makes 2", "BC"[i:i+1], n))
		}
		res.seen[i], res.reconciled[i] = -1, -1
		recon[i] = after // not reconciled: nothing counts as after
		if n := seenAt[i].Load(); n != 0 {
			res.seen[i] = max(time.Duration(n)-start, 0)
		}
		if n := doneAt[i].Load(); n != 0 {
			recon[i] = time.Duration(n)
			from := end
			if ev.fromBus && backAt[i].Load() != 0 {
				from = time.Duration(backAt[i].Load())
			}
			res.reconciled[i] = max(recon[i]-from, 0)
		}
	}
	res.tally = tallyReads(reads, start, end, after, recon)
	res.tally.failed += int(dropped.Load())

	// Every key once more on B and C: nothing stale may remain.
	for _, in := range s.r {
		for i, k := range s.keys {
			v, err := in.c.GetOrCreate(ctx, k, s.db.load)
			switch {
			case err != nil:
				res.tally.failed++
			case int64(v.Score) != s.db.ver[i].Load():
				res.sweepStale++
			}
			res.sweepReads++
		}
	}
	if res.tally.failed > 0 {
		notes = append(notes, fmt.Sprintf("%d read(s) failed or were dropped by the pacer", res.tally.failed))
	}
	res.remark = strings.Join(notes, "; ")
	return res, nil
}

// lossProgress reports, from an instance's Stats before an event and now,
// whether it has seen a bus loss since (Bus.Losses up by one: the drop) and
// whether it has dealt with it (up by two: the replay or the fallback flush
// once the bus is back; in strict mode, the flush on restore). Both counts
// are made once L1 reflects them.
func lossProgress(before, now hybrid.Stats) (seen, reconciled bool) {
	return now.Bus.Losses > before.Bus.Losses, now.Bus.Losses >= before.Bus.Losses+2
}

// readTally is what the reads of one cell amount to, B and C together.
type readTally struct {
	during, after            int // reads started in each window
	staleBefore              int // stale reads started from the event's start until their instance reconciled
	staleAfter, checkedAfter int // stale reads, and reads, started after their instance reconciled, within the after window
	failed                   int
	latDuring, latAfter      []float64 // ns
}

// tallyReads sorts reads into the event's window [start, end) and the
// window after it [end, after), by when they started. recon[r] is when
// reader r reconciled (after or later: it did not).
func tallyReads(reads []outageRead, start, end, after time.Duration, recon [2]time.Duration) readTally {
	var t readTally
	for _, rd := range reads {
		if rd.failed {
			t.failed++
		}
		switch {
		case rd.at >= start && rd.at < end:
			t.during++
			t.latDuring = append(t.latDuring, float64(rd.took))
		case rd.at >= end && rd.at < after:
			t.after++
			t.latAfter = append(t.latAfter, float64(rd.took))
		}
		if rd.at < start || rd.at >= after {
			continue
		}
		if rd.at < recon[rd.reader] {
			if rd.stale {
				t.staleBefore++
			}
			continue
		}
		t.checkedAfter++
		if rd.stale {
			t.staleAfter++
		}
	}
	return t
}
