package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is the Redis the harness talks to: a redis-server it started (and
// stops, by pid) or one given with -redis, which it never stops.
type server struct {
	Addr string
	path string   // the redis-server binary
	args []string // its command line, port included: a restart reuses it
	dir  string
	once sync.Once

	mu      sync.Mutex
	cmd     *exec.Cmd     // the running process
	exited  chan struct{} // closed when cmd has exited
	stopped bool          // kill was called: start no more
}

// errNoRedis says what to install when there is neither -redis nor a
// redis-server on PATH.
var errNoRedis = errors.New(`no Redis to measure against: redis-server is not on PATH and -redis was not given.
Install Redis 6 or newer (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)
or pass the address of a Redis you may write to: go run . -redis 127.0.0.1:6379`)

// startRedis starts redis-server on a free loopback port, with persistence
// off, and waits until it answers PING.
func startRedis() (*server, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoRedis
	}
	dir, err := os.MkdirTemp("", "hybridcache-bench-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s := &server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), path: path, dir: dir}
		s.args = []string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
			"--protected-mode", "no",
			"--loglevel", "warning",
			"--logfile", "",
		}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("redis-server did not come up: %w", lastErr)
}

// start runs the server's command line and waits until it answers PING;
// if it does not, it stops the process again.
func (s *server) start() error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return errors.New("redis-server: already stopped for good")
	}
	cmd := exec.Command(s.path, s.args...)
	// If the harness dies without cleaning up, the kernel kills the
	// server too (Linux; elsewhere the signal handler and defers do it).
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	if err := waitPing(s.Addr, exited); err != nil {
		stopProcess(cmd, exited)
		return err
	}
	return nil
}

// signal sends sig to the server the harness started (SIGSTOP and SIGCONT
// pause and resume it).
func (s *server) signal(sig os.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.cmd == nil {
		return errors.New("redis-server: not running")
	}
	return s.cmd.Process.Signal(sig)
}

// crash kills the server with SIGKILL, as a crash would, and waits until
// it has exited. restart brings it back.
func (s *server) crash() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	stopped := s.stopped
	s.mu.Unlock()
	if stopped || cmd == nil {
		return errors.New("redis-server: not running")
	}
	if err := cmd.Process.Kill(); err != nil {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(5 * time.Second):
		return errors.New("redis-server: still running 5 s after SIGKILL")
	}
}

// restart starts the server again on the same port, after crash: empty,
// since persistence is off. It tries a few times in case the port is not
// free yet.
func (s *server) restart() error {
	var err error
	for range 5 {
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

func waitPing(addr string, exited <-chan struct{}) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	deadline := time.Now().Add(5 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("redis-server exited at start (port taken?)")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err = rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// kill stops the server the harness started, by its pid, and removes its
// directory. It is safe to call more than once, and does nothing for a
// server given with -redis.
func (s *server) kill() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		s.mu.Lock()
		s.stopped = true
		cmd, exited := s.cmd, s.exited
		s.mu.Unlock()
		if cmd != nil {
			stopProcess(cmd, exited)
		}
		if s.dir != "" {
			os.RemoveAll(s.dir)
		}
	})
}

// stopProcess asks a redis-server to exit (SIGTERM, and SIGCONT in case it
// is paused), and kills it if it has not within a second.
func stopProcess(cmd *exec.Cmd, exited <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-exited:
	case <-time.After(1100 * time.Millisecond):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// info returns the fields of one INFO section as name -> value.
func info(ctx context.Context, rdb *redis.Client, section string) (map[string]string, error) {
	s, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(s), nil
}

func parseInfo(s string) map[string]string {
	out := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

// commandCalls parses INFO commandstats into command -> calls.
func commandCalls(m map[string]string) map[string]int64 {
	out := make(map[string]int64)
	for k, v := range m {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if n, ok := strings.CutPrefix(f, "calls="); ok {
				c, _ := strconv.ParseInt(n, 10, 64)
				out[name] = c
			}
		}
	}
	return out
}

// commandUsec parses INFO commandstats into command -> microseconds spent
// in it (a script's commands count in the script's time and in their own).
func commandUsec(m map[string]string) map[string]int64 {
	out := make(map[string]int64)
	for k, v := range m {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if n, ok := strings.CutPrefix(f, "usec="); ok {
				c, _ := strconv.ParseInt(n, 10, 64)
				out[name] = c
			}
		}
	}
	return out
}

// serverCounters is a snapshot of what the harness reads from INFO to
// attribute work to one measured phase.
type serverCounters struct {
	calls     map[string]int64
	usec      map[string]int64 // time in each command, µs
	netOut    int64            // total_net_output_bytes
	cpu       float64          // used_cpu_user + used_cpu_sys, seconds
	available bool
}

func readServerCounters(ctx context.Context, rdb *redis.Client) serverCounters {
	sc, _ := readServerCountersSized(ctx, rdb)
	return sc
}

// readServerCountersSized also returns the size of the INFO reply on the
// wire (near enough: the bulk string and its header), so that the
// harness's own reads can be taken out of the server's output.
func readServerCountersSized(ctx context.Context, rdb *redis.Client) (serverCounters, int64) {
	all, err := rdb.Info(ctx, "commandstats", "stats", "cpu").Result()
	if err != nil {
		return serverCounters{}, 0
	}
	m := parseInfo(all)
	sc := serverCounters{calls: commandCalls(m), usec: commandUsec(m), available: true}
	sc.netOut, _ = strconv.ParseInt(m["total_net_output_bytes"], 10, 64)
	u, _ := strconv.ParseFloat(m["used_cpu_user"], 64)
	s, _ := strconv.ParseFloat(m["used_cpu_sys"], 64)
	sc.cpu = u + s
	return sc, int64(len(all)) + 2 + int64(len(strconv.Itoa(len(all)))) + 2 + 1
}

// serverDelta is what the server did between two snapshots, less the INFO
// calls the harness made itself.
type serverDelta struct {
	commands  int64
	byCommand map[string]int64
	usec      map[string]int64 // µs in each command
	netOut    int64
	cpu       float64
	available bool
}

func (a serverCounters) delta(b serverCounters) serverDelta {
	if !a.available || !b.available {
		return serverDelta{}
	}
	d := serverDelta{byCommand: make(map[string]int64), usec: make(map[string]int64), netOut: b.netOut - a.netOut, cpu: b.cpu - a.cpu, available: true}
	for k, v := range b.calls {
		if k == "info" {
			continue
		}
		if n := v - a.calls[k]; n > 0 {
			d.byCommand[k] = n
			d.commands += n
		}
	}
	for k, v := range b.usec {
		if n := v - a.usec[k]; n > 0 && k != "info" {
			d.usec[k] = n
		}
	}
	return d
}

// describe lists the commands of a delta, most frequent first: "mget 20, get 3".
func (d serverDelta) describe() string {
	type kv struct {
		k string
		v int64
	}
	var l []kv
	for k, v := range d.byCommand {
		l = append(l, kv{k, v})
	}
	for i := 1; i < len(l); i++ {
		for j := i; j > 0 && (l[j].v > l[j-1].v || l[j].v == l[j-1].v && l[j].k < l[j-1].k); j-- {
			l[j], l[j-1] = l[j-1], l[j]
		}
	}
	var parts []string
	for _, e := range l {
		parts = append(parts, fmt.Sprintf("%s %s", strings.ToUpper(strings.ReplaceAll(e.k, "|", " ")), fmtCount(float64(e.v))))
	}
	return strings.Join(parts, ", ")
}
