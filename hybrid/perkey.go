package hybrid

import (
	"errors"
	"fmt"
)

// This file holds per-key defaults (Options.PerKey): the
// entry options that apply to a key before a call's own, resolved on misses
// and writes, never on an L1 hit.

// of returns key's policy under p: the key's own when p is a batch call's
// under per-key defaults (see perKey), else p.
func (p *policy) of(key string) *policy {
	if p.keys != nil {
		if q := p.keys[key]; q != nil {
			return q
		}
	}
	return p
}

// keyPolicy returns the policy of a call about key with opts: the cache's
// defaults, then Options.PerKey(key), then opts. Options that the
// provider gives and a call would refuse are an error naming the key.
func (c *Cache[V]) keyPolicy(key string, opts []EntryOption) (policy, error) {
	if c.o.PerKey == nil {
		return c.o.policy(&c.def, opts)
	}
	d, err := c.o.policy(&c.def, c.o.PerKey(key))
	if err == nil && d.skip != 0 {
		err = fmt.Errorf("WithSkip(%v) is a per-call option, not a default", d.skip)
	}
	if err != nil {
		return d, fmt.Errorf("hybrid: Options.PerKey(%q): %w", key, err)
	}
	return c.o.policy(&d, opts)
}

// perKey gives e, the policy of a batch call with opts, the policy of
// each of keys under per-key defaults (see keyPolicy and of), with the
// call's flags (WithSkip), when the cache has them. It returns keys without those whose options are
// refused, and an error for those.
func (c *Cache[V]) perKey(e *policy, keys []string, opts []EntryOption) ([]string, error) {
	if c.o.PerKey == nil || len(keys) == 0 {
		return keys, nil
	}
	if e.keys == nil {
		e.keys = make(map[string]*policy, len(keys))
	}
	var errs []error
	ok := keys[:0:0]
	for _, key := range keys {
		p, err := c.keyPolicy(key, opts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p.skip = e.skip
		e.keys[key] = &p
		ok = append(ok, key)
	}
	if len(errs) == 0 {
		return keys, nil
	}
	return ok, errors.Join(errs...)
}

// keyDefaults returns the policy of key without call options, for the
// values the cache stores in L1 for no call of its own (from a message, a
// replay, a re-read): the cache's defaults, or, under per-key defaults,
// the key's. Options the provider gives that are refused are logged and
// the cache's defaults used.
func (c *Cache[V]) keyDefaults(key string) *policy {
	if c.o.PerKey == nil {
		return &c.def
	}
	p, err := c.keyPolicy(key, nil)
	if err != nil {
		c.n.badOptions.Add(1)
		c.log.log(logOptions, "hybrid: per-key options refused; the cache's defaults used", "namespace", c.o.Namespace, "key", key, "err", err)
		return &c.def
	}
	return &p
}

// keyedMany is perKey for a batch call with opts, whose policy is e: for
// its misses and the keys due for a refresh (due, if not nil). The keys
// whose options are refused leave both, and their error joins badKey.
func (c *Cache[V]) keyedMany(e *policy, misses *[]string, due *pastDue[V], opts []EntryOption, badKey error) error {
	var err1, err2 error
	*misses, err1 = c.perKey(e, *misses, opts)
	if due != nil && len(due.refresh) > 0 {
		refresh, err := c.perKey(e, due.refresh, opts)
		if len(refresh) < len(due.refresh) {
			held := due.held[:0:0]
			for i, key := range due.refresh {
				if _, ok := e.keys[key]; ok {
					held = append(held, due.held[i])
				}
			}
			due.refresh, due.held = refresh, held
		}
		err2 = err
	}
	if err1 == nil && err2 == nil {
		return badKey
	}
	return errors.Join(badKey, err1, err2)
}
