package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// machine describes where and on what a run happened.
type machine struct {
	CPU         string
	Cores       int
	GOMAXPROCS  int
	Memory      string
	OS          string
	Go          string
	Redis       string
	RedisAddr   string
	RedisOwn    bool
	Commit      string
	Dirty       bool
	Date        time.Time
	Modules     []string // "github.com/redis/rueidis v1.0.79"
	LoadStart   string
	LoadEnd     string
	CommandLine string
	Mode        string
	Reps        int
	RunDuration time.Duration
}

func describeMachine(ctx context.Context, rdb *redis.Client) machine {
	m := machine{
		CPU:        cpuModel(),
		Cores:      runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Memory:     memTotal(),
		OS:         runtime.GOOS + "/" + runtime.GOARCH + kernel(),
		Go:         runtime.Version(),
		Date:       time.Now().UTC(),
		LoadStart:  loadAvg(),
	}
	if in, err := info(ctx, rdb, "server"); err == nil {
		m.Redis = in["redis_version"]
	}
	m.Commit, m.Dirty = libraryCommit()
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/redis/go-redis/v9", "github.com/redis/rueidis", "github.com/go-redis/cache/v9",
				"github.com/maypok86/otter/v2", "github.com/vmihailenco/msgpack/v5":
				v := d.Version
				if d.Replace != nil {
					v = d.Replace.Version
				}
				m.Modules = append(m.Modules, d.Path+" "+v)
			}
		}
	}
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	if out, err := exec.Command("sysctl", "-n", "machdep.cpu.brand_string").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	return "unknown"
}

func memTotal() string {
	f, err := os.Open("/proc/meminfo")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
				return fmtBytes(kb * 1024)
			}
		}
	}
	if out, err := exec.Command("sysctl", "-n", "hw.memsize").Output(); err == nil {
		n, _ := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		return fmtBytes(n)
	}
	return "unknown"
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return " (Linux " + strings.TrimSpace(string(b)) + ")"
}

// loadAvg is the 1, 5 and 15 minute load average, to show how busy the
// machine was; "" where unknown.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// libraryCommit is git rev-parse HEAD of the library checkout this module
// sits in ("unknown" if it is not one), and whether the checkout has
// uncommitted changes.
func libraryCommit() (string, bool) {
	dir := ".."
	if wd, err := os.Getwd(); err == nil {
		dir = filepath.Dir(wd)
	}
	out, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown", false
	}
	commit := strings.TrimSpace(string(out))
	st, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=no").Output()
	return commit, err == nil && len(strings.TrimSpace(string(st))) > 0
}

func (m machine) markdown() string {
	var b strings.Builder
	commit := m.Commit
	if m.Dirty {
		commit += " (the checkout had uncommitted changes)"
	}
	redisWhere := "a redis-server started by the harness on " + m.RedisAddr + " (loopback, no persistence)"
	if !m.RedisOwn {
		redisWhere = "the server given with -redis, " + m.RedisAddr + " (shared: server-side counters include other clients' traffic)"
	}
	rows := [][]string{
		{"Date", m.Date.Format("2006-01-02 15:04 UTC")},
		{"Command", "`" + m.CommandLine + "`"},
		{"Mode", fmt.Sprintf("%s, %d runs per figure (median and min–max shown)", m.Mode, m.Reps)},
		{"CPU", fmt.Sprintf("%s, %d logical cores, GOMAXPROCS %d", m.CPU, m.Cores, m.GOMAXPROCS)},
		{"Memory", m.Memory},
		{"OS", m.OS},
		{"Go", m.Go},
		{"Redis", m.Redis + ", " + redisWhere},
		{"Library commit", commit},
		{"Peers and baselines", strings.Join(m.Modules, ", ")},
		{"Load average (1/5/15 min)", fmt.Sprintf("at start %s; at end %s", m.LoadStart, m.LoadEnd)},
		{"Run took", m.RunDuration.Round(time.Second).String()},
	}
	b.WriteString(table{Header: []string{"Run", ""}, Rows: rows}.markdown())
	return b.String()
}
