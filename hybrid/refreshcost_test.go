package hybrid_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
	"github.com/hybridcache/hybridcache/tier"
)

// What a background refresh costs in Redis: the round trips and commands
// a refresh of keys Redis holds sends, counted by a go-redis hook on the
// instance's client, each command labelled with the Remote method that
// sent it (its ctx carries the name), and the commands Redis ran for them
// (INFO commandstats, which counts the commands scripts run inside).

// costTag is the ctx key of the Remote method a command was sent for.
type costTag struct{}

// tagRemote is an l2.Store whose core methods tag their ctx with their
// name, for costHook.
type tagRemote struct{ *l2.Store }

func tagged(ctx context.Context, m string) context.Context {
	return context.WithValue(ctx, costTag{}, m)
}

func (r tagRemote) Get(ctx context.Context, keys []string) ([][]byte, error) {
	return r.Store.Get(tagged(ctx, "Get"), keys)
}

func (r tagRemote) Write(ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error) {
	return r.Store.Write(tagged(ctx, "Write"), ws, f)
}

func (r tagRemote) TakeLeases(ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]tier.Lease, error) {
	return r.Store.TakeLeases(tagged(ctx, "TakeLeases"), keys, guards, token, ttl)
}

func (r tagRemote) ExtendLeases(ctx context.Context, keys []string, token string, ttl time.Duration) ([]bool, error) {
	return r.Store.ExtendLeases(tagged(ctx, "ExtendLeases"), keys, token, ttl)
}

func (r tagRemote) ReleaseLeases(ctx context.Context, keys []string, token string, msg []byte, f tier.Feed) error {
	return r.Store.ReleaseLeases(tagged(ctx, "ReleaseLeases"), keys, token, msg, f)
}

// costHook counts round trips (one per Process call, one per pipeline)
// and commands (a script call is one), by name and sending method.
type costHook struct {
	mu       sync.Mutex
	trips    int
	cmds     []string // "NAME[method]"
	noscript int      // EVALSHAs answered NOSCRIPT (a script not yet loaded)
}

func (h *costHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *costHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.record(ctx, []redis.Cmder{cmd})
		return err
	}
}

func (h *costHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.record(ctx, cmds)
		return err
	}
}

func (h *costHook) record(ctx context.Context, cmds []redis.Cmder) {
	m, _ := ctx.Value(costTag{}).(string)
	if m == "" {
		m = "other"
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trips++
	for _, c := range cmds {
		name := strings.ToUpper(c.Name())
		if name == "MULTI" || name == "EXEC" {
			continue
		}
		if err := c.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			h.noscript++
		}
		h.cmds = append(h.cmds, name+"["+m+"]")
	}
}

// take returns what was counted since the last take, and starts anew.
func (h *costHook) take() (trips int, cmds []string, noscript int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	trips, cmds, noscript = h.trips, h.cmds, h.noscript
	h.trips, h.cmds, h.noscript = 0, nil, 0
	return
}

// cmdSummary is cmds as "NAME[method]×n, ..." in order of first use.
func cmdSummary(cmds []string) string {
	var order []string
	n := map[string]int{}
	for _, c := range cmds {
		if n[c] == 0 {
			order = append(order, c)
		}
		n[c]++
	}
	parts := make([]string, len(order))
	for i, c := range order {
		parts[i] = c
		if n[c] > 1 {
			parts[i] += "×" + strconv.Itoa(n[c])
		}
	}
	return strings.Join(parts, ", ")
}

