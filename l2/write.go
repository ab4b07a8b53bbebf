package l2

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/keyslot"
	"github.com/hybridcache/hybridcache/tier"
)

// Write makes each write of ws, in order, announcing on f, and reports in
// stored[i] whether ws[i] stored its value (see tier.Write for what each
// field asks). With no writes it returns at once.
//
// A write that asks for nothing but its value, with Always or IfAbsent
// (no Msg, Else, Log, Lease or KeepTTL, or an empty f.Channel for its
// messages), is a plain SET, or SET NX. Any other is writeScript (see
// scripts.go), which checks its condition and reads its lease first, then
// appends to the log, then writes, then releases the lease, then
// publishes: one atomic step, so that the order of messages on
// f.Channel, and of log entries, is the order of the writes. More than
// one write go in one pipeline: one round trip per node, whose writes are
// not atomic together. Scripts go by EVALSHA, and those that meet NOSCRIPT
// again by EVAL, in order; the writes of a key that has a script in the
// batch all go as scripts, so that a second try never passes a later
// write of its key.
//
// A ttl is rounded down to whole milliseconds, and up to one when it is
// shorter; zero or less is no expiry.
//
// In Redis Cluster a write's KEYS must share a slot. A lease in the slot
// of the key it guards (a hash tag: package hybrid names leases so) is
// released by the write's own script, as on one server. A lease in
// another slot is not: that write is made first without it, and once every write of the batch is done the
// leases are released by releaseScript, each on its own master, which
// publishes the write's message (cluster-wide, as every PUBLISH from a
// script): two round trips, so that whoever hears the message finds the
// value written and the lease released. With a Ring the message is a
// PUBLISH of its own after the release, sent to the channel's shard, where
// the Ring's subscribers listen; a write's other messages go from its
// key's shard, and reach only the subscribers of that shard.
//
// Neither keeps a log: there a write with Log set fails the batch, before
// any round trip, with an error wrapping errors.ErrUnsupported. Anywhere,
// so does a write asking for what it cannot have: an unknown condition,
// KeepTTL or Touch without IfEqual, a negative StampAt or TouchAt, a Log
// without f.Log or with f.LogLen under 1. A Touch is writeScript's
// SETRANGE of its Value and PEXPIRE of its TTL: the value's other bytes
// are neither sent nor rewritten.
//
// A batch announced as a whole (Feed.Msg) goes, on one server, as one
// MULTI/EXEC transaction: its writes (scripts by EVAL), then
// announceScript, which appends Feed.Entry to the log and publishes
// Feed.Msg positioned at it: one round trip, one atomic step (Info's
// AtomicBatch). In Redis Cluster and with a Ring, Feed.Msg is published
// once every write of the batch, on every node, is done (and its lease
// released): a round trip of its own, after which whoever hears the
// message finds every write made, though another writer's may have come
// between (so the message should carry no values there). A Feed.Entry
// there fails the batch with an error wrapping errors.ErrUnsupported.
//
// NOTE: an error does not say a write was not made: a reply may be lost
// after Redis ran the command. The writes that stored[i] reports were
// made; in Redis Cluster and with a Ring, a write whose release or message
// failed is reported stored, and its lease left to expire.
func (s *Store) Write(ctx context.Context, ws []tier.Write, f tier.Feed) (stored []bool, err error) {
	if len(ws) == 0 {
		return nil, nil
	}
	sub := subject{op: "write", noun: "keys", key: ws[0].Key, n: len(ws)}
	if err := s.checkFeed(f); err != nil {
		return nil, sub.fail(err)
	}
	for i := range ws {
		if err := s.check(&ws[i], f); err != nil {
			return nil, sub.fail(keyErr(ws, i, err))
		}
	}
	stored = make([]bool, len(ws))
	err = call(ctx, s.write, sub, func(ctx context.Context) error {
		ctx, watch := s.asked(ctx, f)
		err := s.writeAll(ctx, ws, f, stored)
		if watch != nil && watch.asked.Load() {
			// Its slot is moving: see ask.go.
			err = firstErr(err, s.republish(ctx, ws, f, stored))
		}
		return err
	})
	return stored, err
}

