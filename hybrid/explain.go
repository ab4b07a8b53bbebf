package hybrid

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hybridcache/hybridcache/internal/envelope"
)

// This file holds Explain: what L1 here and the shared tier hold for one
// key, read without changing either, and whether they agree.

// Explanation is what Explain found for one key: what L1 holds here, what
// the shared tier holds, and whether they agree. It holds no value, only
// what is known of it, so that a debug handler can serve it as JSON (see
// package hybridhttp). Durations are in nanoseconds in JSON.
type Explanation struct {
	Namespace string    `json:"namespace"`
	Key       string    `json:"key"`
	At        time.Time `json:"at"` // when Explain looked
	// L1 is what this instance's L1 holds.
	L1 LocalView `json:"l1"`
	// Remote is what the shared tier holds.
	Remote RemoteView `json:"remote"`
	// Agreement is how the two compare; Detail says it in a sentence.
	Agreement Agreement `json:"agreement"`
	Detail    string    `json:"detail"`
}

// LocalView is what L1 holds for a key (see Explanation). What is not known
// is zero: an L1 entry without a schedule, tags or a version keeps its
// value alone (see Entry), so its Written and Age are zero.
type LocalView struct {
	Present bool `json:"present"`
	// State is "live"; "stale", past its logical lifetime and kept by
	// fail-safe (reads miss it unless they allow stale values); or
	// "absent", a remembered absence (NegativeTTL). Empty when not present.
	State string `json:"state,omitempty"`
	// Held reports an entry that a read checks against the shared tier
	// before serving it: the bus lost messages (LossGrace, StrictLoss).
	Held    bool      `json:"held,omitempty"`
	Written time.Time `json:"written,omitzero"` // when the value was written to the shared tier, by its writer's clock
	// Age is how long ago it was written; InL1For how long ago this
	// instance stored it in L1.
	Age     time.Duration `json:"age_ns,omitempty"`
	InL1For time.Duration `json:"in_l1_ns,omitempty"`
	// TTL is its logical lifetime left here (negative: stale by that
	// much); L1TTL is how long L1 keeps the entry (fail-safe's extra age
	// included); RemoteTTL is its logical lifetime left in the shared tier
	// as this instance last knew it.
	TTL       time.Duration `json:"ttl_ns,omitempty"`
	L1TTL     time.Duration `json:"l1_ttl_ns,omitempty"`
	RemoteTTL time.Duration `json:"remote_ttl_ns,omitempty"`
	Tags      []string      `json:"tags,omitempty"`
	Version   string        `json:"version,omitempty"`
	// Weight is what the entry weighs in L1, in bytes, key and overhead
	// included.
	Weight uint32 `json:"weight,omitempty"`
}

// RemoteView is what the shared tier holds for a key (see Explanation):
// its envelope's header, not the value. The key's physical lifetime in
// Redis (its TTL, fail-safe's extra age included) is not reported: the
// Remote contract does not read it.
type RemoteView struct {
	// Checked is false when the cache has no Remote or the read failed
	// (then Error says why): the rest is then zero.
	Checked bool   `json:"checked"`
	Error   string `json:"error,omitempty"`
	Present bool   `json:"present"`
	// State is "missing" (no key); "value", a live value; "stale", a value
	// past its logical lifetime kept for fail-safe; "absent", a remembered
	// absence; "deleted", a tombstone left by Delete; "cleared", a value
	// that a Clear or DeleteByTag since its write deletes (DeletedBy says
	// which); or "corrupt", bytes this cache does not decode (DecodeError
	// says why). Reads miss all but "value" and "absent" (a miss too, but
	// remembered).
	State       string        `json:"state"`
	DeletedBy   string        `json:"deleted_by,omitempty"` // "clear", or "tag:" and the tag
	DecodeError string        `json:"decode_error,omitempty"`
	Written     time.Time     `json:"written,omitzero"`
	Age         time.Duration `json:"age_ns,omitempty"`
	Expires     time.Time     `json:"expires,omitzero"` // the logical expiry
	TTL         time.Duration `json:"ttl_ns,omitempty"` // the logical lifetime left; negative: stale
	// Flags names the envelope's flags: absent, deleted, tagged,
	// compressed, versioned, load_time.
	Flags    []string      `json:"flags,omitempty"`
	Codec    byte          `json:"codec,omitempty"`
	Tags     []string      `json:"tags,omitempty"`
	Version  string        `json:"version,omitempty"`
	LoadTime time.Duration `json:"load_time_ns,omitempty"`
	Size     int           `json:"size,omitempty"` // the stored envelope's length, in bytes
	// LeaseHeld reports that some instance holds the key's load lease
	// (Options.LoadLease): a load of it is running.
	LeaseHeld bool `json:"lease_held,omitempty"`
}

