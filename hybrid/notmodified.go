package hybrid

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"sync"
	"time"

	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds conditional refresh. A load called to replace a value
// (an eager refresh, or a fill after the value's expiry with fail-safe
// keeping it) finds the value and the version its own load gave it with
// StaleFrom. When it answers ErrNotModified, the value lives on for a new
// lifetime: in L1 here, in the shared tier by a touch of its envelope's
// expiry (Write.Touch: the value is neither encoded nor sent again), and on
// every instance that holds the same value, told by one message (extend).

// ErrNotModified is returned by a load function called to refresh a value
// (see StaleFrom) to say that the value has not changed since the version
// it carries: the cache then extends its lifetime in L1, in the shared tier
// and on the other instances that hold it, without encoding or sending the
// value again (Stats.Load.NotModified counts these). Returned for a key
// with no value at hand to keep, it is an error like any other. Check it
// with errors.Is.
var ErrNotModified = errors.New("hybrid: not modified")

// Stale is a value that a load is called to replace, as StaleFrom gives it.
type Stale[V any] struct {
	Value V
	// Version is the version the load that stored Value gave it (see
	// SetVersion), "" for none.
	Version string
	// Written is when Value was written to the shared tier.
	Written time.Time
}

// StaleFrom returns, inside a load function, the value the load is called
// to replace for key, and ok true: when it refreshes the value eagerly
// (Options.EagerRefresh), or loads it after its expiry while fail-safe
// keeps it (Options.FailSafeMaxAge). A load that finds the value unchanged
// since s.Version (or s.Written) returns ErrNotModified, or, in a batch
// load, returns s.Value under key having set its version to s.Version
// (SetVersion). V must be the cache's value type. ok is false in any other
// load, or for a key the load has no value to replace for.
//
// NOTE: s.Value is the cached value itself, shared as GetOrCreate's
// results are: do not modify it.
func StaleFrom[V any](ctx context.Context, key string) (s Stale[V], ok bool) {
	n, _ := ctx.Value(noteKey{}).(*loadNote[V])
	if n == nil {
		return s, false
	}
	it, ok := n.stale[key]
	if !ok {
		return s, false
	}
	return Stale[V]{Value: it.v, Version: it.t.version, Written: time.Unix(0, it.t.written)}, true
}

// SetVersion records, inside a load function, the version of the value the
// load returns for key: an ETag or a last-modified time, say, of at most
// 255 bytes. It is stored with the value, given back by StaleFrom when the
// value is refreshed, and reported by GetEntry. It returns an error when
// ctx is not a load function's, key is not one the load was called for,
// or version is empty or too long.
//
// NOTE: an instance that predates versions reads a value stored with one
// as corrupt: a miss, counted in Stats.L2.DecodeErrors, whose fill then
// replaces it. Upgrade every instance before loads set versions.
func SetVersion(ctx context.Context, key, version string) error {
	n, _ := ctx.Value(noteKey{}).(versioner)
	if n == nil {
		return errors.New("hybrid: SetVersion: ctx is not a load function's")
	}
	return n.setVersion(key, version)
}

type noteKey struct{}

// versioner is the part of a loadNote that SetVersion, which does not
// know V, uses.
type versioner interface {
	setVersion(key, version string) error
}

// loadNote is what a load's ctx carries for StaleFrom and SetVersion: it is
// that ctx, so that it costs one allocation per load.
type loadNote[V any] struct {
	context.Context
	keys  []string
	stale map[string]item[V] // by key, the value a refresh replaces (with a timing)

	mu       sync.Mutex
	versions map[string]string
}

// newLoadNote returns the note of a load of keys.
func newLoadNote[V any](keys []string) *loadNote[V] { return &loadNote[V]{keys: keys} }

// replaces records that the load replaces it, a value with a timing, for
// key.
func (n *loadNote[V]) replaces(key string, it item[V]) {
	if it.t == nil || it.absent {
		return
	}
	if n.stale == nil {
		n.stale = make(map[string]item[V])
	}
	n.stale[key] = it
}

// in returns n as the load's ctx, over ctx.
func (n *loadNote[V]) in(ctx context.Context) context.Context {
	if n == nil {
		return ctx
	}
	n.Context = ctx
	return n
}

func (n *loadNote[V]) Value(key any) any {
	if _, ok := key.(noteKey); ok {
		return n
	}
	return n.Context.Value(key)
}

