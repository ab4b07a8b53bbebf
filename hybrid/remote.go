package hybrid

import (
	"context"
	"time"

	"github.com/hybridcache/hybridcache/internal/tier"
)

// Remote is the shared second tier: a byte store that every instance reads
// and writes, such as *l2.Store over Redis. Keys arrive namespaced; the
// Remote may prepend a prefix of its own (see RemoteInfo). Implementations
// must be safe for concurrent use. hybridtest.TestRemote checks one
// against this contract.
//
// What a deployment cannot do is an error wrapping errors.ErrUnsupported
// (for example a log on Redis Cluster), never a missing method.
type Remote interface {
	// Info describes the Remote. The cache calls it once, in New.
	Info() RemoteInfo

	// Get returns the stored bytes of each key, in order, nil for a
	// missing key, in one round trip (per node) where it can. A miss is
	// not an error.
	Get(ctx context.Context, keys []string) ([][]byte, error)

	// Write makes each write of ws, in order, announcing on f, in one
	// round trip (per node) where it can; each write is atomic with its
	// message, log entry and lease release, the batch is not, but for a
	// batch announced as a whole by f.Msg where Info().AtomicBatch holds
	// (see Feed). stored[i] reports whether ws[i] stored its value. After
	// an error, the writes it reports stored were made; the others may
	// have been.
	Write(ctx context.Context, ws []Write, f Feed) (stored []bool, err error)

	// TakeLeases takes a lease under token for ttl (at least 1ms) on each
	// of keys that no one holds, in one round trip (per node) where it
	// can. guards[i] is the key that keys[i] is a lease for: a taker
	// learns what it held right after the take, so that it sees a value
	// stored by a holder that released between its read and its take. A
	// lease found held is marked as asked for, so that its holder's
	// release announces (see Write.Lease, ReleaseLeases).
	TakeLeases(ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]Lease, error)

	// ExtendLeases sets to ttl the lifetime of each lease of keys still
	// held under token, and reports which were.
	ExtendLeases(ctx context.Context, keys []string, token string, ttl time.Duration) (held []bool, err error)

	// ReleaseLeases deletes each lease of keys still held under token (one
	// taken over by another holder stays), then publishes msg on
	// f.Channel if someone may wait for one of them (it was asked for, or
	// is no longer held under token).
	ReleaseLeases(ctx context.Context, keys []string, token string, msg []byte, f Feed) error

	// ReadLog returns up to max entries of the log named log after the
	// position after, oldest first. With after empty it opens the log:
	// it creates the log if missing and returns no entries, only Last.
	// Positions compare as Redis stream ids ("<ms>-<seq>").
	ReadLog(ctx context.Context, log, after string, max int) (LogPage, error)
}

// The request and result types of Remote, documented where they are
// defined.
type (
	// RemoteInfo describes a Remote: its key prefix, its read bound, whether
	// it keeps a log, and advice for the startup log.
	RemoteInfo = tier.Info
	// Write is one write of Remote.Write.
	Write = tier.Write
	// Cond is the condition of a Write: Always, IfAbsent, IfEqual, IfNewer,
	// IfSeq.
	Cond = tier.Cond
	// Feed is where a batch of writes announces: channel and log.
	Feed = tier.Feed
	// Lease is one key's result of Remote.TakeLeases.
	Lease = tier.Lease
	// LogPage is what Remote.ReadLog found.
	LogPage = tier.LogPage
)

// The conditions of a Write.
const (
	Always   = tier.Always
	IfAbsent = tier.IfAbsent
	IfEqual  = tier.IfEqual
	IfNewer  = tier.IfNewer
	IfSeq    = tier.IfSeq
)
