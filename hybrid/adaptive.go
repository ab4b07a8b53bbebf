package hybrid

import (
	"context"
	"slices"
	"sync"
	"time"
)

// This file holds adaptive entries: what a load function says, through
// SettingsFrom, of the values it returns (their lifetimes, tags, fail-safe,
// negative caching, or that they are not to be cached), and how a fill
// turns that into the policy each key is written under.

// LoadSettings is what a load function may set of the values it returns,
// over the call's entry options (see EntryOption): their lifetimes, tags, fail-safe and
// negative caching, or that they are not to be cached at all. A load gets
// it with SettingsFrom(ctx). What it sets applies to every key the load
// returns; what For(key) sets applies to that key, after it. Its methods
// are safe for concurrent use.
//
// The settings are read when the load returns, and only if it returns
// values (or ErrNotFound): a load that fails stores nothing anyway. Later
// calls of its methods do nothing. They are checked as the same
// entry options are at a call; a value whose settings are refused is still
// returned to its callers, and stored nowhere, counted in
// Stats.Load.BadOptions and logged.
type LoadSettings struct {
	l    *entryLoad // nil: outside a load, where it does nothing
	opts []EntryOption
	skip bool // DoNotCache
}

// entryLoad is what one load set through its LoadSettings (all) and
// those of its keys (each).
type entryLoad struct {
	mu   sync.Mutex
	done bool // the load returned: the settings are read, no longer set
	all  LoadSettings
	each map[string]*LoadSettings
}

// inert is the LoadSettings of a ctx that is not a load's.
var inert = &LoadSettings{}

// entryKey is the ctx key under which a fill's ctx holds its entrySlot.
type entryKey struct{}

// SettingsFrom returns the LoadSettings of the load whose ctx is ctx, for
// the load to say how the values it returns are to be cached. Outside a
// load (a ctx the cache did not give to a load function, or after the load
// returned), it returns settings whose methods do nothing. The load
// function's signature does not change, and a load that does not call
// SettingsFrom costs nothing more.
//
//	func load(ctx context.Context, id string) (Product, error) {
//		p, err := db.Product(ctx, id)
//		if err == nil && p.Stock == 0 {
//			hybrid.SettingsFrom(ctx).SetTTL(10 * time.Second)
//		}
//		return p, err
//	}
//
// NOTE: call it while the load runs. A fill that loads again (under
// LoadLease, for keys whose holder's lease ended) gives its next load the
// same ctx, so a ctx kept past its load reaches the next load's settings.
func SettingsFrom(ctx context.Context) *LoadSettings {
	s, _ := ctx.Value(entryKey{}).(*entrySlot)
	if s == nil {
		return inert
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open {
		return inert
	}
	if s.l == nil {
		s.l = new(entryLoad)
		s.l.all.l = s.l
	}
	return &s.l.all
}

// For returns the LoadSettings of key, one of the keys of a
// GetOrCreateMany load: what they set applies to key alone, after what the
// load's own settings set.
// Settings for a key the load was not asked for are ignored.
func (e *LoadSettings) For(key string) *LoadSettings {
	if e == nil || e.l == nil {
		return inert
	}
	l := e.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return inert
	}
	k := l.each[key]
	if k == nil {
		if l.each == nil {
			l.each = make(map[string]*LoadSettings)
		}
		k = &LoadSettings{l: l}
		l.each[key] = k
	}
	return k
}

// SetTTL sets the shared-tier lifetime of the values, as WithTTL does. The
// L1 lifetime is cut to it when longer, whichever level set that (see
// Options.LocalTTL).
func (e *LoadSettings) SetTTL(d time.Duration) { e.add(WithTTL(d)) }

// SetLocalTTL sets the L1 lifetime of the values, as WithLocalTTL does: cut
// to their TTL when longer, whatever the order of SetLocalTTL and SetTTL.
func (e *LoadSettings) SetLocalTTL(d time.Duration) { e.add(WithLocalTTL(d)) }

// AddTags tags the values, as WithTags does, besides the tags the call
// gives them.
func (e *LoadSettings) AddTags(tags ...string) { e.add(WithTags(slices.Clone(tags)...)) }