// check returns why the Store cannot make w, or nil.
func (s *Store) check(w *tier.Write, f tier.Feed) error {
	switch {
	case w.If > tier.IfSeq:
		return fmt.Errorf("unknown condition %d", w.If)
	case w.KeepTTL && w.If != tier.IfEqual:
		return fmt.Errorf("KeepTTL with %s, want IfEqual", condTitle[w.If])
	case w.Touch && w.If != tier.IfEqual:
		return fmt.Errorf("Touch with %s, want IfEqual", condTitle[w.If])
	case w.If == tier.IfSeq && w.Seq == "":
		return errors.New("IfSeq without Seq")
	case w.Touch && w.TouchAt < 0:
		return fmt.Errorf("negative TouchAt %d", w.TouchAt)
	case w.If == tier.IfNewer && w.StampAt < 0:
		return fmt.Errorf("negative StampAt %d", w.StampAt)
	case w.Log == nil:
		return nil
	case s.topo != single:
		return s.noLog()
	case f.Log == "":
		return errors.New("Log set, but no Feed.Log")
	case f.LogLen < 1:
		return fmt.Errorf("Feed.LogLen %d, want at least 1", f.LogLen)
	}
	return nil
}

// condName names the conditions for writeScript, and errors.
var condName = [...]string{tier.Always: "always", tier.IfAbsent: "absent", tier.IfEqual: "equal", tier.IfNewer: "newer", tier.IfSeq: "seq"}

// condTitle names the conditions in errors.
var condTitle = [...]string{tier.Always: "Always", tier.IfAbsent: "IfAbsent", tier.IfEqual: "IfEqual", tier.IfNewer: "IfNewer", tier.IfSeq: "IfSeq"}

// keyErr names ws[i]'s key in err, when ws has more than one write (the
// call's error names the key of one).
func keyErr(ws []tier.Write, i int, err error) error {
	if len(ws) == 1 {
		return err
	}
	return fmt.Errorf("%q: %w", ws[i].Key, err)
}

// writeAll makes ws, storing what each stored in stored, and returns the
// first error.
func (s *Store) writeAll(ctx context.Context, ws []tier.Write, f tier.Feed, stored []bool) error {
	if announced(f) && (s.topo == single || s.oneSlot(ws)) {
		return s.writeAtomic(ctx, ws, f, stored)
	}
	scripted := s.scripted(ws, f)
	later := false // a lease to release after the batch
	for i := range ws {
		later = later || (ws[i].Lease != "" && !s.together(ws[i].Lease, ws[i].Key))
	}
	cmds, err := s.run(ctx, len(ws), func(c redis.Cmdable) ([]redis.Cmder, []func(redis.Cmdable) *redis.Cmd) {
		cmds := make([]redis.Cmder, len(ws))
		again := make([]func(redis.Cmdable) *redis.Cmd, len(ws))
		for i := range ws {
			w := &ws[i]
			switch {
			case scripted[i]:
				keys, args := s.scriptArgs(w, f, !s.together(w.Lease, w.Key))
				cmds[i] = writeScript.EvalSha(ctx, c, keys, args...)
				again[i] = func(c redis.Cmdable) *redis.Cmd { return writeScript.Eval(ctx, c, keys, args...) }
			case w.If == tier.IfAbsent:
				cmds[i] = c.SetNX(ctx, s.prefix+w.Key, w.Value, expiry(w.TTL))
			default:
				cmds[i] = c.Set(ctx, s.prefix+w.Key, w.Value, expiry(w.TTL))
			}
		}
		return cmds, again
	})
	if err != nil {
		return err
	}
	var first error
	results := make([]int64, len(ws)) // writeScript's, -1 for a failure
	for i, cmd := range cmds {
		n, err := result(cmd)
		if err != nil {
			results[i] = -1
			first = firstErr(first, keyErr(ws, i, err))
			continue
		}
		results[i], stored[i] = n, n != 0
	}
	if later {
		first = firstErr(first, s.releaseAfter(ctx, ws, f, results))
	}
	if announced(f) {
		first = firstErr(first, s.announceAfter(ctx, f))
	}
	return first
}

