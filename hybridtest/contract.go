package hybridtest

import (
	"context"
	"time"

	"github.com/hybridcache/hybridcache/internal/tier"
)

// Contract is the shared tier's contract: the method set of the interface
// through which package hybrid reads and writes the shared tier
// (hybrid.Remote), documented there and with the request and result types
// in package internal/tier. Remote implements it, as l2.Store does;
// TestRemote checks an implementation.
type Contract interface {
	// Info describes the Remote.
	Info() tier.Info
	// Get returns the stored bytes of each key, in order, nil for a
	// missing key.
	Get(ctx context.Context, keys []string) ([][]byte, error)
	// Write makes each write of ws, in order, announcing on f, and reports
	// which stored their value.
	Write(ctx context.Context, ws []tier.Write, f tier.Feed) (stored []bool, err error)
	// TakeLeases takes a lease under token for ttl on each of keys that no
	// one holds.
	TakeLeases(ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]tier.Lease, error)
	// ExtendLeases sets to ttl the lifetime of each lease of keys still
	// held under token, and reports which were.
	ExtendLeases(ctx context.Context, keys []string, token string, ttl time.Duration) (held []bool, err error)
	// ReleaseLeases deletes each lease of keys still held under token, then
	// publishes msg on f.Channel if someone may wait for one of them.
	ReleaseLeases(ctx context.Context, keys []string, token string, msg []byte, f tier.Feed) error
	// ReadLog returns up to max entries of the log named log after the
	// position after; with after empty, it opens the log.
	ReadLog(ctx context.Context, log, after string, max int) (tier.LogPage, error)
}
