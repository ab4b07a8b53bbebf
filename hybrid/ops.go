package hybrid

import (
	"strconv"

	"github.com/hybridcache/hybridcache/internal/message"
)

// Op names a call the cache makes: a load, or a call to the shared tier or
// the bus. Tracer.Start and Events.L2Error get one; so does
// Events.Invalidated, naming the call another instance made (OpSet,
// OpDelete, OpExpire, OpTouch, OpDeleteTag or OpClear). The otel module names its
// spans "hybridcache." + op.
type Op string

// The ops the cache emits, and the call each names.
const (
	OpLoad     Op = "load"      // a call of a one-key load function (GetOrCreate's, or its eager refresh's)
	OpLoadMany Op = "load_many" // a call of a batch load function (GetOrCreateMany's, or its refresh's)

	OpGet      Op = "get"       // a read of one key: a one-key fill's, or Expire's
	OpGetMany  Op = "get_many"  // a batch fill's read of its keys
	OpGetSeq   Op = "get_seq"   // a fill's read, before its load, of the sequence counters of the keys it found missing, which its write-back is conditional on; also their write when found missing
	OpGetTag   Op = "get_tag"   // a read of a tag's delete record, to judge a tagged value; also its write when found missing, and the extension of its lifetime
	OpGetClear Op = "get_clear" // a read of the record of the last Clear, to judge a value; also its write when found missing, and the extension of its lifetime

	OpSet       Op = "set"        // Set's write, or a fill's write-back of one key
	OpSetMany   Op = "set_many"   // SetMany's write, or a batch fill's write-back
	OpDelete    Op = "delete"     // Delete's write of a tombstone
	OpExpire    Op = "expire"     // Expire's rewrite of a value as stale
	OpDeleteTag Op = "delete_tag" // DeleteByTag's write of the tag's record
	OpClear     Op = "clear"      // Clear's write of its record (in Events.Invalidated, also ClearL1)
	OpPublish   Op = "publish"    // a message sent on the bus without a shared-tier write
	OpTouch     Op = "touch"      // a not-modified refresh's extension of values in place (Write.Touch)

	OpLease        Op = "lease"         // a fill's take of load leases (Options.LoadLease)
	OpLeaseCheck   Op = "lease_check"   // a read of whether a waited-for lease is still held
	OpLeaseExtend  Op = "lease_extend"  // the keep-alive of leases held while their load runs
	OpLeaseRelease Op = "lease_release" // a release of load leases, telling the instances waiting how the load went

	OpOpenLog Op = "open_log" // New's opening of the log of announced writes
	OpReadLog Op = "read_log" // a read of that log after a bus loss, to replay what was missed
	OpProbe   Op = "probe"    // a read of whether the shared tier answers again, while held entries are served during a bus loss, or values whose write-back failed are kept
	OpCatchUp Op = "catch_up" // a read of every slot's sequence counter where no log is kept (New's, and after a bus loss, with the records of the tags L1 holds), to drop from L1 only what changed

	OpReplaySet       Op = "replay_set"        // the replay of a queued Set (Options.QueueWrites)
	OpReplayDelete    Op = "replay_delete"     // the replay of a queued Delete
	OpReplayDeleteTag Op = "replay_delete_tag" // the replay of a queued DeleteByTag
	OpReplayClear     Op = "replay_clear"      // the replay of a queued Clear

	OpDeleteMany Op = "delete_many" // DeleteMany's write of tombstones
	OpExplain    Op = "explain"     // Explain's read of a key, its lease and the records that may delete it
	OpVerify     Op = "verify"      // the background verifier's read of stored headers (Options.VerifyRate)

	OpHotSet Op = "hot_set" // a read or write of the namespace's hot set (Options.HotSetEvery, WarmHot)
)

// readOp is the op of a fill's read of keys, and the key it is about.
func readOp(keys []string) (Op, string) {
	if len(keys) == 1 {
		return OpGet, keys[0]
	}
	return OpGetMany, ""
}

// replayOf is the op of the replay of a queued write made as op.
func replayOf(op Op) Op {
	switch op {
	case OpSet:
		return OpReplaySet
	case OpDelete:
		return OpReplayDelete
	case OpDeleteTag:
		return OpReplayDeleteTag
	case OpClear:
		return OpReplayClear
	}
	return op
}

// changeOf is the op of the call another instance made that m announces,
// as Events.Invalidated names it. A delete of the tag clearTag is a Clear.
func changeOf(m *message.Message) Op {
	switch m.Op {
	case message.OpSet:
		return OpSet
	case message.OpDelete:
		return OpDelete
	case message.OpExpire:
		return OpExpire
	case message.OpExtend:
		return OpTouch
	case message.OpTag:
		if len(m.Keys) == 1 && m.Keys[0] == clearTag {
			return OpClear
		}
		return OpDeleteTag
	}
	return OpClear
}

// about names a call about name (a key or tag; none for a Clear) in errors.
func about(op Op, name string) string {
	if name == "" {
		return string(op)
	}
	return string(op) + " " + strconv.Quote(name)
}
