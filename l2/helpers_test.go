package l2_test

import (
	"context"
	"time"

	"github.com/hybridcache/hybridcache/internal/tier"
	"github.com/hybridcache/hybridcache/l2"
)

// remote is the contract a Store implements: hybrid.Remote, as
// internal/tier/CONTRACT.go.txt states it (package hybrid is not imported,
// so that these tests build while it moves over).
type remote interface {
	Info() tier.Info
	Get(ctx context.Context, keys []string) ([][]byte, error)
	Write(ctx context.Context, ws []tier.Write, f tier.Feed) (stored []bool, err error)
	TakeLeases(ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]tier.Lease, error)
	ExtendLeases(ctx context.Context, keys []string, token string, ttl time.Duration) (held []bool, err error)
	ReleaseLeases(ctx context.Context, keys []string, token string, msg []byte, f tier.Feed) error
	ReadLog(ctx context.Context, log, after string, max int) (tier.LogPage, error)
}

var _ remote = (*l2.Store)(nil)

// The functions below are the calls of the Store's former API, as package
// hybrid made them, each as one Write (or other call) of the contract:
// the tests that checked them check the mapping.

// get is Get of one key: the value, and whether it was found.
func get(ctx context.Context, s *l2.Store, key string) ([]byte, bool, error) {
	vs, err := s.Get(ctx, []string{key})
	if err != nil {
		return nil, false, err
	}
	return vs[0], vs[0] != nil, nil
}

// write makes the one write w on f, and reports whether it stored.
func write(ctx context.Context, s *l2.Store, w tier.Write, f tier.Feed) (bool, error) {
	stored, err := s.Write(ctx, []tier.Write{w}, f)
	if err != nil {
		return false, err
	}
	return stored[0], nil
}

func set(ctx context.Context, s *l2.Store, key string, value []byte, ttl time.Duration) error {
	_, err := write(ctx, s, tier.Write{Key: key, Value: value, TTL: ttl}, tier.Feed{})
	return err
}

func setIfAbsent(ctx context.Context, s *l2.Store, key string, value []byte, ttl time.Duration) (bool, error) {
	return write(ctx, s, tier.Write{Key: key, Value: value, TTL: ttl, If: tier.IfAbsent}, tier.Feed{})
}

func setManyIfAbsent(ctx context.Context, s *l2.Store, keys []string, values [][]byte, ttls []time.Duration) ([]bool, error) {
	ws := make([]tier.Write, len(keys))
	for i, k := range keys {
		ws[i] = tier.Write{Key: k, Value: values[i], TTL: ttls[i], If: tier.IfAbsent}
	}
	return s.Write(ctx, ws, tier.Feed{})
}

func compareAndSet(ctx context.Context, s *l2.Store, key string, old, value []byte, ttl time.Duration) (bool, error) {
	return write(ctx, s, tier.Write{Key: key, Value: value, TTL: ttl, If: tier.IfEqual, Old: old}, tier.Feed{})
}

func setAndPublish(ctx context.Context, s *l2.Store, key string, value []byte, ttl time.Duration, channel string, msg []byte) error {
	_, err := write(ctx, s, tier.Write{Key: key, Value: value, TTL: ttl, Msg: msg}, tier.Feed{Channel: channel})
	return err
}

// replaceAndPublish publishes msg whether or not it replaced.
func replaceAndPublish(ctx context.Context, s *l2.Store, key string, old, value []byte, channel string, msg []byte) (bool, error) {
	return write(ctx, s, tier.Write{Key: key, Value: value, If: tier.IfEqual, Old: old, KeepTTL: true, Msg: msg, Else: msg},
		tier.Feed{Channel: channel})
}

func setIfNewerAndPublish(ctx context.Context, s *l2.Store, key string, value []byte, ttl time.Duration, channel string, msg []byte, stampAt int) (bool, error) {
	return write(ctx, s, tier.Write{Key: key, Value: value, TTL: ttl, If: tier.IfNewer, StampAt: stampAt, Msg: msg},
		tier.Feed{Channel: channel})
}

// orEmpty returns b, or an empty slice for nil: the former log calls
// always published and logged.
func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func setPublishAndLog(ctx context.Context, s *l2.Store, key string, value []byte, ttl time.Duration, channel string, msg []byte, log string, entry []byte, maxLen int) error {
	_, err := write(ctx, s, tier.Write{Key: key, Value: value, TTL: ttl, Msg: orEmpty(msg), Log: orEmpty(entry)},
		tier.Feed{Channel: channel, Log: log, LogLen: maxLen})
	return err
}

func replacePublishAndLog(ctx context.Context, s *l2.Store, key string, old, value []byte, channel string, msg []byte, log string, entry []byte, maxLen int) (bool, error) {
	return write(ctx, s, tier.Write{Key: key, Value: value, If: tier.IfEqual, Old: old, KeepTTL: true,
		Msg: orEmpty(msg), Else: orEmpty(msg), Log: orEmpty(entry)}, tier.Feed{Channel: channel, Log: log, LogLen: maxLen})
}

func setIfNewerPublishAndLog(ctx context.Context, s *l2.Store, key string, value []byte, ttl time.Duration, channel string, msg []byte, stampAt int, log string, entry []byte, maxLen int) (bool, error) {
	return write(ctx, s, tier.Write{Key: key, Value: value, TTL: ttl, If: tier.IfNewer, StampAt: stampAt,
		Msg: orEmpty(msg), Log: orEmpty(entry)}, tier.Feed{Channel: channel, Log: log, LogLen: maxLen})
}

// openLog is ReadLog with no position: the log's last position.
func openLog(ctx context.Context, s *l2.Store, log string) (string, error) {
	page, err := s.ReadLog(ctx, log, "", 0)
	return page.Last, err
}

// readLog is ReadLog, with "" for the log's start ("0-0").
func readLog(ctx context.Context, s *l2.Store, log, after string, max int) ([][]byte, []string, bool, error) {
	if after == "" {
		after = "0-0"
	}
	page, err := s.ReadLog(ctx, log, after, max)
	return page.Entries, page.Positions, page.Complete, err
}

// takeLeases is TakeLeases, its results by field.
func takeLeases(ctx context.Context, s *l2.Store, keys, guards []string, token string, ttl time.Duration) (taken []bool, left []time.Duration, values [][]byte, holders []string, err error) {
	ls, err := s.TakeLeases(ctx, keys, guards, token, ttl)
	if err != nil || ls == nil {
		return nil, nil, nil, nil, err
	}
	for _, l := range ls {
		taken = append(taken, l.Taken)
		left = append(left, l.Left)
		values = append(values, l.Value)
		holders = append(holders, l.Holder)
	}
	return taken, left, values, holders, nil
}

func releaseLeases(ctx context.Context, s *l2.Store, keys []string, token, channel string, msg []byte) error {
	return s.ReleaseLeases(ctx, keys, token, msg, tier.Feed{Channel: channel})
}

// fillAndRelease is a lease holder's write: where key holds nothing (old
// nil) or exactly old; it publishes stored or unstored if someone may wait
// for the lease.
func fillAndRelease(ctx context.Context, s *l2.Store, key string, old, value []byte, ttl time.Duration, lease, token, channel string, stored, unstored []byte) (bool, error) {
	w := tier.Write{Key: key, Value: value, TTL: ttl, If: tier.IfAbsent, Lease: lease, Token: token, Msg: stored, Else: unstored}
	if old != nil {
		w.If, w.Old = tier.IfEqual, old
	}
	return write(ctx, s, w, tier.Feed{Channel: channel})
}
