package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain runs the test binary as a reader when run starts it as one.
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "reader" {
		if err := runReader(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "reader:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// lockedBuffer is a buffer the readers' stderr copiers may write at once.
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

// TestRun runs the demonstration on an embedded Redis in each mode and
// checks that every change reached both readers as the mode says, and that
// no instance logged a warning (the startup advisor's included).
func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  config
		want string
	}{
		{"inline", config{Inline: true}, "6 swapped in from the message, 0 re-read from Redis, 0 neither"},
		{"key-only", config{Inline: false}, "0 swapped in from the message, 6 re-read from Redis, 0 neither"},
		{"poll", config{Inline: true, Poll: 100 * time.Microsecond}, "6 swapped in from the message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			var errOut lockedBuffer
			// Instance 1 runs in this process, and logs to slog.Default.
			defer slog.SetDefault(slog.Default())
			slog.SetDefault(slog.New(slog.NewTextHandler(&errOut, nil)))
			err := run(t.Context(), tc.cfg, 3, &out, &errOut)
			if err != nil {
				t.Fatalf("run: %v\n%s\nstderr:\n%s", err, out.String(), errOut.String())
			}
			for _, want := range []string{tc.want, "2 of 2 readers closed their cache and bus and exited"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			if s := errOut.String(); s != "" {
				t.Errorf("the instances logged:\n%s", s)
			}
		})
	}
}
