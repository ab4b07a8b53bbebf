package hybrid

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/internal/keyslot"
	"github.com/hybridcache/hybridcache/tier"
)

// Options configures a Cache. The zero value is an L1-only cache with the
// defaults below. The fields come in groups, each under a "--- name ---"
// line: Essentials is what most caches set (the package doc says which a
// production setup needs); the rest tune lifetimes, keys and values,
// resilience, leases, the bus and its loss, background refresh,
// observability and warm start (docs/usage.md and docs/operations.md say
// more of each).
type Options struct {
	// --- Essentials ---
	//
	// Namespace names this cache's keys in the shared tier ("Namespace:key")
	// and its bus channel; every instance of one logical cache uses the
	// same. Required with a Remote or a Bus. No ':' and no glob character
	// ('*', '?', '[', ']', '\'), so that no two namespaces share a key.
	Namespace string
	// Remote is the shared tier, such as *l2.Store (package tier holds its
	// contract, tier.Remote). nil: L1 only.
	Remote tier.Remote
	// Bus carries invalidations between instances, such as *invalidate.Bus;
	// it must deliver what the Remote publishes. nil: other instances keep
	// their copy until LocalTTL ends.
	Bus Bus
	// Secret signs bus messages (HMAC-SHA256). With it, a Set's message
	// carries the value (up to InlineMaxBytes) and peers swap it in;
	// unsigned messages only drop keys. nil: peers drop the key.
	Secret []byte
	// Codec encodes values for the shared tier. Default: codec.JSON{}.
	Codec Codec
	// LocalMaxBytes bounds L1 by the encoded size of its values, plus key
	// and a fixed overhead per entry. Default: 64 MiB.
	LocalMaxBytes int64

	// --- Lifetimes, and per-key defaults ---
	//
	// The entry settings among the fields (these four, FailSafeMaxAge,
	// FailSafeThrottle, SoftTimeout, LoadTimeout, LoadLease, EagerRefresh,
	// XFetchBeta) are the cache's defaults, which PerKey, a call's
	// EntryOptions and the load's LoadSettings override (see EntryOption).
	//
	// TTL is how long a value lives in the shared tier. Default: 10 minutes.
	TTL time.Duration
	// LocalTTL is how long a value lives in L1. With a Remote, it is cut to
	// the TTL the value is written with, never refused, whichever level
	// set either (EntryOption has the levels and their precedence).
	// Default: the smaller of TTL and 1 minute (cut at about 49.7 days).
	LocalTTL time.Duration
	// NegativeTTL is how long an absence is remembered in both tiers when
	// load returns an error wrapping ErrNotFound. Default: 0, not remembered.
	NegativeTTL time.Duration
	// TTLJitter shortens each write's lifetimes by a random fraction of up
	// to TTLJitter, in [0, 1), so that entries written together do not
	// expire together. Default: 0.
	TTLJitter float64
	// PerKey, if set, gives the EntryOptions that apply to key by
	// default, before a call's own (see EntryOption), so that a cache holding several kinds
	// of keys need not repeat them at every call: they shape what fills
	// and Sets write, and the L1 lifetime of what is read from the shared
	// tier or a message. It is called on misses and writes, never on an L1
	// hit, and must be fast and safe for concurrent use. Options it gives
	// that a call would refuse fail the call. In GetOrCreateMany they apply
	// key by key to what is stored; the options about the load itself
	// (timeouts, lease) are the call's. WithSkip is refused here: it is
	// per call. Default: nil, none.
	PerKey func(key string) []EntryOption

	// --- Keys and values ---
	//
	// MaxKeyBytes is the longest key accepted (else ErrKeyTooLong).
	// Default: 1024.
	MaxKeyBytes int
	// MaxValueBytes is the largest encoded value stored: a larger loaded
	// value is returned but not stored; Set returns ErrValueTooLarge.
	// Default: 1 MiB.
	MaxValueBytes int
	// CompressAbove stores encoded values of at least this many bytes
	// S2-compressed when that is shorter. Default: 0, off.
	CompressAbove int
	// CopyOnRead gives every caller its own copy of a value (its Clone()
	// V method, else a Codec round trip). Default: false, values are shared
	// and must not be modified.
	CopyOnRead bool

	// --- Resilience: timeouts, fail-safe, bounds, breaker, queued writes ---
	//
	// LoadTimeout bounds one shared fill, its shared-tier read and its
	// load, whose ctx it cancels; no caller's leaving cancels a fill.
	// Default: 0, no bound but Close.
	LoadTimeout time.Duration
	// FailSafeMaxAge turns fail-safe on: values are kept this long past
	// their lifetime, and served instead of a load's error (or timeout).
	// Default: 0, off.
	FailSafeMaxAge time.Duration
	// FailSafeThrottle is how long a stale value served by fail-safe is
	// served before load is tried again. Default: 30 seconds.
	FailSafeThrottle time.Duration
	// SoftTimeout, with fail-safe, is how long callers wait for a load
	// when a stale value is at hand; the load goes on and updates the
	// cache. Default: 0, none.
	SoftTimeout time.Duration
	// MaxConcurrentLoads bounds the load calls running at once (a batch
	// load is one); a fill beyond it waits, and callers with a fail-safe
	// value get it at once. Default: 0, no bound.
	MaxConcurrentLoads int
	// BreakerThreshold is how many shared-tier failures in a row open the
	// breaker, which keeps calls away for BreakerOpenFor. Default: 0, none.
	BreakerThreshold int
	// BreakerOpenFor is how long the breaker stays open before one call
	// probes. Default: 5 seconds.
	BreakerOpenFor time.Duration
	// QueueWrites queues, up to this many, writes that fail because the
	// shared tier cannot be reached, applies them to L1, and replays them
	// when it answers, never over a newer value; the call returns an error
	// wrapping ErrQueued. A queued Set whose key the shared tier holds
	// nothing for when it is replayed (restarted empty, or evicted the key,
	// perhaps a newer Delete's tombstone) is replayed as a delete: every
	// instance, this one too, loads the key again. Default: 0, off.
	QueueWrites int

	// --- Leases: one load per key across the fleet ---
	//
	// LoadLease turns on one load per key across the fleet: the fill that
	// takes a lease on a key cold in both tiers, for this long (kept alive
	// while it loads), loads it; the others wait for its value. Needs a
	// Remote and a Bus; 10 ms to 24 hours (docs/leases.md). Default: 0, off.
	LoadLease time.Duration
	// LeaseWait bounds the wait for another instance's lease before
	// loading here. At most 24 hours. Default: 5 seconds.
	LeaseWait time.Duration

	// --- Bus and loss: the messages, and a lost bus ---
	//
	// Channel is the bus channel. Default: "hybridcache:" + the Remote's
	// key prefix + Namespace.
	Channel string
	// InlineMaxBytes is the largest encoded value a message carries
	// (signed, with Secret): the peers that hold the key swap it in. A
	// larger value's message names the key only, and the peers drop their
	// copy and read the shared tier at their next read of it. It is the
	// switch between swap and drop: negative drops always. Swap keeps the
	// peers' hits when they read again what is written; drop's message
	// names the key only (about 130 bytes in bench/ scenario 12), and pays
	// when values run to kilobytes, instances are many and the bus's bytes
	// or the peers' decoding cost more than a read of the shared tier
	// after each write (docs/usage.md, "Swap or drop"). Default: 64 KiB.
	InlineMaxBytes int
	// NoSendTime leaves the send time out of the messages this instance
	// sends, for a rolling upgrade from a version that predates send
	// times: instances of that version reject a message that has one (and
	// keep their copy). Receivers measure no lag for these messages (see
	// InvalidationStats.Lag). Default: false, messages carry it.
	NoSendTime bool
	// LossGrace is how long, while the bus is down, an L1 entry is served
	// as it is; past it the entry is read again from the shared tier.
	// Missed messages are replayed from the log when the bus is back, or,
	// where no log is kept, L1 is caught up per hash slot (see
	// BusStats.CaughtUp); else L1 is flushed. Default: 1 second.
	LossGrace time.Duration
	// StrictLoss reads every L1 miss and hit from the shared tier while the
	// bus is down, and flushes L1 when it drops and when it is back.
	// Default: false.
	StrictLoss bool
	// ReplayLogLen is about how many announced writes the log keeps for
	// replay after a bus loss. Default: 10,000. Negative: no log (a loss is
	// then caught up per hash slot, as on Redis Cluster).
	ReplayLogLen int

	// --- Background refresh: reloads before expiry, serving meanwhile ---
	//
	// EagerRefresh, in (0, 1), reloads in the background an entry hit past
	// this fraction of its L1 lifetime, serving it meanwhile. Default: 0.
	EagerRefresh float64
	// XFetchBeta, in (0, 10], turns on probabilistic early refresh (XFetch,
	// docs/usage.md): a hit on a loaded value near its L1 expiry reloads it
	// in the background, serving it meanwhile, when
	// now - XFetchBeta * loadTime * ln(rand()) >= expiry, loadTime being
	// how long its load took (stored with the value, so every instance
	// knows it). 1 is the paper's choice; more refreshes earlier. A value
	// that was Set, not loaded, just expires. Not with EagerRefresh.
	// Default: 0, off.
	XFetchBeta float64
	// RefreshBackoff is how long after a failed background refresh
	// (EagerRefresh, XFetchBeta) the next is tried, doubled after each
	// failure in a row up to 32 times RefreshBackoff, each wait drawn
	// between half and all of it; hits meanwhile serve the value.
	// RefreshBackoff is at most 1 hour. Default: 1 second.
	RefreshBackoff time.Duration

	// --- Observability ---
	//
	// Logger receives the read path's and the bus's errors, one per kind
	// per LogEvery, and New's advice. Default: slog.Default().
	Logger *slog.Logger
	// LogEvery is the least gap between two log lines of one kind.
	// Default: 10 seconds.
	LogEvery time.Duration
	// Events are hooks on evictions, invalidations received, shared-tier
	// errors and stale serves. Default: none.
	Events Events
	// Tracer gets a span around every load and shared-tier call (the otel
	// module has one). Default: none.
	Tracer Tracer
	// VerifyRate turns on the background verifier (docs/operations.md):
	// about this many L1 entries a second, from 1/3600 (one an hour) to
	// 10,000, are checked against the header of what the shared tier
	// holds, in rounds of up to 32 keys that each cost one read; an entry
	// older than the shared tier's value by more than VerifyWindow is
	// dropped, counted in Stats.Verify and logged. Needs a Remote.
	// Default: 0, off (no goroutine, no calls).
	VerifyRate float64
	// VerifyWindow is how long an invalidation may take to arrive before
	// the verifier takes an entry that it should have changed as
	// divergent. At most 24 hours. Default: 1 second.
	VerifyWindow time.Duration

	// --- Warm start ---
	//
	// HotSetEvery, if positive, records this instance's hot keys
	// (HotKeys) in the shared tier that often, merged with other
	// instances' into the namespace's hot set, so that a new instance can
	// warm from them (WarmHot): the reads recorded are halved, this
	// instance's added, and the HotSetSize keys with the most kept, in one
	// value written only if no other instance wrote it since it was read,
	// with a lifetime of ten rounds (at least an hour). It needs a Remote
	// (New refuses it without one). Default: 0, not recorded.
	HotSetEvery time.Duration
	// HotSetSize is how many keys the hot set keeps, at most 100,000.
	// Default: 1,000.
	HotSetSize int

	info    tier.Info // what the Remote said of itself (withDefaults asks once)
	batched bool      // New was given a RefreshBatch (for advice)
}

