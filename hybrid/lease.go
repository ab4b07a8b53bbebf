package hybrid

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds load leases (Options.LoadLease): a fill that finds
// nothing live in either tier takes a lease on its keys in the shared
// tier, so that one instance of the fleet loads a key while the others wait
// for the value it announces.

// leaseSlack is added to what a lease has left before a waiter tries to
// take it over: the holder's keep-alive may be a little late.
const leaseSlack = 2 * time.Millisecond

// maxFilledInline bounds the values one filled message carries together;
// the rest are read from the shared tier by whoever waits for them.
const maxFilledInline = 1 << 20

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

// heldLease is this instance's lease on keys, kept alive until released.
type heldLease struct {
	keys  []string // the keys, not prefixed
	token string
	life  time.Duration // the lease's lifetime, renewed by the keep-alive
	// released is set, on the fill's goroutine, once the fill has
	// released the lease or handed it to its write (see abandon).
	released bool
	once     sync.Once
	stop     chan struct{} // closed by halt: ends the keep-alive
	done     chan struct{} // closed when the keep-alive has ended
}

// halt ends h's keep-alive, if it has one, and waits for it. It may be
// called more than once, and on a nil h.
func (h *heldLease) halt() {
	if h == nil || h.stop == nil {
		return
	}
	h.once.Do(func() { close(h.stop) })
	<-h.done
}

// abandon releases h, if its fill did not, as a failed load's: deferred by
// the fill of key (or of a batch of n keys), it runs when the load calls
// runtime.Goexit or panics, so that neither the keep-alive nor the lease
// outlives the load, and the waiters hear of the failure at once.
func (c *Cache[V]) abandon(ctx context.Context, h *heldLease, what string) {
	if h != nil && !h.released && len(h.keys) > 0 {
		c.releaseLeases(ctx, h, nil, fmt.Errorf("%w: %s: %w", ErrPanic, what, errGoexit))
	}
	h.halt() // also when the fill released its keys in parts
}

// part returns a lease on keys, some of h's, to release apart from h.
func (h *heldLease) part(keys []string) *heldLease {
	return &heldLease{keys: keys, token: h.token, life: h.life}
}

// leaseKey is the shared-tier key of key's lease: Namespace:\x00lease:<key>
// (see tagKey for why the NUL byte).
func (c *Cache[V]) leaseKey(key string) string { return c.prefix + "\x00lease:" + key }

func (c *Cache[V]) leaseKeys(keys []string) []string {
	full := make([]string, len(keys))
	for i, key := range keys {
		full[i] = c.leaseKey(key)
	}
	return full
}

// leaseToken returns a token no other lease holder has: this instance's id
// and a sequence number.
func (c *Cache[V]) leaseToken() string {
	return hex.EncodeToString(c.origin[:]) + "." + strconv.FormatUint(c.leases.seq.Add(1), 10)
}

// leasing reports whether a fill under e takes leases.
func (c *Cache[V]) leasing(e *policy) bool { return e.lease > 0 && c.remote != nil && c.bus != nil }

