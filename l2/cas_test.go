package l2_test

import (
	"context"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/l2"
)

var _ hybrid.CompareAndSetter = (*l2.Store)(nil)

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