const (
	defaultTTL       = 10 * time.Minute
	defaultLocalTTL  = time.Minute
	defaultLocalMax  = 64 << 20
	defaultMaxKey    = 1 << 10
	defaultMaxValue  = 1 << 20
	defaultInlineMax = 64 << 10
	defaultLogEvery  = 10 * time.Second
	// minLease is the shortest lease: a keep-alive renews it every third.
	minLease = 10 * time.Millisecond
	// maxLease bounds LoadLease and LeaseWait: a lease is kept alive while
	// its load runs, so a longer one serves nothing, and the timers built
	// from them must not overflow.
	maxLease = 24 * time.Hour
)

// scope names what one cache shares between its instances: the Remote's
// key prefix (when it has one, see Remote) and the Namespace. The bus
// channel and every message carry it, so that caches that share no keys
// share no messages either.
func (o *Options) scope() string { return o.info.Prefix + o.Namespace }

// globChars are the characters with a meaning in a Redis glob pattern
// (SCAN MATCH, KEYS), refused in a Namespace.
const globChars = "*?[]\\"

// withDefaults validates o and fills in its defaults.
func (o Options) withDefaults() (Options, error) {
	if (o.Remote != nil || o.Bus != nil) && o.Namespace == "" {
		return o, errors.New("hybrid: Options.Namespace is required when Remote or Bus is set")
	}
	if strings.Contains(o.Namespace, ":") {
		// "X" with key "v2:1" and "X:v2" with key "1" would share a Redis key.
		return o, fmt.Errorf("hybrid: Options.Namespace %q contains ':', which separates the namespace from keys in Redis", o.Namespace)
	}
	if i := strings.IndexAny(o.Namespace, globChars); i >= 0 {
		// "ns*" would make SCAN MATCH "ns*:*" list every "ns...:" namespace.
		return o, fmt.Errorf("hybrid: Options.Namespace %q contains %q, a glob character in Redis MATCH patterns", o.Namespace, o.Namespace[i])
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"TTL", o.TTL}, {"LocalTTL", o.LocalTTL}, {"LoadTimeout", o.LoadTimeout}, {"LogEvery", o.LogEvery}, {"NegativeTTL", o.NegativeTTL}, {"BreakerOpenFor", o.BreakerOpenFor}, {"FailSafeMaxAge", o.FailSafeMaxAge}, {"FailSafeThrottle", o.FailSafeThrottle}, {"SoftTimeout", o.SoftTimeout}, {"LossGrace", o.LossGrace}, {"LoadLease", o.LoadLease}, {"LeaseWait", o.LeaseWait}, {"RefreshBackoff", o.RefreshBackoff}, {"VerifyWindow", o.VerifyWindow}} {
		if f.d < 0 {
			return o, fmt.Errorf("hybrid: Options.%s is negative (%v)", f.name, f.d)
		}
	}
	if o.TTLJitter < 0 || o.TTLJitter >= 1 || o.TTLJitter != o.TTLJitter {
		return o, fmt.Errorf("hybrid: Options.TTLJitter (%v) is outside [0, 1)", o.TTLJitter)
	}
	if o.EagerRefresh < 0 || o.EagerRefresh >= 1 || o.EagerRefresh != o.EagerRefresh {
		return o, fmt.Errorf("hybrid: Options.EagerRefresh (%v) is outside [0, 1)", o.EagerRefresh)
	}
	if !(o.XFetchBeta >= 0 && o.XFetchBeta <= maxXFetchBeta) {
		return o, fmt.Errorf("hybrid: Options.XFetchBeta (%v) is outside [0, %v]", o.XFetchBeta, maxXFetchBeta)
	}
	if o.XFetchBeta > 0 && o.EagerRefresh > 0 {
		return o, errors.New("hybrid: Options.XFetchBeta and Options.EagerRefresh are two refresh schedules; set one")
	}
	if o.RefreshBackoff > maxRefreshBackoff {
		return o, fmt.Errorf("hybrid: Options.RefreshBackoff (%v) is longer than %v", o.RefreshBackoff, maxRefreshBackoff)
	}
	if o.RefreshBackoff == 0 {
		o.RefreshBackoff = time.Second
	}
	if err := o.checkHotSet(); err != nil {
		return o, err
	}
	if o.FailSafeThrottle == 0 {
		o.FailSafeThrottle = 30 * time.Second
	}
	if o.MaxConcurrentLoads < 0 {
		return o, fmt.Errorf("hybrid: Options.MaxConcurrentLoads is negative (%d)", o.MaxConcurrentLoads)
	}
	if o.BreakerThreshold < 0 {
		return o, fmt.Errorf("hybrid: Options.BreakerThreshold is negative (%d)", o.BreakerThreshold)
	}
	if o.QueueWrites < 0 {
		return o, fmt.Errorf("hybrid: Options.QueueWrites is negative (%d)", o.QueueWrites)
	}
	if o.LossGrace == 0 {
		o.LossGrace = time.Second
	}
	if o.LeaseWait == 0 {
		o.LeaseWait = 5 * time.Second
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"LoadLease", o.LoadLease}, {"LeaseWait", o.LeaseWait}} {
		if f.d > maxLease {
			return o, fmt.Errorf("hybrid: Options.%s (%v) is longer than %v", f.name, f.d, maxLease)
		}
	}
	if o.LoadLease > 0 {
		if o.Remote == nil || o.Bus == nil {
			return o, errors.New("hybrid: Options.LoadLease needs a Remote and a Bus")
		}
		if o.LoadLease < minLease {
			return o, fmt.Errorf("hybrid: Options.LoadLease (%v) is shorter than %v", o.LoadLease, minLease)
		}
	}
	if err := o.checkVerify(); err != nil {
		return o, err
	}
	if o.ReplayLogLen == 0 {
		o.ReplayLogLen = 10_000
	}
	if o.BreakerOpenFor == 0 {
		o.BreakerOpenFor = 5 * time.Second
	}
	if o.LocalMaxBytes < 0 {
		return o, fmt.Errorf("hybrid: Options.LocalMaxBytes is negative (%d)", o.LocalMaxBytes)
	}
	if o.CompressAbove < 0 {
		return o, fmt.Errorf("hybrid: Options.CompressAbove is negative (%d)", o.CompressAbove)
	}
	if o.MaxKeyBytes < 0 {
		return o, fmt.Errorf("hybrid: Options.MaxKeyBytes is negative (%d)", o.MaxKeyBytes)
	}
	if o.MaxValueBytes < 0 {
		return o, fmt.Errorf("hybrid: Options.MaxValueBytes is negative (%d)", o.MaxValueBytes)
	}
	if o.TTL == 0 {
		o.TTL = defaultTTL
	}
	if o.LocalTTL == 0 {
		o.LocalTTL = min(o.TTL, defaultLocalTTL)
	}
	if o.LocalMaxBytes == 0 {
		o.LocalMaxBytes = defaultLocalMax
	}
	if o.MaxKeyBytes == 0 {
		o.MaxKeyBytes = defaultMaxKey
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = defaultMaxValue
	}
	if o.InlineMaxBytes == 0 {
		o.InlineMaxBytes = defaultInlineMax
	}
	if o.Codec == nil {
		o.Codec = codec.JSON{}
	}
	if o.Remote != nil {
		o.info = o.Remote.Info()
	}
	if o.Channel == "" {
		o.Channel = "hybridcache:" + o.scope()
	}
	if err := o.checkSharded(); err != nil {
		return o, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.LogEvery == 0 {
		o.LogEvery = defaultLogEvery
	}
	return o, nil
}