// leased is the lease step of a fill of keys (one key, or a batch's
// misses), toks their tokens from before the fill's read. It ends each key
// in one of two ways: answer(i, it, err), with what another
// instance's load gave (a value, stored in L1 if tok[i] is still valid,
// or an error); or load(idx, h), which loads keys[idx] and stores them, h
// being this fill's lease on some of them (nil: none), to release with
// releaseLeases once stored. A key is loaded under a lease when this fill
// takes it, at once or after the holder's lease ended; without one when
// the shared tier cannot be reached for it, or after Options.LeaseWait.
// alone are keys to load without a lease from the start; they are loaded
// with the first keys this fill takes. When ctx ends, leased returns the
// keys not yet ended, for the caller to end.
func (c *Cache[V]) leased(ctx context.Context, keys []string, toks []token, alone []int, e *policy,
	answer func(i int, it item[V], err error), load func(idx []int, h *heldLease)) (left []int) {
	w := c.leases.watch(keys)
	defer c.leases.unwatch(w, keys)
	deadline := time.Now().Add(c.o.LeaseWait)
	aloneSet := make(map[int]bool, len(alone))
	for _, i := range alone {
		aloneSet[i] = true
	}
	pending := make([]int, 0, len(keys))
	for i := range keys {
		if !aloneSet[i] {
			pending = append(pending, i)
		}
	}
	takeNow := pending
	retry := make(map[int]time.Time) // when a waited lease ends
	waited := make(map[int]bool)
	holder := make([]string, len(keys)) // the token of each waited lease's holder
	for {
		if len(takeNow) > 0 || len(alone) > 0 {
			mine, h, found := c.takeRound(ctx, keys, takeNow, e, retry, waited, holder)
			if h == nil {
				// The lease could not be asked for: load them alone.
				alone = append(alone, mine...)
				mine = nil
			} else if len(mine) > 0 {
				var answered []int
				mine, answered = c.recheck(ctx, keys, mine, h, found, e, answer)
				pending = without(pending, answered)
				if len(h.keys) > 0 {
					c.keepAlive(h, e.lease)
				}
			}
			pending = without(pending, mine)
			pending = without(pending, alone)
			if len(mine)+len(alone) > 0 {
				load(append(mine, alone...), h)
			}
			takeNow, alone = nil, nil
		}
		if len(pending) == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return pending
		}
		now := time.Now()
		next := deadline
		for _, i := range pending {
			if t, ok := retry[i]; ok && t.Before(next) {
				next = t
			}
		}
		t := time.NewTimer(next.Sub(now))
		select {
		case <-w.signal:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return pending
		}
		t.Stop()
		news, all := w.take()
		now = time.Now()
		var read []int
		var still []int
		var unsure []int // a failure or not_stored, unsigned: forgeable
		for _, i := range pending {
			n, heard := news[keys[i]]
			if heard && n.holder != holder[i] {
				// Not from the holder this fill found (an earlier lease's
				// news, replayed, or a change of another kind): a reason
				// to read the key, no more.
				n = leaseNews{}
			}
			switch {
			case heard && (n.failed != nil || n.alone) && !n.sure:
				unsure = append(unsure, i)
			case heard && n.failed != nil:
				c.n.leasesAnswered.Add(1)
				answer(i, item[V]{}, n.failed)
			case heard && n.alone:
				alone = append(alone, i) // nothing to wait for: the holder cannot store it
			case heard && n.value != nil:
				if it, ok := c.takeFilled(keys[i], n.value, toks[i], e); ok {
					c.n.leasesAnswered.Add(1)
					answer(i, it, nil)
				} else {
					read = append(read, i)
				}
			case heard || all:
				read = append(read, i)
			case !now.Before(retry[i]):
				takeNow = append(takeNow, i) // the holder's lease ended: take it over
			default:
				still = append(still, i)
			}
		}
		if len(unsure) > 0 {
			// A holder releases its lease before it sends its news: while
			// it still holds it, the news is forged.
			held := c.leasesHeld(ctx, keys, unsure, holder)
			for j, i := range unsure {
				n := news[keys[i]]
				switch {
				case held[j]:
					still = append(still, i)
				case n.failed != nil:
					c.n.leasesAnswered.Add(1)
					answer(i, item[V]{}, n.failed)
				default:
					alone = append(alone, i)
				}
			}
		}
		pending = still
		if len(read) > 0 {
			again, down, cut := c.readWaited(ctx, keys, read, e, answer)
			if cut {
				return append(pending, read...)
			}
			takeNow = append(takeNow, again...)
			alone = append(alone, down...)
		}
		pending = append(pending, takeNow...)
		pending = append(pending, alone...)
		if !time.Now().Before(deadline) {
			// Waited long enough: load the rest here.
			c.n.leasesTimedOut.Add(uint64(len(pending) - len(alone)))
			alone, takeNow = pending, nil
		}
	}
}

