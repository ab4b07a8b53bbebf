// Package redistest starts a throwaway Redis for this module's tests.
//
// Start picks, in order: the server named by HYBRID_REDIS_ADDR; a redis-server
// from PATH, started on a free loopback port with no persistence; an embedded
// miniredis. With HYBRID_REQUIRE_REDIS=1 the last choice is an error instead,
// so CI never passes on the fallback by accident.
//
// Tests share one server per package run and keep apart by key prefix and
// channel (see Prefix); they never FLUSHDB.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Server is a Redis that a test package can use.
type Server struct {
	// Addr is host:port of the server.
	Addr string

	mu    sync.Mutex
	cmd   *exec.Cmd // the redis-server process we started, if any
	dir   string
	port  int
	mini  *miniredis.Miniredis
	extra bool     // HYBRID_REDIS_ADDR: not ours, never killed
	args  []string // more arguments for redis-server, after the defaults (StartWith, StartOwn)
}

// RequireReal reports whether HYBRID_REQUIRE_REDIS asks for a real server.
func RequireReal() bool { return os.Getenv("HYBRID_REQUIRE_REDIS") == "1" }

// Start returns a Redis for the package's tests. Call Close when done
// (usually from TestMain).
func Start() (*Server, error) {
	if addr := os.Getenv("HYBRID_REDIS_ADDR"); addr != "" {
		return &Server{Addr: addr, extra: true}, nil
	}
	if path, err := exec.LookPath("redis-server"); err == nil {
		return startReal(path, nil)
	}
	if RequireReal() {
		return nil, errors.New("redistest: HYBRID_REQUIRE_REDIS=1 but no redis-server on PATH and HYBRID_REDIS_ADDR unset")
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("redistest: start miniredis: %w", err)
	}
	return &Server{Addr: m.Addr(), mini: m}, nil
}

// StartWith starts a redis-server of its own with more configuration, given
// as command-line arguments ("--maxmemory", "4mb", say), for a test that
// needs a server set up unlike the package's. It never falls back to
// miniredis nor to HYBRID_REDIS_ADDR: without a redis-server on PATH it
// returns an error. Call Close when done.
func StartWith(args ...string) (*Server, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: no redis-server on PATH: %w", err)
	}
	return startReal(path, args)
}

// startReal starts the redis-server at path on a free port, with args
// after the usual arguments.
func startReal(path string, args []string) (*Server, error) {
	s := &Server{args: args}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.port = port
		if lastErr = s.spawn(path); lastErr == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("redistest: start redis-server: %w", lastErr)
}

// Main runs a test package against a fresh server: it starts one, stores it
// in *s, runs the tests and stops it. Use it from TestMain.
func Main(m *testing.M, s **Server) {
	srv, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*s = srv
	code := m.Run()
	srv.Close()
	os.Exit(code)
}

func (s *Server) spawn(path string) error {
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			return err
		}
		s.dir = dir
	}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	args := append([]string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--protected-mode", "no",
		"--loglevel", "warning",
	}, s.args...)
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server on port %d exited: %v", s.port, err)
		default:
		}
		if ping(s.Addr) == nil {
			s.mu.Lock()
			s.cmd = cmd
			s.mu.Unlock()
			// Reap the process in the background so Kill can wait for it.
			go func() { <-exited }()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("redis-server on port %d did not answer PING", s.port)
}

func ping(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Real reports whether s is a real redis-server (started here or named by
// HYBRID_REDIS_ADDR), not the embedded fallback.
func (s *Server) Real() bool { return s.mini == nil }

// Owned reports whether this package started the server (and so may kill
// and restart it).
func (s *Server) Owned() bool { return s.cmd != nil }

// NeedReal skips tb when only the embedded fallback is there; under
// HYBRID_REQUIRE_REDIS=1 Start has already failed in that case.
func (s *Server) NeedReal(tb testing.TB) {
	tb.Helper()
	if !s.Real() {
		tb.Skip("needs a real redis-server (kill, restart or CLIENT commands)")
	}
}

// NeedOwned skips tb unless this package started the server itself, so it
// may kill and restart it. With HYBRID_REQUIRE_REDIS=1 it fails instead.
func (s *Server) NeedOwned(tb testing.TB) {
	tb.Helper()
	if s.Owned() {
		return
	}
	if RequireReal() && !s.extra {
		tb.Fatal("HYBRID_REQUIRE_REDIS=1 but no redis-server was started")
	}
	tb.Skip("needs a redis-server started by the test (not HYBRID_REDIS_ADDR or miniredis)")
}

// Client returns a go-redis client for s, closed when tb ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	tb.Cleanup(func() { c.Close() })
	return c
}

// Kill stops the server with SIGKILL and waits until its port refuses
// connections. Only for a server that Owned reports.
func (s *Server) Kill() error {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return errors.New("redistest: Kill: no redis-server started here")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.Addr, 100*time.Millisecond)
		if err != nil {
			return nil
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	return errors.New("redistest: Kill: server still answers")
}

// Signal sends sig to the server, such as SIGSTOP and SIGCONT to stall it
// and let it go on. Only for a server that Owned reports.
func (s *Server) Signal(sig os.Signal) error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return errors.New("redistest: Signal: no redis-server started here")
	}
	return cmd.Process.Signal(sig)
}

// Restart starts the server again on the same port after Kill.
func (s *Server) Restart() error {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		if lastErr = s.spawn(path); lastErr == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return lastErr
}

// Close stops a server that Start started.
func (s *Server) Close() {
	if s.mini != nil {
		s.mini.Close()
	}
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// Prefix returns a string unique to this test, for keys, namespaces and
// channels, so tests sharing one server never see each other's data.
func Prefix(tb testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	// No ':' nor glob character: hybrid.New refuses them in a Namespace.
	name := strings.NewReplacer("/", "_", " ", "_", ":", "_", "*", "_", "?", "_", "[", "_", "]", "_", `\`, "_").Replace(tb.Name())
	return "t." + name + "." + hex.EncodeToString(b[:])
}

// ClusterAddrs returns the seed addresses of a Redis Cluster named by
// HYBRID_REDIS_CLUSTER (comma separated), as started by scripts/cluster.sh.
// Without it the test is skipped, or fails under HYBRID_REQUIRE_CLUSTER=1.
func ClusterAddrs(tb testing.TB) []string {
	tb.Helper()
	v := os.Getenv("HYBRID_REDIS_CLUSTER")
	if v == "" {
		if os.Getenv("HYBRID_REQUIRE_CLUSTER") == "1" {
			tb.Fatal("HYBRID_REQUIRE_CLUSTER=1 but HYBRID_REDIS_CLUSTER is unset")
		}
		tb.Skip("no Redis Cluster: run scripts/cluster.sh start and set HYBRID_REDIS_CLUSTER")
	}
	return strings.Split(v, ",")
}