// checkSharded returns an error when the Remote and the Bus disagree on
// sharded pub/sub (a Bus that says which it uses: invalidate.Bus does),
// which would lose every message, or when the Remote announces over
// sharded pub/sub on a Channel whose hash tag puts its one shard channel
// in another slot than the namespace's keys, where a write's script
// cannot publish.
func (o *Options) checkSharded() error {
	if o.Remote == nil || o.Bus == nil {
		return nil
	}
	if b, ok := o.Bus.(interface{ Sharded() bool }); ok && b.Sharded() != o.info.Sharded {
		mode := func(sharded bool) string {
			if sharded {
				return "sharded pub/sub (SPUBLISH)"
			}
			return "classic pub/sub (PUBLISH)"
		}
		return fmt.Errorf("hybrid: Options.Remote announces over %s and Options.Bus listens over %s, so no message would arrive: build both on the same client, or set Classic in both l2.Options and invalidate.Options", mode(o.info.Sharded), mode(b.Sharded()))
	}
	if o.info.Sharded && keyslot.Tagged(o.Channel) && keyslot.Of(o.Channel) != keyslot.Of(o.info.Prefix+o.Namespace+":") {
		return fmt.Errorf("hybrid: Options.Channel %q has a hash tag that puts it in another Redis Cluster slot than the namespace's keys; over sharded pub/sub a write announces in its key's slot: leave Channel to its default, or give it the keys' hash tag", o.Channel)
	}
	return nil
}
