package hybrid

import (
	"errors"
	"fmt"

	"github.com/hybridcache/hybridcache/internal/envelope"
	"time"
)

// This file holds the per-call options (EntryOption) and the policy a call
// runs under: Options' defaults with its entry options applied.

// EntryOption sets one entry setting for a call, or for a key by default
// (Options.PerKey). It is a plain value, so passing options keeps the
// L1-hit path free of allocations.
//
// An entry setting has one name at every level that can give it: the
// Options field X, the option WithX, and, where a load may set it, the
// LoadSettings method SetX. Tags, which add up, are WithTags and AddTags.
//
//	setting            Options            EntryOption             LoadSettings
//	shared-tier life   TTL                WithTTL                 SetTTL
//	L1 life            LocalTTL           WithLocalTTL            SetLocalTTL
//	absence kept       NegativeTTL        WithNegativeTTL         SetNegativeTTL
//	jitter             TTLJitter          WithTTLJitter           -
//	fail-safe          FailSafeMaxAge     WithFailSafeMaxAge      SetFailSafeMaxAge
//	                   FailSafeThrottle   WithFailSafeThrottle    -
//	timeouts           SoftTimeout        WithSoftTimeout         -
//	                   LoadTimeout        WithLoadTimeout         -
//	early refresh      EagerRefresh       WithEagerRefresh        -
//	                   XFetchBeta         WithXFetchBeta          -
//	fleet-wide load    LoadLease          WithLoadLease           -
//	tags               -                  WithTags                AddTags
//	steps left out     -                  WithSkip (call only)    -
//	stale reads        -                  WithAllowStale (call)   -
//	stored nowhere     -                  -                       DoNotCache
//
// Precedence: each setting comes from the last level that sets it, in this
// order (tags add up instead):
//
//	1  Options                     the cache's defaults
//	2  Options.PerKey(key)         the key's defaults
//	3  the call's EntryOptions     in order: a later one wins
//	4  SettingsFrom(ctx)           what the load sets for all its keys
//	5  SettingsFrom(ctx).For(key)  what the load sets for one key
//
// The L1 lifetime is the smaller of LocalTTL and TTL (with a Remote),
// whichever levels set them. WithEagerRefresh and WithXFetchBeta replace
// each other: a level that turns one on turns the other off. In
// GetOrCreateMany, levels 2 and 5 apply key by key to what is stored; the
// settings of the load itself (timeouts, lease) are the call's.
//
// Settings that shape a stored value (its lifetimes, jitter, fail-safe's
// extra lifetime, the refresh schedule, tags) apply to the values the call
// writes; those that shape a miss (fail-safe's fallback and throttle, the
// timeouts, the lease, negative caching) apply to the call's fill. So
// fail-safe can serve a stale value only if the value was written by a call
// with fail-safe on: without it, nothing is kept past TTL.
//
// A refused setting (a non-positive TTL, a fraction outside [0, 1), a bad
// tag) fails the call; given by Options.PerKey, every call about the key;
// set by the load, the value is returned and stored nowhere.
type EntryOption struct {
	kind entryKind
	skip Skip
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
	kindSkip
	kindAllowStale
	kindXFetch
)

// WithTTL sets the shared-tier lifetime of the value written by this call.
func WithTTL(d time.Duration) EntryOption { return EntryOption{kind: kindTTL, d: d} }

// WithLocalTTL sets the L1 lifetime of the value stored by this call. With
// a Remote, a LocalTTL longer than the TTL the value is written with is cut
// to that TTL, whichever level set either (see Options.LocalTTL).
func WithLocalTTL(d time.Duration) EntryOption { return EntryOption{kind: kindLocalTTL, d: d} }

// WithNegativeTTL sets Options.NegativeTTL for this call: how long an
// absence found by its load is remembered. 0 remembers nothing.
func WithNegativeTTL(d time.Duration) EntryOption {
	return EntryOption{kind: kindNegativeTTL, d: d}
}

// WithTTLJitter sets Options.TTLJitter for the values this call writes.
func WithTTLJitter(f float64) EntryOption { return EntryOption{kind: kindTTLJitter, f: f} }