// Agreement is how L1's entry for a key compares with the shared tier's
// (see Explanation).
type Agreement string

// The agreements. Two entries are the same write when their write times
// (to the millisecond) and versions match; when L1 did not keep the write
// time, their encoded values are compared instead (Detail says which).
const (
	AgreementSame          Agreement = "agree"          // the same write in both, or no value in either
	AgreementNowhere       Agreement = "nowhere"        // neither tier holds the key
	AgreementL1Missing     Agreement = "l1_missing"     // the shared tier holds it, L1 here does not: a read takes it from there
	AgreementRemoteMissing Agreement = "remote_missing" // L1 holds a value the shared tier does not (missing, deleted, cleared, corrupt)
	AgreementL1Older       Agreement = "l1_older"       // L1's entry was written before the shared tier's: stale here
	AgreementL1Newer       Agreement = "l1_newer"       // L1's entry was written after the shared tier's
	AgreementDiffer        Agreement = "differ"         // different values, write order unknown
	AgreementUnknown       Agreement = "unknown"        // the shared tier was not read (none, or the read failed)
)

// Explain reports what this instance's L1 and the shared tier hold for
// key, and whether they agree (see Explanation): for a debug endpoint, or
// to answer "why did this instance serve that value?". It changes nothing:
// it stores nothing, loads nothing, counts no hit or miss and tells L1's
// eviction policy nothing. It reads the shared tier once (the key, its load
// lease and the record of the last Clear), and once more for a tagged
// value's tag records, under ctx and the breaker; a failure of that read
// is counted as any shared-tier error and returned, wrapped, with the L1
// part filled in. A bad key gets the error every call gives it.
//
// NOTE: an Explanation names the key and its tags: serve it only behind
// the service's debug authentication.
func (c *Cache[V]) Explain(ctx context.Context, key string) (Explanation, error) {
	if err := c.check(ctx, key); err != nil {
		return Explanation{}, err
	}
	x := Explanation{Namespace: c.o.Namespace, Key: key, At: time.Now()}
	it, inL1 := c.peek(key, &x.L1)
	if c.remote == nil {
		x.Agreement, x.Detail = AgreementUnknown, "the cache has no shared tier"
		return x, nil
	}
	payload, err := c.explainRemote(ctx, key, &x.Remote)
	if err != nil {
		x.Remote.Error = err.Error()
		x.Agreement, x.Detail = AgreementUnknown, "the shared tier could not be read"
		if errors.Is(err, errCallerDone) {
			err = ctx.Err()
		}
		return x, fmt.Errorf("hybrid: explain %q: %w", key, err)
	}
	x.Agreement, x.Detail = c.agreement(it, inL1, &x.L1, &x.Remote, payload)
	return x, nil
}

// peek fills l with what L1 holds for key, without counting or promoting
// it, and returns the entry.
func (c *Cache[V]) peek(key string, l *LocalView) (item[V], bool) {
	it, exp, w, ok := c.local.Peek(key)
	if !ok {
		return it, false
	}
	now := c.local.Now()
	l.Present, l.Weight, l.Held = true, w, c.held(it)
	l.State = "live"
	l.InL1For = c.storedAge(it.stored)
	l.L1TTL = time.Duration(exp - now)
	l.TTL = l.L1TTL
	if t := it.t; t != nil {
		if t.expires != math.MaxInt64 {
			l.TTL = time.Duration(t.expires - now)
		}
		if t.written != 0 {
			l.Written = time.Unix(0, t.written)
			l.Age = time.Since(l.Written)
		}
		if t.remote != 0 {
			l.RemoteTTL = time.Until(time.Unix(0, t.remote))
		}
		l.Tags, l.Version = t.tags, t.version
		if l.TTL <= 0 {
			l.State = "stale"
		}
	}
	if it.absent {
		l.State = "absent"
	}
	return it, true
}