// together reports whether the keys a and b can be named by one script:
// on one server, any; on Redis Cluster, keys in one hash slot (a lease
// named with its key's hash tag, as package hybrid names it). A Ring sends
// a script to its first key's shard only: never.
func (s *Store) together(a, b string) bool {
	switch s.topo {
	case single:
		return true
	case cluster:
		return slot(s.prefix+a) == slot(s.prefix+b)
	}
	return false
}

// firstErr returns a if it is not nil, else b.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// result returns what a write's command reports: 1 stored, 0 not, 2
// (writeScript with IfNewer) holds the value already.
func result(cmd redis.Cmder) (int64, error) {
	switch cmd := cmd.(type) {
	case *redis.StatusCmd:
		return 1, cmd.Err()
	case *redis.BoolCmd:
		ok, err := cmd.Result()
		if ok {
			return 1, err
		}
		return 0, err
	case *redis.Cmd:
		return cmd.Int64()
	}
	return 0, fmt.Errorf("unexpected %T", cmd)
}

// scripted reports, for each write of ws, whether it goes as writeScript:
// when it asks for more than a plain SET or SET NX, or a write of its key
// in ws does.
func (s *Store) scripted(ws []tier.Write, f tier.Feed) []bool {
	out := make([]bool, len(ws))
	n := 0
	for i := range ws {
		w := &ws[i]
		inScript := w.Lease != "" && s.together(w.Lease, w.Key)
		announced := f.Channel != "" && (w.Msg != nil || w.Else != nil) && (w.Lease == "" || inScript)
		out[i] = w.If >= tier.IfEqual || w.KeepTTL || w.Touch || w.Log != nil || w.Seq != "" || announced || inScript
		if out[i] {
			n++
		}
	}
	if n == 0 || n == len(ws) {
		return out
	}
	keys := make(map[string]bool, n)
	for i := range ws {
		if out[i] {
			keys[ws[i].Key] = true
		}
	}
	for i := range ws {
		out[i] = out[i] || keys[ws[i].Key]
	}
	return out
}

// scriptArgs returns the KEYS and ARGV of writeScript for w (see its
// doc). With leaseLater, the script leaves the lease and the messages out:
// releaseAfter sees to them.
func (s *Store) scriptArgs(w *tier.Write, f tier.Feed, leaseLater bool) ([]string, []any) {
	keys := []string{s.prefix + w.Key}
	var old any = w.Old
	if w.If == tier.IfNewer {
		old = w.StampAt
	}
	ttl := "keep"
	if !w.KeepTTL {
		ttl = strconv.FormatInt(int64(expiry(w.TTL)/time.Millisecond), 10)
	}
	cond, at := condName[w.If], ""
	if w.Touch {
		cond, at = "touch", strconv.Itoa(w.TouchAt)
	}
	args := []any{w.Value, cond, old, ttl, "", nil, "", nil, "", "", "0", nil, "", at, "0", w.SeqWas, ""}
	if w.Lease != "" && leaseLater {
		return s.seqArgs(w, keys, args), args
	}
	args[4], args[5], args[6], args[7] = flag(w.Msg != nil), w.Msg, flag(w.Else != nil), w.Else
	args[12] = f.Channel
	if s.sharded && f.Channel != "" {
		args[12], args[16] = keyslot.Channel(f.Channel, slot(keys[0])), "s"
	}
	if w.Lease != "" {
		keys = append(keys, s.prefix+w.Lease)
		args[8], args[9] = "1", w.Token
	}
	keys = s.seqArgs(w, keys, args)
	if w.Log != nil {
		keys = append(keys, s.prefix+f.Log)
		args[10], args[11] = strconv.Itoa(f.LogLen), w.Log
	}
	return keys, args
}

