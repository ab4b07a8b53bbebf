package redistest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// StartOwn starts a redis-server for tb alone, on a free loopback port,
// with the configuration directives args given after the defaults of
// Start (so they override them: "--appendonly", "yes" turns the AOF on).
// The test may Kill, Restart, Signal and Wipe it; it is killed and its
// directory removed when tb ends. Without a redis-server on PATH tb is
// skipped, or fails under HYBRID_REQUIRE_REDIS=1.
func StartOwn(tb testing.TB, args ...string) *Server {
	tb.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if RequireReal() {
			tb.Fatal("HYBRID_REQUIRE_REDIS=1 but no redis-server on PATH")
		}
		tb.Skip("needs a redis-server on PATH")
	}
	s, err := startReal(path, args)
	if err != nil {
		tb.Fatalf("redistest: start redis-server %v: %v", args, err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Wipe removes the data files of a server that Kill stopped, so that
// Restart brings it back empty, as a cache server without persistence
// comes back after a crash.
func (s *Server) Wipe() error {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running || s.dir == "" {
		return errNotStopped
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// errNotStopped is Wipe's error for a server still running, or never
// started here.
var errNotStopped = errors.New("redistest: Wipe: no stopped redis-server started here")
