// Command bench runs hybridcache's scenario benchmarks against real Redis,
// next to raw baselines (sync.Map, otter, go-redis) and peer libraries
// (go-redis/cache, rueidis, go-redis's client-side cache), and writes a
// Markdown report with SVG charts.
//
//	cd bench && go run .                 # full run, about 90 minutes on 2 cores (scenario 10 about 45, scenario 12 about 26)
//	cd bench && go run . -quick          # under 2 minutes
//	go run . -redis 127.0.0.1:6379       # use this Redis instead of starting one
//
// Without -redis it starts its own redis-server on a free loopback port
// (persistence off) and stops it, by pid, when it ends or is interrupted.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/invalidate"
)

type scenario struct {
	id   int
	name string
	run  func(context.Context, *env) (*section, error)
}

var scenarios = []scenario{
	{1, "per-read cost", scenarioReads},
	{2, "page of 50", scenarioPage},
	{3, "cold instance fill", scenarioFill},
	{4, "config object", scenarioConfig},
	{5, "multi-goroutine hits", scenarioParallel},
	{6, "invalidation propagation", scenarioPropagation},
	{7, "semantics", scenarioSemantics},
	{8, "outages", scenarioOutage},
	{9, "fleet cold start", scenarioFleet},
	{10, "production traces", scenarioTrace},
	{11, "stampede at expiry (XFetch)", scenarioXFetch},
	{12, "write-heavy traffic: swap against drop", scenarioWrites},
}

func main() { os.Exit(run()) }

