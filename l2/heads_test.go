package l2_test

import (
	"github.com/hybridcache/hybridcache/tier"
	"strings"
	"testing"

	"github.com/hybridcache/hybridcache/l2"
)

var _ tier.HeadReader = (*l2.Store)(nil)

// TestHeads reads the first bytes of values of several lengths, and a
// missing key, in one pipeline of GETRANGE.
func TestHeads(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	long := strings.Repeat("x", 100)
	for k, v := range map[string]string{"long": long, "short": "abc", "exact": "0123456789"} {
		if err := rdb.Set(ctx, prefix+k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var c counter
	rdb.AddHook(&c)
	got, err := s.Heads(ctx, []string{"long", "missing", "short", "exact"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{long[:10], "", "abc", "0123456789"}
	if len(got) != len(want) {
		t.Fatalf("Heads returned %d values, want %d", len(got), len(want))
	}
	for i, w := range want {
		if string(got[i]) != w || (w == "") != (got[i] == nil) {
			t.Errorf("Heads[%d] = %q (nil %v), want %q", i, got[i], got[i] == nil, w)
		}
	}
	if got, want := c.String(), "commands [], pipelines [[getrange getrange getrange getrange]]"; got != want {
		t.Errorf("sent %s; want %s", got, want)
	}

	c.reset()
	if got, err := s.Heads(ctx, nil, 10); err != nil || got != nil {
		t.Errorf("Heads of no keys = %v, %v; want nil, nil", got, err)
	}
	if cmds, pipes := c.counts(); cmds+pipes != 0 {
		t.Errorf("Heads of no keys sent %s; want nothing", c.String())
	}
	if _, err := s.Heads(ctx, []string{"long"}, 0); err == nil {
		t.Error("Heads with length 0: no error")
	}
}

// TestHeadsWrongType fails the whole call, naming it, when a key holds
// another type, as Get does.
func TestHeadsWrongType(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	if err := rdb.HSet(ctx, prefix+"h", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Heads(ctx, []string{"a", "h"}, 19)
	if err == nil || !strings.Contains(err.Error(), "l2: heads 2 keys") {
		t.Fatalf("Heads over a hash = %v, %v; want an error naming heads", got, err)
	}
	if got != nil {
		t.Errorf("Heads returned %v with its error, want nil", got)
	}
}