// takeRound takes leases on keys[idx] for this fill. It returns those it
// took and the lease on them; h is nil when the shared tier could not be
// asked (then mine is idx: to load alone). For the others, retry gets when
// their holder's lease ends, and holder their holder's token. What the
// keys it took held once taken is in found, by index, for recheck.
func (c *Cache[V]) takeRound(ctx context.Context, keys []string, idx []int, e *policy, retry map[int]time.Time, waited map[int]bool, holder []string) (mine []int, h *heldLease, found map[int]taken) {
	if len(idx) == 0 {
		return nil, &heldLease{life: e.lease}, nil
	}
	tok := c.leaseToken()
	ask := pick(keys, idx)
	toks := c.tokens(ask) // before the read that comes with the take
	var got []Lease
	err := c.call(ctx, OpLease, leaseName(ask), func(ctx context.Context) (err error) {
		got, err = c.remote.TakeLeases(ctx, c.leaseKeys(ask), c.prefixed(ask), tok, e.lease)
		if err == nil && len(got) != len(ask) {
			err = fmt.Errorf("hybrid: Remote.TakeLeases returned %d results for %d keys", len(got), len(ask))
		}
		return err
	})
	if err != nil {
		c.n.leasesSkipped.Add(uint64(len(idx)))
		return idx, nil, nil
	}
	now := time.Now()
	var held []string
	for j, i := range idx {
		if got[j].Taken {
			mine = append(mine, i)
			held = append(held, keys[i])
			c.n.leasesTaken.Add(1)
			if waited[i] {
				c.n.leasesTakenOver.Add(1)
			}
			if got[j].Value != nil {
				if found == nil {
					found = make(map[int]taken)
				}
				found[i] = taken{b: got[j].Value, tok: toks[j]}
			}
			continue
		}
		if !waited[i] {
			waited[i] = true
			c.n.leasesWaited.Add(1)
		}
		retry[i] = now.Add(max(got[j].Left, time.Millisecond) + leaseSlack)
		holder[i] = got[j].Holder
	}
	return mine, &heldLease{keys: held, token: tok, life: e.lease}, found
}

// taken is what a key held right after this fill took its lease: the
// stored bytes, and the key's token from before that read.
type taken struct {
	b   []byte
	tok token
}

// recheck looks at what the keys[mine] this fill has just taken leases on
// (h) held once taken (found): another instance may have stored one
// between this fill's first read and its lease (its lease released in
// between). Those holding a live value are answered and their leases
// released, announced without a value, so that whoever waits for them
// reads them too; h keeps the rest, which are returned.
func (c *Cache[V]) recheck(ctx context.Context, keys []string, mine []int, h *heldLease, found map[int]taken, e *policy, answer func(i int, it item[V], err error)) (rest, answered []int) {
	if len(found) == 0 {
		return mine, nil
	}
	var filled []string
	for _, i := range mine {
		f, ok := found[i]
		var it item[V]
		if ok && c.take(ctx, nil, &it, keys[i], f.b, f.tok, e) == readHit {
			answered = append(answered, i)
			filled = append(filled, keys[i])
			answer(i, it, nil)
		} else {
			rest = append(rest, i)
		}
	}
	if len(filled) > 0 {
		h.keys = pick(keys, rest)
		c.releaseLeases(ctx, h.part(filled), make([][]byte, len(filled)), nil)
	}
	return rest, answered
}

// leasesHeld reports, for each keys[i] of idx, whether its lease is still
// held under holder[i], as read from the shared tier in one call. A read
// that fails reports none held.
func (c *Cache[V]) leasesHeld(ctx context.Context, keys []string, idx []int, holder []string) []bool {
	ask := pick(keys, idx)
	vals, err := c.get(ctx, OpLeaseCheck, leaseName(ask), c.leaseKeys(ask))
	held := make([]bool, len(idx))
	if err != nil {
		return held
	}
	for j, i := range idx {
		held[j] = vals[j] != nil && strings.TrimSuffix(string(vals[j]), "*") == holder[i]
	}
	return held
}

