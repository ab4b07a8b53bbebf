package hybrid

import (
	"fmt"
	"strings"
)

// This file holds the per-call tier flags (WithSkip): which steps of a call
// they leave out, which calls take which, and how they are counted.

// Skip is a set of steps a call leaves out, passed with WithSkip. Combine
// them with |: WithSkip(SkipL1Read | SkipL1Write).
//
// The flags of the call that leads a fill apply to the fill: a call that
// joins a fill of its key in progress takes its result, whatever its own
// flags, and so does a call without flags that joins one led by a call
// with flags.
type Skip uint8

const (
	// SkipL1Read makes GetOrCreate, GetOrCreateMany and Get look past L1:
	// they read the shared tier (and GetOrCreate loads on a miss there), and
	// store what they find in L1 as usual, replacing what L1 held. An entry
	// in L1 is neither served nor refreshed eagerly by such a call.
	SkipL1Read Skip = 1 << iota
	// SkipL1Write keeps what a read or a Set returns out of L1 here: a value
	// read from the shared tier or loaded is returned and not stored in L1
	// (an entry L1 holds for the key stays as it is); a Set or SetMany
	// writes the shared tier and announces as usual, and drops the key from
	// L1 here, so that the next read here reads the new value from the
	// shared tier (read-your-writes holds through it). A write queued for
	// replay (QueueWrites) is kept in L1 all the same: until its replay, no
	// other tier holds it. Delete refuses it: the deleted value would stay
	// here.
	SkipL1Write
	// SkipRemoteRead makes GetOrCreate, GetOrCreateMany and Get leave the
	// shared tier unread: on an L1 miss, GetOrCreate loads, and Get misses.
	// A loaded value is written to the shared tier only where it holds
	// nothing, as every fill's is: a value there, unread, wins, and the
	// loaded one leaves L1 again. A fill under it takes no load lease.
	SkipRemoteRead
	// SkipRemoteWrite leaves the shared tier as it is: a fill's loaded
	// values are stored in L1 only, a Set's value too (other instances keep
	// reading the shared tier's), and a Delete drops the key from L1 here
	// only. The announcement still goes out, naming the keys without their
	// values (a plain publish, not logged), so other instances drop their
	// copies and read the shared tier again: Delete with SkipRemoteWrite
	// drops a key from every L1 and keeps it in the shared tier. Add
	// SkipAnnounce to leave other instances alone. A fill under it takes
	// no load lease.
	//
	// NOTE: until its L1 lifetime ends, a value kept here by a Set with
	// SkipRemoteWrite is not what the shared tier holds: convergence
	// (docs/promises.md) holds for it only then.
	SkipRemoteWrite
	// SkipAnnounce makes Set, SetMany, Delete and DeleteMany tell no other
	// instance: the shared tier is written without a message or a log
	// entry, and other instances keep serving their L1 copies of the keys
	// until those copies' L1 lifetime ends (LocalTTL), or until another
	// change of the keys is announced. A queued write (QueueWrites) is
	// replayed unannounced too. Reads announce nothing and refuse it.
	SkipAnnounce

	skipAll = SkipL1Read | SkipL1Write | SkipRemoteRead | SkipRemoteWrite | SkipAnnounce
)