// commandStats is INFO commandstats: calls by command.
func commandStats(t testing.TB, rdb *redis.Client) map[string]int {
	t.Helper()
	s, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

func statsDelta(before, after map[string]int) string {
	var parts []string
	for k, v := range after {
		if d := v - before[k]; k == "getrange" {
			continue // stored()
		} else if k == "info" {
			d-- // the INFO that took before
			if d > 0 {
				parts = append(parts, fmt.Sprintf("%s×%d", k, d))
			}
		} else if d > 0 {
			parts = append(parts, fmt.Sprintf("%s×%d", k, d))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func prefixed(ns string, keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = ns + ":" + k
	}
	return out
}

// refreshCost is what one measured refresh sent.
type refreshCost struct {
	trips, noscript int
	cmds            []string
	redis           string // commands Redis ran (INFO commandstats delta; real server only)
	idle            string // commands sent while the keys waited to come due
}

// costCase is a refresh to measure: of n keys (n > 1: RefreshBatch of n),
// in mode eager (EagerRefresh 0.5), xfetch (XFetchBeta 10) or batch, with
// LoadLease or not, of keys Redis holds or has lost (missing), their
// values written with lifetime ttl; settle is how long after the write
// lands trailing calls are still counted.
type costCase struct {
	mode           string
	n              int
	lease, missing bool
	ttl, settle    time.Duration
}

// measureRefresh fills keys w... (warm-up: loads every script the refresh
// uses) and keys k..., waits until they are due, refreshes the warm-up
// keys, then counts what the refresh of the k keys sends, from just
// before the hit that starts it (an L1 hit, which sends nothing) until
// its write has landed in Redis and settle has passed.
func measureRefresh(t *testing.T, cc costCase) refreshCost {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	var loads atomic.Int64
	delay := time.Duration(0)
	if cc.mode == "xfetch" {
		delay = 100 * time.Millisecond // XFetch's window: beta × this load time
	}
	load := func(ctx context.Context, key string) (string, error) {
		time.Sleep(delay)
		return fmt.Sprintf("%s@%d", key, loads.Add(1)), nil
	}
	o := hybrid.Options{Namespace: ns, TTL: cc.ttl, LocalTTL: cc.ttl, Logger: quiet}
	var batch []hybrid.RefreshBatch[string]
	switch cc.mode {
	case "eager":
		o.EagerRefresh = 0.5
	case "xfetch":
		o.XFetchBeta = 10
	case "batch":
		o.EagerRefresh = 0.5
		batch = append(batch, hybrid.BatchRefresh(func(ctx context.Context, keys []string) (map[string]string, error) {
			out := map[string]string{}
			for _, k := range keys {
				out[k], _ = load(ctx, k)
			}
			return out, nil
		}, cc.n, 20*time.Millisecond))
	}
	if cc.lease {
		o.LoadLease = 5 * time.Second
	}
	hook := new(costHook)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(hook)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { raw.Close() })
	bus := invalidate.New(rdb, invalidate.Options{Logger: quiet})
	t.Cleanup(func() { bus.Close() })
	o.Remote, o.Bus = tagRemote{l2.New(rdb, l2.Options{})}, bus
	c := newTestCache(t, o, batch...)

	var warm, keys []string
	for i := range cc.n {
		warm = append(warm, fmt.Sprintf("w%d", i))
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	stored := func(keys []string) []string {
		out := make([]string, len(keys))
		for i, k := range keys {
			out[i], _ = raw.GetRange(ctx, ns+":"+k, 0, -1).Result() // GETRANGE: no command the cache sends
		}
		return out
	}
	all := slices.Concat(warm, keys)
	for _, k := range all {
		if _, err := c.GetOrCreate(ctx, k, load); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "the write-backs", func() bool { return !slices.Contains(stored(all), "") }, nil)
	time.Sleep(20 * time.Millisecond)
	hook.take()
	time.Sleep(cc.ttl * 55 / 100) // past the eager refresh's due time (half the lifetime)
	_, idle, _ := hook.take()

	// refresh hits keys until a refresh of each has started, and waits
	// until Redis holds each one's new value.
	refresh := func(keys []string) {
		before := stored(keys)
		started := c.Stats().Load.Refreshes
		for deadline := time.Now().Add(cc.ttl / 3); c.Stats().Load.Refreshes < started+uint64(len(keys)); {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d refreshes started", c.Stats().Load.Refreshes-started, len(keys))
			}
			for _, k := range keys {
				if _, err := c.GetOrCreate(ctx, k, load); err != nil {
					t.Fatal(err)
				}
			}
			if cc.mode == "xfetch" {
				time.Sleep(2 * time.Millisecond)
			}
		}
		waitFor(t, 5*time.Second, "the refresh's write", func() bool {
			now := stored(keys)
			for i := range now {
				if now[i] == before[i] {
					return false
				}
			}
			return true
		}, nil)
		time.Sleep(cc.settle) // what follows the write (a lease's release)
	}
	if cc.missing { // Redis lost the keys: the refresh's read finds none
		raw.Del(ctx, prefixed(ns, warm)...)
	}
	refresh(warm)
	hook.take()
	if cc.missing {
		raw.Del(ctx, prefixed(ns, keys)...)
	}
	var cs map[string]int
	if srv.Real() {
		cs = commandStats(t, raw)
	}
	refresh(keys)
	trips, cmds, noscript := hook.take()
	r := refreshCost{trips: trips, noscript: noscript, cmds: cmds, idle: cmdSummary(idle)}
	if cs != nil {
		r.redis = statsDelta(cs, commandStats(t, raw))
	}
	return r
}

// TestRefreshCost: a background refresh sends Redis what
// bench/RESULTS.md says it does ("What a background refresh costs in
// Redis"): of one key Redis holds, its read and its conditional write
// back; of a batch of 4 keys Redis lost, under LoadLease, the read, the
// read of their sequence counters, the leases, the writes and the
// release. A change to either is a change to that section.
func TestRefreshCost(t *testing.T) {
	for _, tc := range []struct {
		costCase
		trips int
		cmds  string
	}{
		{costCase{mode: "eager", n: 1}, 2, "GET[Get], EVALSHA[Write]"},
		{costCase{mode: "batch", n: 4, lease: true, missing: true}, 5,
			"MGET[Get]×2, EVALSHA[TakeLeases]×4, EVALSHA[Write]×4, EVALSHA[ReleaseLeases]"},
	} {
		t.Run(fmt.Sprintf("%s/lease=%v/missing=%v", tc.mode, tc.lease, tc.missing), func(t *testing.T) {
			tc.ttl, tc.settle = 1200*time.Millisecond, 50*time.Millisecond
			r := measureRefresh(t, tc.costCase)
			if got := cmdSummary(r.cmds); r.trips != tc.trips || got != tc.cmds {
				t.Errorf("the refresh sent %d round trips: %s; want %d: %s (Redis ran: %s)", r.trips, got, tc.trips, tc.cmds, r.redis)
			}
		})
	}
}

// TestRefreshCostReport logs what a refresh of one key (eager, XFetch)
// and of a batch of 4 (RefreshBatch) sends to Redis, with and without
// LoadLease, of keys Redis holds or has lost: the table of bench/RESULTS.md
// ("What a background refresh costs in Redis"). On demand, on a real
// redis-server: HYBRID_REFRESH_COST=1 HYBRID_REQUIRE_REDIS=1.
func TestRefreshCostReport(t *testing.T) {
	if os.Getenv("HYBRID_REFRESH_COST") == "" {
		t.Skip("HYBRID_REFRESH_COST=1 to run")
	}
	for _, m := range []struct {
		mode string
		n    int
	}{{"eager", 1}, {"xfetch", 1}, {"batch", 4}} {
		for _, lease := range []bool{false, true} {
			for _, missing := range []bool{false, true} {
				if missing && m.mode == "xfetch" {
					continue // as eager's
				}
				t.Run(fmt.Sprintf("%s/lease=%v/missing=%v", m.mode, lease, missing), func(t *testing.T) {
					cc := costCase{mode: m.mode, n: m.n, lease: lease, missing: missing, ttl: 2 * time.Second, settle: 150 * time.Millisecond}
					r := measureRefresh(t, cc)
					t.Logf("COST mode=%s keys=%d lease=%v missing=%v trips=%d cmds=%d noscript=%d | %s | redis ran: %s | idle: %s",
						m.mode, m.n, lease, missing, r.trips, len(r.cmds), r.noscript, cmdSummary(r.cmds), r.redis, r.idle)
				})
			}
		}
	}
}