// leaseName names the keys of a lease call in spans and errors.
func leaseName(keys []string) string {
	if len(keys) == 1 {
		return keys[0]
	}
	return ""
}

// readWaited reads keys[idx], which may have been stored meanwhile, from
// the shared tier, and answers those it finds. again are the ones still to
// be loaded (to take a lease on), down the ones to load alone because the
// shared tier failed; cut reports that ctx ended first.
func (c *Cache[V]) readWaited(ctx context.Context, keys []string, idx []int, e *policy, answer func(i int, it item[V], err error)) (again, down []int, cut bool) {
	ask := pick(keys, idx)
	res, _, cut := c.readRemoteMany(ctx, ask, c.tokens(ask), e)
	if cut {
		return nil, nil, true
	}
	for j, i := range idx {
		switch res[j].st {
		case readHit:
			c.n.leasesAnswered.Add(1)
			answer(i, res[j].it, nil)
		case readDown:
			down = append(down, i)
		default:
			again = append(again, i)
		}
	}
	return again, down, false
}

// takeFilled decodes b, the value a lease holder stored under key and
// announced, and stores it in L1 if tok is still valid. It reports false
// if b does not decode or is not live, and the key is to be read instead.
func (c *Cache[V]) takeFilled(key string, b []byte, tok token, e *policy) (item[V], bool) {
	var it item[V]
	ttl, written, err := c.decodeInto(&it, b, e.timed())
	if err != nil {
		c.n.decodeErrors.Add(1)
		return item[V]{}, false
	}
	if ttl <= 0 || c.tagKnownDeleted(it.tags(), written) {
		return item[V]{}, false
	}
	c.storeLocal(nil, key, it, c.size(b), min(ttl, e.localTTL), tok, e)
	return it, true
}

// keepAlive extends h's leases every third of d until h is released, so
// that a load slower than d is not taken over while it runs.
func (c *Cache[V]) keepAlive(h *heldLease, d time.Duration) {
	h.stop, h.done = make(chan struct{}), make(chan struct{})
	keys := c.leaseKeys(h.keys)
	c.wg.Add(1) // within the fill's own count, so never after Close's Wait
	go func() {
		defer c.wg.Done()
		defer close(h.done)
		t := time.NewTicker(d / 3)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-c.stop.Done():
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(c.stop, d/3)
			var held []bool
			err := c.do(ctx, OpLeaseExtend, leaseName(h.keys), func(ctx context.Context) (err error) {
				held, err = c.remote.ExtendLeases(ctx, keys, h.token, d)
				return err
			})
			cancel()
			if err != nil || len(held) != len(keys) {
				continue // tried again at the next tick
			}
			lost := 0
			for _, ok := range held {
				if !ok {
					lost++
				}
			}
			if lost == len(keys) {
				return // taken over: our write is fenced by its set-if-absent
			}
		}
	}()
}