// explainRemote fills r with what the shared tier holds for key, and
// returns the codec's bytes of a value that decodes (compressed or not).
func (c *Cache[V]) explainRemote(ctx context.Context, key string, r *RemoteView) ([]byte, error) {
	vals, err := c.get(ctx, OpExplain, key, []string{c.prefix + key, c.leaseKey(key), c.tagKey(clearTag)})
	if err != nil {
		return nil, err
	}
	r.Checked, r.State, r.LeaseHeld = true, "missing", vals[1] != nil
	b := vals[0]
	if b == nil {
		return nil, nil
	}
	r.Present, r.Size = true, len(b)
	h, payload, err := envelope.Decode(b)
	if err != nil {
		r.State, r.DecodeError = "corrupt", err.Error()
		return nil, nil
	}
	r.Codec, r.Tags, r.Version, r.LoadTime = h.Codec, h.Tags, h.Version, h.LoadTime
	r.Flags = flagNames(h.Flags)
	r.Written, r.Age = h.Written, time.Since(h.Written)
	if !h.Expires.IsZero() {
		r.Expires, r.TTL = h.Expires, time.Until(h.Expires)
	}
	var it item[V]
	_, _, err = c.decodeInto(&it, b, false)
	switch {
	case errors.Is(err, errTombstone):
		r.State = "deleted"
		return nil, nil
	case err != nil:
		r.State, r.DecodeError = "corrupt", err.Error()
		return nil, nil
	}
	if by, err := c.deletedBy(ctx, key, vals[2], h); err != nil || by != "" {
		r.State, r.DeletedBy = "cleared", by
		return nil, err
	}
	switch {
	case h.Flags&envelope.FlagAbsent != 0:
		r.State = "absent"
	case !h.Expires.IsZero() && r.TTL <= 0:
		r.State = "stale"
	default:
		r.State = "value"
	}
	if h.Flags&envelope.FlagCompressed != 0 {
		payload, _ = c.decompress(payload) // it decoded above
	}
	return payload, nil
}

// deletedBy names the record that deletes a value with header h: "clear"
// when clear, the record of the last Clear, postdates its write, else
// "tag:" and the first of its tags whose record does (read from the shared
// tier, not learnt). "" when none does.
func (c *Cache[V]) deletedBy(ctx context.Context, key string, clear []byte, h envelope.Header) (string, error) {
	written := h.Written.UnixNano()
	if t, ok := decodeTagRecord(clear); ok && deletedSince(t, written) {
		return "clear", nil
	}
	if len(h.Tags) == 0 {
		return "", nil
	}
	keys := make([]string, len(h.Tags))
	for i, tag := range h.Tags {
		keys[i] = c.tagKey(tag)
	}
	vals, err := c.get(ctx, OpExplain, key, keys)
	if err != nil {
		return "", err
	}
	for i, b := range vals {
		if t, ok := decodeTagRecord(b); ok && deletedSince(t, written) {
			return "tag:" + h.Tags[i], nil
		}
	}
	return "", nil
}

// flagNames names the envelope flags set in f.
func flagNames(f byte) []string {
	var names []string
	for _, n := range [...]struct {
		bit  byte
		name string
	}{
		{envelope.FlagAbsent, "absent"}, {envelope.FlagDeleted, "deleted"}, {envelope.FlagTagged, "tagged"},
		{envelope.FlagCompressed, "compressed"}, {envelope.FlagVersioned, "versioned"}, {envelope.FlagLoadTime, "load_time"},
	} {
		if f&n.bit != 0 {
			names = append(names, n.name)
		}
	}
	return names
}

// agreement compares L1's entry it (if inL1), seen as l, with the shared
// tier's, seen as r, whose codec bytes are payload.
func (c *Cache[V]) agreement(it item[V], inL1 bool, l *LocalView, r *RemoteView, payload []byte) (Agreement, string) {
	held := r.State == "value" || r.State == "stale" || r.State == "absent"
	switch {
	case !inL1 && !held:
		return AgreementNowhere, "neither L1 here nor the shared tier holds the key (shared tier: " + r.State + ")"
	case !inL1:
		return AgreementL1Missing, "L1 here does not hold the key; the shared tier holds it (" + r.State + ")"
	case !held && it.absent:
		return AgreementSame, "neither holds a value: L1 remembers an absence, the shared tier is " + r.State
	case !held:
		return AgreementRemoteMissing, "L1 here holds a value the shared tier does not (" + r.State + ")"
	}
	if !l.Written.IsZero() {
		lw, rw := l.Written.UnixMilli(), r.Written.UnixMilli()
		switch {
		case lw < rw:
			return AgreementL1Older, fmt.Sprintf("L1's entry was written %v before the shared tier's: stale here", r.Written.Sub(l.Written))
		case lw > rw:
			return AgreementL1Newer, fmt.Sprintf("L1's entry was written %v after the shared tier's", l.Written.Sub(r.Written))
		case l.Version != r.Version:
			return AgreementDiffer, fmt.Sprintf("same write time, versions %q here and %q in the shared tier", l.Version, r.Version)
		}
		return AgreementSame, "the same write (by write time and version)"
	}
	if it.absent || r.State == "absent" {
		if it.absent && r.State == "absent" {
			return AgreementSame, "both remember an absence"
		}
		return AgreementDiffer, "one holds a value, the other an absence (L1 keeps no write time)"
	}
	enc, err := c.codec.Marshal(it.v)
	if err != nil {
		return AgreementDiffer, "L1's value does not encode: " + err.Error()
	}
	if bytes.Equal(enc, payload) {
		return AgreementSame, "the same value (by its encoding; L1 keeps no write time)"
	}
	return AgreementDiffer, "different values (by their encoding; L1 keeps no write time)"
}