// SetFailSafeMaxAge keeps the values maxAge past their lifetime, for fail-safe,
// as WithFailSafeMaxAge does for the values a call writes (0: not kept). A stale
// value is served when a load fails only by a call with fail-safe on.
func (e *LoadSettings) SetFailSafeMaxAge(maxAge time.Duration) { e.add(WithFailSafeMaxAge(maxAge)) }

// SetNegativeTTL sets how long an absence the load found (ErrNotFound; in
// a batch, a key it did not return) is remembered, as WithNegativeTTL
// does. 0 remembers nothing.
func (e *LoadSettings) SetNegativeTTL(d time.Duration) { e.add(WithNegativeTTL(d)) }

// DoNotCache returns the values, or the absence the load found, to the
// callers waiting for them, and stores them nowhere: neither tier holds
// them and no instance hears of them, so the next call loads again. What
// the tiers held before is left as it was: a stale value stays for
// fail-safe; an eager refresh whose load says DoNotCache leaves the value
// it was to replace until it expires. Under a load lease, the instances
// waiting for the lease are told the value was not stored, and load it
// themselves.
func (e *LoadSettings) DoNotCache() {
	if e == nil || e.l == nil {
		return
	}
	e.l.mu.Lock()
	defer e.l.mu.Unlock()
	if !e.l.done {
		e.skip = true
	}
}

func (e *LoadSettings) add(opt EntryOption) {
	if e == nil || e.l == nil {
		return
	}
	e.l.mu.Lock()
	defer e.l.mu.Unlock()
	if !e.l.done {
		e.opts = append(e.opts, opt)
	}
}

// entrySlot is where a fill's ctx keeps the LoadSettings of the load it
// runs, made when the load first asks for them: a fill runs its loads one
// at a time, and a load that does not ask allocates nothing.
type entrySlot struct {
	mu   sync.Mutex
	open bool // a load runs
	l    *entryLoad
}

// begin opens s for a load about to run.
func (s *entrySlot) begin() {
	s.mu.Lock()
	s.open, s.l = true, nil
	s.mu.Unlock()
}

// end closes s once its load returned, and returns what the load set (nil:
// it did not ask for its LoadSettings). Nothing set later counts.
func (s *entrySlot) end() *entryLoad {
	s.mu.Lock()
	l := s.l
	s.open, s.l = false, nil
	s.mu.Unlock()
	if l != nil {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	}
	return l
}

// adapted is what a load set (l) turned into the policy of each key it
// returned, over the fill's policy.
type adapted struct {
	l *entryLoad
	// perKey: the fill's keys have policies of their own (see policy.of),
	// so the load's LoadSettings is resolved over each.
	perKey  bool
	all     policy // the load's LoadSettings over the fill's policy
	err     error  // all's error
	once    bool   // all and err are set
	scratch policy // the last key's policy, when its own
}

// adapt returns the policy key is written under, p being the policy it
// has without the load's settings: p itself when the load set nothing for
// it, else a resolved copy, valid until the next call. skip reports that
// key's value is not to be stored: its load said DoNotCache, or its
// settings are refused (counted and logged here).
func (c *Cache[V]) adapt(a *adapted, key string, p *policy) (_ *policy, skip bool) {
	scratch := &a.scratch
	l := a.l
	k := l.each[key]
	if l.all.skip || (k != nil && k.skip) {
		c.n.notCached.Add(1)
		return p, true
	}
	if len(l.all.opts) == 0 && (k == nil || len(k.opts) == 0) {
		return p, false
	}
	var err error
	switch {
	case k == nil && !a.perKey:
		// The fill's policy, and nothing of this key's own: the load's
		// LoadSettings is resolved once for all such keys.
		if !a.once {
			a.all, a.err = c.o.policy(p, l.all.opts)
			a.once = true
		}
		*scratch, err = a.all, a.err
	case k == nil:
		*scratch, err = c.o.policy(p, l.all.opts)
	default:
		*scratch, err = c.o.policy(p, append(l.all.opts[:len(l.all.opts):len(l.all.opts)], k.opts...))
	}
	if err != nil {
		c.n.badOptions.Add(1)
		c.log.log(logOptions, "hybrid: options set by the load refused; value returned, not stored", "namespace", c.o.Namespace, "key", key, "err", err)
		return p, true
	}
	scratch.keys = nil
	return scratch, false
}