func (n *loadNote[V]) setVersion(key, version string) error {
	if version == "" || len(version) > envelope.MaxVersionLen {
		return fmt.Errorf("hybrid: SetVersion(%q): version of %d bytes, want 1 to %d", key, len(version), envelope.MaxVersionLen)
	}
	if !n.loads(key) {
		return fmt.Errorf("hybrid: SetVersion(%q): the load was not called for this key", key)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.versions == nil {
		n.versions = make(map[string]string)
	}
	n.versions[key] = version
	return nil
}

// loads reports whether the load was called for key.
func (n *loadNote[V]) loads(key string) bool {
	if _, ok := n.stale[key]; ok {
		return true
	}
	for _, k := range n.keys {
		if k == key {
			return true
		}
	}
	return false
}

// version is the version the load gave key, "" for none.
func (n *loadNote[V]) version(key string) string {
	if n == nil {
		return ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.versions[key]
}

// unmodified splits idx, the indexes in keys of a load's keys, into those
// the load found not modified and the rest, given what it returned: on
// ErrNotModified, every key with a value at hand to keep (for the rest it
// is a failure); else each key returned with the version of the value it
// replaces.
func unmodified[V any](keys []string, idx []int, n *loadNote[V], loaded map[string]V, err error) (nm, rest []int, _ error) {
	if n == nil || len(n.stale) == 0 {
		return nil, idx, err
	}
	if errors.Is(err, ErrNotModified) {
		for _, i := range idx {
			if _, ok := n.stale[keys[i]]; ok {
				nm = append(nm, i)
			} else {
				rest = append(rest, i)
			}
		}
		if len(rest) > 0 {
			return nm, rest, fmt.Errorf("%w, and there is no value to keep", err)
		}
		return nm, nil, nil
	}
	if err != nil {
		return nil, idx, err
	}
	for _, i := range idx {
		key := keys[i]
		s, ok := n.stale[key]
		if _, in := loaded[key]; ok && in && s.t.version != "" && n.version(key) == s.t.version {
			nm = append(nm, i)
		} else {
			rest = append(rest, i)
		}
	}
	return nm, rest, nil
}

// extension is a key whose load answered not modified: the value it
// keeps, as held (with a timing), the key's token from before the fill's
// read and its sequence counter as that read found it (see seqKey).
type extension[V any] struct {
	key    string
	it     item[V]
	tok    token
	seqWas []byte
}

// extend gives each of xs a new lifetime, as e says, and returns its items
// as extended, by index: in L1 here at once (unless the key changed since
// its token), then in the shared tier, where the key still holds that value,
// by a touch of its envelope's expiry announced to the other instances,
// which extend their copies of it. Where the shared tier holds another
// value, or none, the value is written back as a fill's would be: it stays
// where nothing is, and leaves L1 where another value is.
func (c *Cache[V]) extend(ctx context.Context, xs []extension[V], e *policy) []item[V] {
	out := make([]item[V], len(xs))
	ws := make([]tier.Write, 0, len(xs))
	ms := make([]message.Message, 0, len(xs))
	lb := c.local.Batch()
	for j, x := range xs {
		p := e.of(x.key)
		ttl, localTTL := c.lifetimes(p)
		exp := min(time.Now().Add(ttl).UnixMilli(), envelope.MaxTime.UnixMilli()) // as the envelope's writer clamps it
		t := *x.it.t
		t.staleAt, t.remote, t.fresh = 0, exp*1e6, true
		it := x.it
		it.t = &t
		out[j] = it
		c.storeLocal(lb, x.key, it, t.size, localTTL, x.tok, p)
		m := message.Message{Op: message.OpExtend, Origin: c.origin, Namespace: c.scope, Keys: []string{x.key},
			Value: extendValue(exp, t.written/1e6, t.version)}
		ms = append(ms, m)
		msg, entry := c.announced(m)
		head := envelope.Head(nil, envelope.Header{Codec: c.codec.ID(), Flags: t.flags, Written: time.UnixMilli(t.written / 1e6), Tags: t.tags, Version: t.version})
		ws = append(ws, tier.Write{Key: c.prefix + x.key, If: tier.IfEqual, Touch: true, TouchAt: envelope.ExpiresAt, Old: head,
			Value: binary.BigEndian.AppendUint64(nil, uint64(exp)), TTL: p.physical(ttl), Msg: msg, Log: entry})
	}
	lb.Done()
	c.n.notModified.Add(uint64(len(xs)))
	if c.remote == nil {
		for _, m := range ms {
			if c.bus != nil && c.publish(ctx, m) != nil {
				break
			}
		}
		return out
	}
	name := ""
	if len(xs) == 1 {
		name = xs[0].key
	}
	stored, err := c.write(ctx, OpTouch, name, ws)
	if err != nil {
		c.log.log(logL2, "hybrid: not-modified refresh could not extend the shared tier's value; extended in L1 only", "namespace", c.o.Namespace, "err", err)
		return out
	}
	var fws []fillWrite
	for j, x := range xs {
		if stored[j] {
			if ws[j].Msg != nil {
				c.n.published.Add(1)
			}
			continue
		}
		c.knowTags(ctx, x.it.t.tags)
		b, err := c.encode(x.key, x.it.v, time.Duration(out[j].t.remote-time.Now().UnixNano()), x.it.t.tags, x.it.t.version)
		if err != nil {
			c.vers.bump(x.key)
			c.local.Delete(x.key)
			continue
		}
		fws = append(fws, fillWrite{key: x.key, b: b, life: ws[j].TTL, tok: x.tok, seq: c.seqKey(x.key), seqWas: x.seqWas})
	}
	c.storeRemote(ctx, fws)
	return out
}

// extendFilled extends the values of f.keys[nm], which its load found not
// modified (see extend), answers their callers with them, and releases
// the lease h holds on any of them, for their waiters to read them. It
// returns h with the keys it still holds (nil: none).
func (c *Cache[V]) extendFilled(ctx context.Context, f *fill[V], nm []int, note *loadNote[V], h *heldLease) *heldLease {
	xs := make([]extension[V], len(nm))
	for j, i := range nm {
		xs[j] = extension[V]{key: f.keys[i], it: note.stale[f.keys[i]], tok: f.toks[i], seqWas: f.seqWas[f.keys[i]]}
	}
	its := c.extend(ctx, xs, &f.e)
	for j, i := range nm {
		f.vals[i].it = its[j]
	}
	c.flights.FinishMany(f.keys, f.calls, nm, f.result)
	if h == nil {
		return nil
	}
	var done, kept []string
	for _, key := range h.keys {
		if _, ok := note.stale[key]; ok && inIdx(f.keys, nm, key) {
			done = append(done, key)
		} else {
			kept = append(kept, key)
		}
	}
	switch {
	case len(done) == 0:
		return h
	case len(kept) == 0:
		c.releaseLeases(ctx, h, make([][]byte, len(done)), nil)
		return nil
	}
	c.releaseLeases(ctx, h.part(done), make([][]byte, len(done)), nil)
	h.keys = kept
	return h
}

// inIdx reports whether key is one of keys[idx].
func inIdx(keys []string, idx []int, key string) bool {
	for _, i := range idx {
		if keys[i] == key {
			return true
		}
	}
	return false
}

// extendValue is the Value of an extend message: the new logical expiry and
// the write time (Unix milliseconds, 8 bytes big-endian each) and version
// of the value extended.
func extendValue(exp, written int64, version string) []byte {
	b := make([]byte, 0, 16+len(version))
	b = binary.BigEndian.AppendUint64(b, uint64(exp))
	b = binary.BigEndian.AppendUint64(b, uint64(written))
	return append(b, version...)
}

// parseExtend undoes extendValue; ok is false for anything else.
func parseExtend(b []byte) (exp, written int64, version string, ok bool) {
	if len(b) < 16 || len(b) > 16+envelope.MaxVersionLen {
		return 0, 0, "", false
	}
	return int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[8:])), string(b[16:]), true
}

