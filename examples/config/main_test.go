package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// small is a configuration that runs in about a second.
func small(addr, codec string) config {
	return config{
		Redis:     addr,
		Codec:     codec,
		Instances: 3,
		Readers:   4,
		Rate:      2730,
		Updates:   3,
		Every:     50 * time.Millisecond,
		Reads:     10000,
		GetReads:  5,
		Timeout:   20 * time.Second,
	}
}

func TestDemo(t *testing.T) {
	for _, codec := range []string{"json", "msgpack"} {
		t.Run(codec, func(t *testing.T) { testDemo(t, codec) })
	}
}

func testDemo(t *testing.T, codec string) {
	m := miniredis.RunT(t)
	cfg := small(m.Addr(), codec)
	var out, logs bytes.Buffer
	// The caches log to slog.Default: New's startup advice would show here.
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	res, err := demo(t.Context(), cfg, &out)
	if logs.Len() > 0 {
		t.Errorf("the caches logged:\n%s", logs.String())
	}
	defer func() {
		if t.Failed() {
			t.Logf("output:\n%s", out.String())
		}
	}()
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if want := cfg.Updates + 1; res.Last != want {
		t.Errorf("got last version %d, want %d", res.Last, want)
	}
	if len(res.Instances) != cfg.Instances {
		t.Fatalf("got %d instances, want %d", len(res.Instances), cfg.Instances)
	}
	for i, in := range res.Instances {
		id := i + 1
		if in.Final != res.Last {
			t.Errorf("instance %d: serves v%d at the end, want v%d", id, in.Final, res.Last)
		}
		if in.Requests == 0 {
			t.Errorf("instance %d: served no requests", id)
		}
		if in.Errors != 0 {
			t.Errorf("instance %d: got %d failed requests, want 0", id, in.Errors)
		}
		// After warm-up, requests are served from L1 only: every new
		// version reached the peers in a message.
		if n := in.RedisReads(); n != 0 {
			t.Errorf("instance %d: got %d Redis reads after warm-up (L2.Hits %d, L2.Misses %d), want 0",
				id, n, in.During.L2.Hits, in.During.L2.Misses)
		}
		if in.During.Load.Calls != 0 {
			t.Errorf("instance %d: got %d loads after warm-up, want 0", id, in.During.Load.Calls)
		}
		want := uint64(cfg.Updates)
		if id == 1 {
			want = 0 // the writer stores its own Set
		}
		if in.During.Invalidations.Swapped != want {
			t.Errorf("instance %d: got %d values swapped in, want %d", id, in.During.Invalidations.Swapped, want)
		}
	}
	if n := res.Cost.CacheRedisReads; n != 0 {
		t.Errorf("cost loop: got %d Redis reads, want 0", n)
	}
	// An allocation per read shows as 1 or more; other goroutines'
	// allocations over 10000 reads add far less.
	if a := res.Cost.CacheAllocs; a >= 0.5 {
		t.Errorf("cost loop: got %.2f allocs per L1 read, want 0", a)
	}
	if res.Cost.CacheNs <= 0 || res.Cost.GetNs <= 0 {
		t.Errorf("got %v ns per cache read and %v ns per Redis read, want both positive", res.Cost.CacheNs, res.Cost.GetNs)
	}
}

// TestRun runs the command as main does, with its embedded server.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), []string{"-updates", "2", "-every", "50ms", "-reads", "1000", "-gets", "2"}, &out)
	if err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	lines := strings.Split(out.String(), "\n")
	for id := 1; id <= 3; id++ {
		prefix := fmt.Sprintf("  instance %d: ", id)
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
		if i < 0 || !strings.HasSuffix(lines[i], "; serves v3") {
			t.Errorf("output has no line %q...%q:\n%s", prefix, "; serves v3", out.String())
		}
	}
}

func TestParse(t *testing.T) {
	cfg, err := parse(nil, io.Discard)
	if err != nil {
		t.Fatalf("parse(nil, io.Discard): %v", err)
	}
	if cfg.Updates != 3 || cfg.Instances != 3 || cfg.Redis != "" || cfg.Codec != "json" {
		t.Errorf("got defaults %+v, want 3 updates, 3 instances, no -redis, json", cfg)
	}
	for _, args := range [][]string{
		{"-codec", "gob"},
		{"-instances", "1"},
		{"-readers", "0"},
		{"-rate", "0"},
		{"-updates", "0"},
		{"-every", "-1s"},
		{"-reads", "0"},
		{"-timeout", "0"},
		{"extra"},
	} {
		if _, err := parse(args, io.Discard); err == nil {
			t.Errorf("parse(%q): got nil error, want one", args)
		}
	}
	if _, err := parse([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("parse(-h): got %v, want flag.ErrHelp", err)
	}
	if _, err := parse([]string{"-bogus"}, io.Discard); !errors.Is(err, errBadFlags) {
		t.Errorf("parse(-bogus): got %v, want errBadFlags", err)
	}
}
