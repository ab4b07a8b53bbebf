package hybrid

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds what a fill waiting for another instance's lease hears:
// the holder's news (its value, its error, or that it could not store),
// from the bus or from a fill of this instance.

// leaseState is this instance's side of leases: the fills waiting for
// keys leased by other instances, which the bus's goroutine tells of what
// it hears about those keys.
type leaseState struct {
	mu      sync.Mutex
	waits   map[string][]*leaseWait
	waiting atomic.Int32  // fills watching keys, read by onMessage without mu
	seq     atomic.Uint64 // makes this instance's tokens unique
}

// leaseWait is one fill's watch over the keys it waits for.
type leaseWait struct {
	mu     sync.Mutex
	news   map[string]leaseNews
	all    bool          // messages may have been lost: check every key
	signal chan struct{} // cap 1: something was posted
}

// leaseNews is what was heard about a watched key: a holder's stored value
// (value), its load error (failed), that it could not store what it loaded
// (alone: load it here, without a lease), or a change of another kind,
// after which the key is to be read from the shared tier (none of those).
// A holder's news names its lease token (holder): a waiter takes it only
// from the holder it found, and reads the key on any other.
type leaseNews struct {
	value  []byte
	failed error
	alone  bool
	holder string // the sender's lease token; "": not a holder's news
	sure   bool   // signed, or this instance's own: no need to check the lease
}

// errNotStored tells releaseLeases that the holder loaded its keys but
// could not store them.
var errNotStored = errors.New("hybrid: loaded value not stored")

// watch registers a wait for news of keys.
func (s *leaseState) watch(keys []string) *leaseWait {
	w := &leaseWait{signal: make(chan struct{}, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waits == nil {
		s.waits = make(map[string][]*leaseWait)
	}
	for _, key := range keys {
		s.waits[key] = append(s.waits[key], w)
	}
	s.waiting.Add(1)
	return w
}

// unwatch ends w's watch of keys.
func (s *leaseState) unwatch(w *leaseWait, keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, key := range keys {
		ws := s.waits[key]
		for i, x := range ws {
			if x == w {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(s.waits, key)
		} else {
			s.waits[key] = ws
		}
	}
	s.waiting.Add(-1)
}

// post tells the waits on key of n.
func (s *leaseState) post(key string, n leaseNews) {
	if s.waiting.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.waits[key] {
		w.post(key, n)
	}
}

// postAll tells every wait to check all its keys: messages may have been
// lost, or a Clear or DeleteByTag changed keys no message names.
func (s *leaseState) postAll() {
	if s.waiting.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[*leaseWait]bool)
	for _, ws := range s.waits {
		for _, w := range ws {
			if !seen[w] {
				seen[w] = true
				w.mu.Lock()
				w.all = true
				w.mu.Unlock()
				w.wake()
			}
		}
	}
}

func (w *leaseWait) post(key string, n leaseNews) {
	w.mu.Lock()
	if w.news == nil {
		w.news = make(map[string]leaseNews)
	}
	if _, ok := w.news[key]; ok {
		// Two messages before the wait looked: the key may have changed
		// after the holder's fill, so only the shared tier can tell.
		n = leaseNews{}
	}
	w.news[key] = n
	w.mu.Unlock()
	w.wake()
}

func (w *leaseWait) wake() {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// take returns what was posted since the last take.
func (w *leaseWait) take() (news map[string]leaseNews, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	news, all = w.news, w.all
	w.news, w.all = nil, false
	return news, all
}

// maxErrText bounds the error text a lease holder's load_failed message
// carries, and that a waiter takes from one.
const maxErrText = 256

// errText returns the first line of a load's error text (a panic's stack
// follows it), cut to maxErrText bytes.
func errText(s string) []byte {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > maxErrText {
		s = strings.ToValidUTF8(s[:maxErrText], "")
	}
	return []byte(s)
}

// errPeerLoad is the error a waiter's callers get for a load that failed
// on the instance that held the lease: it wraps ErrLeaseHolderFailed and
// carries the holder's error text (text, empty without a Secret).
func errPeerLoad(key string, text []byte) error {
	if len(text) == 0 {
		return fmt.Errorf("hybrid: load %q: %w", key, ErrLeaseHolderFailed)
	}
	return fmt.Errorf("hybrid: load %q: %w: %s", key, ErrLeaseHolderFailed, errText(string(text)))
}

// onLeaseMessage passes a lease holder's filled, load_failed, not_found
// or not_stored message to the fills waiting for its keys. With a Secret,
// the holder's token of an unsigned message is not trusted (its news is
// only a reason to read); without one, nothing is signed, and a failure
// or not_stored is checked against the lease (see leased).
func (c *Cache[V]) onLeaseMessage(m message.Message) {
	var vals [][]byte
	if m.Op == message.OpFilled && m.Value != nil {
		vals, _ = message.UnpackValues(m.Value, len(m.Keys)) // on error: read them
	}
	token := m.Token
	if len(c.o.Secret) > 0 && !m.Authentic {
		token = ""
	}
	c.hear(m.Op, m.Keys, vals, m.Value, token, m.Authentic)
}

// tellHere passes this instance's own lease news (op on keys, with vals for
// filled, or text for load_failed, from its lease token) to the fills here
// that wait for its keys: a fill that started while this instance held the lease (a Delete,
// Clear or bus loss made callers start anew) waits for it too, and own
// messages are dropped when they come back (admit).
func (c *Cache[V]) tellHere(op message.Op, keys []string, vals [][]byte, text []byte, token string) {
	if c.leases.waiting.Load() == 0 {
		return
	}
	c.hear(op, keys, vals, text, token, true)
}

// hear posts the news of the lease holder of token, op on keys, to the
// fills waiting for them: for filled, vals[i] is keys[i]'s stored value
// (nil, or vals nil: read it); for load_failed, text is the holder's error
// text. sure says the news needs no check (signed, or our own).
func (c *Cache[V]) hear(op message.Op, keys []string, vals [][]byte, text []byte, token string, sure bool) {
	for i, key := range keys {
		n := leaseNews{holder: token, sure: sure}
		switch op {
		case message.OpLoadFailed:
			n.failed = errPeerLoad(key, text)
		case message.OpNotFound:
			n.failed = fmt.Errorf("hybrid: load %q: %w", key, ErrNotFound)
		case message.OpNotStored:
			n.alone = true
		default:
			if vals != nil {
				n.value = vals[i]
			}
		}
		c.leases.post(key, n)
	}
}