// onExtend applies another instance's extend message for key: an L1 entry
// holding the value it names (by write time and version) lives until the
// new expiry (within LocalTTL); any other entry of key is dropped, as on a
// set, and so is every entry when the message carries no usable value (a
// replay from the log, or an unsigned one where a Secret is set).
func (c *Cache[V]) onExtend(m message.Message) {
	exp, written, version, ok := parseExtend(m.Value)
	ok = ok && (len(c.o.Secret) == 0 || m.Authentic)
	for i, key := range m.Keys {
		c.leases.post(key, leaseNews{}) // a fill waiting for a lease reads it
		if i == 0 && ok && c.extendLocal(key, exp, written, version) {
			continue
		}
		c.vers.bump(key)
		c.flights.Forget(key)
		c.local.Delete(key)
	}
}

// extendLocal gives key's L1 entry a new logical lifetime ending at exp
// (Unix milliseconds), if it holds the value written at written with
// version, and reports whether it did.
func (c *Cache[V]) extendLocal(key string, exp, written int64, version string) bool {
	ttl := time.Until(time.UnixMilli(exp))
	if ttl <= 0 {
		return false
	}
	extended := false
	p := c.keyDefaults(key)
	c.local.Update(key, func(old item[V]) (item[V], uint32, time.Duration, bool) {
		if old.absent || old.t == nil || old.t.written != written*1e6 || old.t.version != version {
			return old, 0, 0, true // drop
		}
		t := *old.t
		t.staleAt, t.remote, t.fresh = 0, exp*1e6, true
		it := old
		it.t = &t
		it, life := c.stamp(it, t.size, min(ttl, p.localTTL), p)
		extended = true
		return it, weight(key, it, t.size), life, true
	})
	if extended {
		c.n.extended.Add(1)
	}
	return extended
}