// String returns the names of the flags in s joined by "|", such as
// "SkipL1Read|SkipAnnounce".
func (s Skip) String() string {
	var names []string
	for i, name := range [...]string{"SkipL1Read", "SkipL1Write", "SkipRemoteRead", "SkipRemoteWrite", "SkipAnnounce"} {
		if s&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	if rest := s &^ skipAll; rest != 0 || len(names) == 0 {
		names = append(names, fmt.Sprintf("Skip(%#x)", uint8(rest)))
	}
	return strings.Join(names, "|")
}

// WithSkip leaves out of this call the steps s names (see Skip). Several
// WithSkip options add up.
func WithSkip(s Skip) EntryOption { return EntryOption{kind: kindSkip, skip: s} }

// The calls that take flags, and the flags each applies.
type skipCall struct {
	name string
	can  Skip // the flags it applies
	void Skip // flags that together leave it nothing to do (0: none)
	why  string
}

var (
	skipGetOrCreate     = skipCall{"GetOrCreate", SkipL1Read | SkipL1Write | SkipRemoteRead | SkipRemoteWrite, 0, ""}
	skipGetOrCreateMany = skipCall{"GetOrCreateMany", skipGetOrCreate.can, 0, ""}
	skipGet             = skipCall{"Get", SkipL1Read | SkipL1Write | SkipRemoteRead, SkipL1Read | SkipRemoteRead, "it would read no tier"}
	skipGetEntry        = skipCall{"GetEntry", skipGet.can, skipGet.void, skipGet.why}
	skipGetMany         = skipCall{"GetMany", skipGet.can, skipGet.void, skipGet.why}
	skipSet             = skipCall{"Set", SkipL1Write | SkipRemoteWrite | SkipAnnounce, SkipL1Write | SkipRemoteWrite, "it would store the value nowhere"}
	skipSetMany         = skipCall{"SetMany", skipSet.can, skipSet.void, skipSet.why}
	skipDelete          = skipCall{"Delete", SkipRemoteWrite | SkipAnnounce, 0, ""}
	skipDeleteMany      = skipCall{"DeleteMany", skipDelete.can, 0, ""}
)

// check returns the error for flags s on call k: flags it cannot apply, or
// a set that leaves it nothing to do (without a Remote, the shared tier is
// left out anyway).
func (k *skipCall) check(s Skip, remote bool) error {
	if bad := s &^ k.can; bad != 0 {
		return fmt.Errorf("hybrid: %s: %v does not apply to it", k.name, bad)
	}
	if !remote {
		s |= SkipRemoteRead | SkipRemoteWrite
	}
	if k.void != 0 && s&k.void == k.void {
		if !remote {
			return fmt.Errorf("hybrid: %s: %v on a cache without a Remote: %s", k.name, k.void&^(SkipRemoteRead|SkipRemoteWrite), k.why)
		}
		return fmt.Errorf("hybrid: %s: %v: %s", k.name, k.void, k.why)
	}
	return nil
}

// skipOf returns the flags among opts, checked for call k, without
// resolving the other options: the L1-hit path of GetOrCreate calls it.
func (c *Cache[V]) skipOf(k *skipCall, opts []EntryOption) (Skip, error) {
	var s Skip
	for i := range opts {
		if opts[i].kind == kindSkip {
			s |= opts[i].skip
		}
	}
	if s == 0 {
		return 0, nil
	}
	return s, k.check(s, c.remote != nil)
}

// policyFor resolves opts over the cache's defaults for call k, checking
// its flags.
func (c *Cache[V]) policyFor(k *skipCall, opts []EntryOption) (policy, error) {
	e, err := c.o.policy(&c.def, opts)
	if err != nil {
		return e, err
	}
	return e, k.check(e.skip, c.remote != nil)
}

// keyPolicyFor is policyFor for a call about one key: under per-key
// defaults (Options.PerKey), the key's come before opts.
func (c *Cache[V]) keyPolicyFor(k *skipCall, key string, opts []EntryOption) (policy, error) {
	e, err := c.keyPolicy(key, opts)
	if err != nil {
		return e, err
	}
	return e, k.check(e.skip, c.remote != nil)
}

// onlySkip returns the flags among opts for call k, which takes no other
// option, checked.
func (c *Cache[V]) onlySkip(k *skipCall, opts []EntryOption) (Skip, error) {
	for _, opt := range opts {
		if err := opt.check(); err != nil {
			return 0, err
		}
		if opt.kind != kindSkip {
			return 0, fmt.Errorf("hybrid: %s: only WithSkip applies to it", k.name)
		}
	}
	return c.skipOf(k, opts)
}

// skipping returns the policy of a read of n keys that takes flags s and
// no other option, counting the keys it does not look up in L1.
func (c *Cache[V]) skipping(s Skip, n int) *policy {
	if s&SkipL1Read != 0 {
		c.skipped(SkipL1Read, n)
	}
	e := c.def
	e.skip = s
	return &e
}

// skipped counts n keys whose step s (one flag) a call left out.
func (c *Cache[V]) skipped(s Skip, n int) {
	if n <= 0 {
		return
	}
	switch s {
	case SkipL1Read:
		c.n.skipL1Reads.Add(uint64(n))
	case SkipL1Write:
		c.n.skipL1Writes.Add(uint64(n))
	case SkipRemoteRead:
		c.n.skipRemoteReads.Add(uint64(n))
	case SkipRemoteWrite:
		c.n.skipRemoteWrites.Add(uint64(n))
	case SkipAnnounce:
		c.n.skipAnnounces.Add(uint64(n))
	}
}
