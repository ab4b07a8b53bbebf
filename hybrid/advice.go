package hybrid

import (
	"fmt"
	"strings"
)

// advice returns one line for each setting that contradicts another or
// costs its user, for New to log once at warning level: the Remote's own
// advice first, then the cache's. o is the Options New runs with (defaults
// filled in, the Remote's Info asked), set the Options as given, to tell a
// setting from its default. A setting New refuses (LoadLease without a
// Bus) is an error, not advice.
func advice(o, set *Options) []string {
	lines := append([]string(nil), o.info.Advice...)
	add := func(format string, args ...any) {
		lines = append(lines, "hybrid: "+fmt.Sprintf(format, args...))
	}

	if o.Bus == nil {
		var unused []string
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"Channel", set.Channel != ""},
			{"Secret", len(set.Secret) > 0},
			{"LossGrace", set.LossGrace > 0},
			{"StrictLoss", set.StrictLoss},
			{"ReplayLogLen", set.ReplayLogLen > 0},
		} {
			if f.set {
				unused = append(unused, "Options."+f.name)
			}
		}
		if len(unused) > 0 {
			add("%s: no effect without Options.Bus, which carries the messages they are about", strings.Join(unused, ", "))
		}
	} else {
		if len(o.Secret) == 0 {
			add("Options.Bus without Options.Secret: messages are unsigned and carry no values, so other instances drop a changed key and read it again rather than swap the new value in, and anyone who can publish on the channel can make every instance drop keys or flush its L1 (never plant a value); set the same Secret on every instance")
		}
		if set.ReplayLogLen > 0 && !o.info.Log {
			if o.Remote == nil {
				add("Options.ReplayLogLen is set but there is no Remote to keep the log: after a bus loss L1 is flushed, not caught up by replay")
			} else {
				add("Options.ReplayLogLen is set but the Remote keeps no log (tier.Info.Log is false, as on Redis Cluster): after a bus loss L1 is caught up per hash slot by its sequence counters (entries of slots written meanwhile dropped), not by replay")
			}
		}
	}

	if o.Remote != nil && o.LocalTTL > o.TTL {
		add("Options.LocalTTL (%v) is longer than Options.TTL (%v): L1 keeps a value no longer than the shared tier does, so LocalTTL is cut to TTL", o.LocalTTL, o.TTL)
	}
	if o.LoadLease > o.LeaseWait {
		add("Options.LoadLease (%v) is longer than Options.LeaseWait (%v): if a lease holder dies, every instance waiting for it loads the key itself after LeaseWait, instead of one taking the lease over when it ends; keep LoadLease at most LeaseWait", o.LoadLease, o.LeaseWait)
	}
	if o.LoadLease > 0 && o.LoadTimeout > 0 && o.LeaseWait >= o.LoadTimeout {
		add("Options.LeaseWait (%v) is not shorter than Options.LoadTimeout (%v): a fill waiting for another instance's lease ends at LoadTimeout and its callers get a timeout, before LeaseWait would have it load by itself", o.LeaseWait, o.LoadTimeout)
	}
	if o.SoftTimeout > 0 && o.LoadTimeout > 0 && o.SoftTimeout >= o.LoadTimeout {
		add("Options.SoftTimeout (%v) is not shorter than Options.LoadTimeout (%v): the load is cancelled first, so callers never get the stale value early; they wait the whole LoadTimeout", o.SoftTimeout, o.LoadTimeout)
	}
	if o.batched && o.EagerRefresh == 0 && o.XFetchBeta == 0 {
		add("a RefreshBatch without Options.EagerRefresh or Options.XFetchBeta: only calls with WithEagerRefresh or WithXFetchBeta refresh in the background, and only theirs are batched")
	}
	if set.BreakerOpenFor > 0 && o.BreakerThreshold == 0 {
		add("Options.BreakerOpenFor has no effect without Options.BreakerThreshold: there is no breaker")
	}

	if o.Remote == nil {
		if o.QueueWrites > 0 {
			add("Options.QueueWrites has no effect without Options.Remote: nothing is queued, and a failed publish returns its error")
		}
		if o.CompressAbove > 0 {
			add("Options.CompressAbove without Options.Remote: values are compressed for a shared tier that is not there, which costs CPU and saves nothing")
		}
	} else if o.CompressAbove > o.MaxValueBytes {
		add("Options.CompressAbove (%d bytes) is larger than Options.MaxValueBytes (%d bytes): no value is ever compressed", o.CompressAbove, o.MaxValueBytes)
	}
	if int64(o.MaxValueBytes) > o.LocalMaxBytes {
		add("Options.MaxValueBytes (%d bytes) is larger than Options.LocalMaxBytes (%d bytes): a value larger than L1 cannot stay in it, and every read of it goes to the shared tier or the load", o.MaxValueBytes, o.LocalMaxBytes)
	}
	return lines
}
