package hybrid

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/internal/envelope"
)

// Options configures a Cache. The zero value is an L1-only cache with the
// defaults below.
type Options struct {
	// Namespace names this cache's keys in the shared tier ("Namespace:key")
	// and its invalidation channel. Required when Remote or Bus is set;
	// every instance of one logical cache uses the same Namespace. It may
	// not contain ':', so that no two namespaces share a Redis key, nor a
	// glob character ('*', '?', '[', ']', '\'), so that
	// SCAN MATCH "Namespace:*" lists this namespace's keys and no other's.
	Namespace string

	// Remote is the shared tier, such as *l2.Store. nil: L1 only.
	Remote Remote

	// Bus carries invalidations between instances, such as
	// *invalidate.Bus. nil: no cross-instance invalidation, so other
	// instances keep their copy until LocalTTL ends.
	Bus Bus

	// Channel is the bus channel. Default: "hybridcache:" + Namespace.
	Channel string

	// Secret signs invalidation messages (HMAC-SHA256). With a Secret and a
	// Remote that implements Announcer, a Set's message carries the new
	// value (up to InlineMaxBytes) so that peers holding the key swap it in
	// without a round trip; messages that do not verify only drop keys.
	// nil: messages never carry values; peers drop the key.
	Secret []byte

	// InlineMaxBytes is the largest stored value a message carries.
	// Default: 64 KiB. Negative: never carry values.
	InlineMaxBytes int

	// Codec encodes values for the shared tier. Default: codec.JSON{}.
	Codec Codec

	// TTL is how long a value lives in the shared tier. Default: 10 minutes.
	TTL time.Duration

	// LocalTTL is how long a value lives in L1; it may not exceed TTL when
	// Remote is set. Default: the smaller of TTL and 1 minute. L1 keeps
	// lifetimes to the millisecond and cuts them at about 49.7 days.
	LocalTTL time.Duration

	// NegativeTTL is how long an absence is remembered: when load returns
	// an error wrapping ErrNotFound, both tiers remember for this long that
	// the key has no value, and GetOrCreate returns ErrNotFound without
	// calling load. Default: 0, absences are not remembered.
	NegativeTTL time.Duration

	// TTLJitter shortens each write's lifetimes (TTL and LocalTTL) by a
	// random fraction of up to TTLJitter, so that entries written together
	// do not expire together. Range [0, 1). Default: 0, no jitter.
	TTLJitter float64

	// LocalMaxBytes bounds L1 by the encoded size of its values (plus key and
	// a fixed overhead per entry). Default: 64 MiB.
	LocalMaxBytes int64

	// MaxKeyBytes is the longest key accepted; a longer one gets
	// ErrKeyTooLong (in a batch, that key only). Default: 1024.
	MaxKeyBytes int

	// MaxValueBytes is the largest encoded value stored. A larger value
	// loaded by GetOrCreate is returned but not stored; Set returns
	// ErrValueTooLarge. Default: 1 MiB.
	MaxValueBytes int

	// CopyOnRead gives every caller its own copy of a value, for mutable
	// types: made by the value's Clone method if V has one (Clone() V),
	// else by a round trip through Codec. Set stores a copy too. Default:
	// false, values are shared and callers must not modify them.
	CopyOnRead bool

	// CompressAbove turns compression on: an encoded value of at least this
	// many bytes is stored S2-compressed in the shared tier when that makes
	// it shorter (flagged in its envelope; MaxValueBytes still bounds the
	// value before compression and when inflating). Default: 0, off.
	CompressAbove int

	// LoadTimeout bounds one shared fill: the shared-tier read and the load
	// function. The load's ctx is cancelled when it passes. It is not tied to
	// any caller's ctx: a caller leaving never cancels the fill for the
	// others. Default: 0, no bound other than Close.
	LoadTimeout time.Duration

	// FailSafeMaxAge turns fail-safe on: values are kept this long past
	// their lifetime (in both tiers), and when load fails or times out for
	// a key whose value has expired less than FailSafeMaxAge ago, that stale
	// value is returned instead of the error (Stats.Load.StaleServed); in a
	// batch, for each key that has one. Default: 0, off.
	FailSafeMaxAge time.Duration

	// FailSafeThrottle is how long a stale value served by fail-safe is
	// served again before load is tried anew. Default: 30 seconds.
	FailSafeThrottle time.Duration

	// SoftTimeout, with fail-safe, bounds how long callers wait for a load
	// when a stale value is at hand: past it they get the stale value, as do
	// callers that come meanwhile, while the load goes on and updates the
	// cache when it finishes. LoadTimeout is the hard bound that cancels the
	// load. Default: 0, none.
	SoftTimeout time.Duration

	// EagerRefresh, in (0, 1), turns eager refresh on: a hit on an entry
	// older than this fraction of its L1 lifetime returns it at once and
	// reloads it in the background, once per key, writing and announcing
	// the new value like Set (a batch reloads its due keys with one call of
	// its load). Default: 0, off.
	EagerRefresh float64

	// MaxConcurrentLoads bounds the load calls that run at once in this
	// cache (fills, batch fills and eager refreshes alike; a batch load
	// takes one slot, as it is one call to the database however many keys
	// it asks for). A fill beyond the bound waits for a slot, within its
	// LoadTimeout and until Close, while each of its callers waits with its
	// own ctx; when a fail-safe stale value is at hand, its callers get that
	// at once (Stats.Load.StaleServed) and the fill goes on waiting, then loads
	// and stores the result. Waits are counted in Stats.Load.Queued.
	// Shared-tier reads are not bounded. Default: 0, no bound.
	MaxConcurrentLoads int

	// LoadLease turns on one load per key across the fleet: a fill that
	// finds nothing live in either tier first takes a lease on the key in
	// the shared tier, for this long (kept alive while the load runs).
	// The instance that gets it loads, stores the value and announces it
	// on the bus, with the value when Secret is set and it is no larger
	// than InlineMaxBytes; the others wait for that message (and read the
	// shared tier once if it carries no value) instead of loading too, and
	// their callers get the holder's value, or its load error. If the
	// lease ends without a value (its holder died), a waiter takes it over
	// and loads. An instance that cannot reach the shared tier for the
	// lease, or has waited LeaseWait, loads by itself. It needs a Remote
	// that is a Leaser (such as *l2.Store) and a Bus. Costs, per key cold
	// in both tiers, one more shared-tier call before the load on the
	// instance that loads it (its write is one call, as without a lease),
	// and one on an instance that waits; hits cost nothing. At least 10 ms,
	// at most 24 hours.
	// Default: 0, off: each instance loads a cold key once.
	LoadLease time.Duration

	// LeaseWait bounds how long a fill waits for another instance's lease
	// (see LoadLease) before it loads by itself. At most 24 hours.
	// Default: 5 seconds.
	LeaseWait time.Duration

	// LossGrace is how long, while the bus has lost its connection, an L1
	// entry is served as it is: from the start of the loss for entries
	// stored before it, from their store for entries stored during it. Past
	// it, the entry is read again from the shared tier, and served as it is
	// only while the shared tier cannot be reached. When the bus is back, the
	// messages missed meanwhile are replayed from the shared tier's log
	// (with a Remote that is a Journal, as l2.Store on one Redis server is)
	// and L1 is kept; without a log, or when it cannot cover the gap, L1 is
	// flushed. Default: 1 second.
	LossGrace time.Duration

	// StrictLoss flushes L1 whenever the bus loses its connection and again
	// when it is back, and while it is down serves nothing from L1 that it
	// has not just read again from the shared tier: every read goes there.
	// While the shared tier answers, nothing served is then older than what
	// it holds, plus the propagation window once the bus is back; the cost
	// is a round trip per read during the loss. While it cannot be reached,
	// what was loaded since the loss is served from L1, as without
	// StrictLoss. (Its writes are still logged, for the other instances.)
	// Default: false.
	StrictLoss bool

	// ReplayLogLen is about how many announced writes the shared tier's log
	// keeps for replay after a bus loss (each write appends one entry).
	// Default: 10,000. Negative: no log (a loss flushes L1 once the bus is
	// back).
	ReplayLogLen int

	// QueueWrites turns on the queue of failed writes, holding at most this
	// many: a Set, Delete, DeleteByTag or Clear whose write fails because
	// the shared tier cannot be reached (a network error or timeout, a bus
	// that cannot publish, ErrUnavailable from the breaker) is applied to
	// L1 here (Set stores the value, so read-your-writes holds on this
	// instance), queued, and replayed in order in the background once the
	// shared tier answers (retried after 100 ms, doubling to 5 s, and at
	// once when the bus comes back); the call returns an error wrapping
	// ErrQueued and the failure. The queue keeps the newest write per key
	// (and per tag); when it is full, a failed write of a key not queued is
	// refused (Stats.Queue.Refused) and its error returned as without a
	// queue. Bad input, encoding errors and a call cut short by its own
	// ctx are never queued. Close drops what is still queued, and says how
	// many in a warning and in Stats.Queue.DroppedOnClose.
	//
	// A replay writes only over an older value (write times compared in
	// Redis, see NewerSetter; clocks in sync, as for tags), so a write
	// another instance made meanwhile wins (Stats.Queue.Stale), and
	// a write that timed out but landed is not written twice.
	// Default: 0, off: failed writes return their error.
	QueueWrites int

	// BreakerThreshold is how many shared-tier failures in a row open the
	// circuit breaker. While open, reads skip the shared tier (L1 and load
	// answer), background writes are skipped, and Set, Delete, Expire,
	// Clear and DeleteByTag return ErrUnavailable at once; after
	// BreakerOpenFor one call probes the shared tier and its success closes
	// the breaker. Default: 0, no breaker.
	BreakerThreshold int

	// BreakerOpenFor is how long the breaker stays open before a probe.
	// Default: 5 seconds.
	BreakerOpenFor time.Duration

	// Logger receives errors from the read path and the bus, at most one per
	// kind per LogEvery, and New's advice on the settings. Default:
	// slog.Default().
	Logger *slog.Logger

	// LogEvery is the minimum gap between two log lines of one kind.
	// Default: 10 seconds.
	LogEvery time.Duration

	// Events are hooks called on evictions, invalidations received,
	// shared-tier errors and stale serves. Default: none.
	Events Events

	// Tracer, if set, gets a span around every load and shared-tier call
	// (see the otel module for one on OpenTelemetry). Default: none.
	Tracer Tracer

	info RemoteInfo // what the Remote said of itself (withDefaults asks it once)
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
	}{{"TTL", o.TTL}, {"LocalTTL", o.LocalTTL}, {"LoadTimeout", o.LoadTimeout}, {"LogEvery", o.LogEvery}, {"NegativeTTL", o.NegativeTTL}, {"BreakerOpenFor", o.BreakerOpenFor}, {"FailSafeMaxAge", o.FailSafeMaxAge}, {"FailSafeThrottle", o.FailSafeThrottle}, {"SoftTimeout", o.SoftTimeout}, {"LossGrace", o.LossGrace}, {"LoadLease", o.LoadLease}, {"LeaseWait", o.LeaseWait}} {
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
	if o.Remote != nil && o.LocalTTL > o.TTL {
		return o, fmt.Errorf("hybrid: Options.LocalTTL (%v) is longer than Options.TTL (%v)", o.LocalTTL, o.TTL)
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
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.LogEvery == 0 {
		o.LogEvery = defaultLogEvery
	}
	return o, nil
}

// EntryOption overrides an Options setting for one call. It is a plain
// value, so passing options keeps the L1-hit path free of allocations.
//
// Options that shape a stored value (TTL, LocalTTL, jitter, fail-safe's
// extra lifetime, eager refresh's schedule, tags) apply to the values this
// call writes; options that shape a miss (fail-safe's fallback and
// throttle, the timeouts, negative caching) apply to this call's fill. So
// fail-safe can serve a stale value only if the value was written by a call
// with fail-safe on: without it, nothing is kept past TTL.
type EntryOption struct {
	kind entryKind
	d    time.Duration
	f    float64
	s    []string
}

type entryKind uint8

const (
	kindTTL entryKind = iota + 1
	kindLocalTTL
	kindNegativeTTL
	kindTTLJitter
	kindFailSafe
	kindFailSafeThrottle
	kindSoftTimeout
	kindLoadTimeout
	kindEagerRefresh
	kindTags
	kindLoadLease
)

// WithTTL sets the shared-tier lifetime of the value written by this call.
func WithTTL(d time.Duration) EntryOption { return EntryOption{kind: kindTTL, d: d} }

// WithLocalTTL sets the L1 lifetime of the value stored by this call. It is
// capped by the call's TTL.
func WithLocalTTL(d time.Duration) EntryOption { return EntryOption{kind: kindLocalTTL, d: d} }

// WithNegativeTTL sets Options.NegativeTTL for this call: how long an
// absence found by its load is remembered. 0 remembers nothing.
func WithNegativeTTL(d time.Duration) EntryOption {
	return EntryOption{kind: kindNegativeTTL, d: d}
}

// WithTTLJitter sets Options.TTLJitter for the values this call writes.
func WithTTLJitter(f float64) EntryOption { return EntryOption{kind: kindTTLJitter, f: f} }

// WithFailSafe sets Options.FailSafeMaxAge for this call: the values it
// writes are kept maxAge past their lifetime, and its fill serves a value
// stale for up to maxAge when load fails. 0 turns fail-safe off.
func WithFailSafe(maxAge time.Duration) EntryOption {
	return EntryOption{kind: kindFailSafe, d: maxAge}
}

// WithFailSafeThrottle sets Options.FailSafeThrottle for this call.
func WithFailSafeThrottle(d time.Duration) EntryOption {
	return EntryOption{kind: kindFailSafeThrottle, d: d}
}

// WithSoftTimeout sets Options.SoftTimeout for this call. 0: none.
func WithSoftTimeout(d time.Duration) EntryOption {
	return EntryOption{kind: kindSoftTimeout, d: d}
}

// WithLoadTimeout sets Options.LoadTimeout, the hard bound that cancels the
// load, for a fill this call starts. 0: none.
func WithLoadTimeout(d time.Duration) EntryOption {
	return EntryOption{kind: kindLoadTimeout, d: d}
}

// WithEagerRefresh sets Options.EagerRefresh for the values this call
// writes. 0: off.
func WithEagerRefresh(f float64) EntryOption { return EntryOption{kind: kindEagerRefresh, f: f} }

// WithLoadLease sets Options.LoadLease for a fill this call starts: 0
// turns the lease off for it. On a cache whose Remote is not a Leaser, or
// that has no Bus, a lease is refused with an error.
func WithLoadLease(d time.Duration) EntryOption {
	return EntryOption{kind: kindLoadLease, d: d}
}

// WithTags tags the values this call writes, so that DeleteByTag removes
// them. See DeleteByTag for the limits on tags.
func WithTags(tags ...string) EntryOption { return EntryOption{kind: kindTags, s: tags} }

// policy is the resolved configuration of one call: Options with its
// EntryOptions applied.
type policy struct {
	ttl, localTTL    time.Duration
	negativeTTL      time.Duration
	jitter           float64
	failSafe         time.Duration // FailSafeMaxAge
	failSafeThrottle time.Duration
	softTimeout      time.Duration
	loadTimeout      time.Duration
	eager            float64
	lease            time.Duration // LoadLease; 0: none
	tags             []string
}

// timed reports whether values written under e need a schedule in L1.
func (e *policy) timed() bool { return e.failSafe > 0 || e.eager > 0 }

// physical is how long the shared tier keeps a value whose logical
// lifetime is ttl: longer by the fail-safe age, so that a stale copy
// remains to fall back on.
func (e *policy) physical(ttl time.Duration) time.Duration { return ttl + e.failSafe }

// defaults returns the policy of a call without options.
func (o *Options) defaults() policy {
	return policy{
		ttl: o.TTL, localTTL: o.LocalTTL, negativeTTL: o.NegativeTTL, jitter: o.TTLJitter,
		failSafe: o.FailSafeMaxAge, failSafeThrottle: o.FailSafeThrottle,
		softTimeout: o.SoftTimeout, loadTimeout: o.LoadTimeout, eager: o.EagerRefresh,
		lease: o.LoadLease,
	}
}

// policy resolves opts over def, the cache's defaults.
func (o *Options) policy(def *policy, opts []EntryOption) (policy, error) {
	e := *def
	if len(opts) == 0 {
		return e, nil
	}
	localSet := false
	for _, opt := range opts {
		if err := opt.check(); err != nil {
			return e, err
		}
		switch opt.kind {
		case kindTTL:
			e.ttl = opt.d
		case kindLocalTTL:
			e.localTTL, localSet = opt.d, true
		case kindNegativeTTL:
			e.negativeTTL = opt.d
		case kindTTLJitter:
			e.jitter = opt.f
		case kindFailSafe:
			e.failSafe = opt.d
		case kindFailSafeThrottle:
			e.failSafeThrottle = opt.d
		case kindSoftTimeout:
			e.softTimeout = opt.d
		case kindLoadTimeout:
			e.loadTimeout = opt.d
		case kindEagerRefresh:
			e.eager = opt.f
		case kindLoadLease:
			if opt.d > 0 {
				if o.Remote == nil || o.Bus == nil {
					return e, errors.New("hybrid: entry option: a load lease needs a Remote and a Bus")
				}
			}
			e.lease = opt.d
		case kindTags:
			e.tags = append(e.tags[:len(e.tags):len(e.tags)], opt.s...)
		}
	}
	if len(e.tags) > maxTags {
		return e, fmt.Errorf("hybrid: entry option: %d tags, at most %d", len(e.tags), maxTags)
	}
	if len(e.tags) > 0 && e.physical(e.ttl) > tagLife(o) {
		return e, fmt.Errorf("hybrid: entry option: a tagged value may live at most %v in the shared tier (TTL plus fail-safe), not %v", tagLife(o), e.physical(e.ttl))
	}
	if e.localTTL > e.ttl && o.Remote != nil {
		if localSet {
			return e, fmt.Errorf("hybrid: entry option: LocalTTL (%v) is longer than TTL (%v)", e.localTTL, e.ttl)
		}
		e.localTTL = e.ttl
	}
	return e, nil
}

// check validates one option's value.
func (opt EntryOption) check() error {
	switch opt.kind {
	case kindTTL, kindLocalTTL, kindFailSafeThrottle:
		if opt.d <= 0 {
			return fmt.Errorf("hybrid: entry option: duration %v is not positive", opt.d)
		}
	case kindNegativeTTL, kindFailSafe, kindSoftTimeout, kindLoadTimeout:
		if opt.d < 0 {
			return fmt.Errorf("hybrid: entry option: duration %v is negative", opt.d)
		}
	case kindLoadLease:
		if opt.d != 0 && (opt.d < minLease || opt.d > maxLease) {
			return fmt.Errorf("hybrid: entry option: load lease %v is outside [%v, %v]", opt.d, minLease, maxLease)
		}
	case kindTTLJitter, kindEagerRefresh:
		if opt.f < 0 || opt.f >= 1 || opt.f != opt.f {
			return fmt.Errorf("hybrid: entry option: fraction %v is outside [0, 1)", opt.f)
		}
	case kindTags:
		for _, tag := range opt.s {
			if tag == "" || len(tag) > maxTagLen {
				return fmt.Errorf("hybrid: entry option: tag %q is empty or longer than %d bytes", tag, maxTagLen)
			}
		}
	default:
		return errors.New("hybrid: entry option: zero EntryOption")
	}
	return nil
}

// The limits on tags are the stored form's (see WithTags).
const (
	maxTags   = envelope.MaxTags
	maxTagLen = envelope.MaxTagLen
)
