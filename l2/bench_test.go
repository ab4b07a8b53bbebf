package l2_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
	"github.com/hybridcache/hybridcache/tier"
)

// Each benchmark runs the Store next to the raw go-redis call it wraps, on
// the same keys, so the Store's overhead reads as a ratio.

// benchKeys writes n keys holding 100-byte values under a prefix unique to b
// and returns them.
func benchKeys(b *testing.B, rdb redis.UniversalClient, n int) []string {
	b.Helper()
	ctx := context.Background()
	prefix := redistest.Prefix(b) + ":"
	value := bytes.Repeat([]byte("x"), 100)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint(prefix, i)
		if err := rdb.Set(ctx, keys[i], value, time.Hour).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for _, k := range keys {
			rdb.Del(context.Background(), k)
		}
	})
	return keys
}

func BenchmarkGet(b *testing.B) {
	rdb := srv.Client(b)
	key := benchKeys(b, rdb, 1)[0]
	ctx := context.Background()
	b.Run("Store", func(b *testing.B) {
		s := l2.New(rdb, l2.Options{})
		b.ReportAllocs()
		for b.Loop() {
			if v, err := s.Get(ctx, []string{key}); err != nil || v[0] == nil {
				b.Fatal(v, err)
			}
		}
	})
	b.Run("Store/NoBound", func(b *testing.B) {
		s := l2.New(rdb, l2.Options{ReadTimeout: -1})
		b.ReportAllocs()
		for b.Loop() {
			if v, err := s.Get(ctx, []string{key}); err != nil || v[0] == nil {
				b.Fatal(v, err)
			}
		}
	})
	b.Run("Raw", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := rdb.Get(ctx, key).Bytes(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGet50(b *testing.B) {
	rdb := srv.Client(b)
	keys := benchKeys(b, rdb, 50)
	ctx := context.Background()
	b.Run("Store", func(b *testing.B) {
		s := l2.New(rdb, l2.Options{})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Get(ctx, keys); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("RawMGET", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := rdb.MGet(ctx, keys...).Result(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWriteIfAbsent50 is a cold page's fill: 50 plain writes, each
// a SET NX, in one pipeline.
func BenchmarkWriteIfAbsent50(b *testing.B) {
	rdb := srv.Client(b)
	keys := benchKeys(b, rdb, 50)
	value := bytes.Repeat([]byte("y"), 100)
	ctx := context.Background()
	b.Run("Store", func(b *testing.B) {
		s := l2.New(rdb, l2.Options{})
		ws := make([]tier.Write, len(keys))
		for i, k := range keys {
			ws[i] = tier.Write{Key: k, Value: value, TTL: time.Hour, If: tier.IfAbsent}
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Write(ctx, ws, tier.Feed{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("RawPipelinedSETNX", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pipe := rdb.Pipeline()
			for _, k := range keys {
				pipe.SetNX(ctx, k, value, time.Hour)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkClusterGet50(b *testing.B) {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.ClusterAddrs(b)})
	b.Cleanup(func() { rdb.Close() })
	keys := benchKeys(b, rdb, 50)
	ctx := context.Background()
	b.Run("Store", func(b *testing.B) {
		s := l2.New(rdb, l2.Options{})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Get(ctx, keys); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A plain MGET fails with CROSSSLOT; the raw baseline is a pipeline of
	// GETs.
	b.Run("RawPipelinedGET", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pipe := rdb.Pipeline()
			for _, k := range keys {
				pipe.Get(ctx, k)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
