package l2_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/l2"
)

var (
	_ hybrid.CompareAndSetter = (*l2.Store)(nil)
	_ hybrid.Replacer         = (*l2.Store)(nil)
)

func TestCompareAndSet(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	if err := s.Set(ctx, "k", []byte("old"), time.Minute); err != nil {
		t.Fatal(err)
	}
	ok, err := s.CompareAndSet(ctx, "k", []byte("other"), []byte("new"), time.Minute)
	if err != nil || ok {
		t.Fatalf("CompareAndSet with a wrong old: got %v %v, want false nil", ok, err)
	}
	if v, _, _ := s.Get(ctx, "k"); string(v) != "old" {
		t.Fatalf("after a failed CompareAndSet: got %q, want old", v)
	}
	ok, err = s.CompareAndSet(ctx, "k", []byte("old"), []byte("new"), time.Minute)
	if err != nil || !ok {
		t.Fatalf("CompareAndSet with the right old: got %v %v, want true nil", ok, err)
	}
	if v, _, _ := s.Get(ctx, "k"); string(v) != "new" {
		t.Fatalf("after CompareAndSet: got %q, want new", v)
	}
	// A missing key holds nothing: no old matches it.
	ok, err = s.CompareAndSet(ctx, "missing", []byte(""), []byte("x"), time.Minute)
	if err != nil || ok {
		t.Fatalf("CompareAndSet on a missing key: got %v %v, want false nil", ok, err)
	}
}

func TestReplaceAndPublish(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	channel := prefix + "ch"
	ps := subscribe(t, srv.Client(t), channel)
	msgs := receive(ps, 3)
	if err := s.Set(ctx, "k", []byte("old"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// A wrong old: nothing replaced, the message goes out all the same.
	ok, err := s.ReplaceAndPublish(ctx, "k", []byte("other"), []byte("new"), channel, []byte("m1"))
	if err != nil || ok {
		t.Fatalf("ReplaceAndPublish with a wrong old: got %v %v, want false nil", ok, err)
	}
	if v, _, _ := s.Get(ctx, "k"); string(v) != "old" {
		t.Fatalf("after a failed ReplaceAndPublish: got %q, want old", v)
	}
	ok, err = s.ReplaceAndPublish(ctx, "k", []byte("old"), []byte("new"), channel, []byte("m2"))
	if err != nil || !ok {
		t.Fatalf("ReplaceAndPublish with the right old: got %v %v, want true nil", ok, err)
	}
	if v, _, _ := s.Get(ctx, "k"); string(v) != "new" {
		t.Fatalf("after ReplaceAndPublish: got %q, want new", v)
	}
	// The lifetime is kept, not reset or removed.
	if pttl, err := rdb.PTTL(ctx, prefix+"k").Result(); err != nil || pttl <= 8*time.Second || pttl > 10*time.Second {
		t.Errorf("PTTL after ReplaceAndPublish = %v, %v; want the 10 s set before, in (8s, 10s]", pttl, err)
	}
	// A missing key holds nothing: no old matches it, and nothing is created.
	ok, err = s.ReplaceAndPublish(ctx, "missing", []byte(""), []byte("x"), channel, []byte("m3"))
	if err != nil || ok {
		t.Fatalf("ReplaceAndPublish on a missing key: got %v %v, want false nil", ok, err)
	}
	if _, found, _ := s.Get(ctx, "missing"); found {
		t.Error("ReplaceAndPublish created a missing key")
	}
	// An empty channel publishes nothing.
	if _, err := s.ReplaceAndPublish(ctx, "k", []byte("new"), []byte("newer"), "", []byte("unseen")); err != nil {
		t.Fatal(err)
	}
	if got, want := wait(t, msgs, 3), []string{"m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
}
