package l2

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/redistest"
)

func TestSlot(t *testing.T) {
	tests := []struct {
		key  string
		want uint16
	}{
		{"", 0},
		{"123456789", 0x31c3 % slotCount}, // the CRC16/XMODEM check value
		{"foo", 12182},
		{"bar", 5061},
		{"user:1000", 1649},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"user1000", 3443},
		{"foo{}{bar}", 8363},    // empty first tag: the whole key is hashed
		{"foo{{bar}}zap", 4015}, // the tag is "{bar"
		{"foo{bar}{zap}", 5061}, // the tag is "bar"
		{"{bar", 4015},          // no closing brace: the whole key
		{"a{b", 13340},
	}
	for _, tt := range tests {
		if got := slot(tt.key); got != tt.want {
			t.Errorf("slot(%q): got %d, want %d", tt.key, got, tt.want)
		}
	}
}

func TestSplit(t *testing.T) {
	s := &Store{topo: cluster}
	keys := []string{"{a}1", "b", "{a}2", "c", "b", "{a}3"}
	groups := s.split(keys)
	got := fmt.Sprint(groups)
	// Groups come in slot order: slot("b") = 3300, slot("c") = 7365,
	// slot("a") = 15495.
	want := "[{[b b] [1 4]} {[c] [3]} {[{a}1 {a}2 {a}3] [0 2 5]}]"
	if got != want {
		t.Errorf("split(%q):\n got %s\nwant %s", keys, got, want)
	}
	if g := s.split([]string{"{x}1", "{x}2"}); g != nil {
		t.Errorf("split of one slot: got %v, want nil (one command)", g)
	}
	if g := (&Store{topo: single}).split(keys); g != nil {
		t.Errorf("split on one server: got %v, want nil (one command)", g)
	}
	if g := (&Store{topo: ring}).split(keys); len(g) != len(keys) {
		t.Errorf("split with a Ring: got %d groups, want %d (one per key)", len(g), len(keys))
	}
}

func TestClusterSlotMatchesServer(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	rdb := redis.NewClient(&redis.Options{Addr: addrs[0]})
	t.Cleanup(func() { rdb.Close() })
	keys := []string{"", "{", "}", "{}", "{}x", "x{}", "{{}}", "a{b}c{d}e", "ключ", "\x00\xff"}
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "ab{}:xyz\x00\xfe"
	for range 2000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		keys = append(keys, string(b))
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.ClusterKeySlot(t.Context(), k)
	}
	if _, err := pipe.Exec(t.Context()); err != nil {
		t.Fatalf("CLUSTER KEYSLOT: %v", err)
	}
	for i, k := range keys {
		if got, want := slot(k), cmds[i].Val(); int64(got) != want {
			t.Errorf("slot(%q): got %d, want %d (CLUSTER KEYSLOT)", k, got, want)
		}
	}
}