// WithFailSafeMaxAge sets Options.FailSafeMaxAge for this call: the values it
// writes are kept maxAge past their lifetime, and its fill serves a value
// stale for up to maxAge when load fails. 0 turns fail-safe off.
func WithFailSafeMaxAge(maxAge time.Duration) EntryOption {
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
// writes, in place of XFetch if f is not 0. 0: off.
func WithEagerRefresh(f float64) EntryOption { return EntryOption{kind: kindEagerRefresh, f: f} }

// WithXFetchBeta sets Options.XFetchBeta for the values this call writes, in
// place of EagerRefresh if beta is not 0. 0: off.
func WithXFetchBeta(beta float64) EntryOption { return EntryOption{kind: kindXFetch, f: beta} }

// WithLoadLease sets Options.LoadLease for a fill this call starts: 0
// turns the lease off for it. On a cache without a Remote or a Bus, a lease
// is refused with an error.
func WithLoadLease(d time.Duration) EntryOption {
	return EntryOption{kind: kindLoadLease, d: d}
}

// WithAllowStale lets a read without a load (Get, GetEntry) return a stale
// value when it finds no live one: a value past its logical lifetime that
// fail-safe keeps (Options.FailSafeMaxAge), from L1 or the shared tier,
// whichever was written last (FusionCache's AllowStaleOnReadOnly).
// GetEntry marks it Stale; Stats.Load.StaleReads counts it. Calls that load
// or write ignore it.
func WithAllowStale() EntryOption { return EntryOption{kind: kindAllowStale} }

// WithTags tags the values this call writes, so that DeleteByTag removes
// them. See DeleteByTag for the limits on tags.
func WithTags(tags ...string) EntryOption { return EntryOption{kind: kindTags, s: tags} }

// policy is the resolved configuration of one call: Options with its
// entry options applied.
type policy struct {
	ttl, localTTL time.Duration // localTTL is cut to ttl with a Remote
	// localAsked is the LocalTTL the last level that set one gave, before
	// the cut, so that a later level's longer TTL lengthens it again.
	localAsked       time.Duration
	negativeTTL      time.Duration
	jitter           float64
	failSafe         time.Duration // FailSafeMaxAge
	failSafeThrottle time.Duration
	softTimeout      time.Duration
	loadTimeout      time.Duration
	eager            float64
	xfetch           float64       // XFetchBeta; 0: off (never with eager)
	lease            time.Duration // LoadLease; 0: none
	tags             []string
	skip             Skip // the steps the call leaves out (WithSkip)
	// keys holds, by key, the keys' own policies in a batch call under
	// per-key defaults (see of); nil otherwise.
	keys       map[string]*policy
	allowStale bool // WithAllowStale
	// meta makes a read keep what a value's envelope says of it (see
	// decodeInto), for GetEntry.
	meta bool
}

// timed reports whether values written under e need a schedule in L1.
func (e *policy) timed() bool { return e.failSafe > 0 || e.eager > 0 || e.xfetch > 0 }

// physical is how long the shared tier keeps a value whose logical
// lifetime is ttl: longer by the fail-safe age, so that a stale copy
// remains to fall back on.
func (e *policy) physical(ttl time.Duration) time.Duration { return ttl + e.failSafe }

// defaults returns the policy of a call without options.
func (o *Options) defaults() policy {
	return policy{
		ttl: o.TTL, localTTL: o.cutLocal(o.LocalTTL, o.TTL), localAsked: o.LocalTTL,
		negativeTTL: o.NegativeTTL, jitter: o.TTLJitter,
		failSafe: o.FailSafeMaxAge, failSafeThrottle: o.FailSafeThrottle,
		softTimeout: o.SoftTimeout, loadTimeout: o.LoadTimeout, eager: o.EagerRefresh,
		lease: o.LoadLease, xfetch: o.XFetchBeta,
	}
}

// cutLocal returns the L1 lifetime of a value asked to live local in L1
// and ttl in the shared tier: local, cut to ttl with a Remote (which would
// otherwise hold a value L1 serves after the shared tier dropped it).
// Without a Remote, TTL bounds nothing and local stands.
func (o *Options) cutLocal(local, ttl time.Duration) time.Duration {
	if o.Remote != nil {
		return min(local, ttl)
	}
	return local
}

// policy resolves opts over def, the cache's defaults.
func (o *Options) policy(def *policy, opts []EntryOption) (policy, error) {
	e := *def
	if len(opts) == 0 {
		return e, nil
	}
	leaseSet := false
	for _, opt := range opts {
		if err := opt.check(); err != nil {
			return e, err
		}
		switch opt.kind {
		case kindTTL:
			e.ttl = opt.d
		case kindLocalTTL:
			e.localAsked = opt.d
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
			if opt.f > 0 {
				e.xfetch = 0
			}
		case kindXFetch:
			e.xfetch = opt.f
			if opt.f > 0 {
				e.eager = 0
			}
		case kindLoadLease:
			if opt.d > 0 {
				if o.Remote == nil || o.Bus == nil {
					return e, errors.New("hybrid: entry option: a load lease needs a Remote and a Bus")
				}
			}
			e.lease, leaseSet = opt.d, opt.d > 0
		case kindSkip:
			e.skip |= opt.skip
		case kindTags:
			e.tags = append(e.tags[:len(e.tags):len(e.tags)], opt.s...)
		case kindAllowStale:
			e.allowStale = true
		}
	}
	if e.skip&(SkipRemoteRead|SkipRemoteWrite) != 0 {
		// A lease coordinates a fleet's loads through the shared tier,
		// which the call leaves out.
		if leaseSet {
			return e, fmt.Errorf("hybrid: entry option: a load lease with %v", e.skip&(SkipRemoteRead|SkipRemoteWrite))
		}
		e.lease = 0
	}
	if len(e.tags) > maxTags {
		return e, fmt.Errorf("hybrid: entry option: %d tags, at most %d", len(e.tags), maxTags)
	}
	if len(e.tags) > 0 && e.physical(e.ttl) > tagLife(o) {
		return e, fmt.Errorf("hybrid: entry option: a tagged value may live at most %v in the shared tier (TTL plus fail-safe), not %v", tagLife(o), e.physical(e.ttl))
	}
	e.localTTL = o.cutLocal(e.localAsked, e.ttl)
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
	case kindSkip:
		if opt.skip == 0 || opt.skip&^skipAll != 0 {
			return fmt.Errorf("hybrid: entry option: WithSkip(%v): no known step", opt.skip)
		}
	case kindAllowStale:
	case kindXFetch:
		if !(opt.f >= 0 && opt.f <= maxXFetchBeta) {
			return fmt.Errorf("hybrid: entry option: XFetch beta %v is outside [0, %v]", opt.f, maxXFetchBeta)
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