// seqArgs adds w's sequence counter, if it has one, to keys, and its place
// there to args.
func (s *Store) seqArgs(w *tier.Write, keys []string, args []any) []string {
	if w.Seq == "" {
		return keys
	}
	keys = append(keys, s.prefix+w.Seq)
	args[14] = strconv.Itoa(len(keys))
	return keys
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return ""
}

// releaseAfter releases, in Redis Cluster or with a Ring, the lease of
// each write of ws that has one and was made (results[i] is not -1), and
// sends its message if someone may wait for it (see writeAll).
func (s *Store) releaseAfter(ctx context.Context, ws []tier.Write, f tier.Feed, results []int64) error {
	var idx []int
	var msgs [][]byte // of idx
	for i := range ws {
		if ws[i].Lease == "" || results[i] < 0 || s.together(ws[i].Lease, ws[i].Key) {
			continue // no lease, a failed write, or released by its script
		}
		var msg []byte
		switch results[i] {
		case 0:
			msg = ws[i].Else
		case 1:
			msg = ws[i].Msg
		}
		if f.Channel == "" {
			msg = nil
		}
		idx, msgs = append(idx, i), append(msgs, msg)
	}
	if len(idx) == 0 {
		return nil
	}
	// In Redis Cluster a PUBLISH from the script reaches every node. With
	// a Ring it would reach the lease's shard only.
	inScript := s.topo == cluster
	leases := make([]string, len(idx))
	for j, i := range idx {
		leases[j] = ws[i].Lease
	}
	cmds, err := s.evalEach(ctx, releaseScript, len(idx),
		func(j int) []string { return []string{s.prefix + leases[j]} },
		func(j int) []any {
			switch {
			case !inScript || msgs[j] == nil:
				return []any{ws[idx[j]].Token, "", "", ""}
			case s.sharded:
				return []any{ws[idx[j]].Token, keyslot.Channel(f.Channel, slot(s.prefix+leases[j])), msgs[j], "s"}
			}
			return []any{ws[idx[j]].Token, f.Channel, msgs[j], ""}
		})
	if err != nil {
		return about("release", "leases", leases).fail(err)
	}
	if inScript {
		return nil
	}
	var pub [][]byte
	for j, cmd := range cmds {
		if n, _ := cmd.Int64(); n == 1 && msgs[j] != nil {
			pub = append(pub, msgs[j])
		}
	}
	if err := s.publish(ctx, f.Channel, pub); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return nil
}

// publish publishes each of msgs on channel, in order: through a Ring, on
// the channel's shard, where Ring.Publish and Ring.Subscribe go (in a
// Ring's pipeline a PUBLISH, which names no key, goes to any shard); over
// sharded pub/sub, on the channel's shard channel in the slot of its name
// (as invalidate.Bus's Publish does).
func (s *Store) publish(ctx context.Context, channel string, msgs [][]byte) error {
	r, ok := s.rdb.(interface {
		GetShardClientForKey(string) (*redis.Client, error)
	})
	if len(msgs) < 2 || !ok {
		for _, m := range msgs {
			var err error
			if s.sharded {
				err = s.rdb.SPublish(ctx, keyslot.Channel(channel, keyslot.Of(channel)), m).Err()
			} else {
				err = s.rdb.Publish(ctx, channel, m).Err()
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	shard, err := r.GetShardClientForKey(channel)
	if err != nil {
		return err
	}
	pipe := shard.Pipeline()
	for _, m := range msgs {
		pipe.Publish(ctx, channel, m)
	}
	_, err = pipe.Exec(ctx)
	return err
}
