package hybrid

import "sync"

// A fill whose write-back failed (the shared tier could not be reached, or
// the breaker kept the call away) leaves in L1 a value the shared tier may
// never hold: it was loaded while the shared tier could not be read, or
// before a write this instance could not hear of. Served on while the
// shared tier stays unreachable (the cache degrades to L1 and load), it
// must not outlive the outage: once the shared tier answers again, other
// instances' writes made meanwhile are there, and their messages may never
// come (a stalled Redis keeps the pub/sub connections up). So such keys
// are noted, a probe reads the shared tier every heldProbe until it
// answers, and then each noted entry still as the fill stored it leaves
// L1: its next read goes to the shared tier.

// maxUnverified bounds the keys noted; past it, a fill's value whose
// write-back failed leaves L1 at once.
const maxUnverified = 10_000

// unverifiedSet holds the keys noted, with the token each fill read under.
type unverifiedSet struct {
	mu      sync.Mutex
	keys    map[string]token
	probing bool
}

// unverified notes that the fill of key under tok could not write its
// value back, and starts the probe unless it runs.
func (c *Cache[V]) unverified(key string, tok token) {
	u := &c.unver
	u.mu.Lock()
	if len(u.keys) >= maxUnverified {
		u.mu.Unlock()
		if c.vers.valid(tok) {
			c.vers.bump(key)
			c.local.Delete(key)
		}
		return
	}
	if u.keys == nil {
		u.keys = make(map[string]token)
	}
	u.keys[key] = tok
	start := !u.probing
	u.probing = true
	u.mu.Unlock()
	if start && !c.run(c.verifyUnverified) {
		u.mu.Lock()
		u.probing = false
		u.mu.Unlock()
	}
}

// verifyUnverified reads the shared tier every heldProbe until it answers,
// then drops the noted keys' entries that no write or message changed
// since their fill's read, and ends when no key was noted meanwhile.
func (c *Cache[V]) verifyUnverified() {
	u := &c.unver
	for {
		if !pause(c.stop, heldProbe) {
			return
		}
		err := c.probe(c.tagKey(clearTag))
		if err != nil {
			continue
		}
		u.mu.Lock()
		keys := u.keys
		u.keys = nil
		if len(keys) == 0 {
			u.probing = false
			u.mu.Unlock()
			return
		}
		u.mu.Unlock()
		for key, tok := range keys {
			if c.vers.valid(tok) {
				c.vers.bump(key)
				c.local.Delete(key)
			}
		}
	}
}