func run() (code int) {
	quick := flag.Bool("quick", false, "short runs (3 per figure, 5 s config phase): finishes in under 2 minutes")
	out := flag.String("out", "results", "folder for the report (report.md) and the SVG charts")
	md := flag.String("md", "", "also write the report to this Markdown file, with chart links relative to it (e.g. RESULTS.md)")
	addr := flag.String("redis", "", "address of a Redis 6+ to use (host:port); default: start a redis-server on a free loopback port")
	runs := flag.Int("runs", 0, "runs per figure (default 5, or 3 with -quick)")
	only := flag.String("only", "", "comma-separated scenario numbers to run (default: all)")
	retries := flag.Int("retry", 0, "run a scenario that failed again up to this many times; each failure is kept in the report's notes")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (for go tool pprof)")
	traces := flag.String("traces", "traces/orm-busy.trace.xz,traces/web07.trace.xz", "comma-separated trace files for scenarios 10 and 12 (format: traces/README.md)")
	flag.Parse()

	start := time.Now()
	cmdline := "go run . " + strings.Join(os.Args[1:], " ")

	// Peers log through the standard logger (go-redis/cache warns about
	// TTLs under a second); keep those lines for the report.
	var logged lockedBuffer

	var srv *server
	cleanup := func() { srv.kill() }
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigc
		fmt.Fprintf(os.Stderr, "\n%v: stopping the redis-server this run started\n", s)
		cleanup()
		os.Exit(130)
	}()
	defer cleanup()
	defer func() {
		if r := recover(); r != nil {
			cleanup()
			panic(r)
		}
	}()

	e := &env{quick: *quick, progress: os.Stderr, rng: mrand.New(mrand.NewPCG(1, 2)), traces: strings.Split(*traces, ",")}
	e.reps = pick(e, 3, 5)
	if *runs > 0 {
		e.reps = *runs
	}
	if *addr == "" {
		var err error
		fmt.Fprintln(os.Stderr, "starting redis-server on a free loopback port...")
		if srv, err = startRedis(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		e.addr, e.ownRedis, e.srv = srv.Addr, true, srv
	} else {
		e.addr = *addr
	}
	e.rdb = redis.NewClient(&redis.Options{Addr: e.addr})
	defer e.rdb.Close()
	ctx := context.Background()
	if err := e.rdb.Ping(ctx).Err(); err != nil {
		fmt.Fprintf(os.Stderr, "redis at %s: %v\n", e.addr, err)
		return 1
	}
	id := make([]byte, 4)
	rand.Read(id)
	e.run = "hcbench." + hex.EncodeToString(id) + "."
	e.secret = []byte("bench-secret-" + hex.EncodeToString(id))
	if !e.ownRedis {
		defer e.deleteRun(context.Background())
	}
	// The library logs read-path errors; show them, they would be news.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	// After slog.SetDefault, which would route the log package to it.
	log.SetOutput(&logged)
	log.SetFlags(0)
	// After slog.SetDefault too: the bus logs to slog.Default() as it is
	// at New, and its lines (scenario 8 cuts its connection) are the
	// library's, not a peer's.
	e.bus = invalidate.New(e.rdb, invalidate.Options{})
	defer e.bus.Close()

	m := describeMachine(ctx, e.rdb)
	m.RedisAddr, m.RedisOwn, m.CommandLine, m.Reps = e.addr, e.ownRedis, cmdline, e.reps
	m.Mode = "full"
	if e.quick {
		m.Mode = "quick"
	}
	fmt.Fprintf(os.Stderr, "%s mode, %d runs per figure; Redis %s at %s; Go %s; %d cores\n", m.Mode, e.reps, m.Redis, e.addr, m.Go, m.Cores)

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	want := map[int]bool{}
	for _, f := range strings.Split(*only, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			want[n] = true
		}
	}
	var secs []*section
	failed := false
	for _, sc := range scenarios {
		if len(want) > 0 && !want[sc.id] {
			continue
		}
		t0 := time.Now()
		fmt.Fprintf(os.Stderr, "[%d/%d] %s...\n", sc.id, len(scenarios), sc.name)
		settle()
		sec, err := sc.run(ctx, e)
		for try := 1; err != nil && try <= *retries; try++ {
			// A scenario's checks can trip on a machine busier than the
			// run assumed; the failure stays in the notes, and only a
			// scenario that fails every try fails the run.
			e.notes = append(e.notes, fmt.Sprintf("scenario %d (%s) failed on try %d of %d: %v", sc.id, sc.name, try, *retries+1, err))
			fmt.Fprintf(os.Stderr, "[%d/%d] %s failed (%v); running it again\n", sc.id, len(scenarios), sc.name, err)
			e.deleteRun(ctx) // the next try starts from an empty Redis
			settle()
			sec, err = sc.run(ctx, e)
		}
		if sec == nil {
			sec = &section{id: sc.id, title: sc.name}
		}
		sec.took = since(t0)
		if err != nil {
			sec.err = err
			failed = true
			fmt.Fprintf(os.Stderr, "[%d/%d] %s FAILED after %s: %v\n", sc.id, len(scenarios), sc.name, sec.took, err)
		} else {
			fmt.Fprintf(os.Stderr, "[%d/%d] %s done in %s\n", sc.id, len(scenarios), sc.name, sec.took)
		}
		secs = append(secs, sec)
	}
	m.LoadEnd = loadAvg()
	m.RunDuration = time.Since(start)
	notes := slices.Clone(e.notes)
	for _, l := range dedupeLines(quotedKey.ReplaceAllString(logged.String(), `key="…"`)) {
		n := "logged by a peer library: `" + l.text + "`"
		if l.n > 1 {
			n += fmt.Sprintf(" (%d times)", l.n)
		}
		notes = append(notes, n)
	}

	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := writeCharts(*out, secs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	report := filepath.Join(*out, "report.md")
	if err := os.WriteFile(report, []byte(renderReport(m, secs, notes, ".")), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if *md != "" {
		rel, err := filepath.Rel(filepath.Dir(*md), *out)
		if err != nil {
			rel = *out
		}
		if err := os.WriteFile(*md, []byte(renderReport(m, secs, notes, rel)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Println(renderReport(m, secs, notes, ""))
	fmt.Fprintf(os.Stderr, "report: %s (charts in %s); took %s\n", report, *out, since(start))
	if failed {
		for _, s := range secs {
			if s.err != nil {
				fmt.Fprintf(os.Stderr, "FAILED: scenario %d (%s): %v\n", s.id, s.title, s.err)
			}
		}
		return 1
	}
	return 0
}

// lockedBuffer is an io.Writer safe for the standard logger's concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// quotedKey matches the key names in peers' log lines, so that lines that
// differ only by key are counted as one.
var quotedKey = regexp.MustCompile(`key="[^"]*"`)

type countedLine struct {
	text string
	n    int
}

// dedupeLines returns the distinct non-empty lines of s, in first-seen
// order, each with how often it appeared.
func dedupeLines(s string) []countedLine {
	var out []countedLine
	at := map[string]int{}
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if i, ok := at[l]; ok {
			out[i].n++
			continue
		}
		at[l] = len(out)
		out = append(out, countedLine{l, 1})
	}
	return out
}