// storeFilled is storeRemote for the one key a fill holds a lease on (h):
// the write, the release and the announcement to the waiting instances
// are one atomic write (Write.Lease). A write not made (the key changed
// here since its token, or the call failed) still releases the lease,
// announced without a value.
func (c *Cache[V]) storeFilled(ctx context.Context, fw fillWrite, h *heldLease) {
	key, b := fw.key, fw.b
	h.halt()
	h.released = true
	m := message.Message{Op: message.OpFilled, Origin: c.origin, Namespace: c.scope, Keys: h.keys, Token: h.token}
	unstored := message.Encode(m, c.o.Secret)
	stored := unstored
	if len(c.o.Secret) > 0 && len(b) <= c.o.InlineMaxBytes {
		m.Value = message.PackValues([][]byte{b})
		stored = message.Encode(m, c.o.Secret)
	}
	wrote, tried := false, false
	err := c.retry(ctx, OpSet, key, func() bool { return c.vers.valid(fw.tok) }, func(ctx context.Context) (err error) {
		tried = true
		w := Write{Key: c.prefix + key, Value: b, TTL: fw.life, If: IfAbsent, Msg: stored, Else: unstored, Lease: c.leaseKey(key), Token: h.token}
		if fw.old != nil {
			w.If, w.Old = IfEqual, fw.old
		}
		res, err := c.remote.Write(ctx, []Write{w}, Feed{Channel: c.feed.Channel})
		if err == nil && len(res) != 1 {
			err = fmt.Errorf("hybrid: Remote.Write returned %d results for 1 write", len(res))
		}
		wrote = err == nil && res[0]
		return err
	})
	switch {
	case !tried || err != nil:
		c.releaseLeases(ctx, h, [][]byte{nil}, nil)
	case !wrote:
		c.vers.bump(key)
		c.local.Delete(key)
		c.tellHere(message.OpFilled, h.keys, nil, nil, h.token)
	default:
		c.tellHere(message.OpFilled, h.keys, [][]byte{b}, nil, h.token)
	}
}

// releaseLeases releases h, if it holds keys, and tells the instances
// waiting for one of them (the Leaser announces only if one asked) how the
// load went: for the keys it stored, their stored values
// (vals[i] for h.keys[i], nil: read it from the shared tier), or its load
// error. A fill ended by Close tells them nothing but that the lease is
// free, so that one of them takes over at once.
func (c *Cache[V]) releaseLeases(ctx context.Context, h *heldLease, vals [][]byte, loadErr error) {
	if h == nil || len(h.keys) == 0 {
		return
	}
	h.halt()
	h.released = true
	m := message.Message{Op: message.OpFilled, Origin: c.origin, Namespace: c.scope, Keys: h.keys, Token: h.token}
	switch {
	case errors.Is(loadErr, ErrNotFound):
		m.Op = message.OpNotFound
	case errors.Is(loadErr, errNotStored):
		m.Op = message.OpNotStored
	case loadErr != nil && c.stop.Err() == nil:
		m.Op, m.Value = message.OpLoadFailed, errText(loadErr.Error())
	case len(c.o.Secret) > 0 && loadErr == nil:
		inline := make([][]byte, len(h.keys))
		total := 0
		for i, b := range vals {
			if b != nil && len(b) <= c.o.InlineMaxBytes && total+len(b) <= maxFilledInline {
				inline[i] = b
				total += len(b)
			}
		}
		m.Value = message.PackValues(inline)
	}
	msg := message.Encode(m, c.o.Secret)
	// The fill's ctx may have ended (Close, LoadTimeout): the release is
	// still wanted, for at most what the lease had left.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.life+time.Second)
	defer cancel()
	// Not counted in Invalidations.Sent: the Leaser announces only when another
	// instance asked for one of the leases.
	c.call(ctx, OpLeaseRelease, leaseName(h.keys), func(ctx context.Context) error {
		return c.remote.ReleaseLeases(ctx, c.leaseKeys(h.keys), h.token, msg, Feed{Channel: c.feed.Channel})
	})
	if m.Op == message.OpFilled && loadErr != nil {
		vals = nil // a fill ended by Close: nothing stored
	}
	c.tellHere(m.Op, h.keys, vals, m.Value, h.token)
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

// without returns s without the elements of drop.
func without(s, drop []int) []int {
	if len(drop) == 0 {
		return s
	}
	gone := make(map[int]bool, len(drop))
	for _, i := range drop {
		gone[i] = true
	}
	out := s[:0:0]
	for _, i := range s {
		if !gone[i] {
			out = append(out, i)
		}
	}
	return out
}
