package hybrid

import (
	"context"
	"github.com/hybridcache/hybridcache/tier"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// infoRemote is a Remote that only describes itself: advice asks no more.
type infoRemote struct {
	tier.Remote
	info tier.Info
}

func (r infoRemote) Info() tier.Info { return r.info }

// quietBus is a Bus that is never used: advice only sees that it is set.
type quietBus struct{ Bus }

// adviceFor returns the advice on set, after withDefaults as in New.
func adviceFor(t *testing.T, set Options) []string {
	t.Helper()
	o, err := set.withDefaults()
	if err != nil {
		t.Fatalf("withDefaults: %v", err)
	}
	return advice(&o, &set)
}

func TestAdvice(t *testing.T) {
	single := infoRemote{info: tier.Info{Log: true, ReadBound: time.Second}}
	cluster := infoRemote{info: tier.Info{ReadBound: time.Second}}
	secret := []byte("s3cret")
	// production is a configuration with nothing to advise on.
	production := func() Options {
		return Options{Namespace: "n", Remote: single, Bus: quietBus{}, Secret: secret}
	}
	tests := []struct {
		name string
		o    func() Options
		want string // the one line; "": none
	}{
		{"production", production, ""},
		{"L1 only", func() Options { return Options{} }, ""},
		{"Cluster without ReplayLogLen", func() Options {
			o := production()
			o.Remote = cluster
			return o
		}, ""},
		{"the Remote's advice", func() Options {
			o := production()
			o.Remote = infoRemote{info: tier.Info{Log: true, Advice: []string{"l2: reads are not bounded"}}}
			return o
		}, "l2: reads are not bounded"},
		{"Bus without Secret", func() Options {
			o := production()
			o.Secret = nil
			return o
		}, "hybrid: Options.Bus without Options.Secret: messages are unsigned and carry no values, so other instances drop a changed key and read it again rather than swap the new value in, and anyone who can publish on the channel can make every instance drop keys or flush its L1 (never plant a value); set the same Secret on every instance"},
		{"ReplayLogLen on Cluster", func() Options {
			o := production()
			o.Remote, o.ReplayLogLen = cluster, 1000
			return o
		}, "hybrid: Options.ReplayLogLen is set but the Remote keeps no log (tier.Info.Log is false, as on Redis Cluster): after a bus loss L1 is caught up per hash slot by its sequence counters (entries of slots written meanwhile dropped), not by replay"},
		{"ReplayLogLen without Remote", func() Options {
			return Options{Namespace: "n", Bus: quietBus{}, Secret: secret, ReplayLogLen: 1000}
		}, "hybrid: Options.ReplayLogLen is set but there is no Remote to keep the log: after a bus loss L1 is flushed, not caught up by replay"},
		{"bus settings without Bus", func() Options {
			return Options{Namespace: "n", Remote: single, Secret: secret, StrictLoss: true, LossGrace: time.Second}
		}, "hybrid: Options.Secret, Options.LossGrace, Options.StrictLoss: no effect without Options.Bus, which carries the messages they are about"},
		{"LocalTTL longer than TTL", func() Options {
			o := production()
			o.TTL, o.LocalTTL = time.Minute, 2*time.Minute
			return o
		}, "hybrid: Options.LocalTTL (2m0s) is longer than Options.TTL (1m0s): L1 keeps a value no longer than the shared tier does, so LocalTTL is cut to TTL"},
		{"LocalTTL longer than TTL without Remote", func() Options {
			return Options{TTL: time.Minute, LocalTTL: 2 * time.Minute}
		}, ""},
		{"LoadLease longer than LeaseWait", func() Options {
			o := production()
			o.LoadLease = 10 * time.Second
			return o
		}, "hybrid: Options.LoadLease (10s) is longer than Options.LeaseWait (5s): if a lease holder dies, every instance waiting for it loads the key itself after LeaseWait, instead of one taking the lease over when it ends; keep LoadLease at most LeaseWait"},
		{"LoadLease as long as LeaseWait", func() Options {
			o := production()
			o.LoadLease = 5 * time.Second
			return o
		}, ""},
		{"LeaseWait not shorter than LoadTimeout", func() Options {
			o := production()
			o.LoadLease, o.LoadTimeout = time.Second, 2*time.Second
			return o
		}, "hybrid: Options.LeaseWait (5s) is not shorter than Options.LoadTimeout (2s): a fill waiting for another instance's lease ends at LoadTimeout and its callers get a timeout, before LeaseWait would have it load by itself"},
		{"SoftTimeout not shorter than LoadTimeout", func() Options {
			o := production()
			o.FailSafeMaxAge, o.SoftTimeout, o.LoadTimeout = time.Hour, time.Second, time.Second
			return o
		}, "hybrid: Options.SoftTimeout (1s) is not shorter than Options.LoadTimeout (1s): the load is cancelled first, so callers never get the stale value early; they wait the whole LoadTimeout"},
		{"SoftTimeout shorter than LoadTimeout", func() Options {
			o := production()
			o.FailSafeMaxAge, o.SoftTimeout, o.LoadTimeout = time.Hour, 100*time.Millisecond, time.Second
			return o
		}, ""},
		{"BreakerOpenFor without BreakerThreshold", func() Options {
			o := production()
			o.BreakerOpenFor = time.Second
			return o
		}, "hybrid: Options.BreakerOpenFor has no effect without Options.BreakerThreshold: there is no breaker"},
		{"QueueWrites without Remote", func() Options {
			return Options{Namespace: "n", Bus: quietBus{}, Secret: secret, QueueWrites: 100}
		}, "hybrid: Options.QueueWrites has no effect without Options.Remote: nothing is queued, and a failed publish returns its error"},
		{"CompressAbove without Remote", func() Options { return Options{CompressAbove: 1024} },
			"hybrid: Options.CompressAbove without Options.Remote: values are compressed for a shared tier that is not there, which costs CPU and saves nothing"},
		{"CompressAbove above MaxValueBytes", func() Options {
			o := production()
			o.CompressAbove, o.MaxValueBytes = 2048, 1024
			return o
		}, "hybrid: Options.CompressAbove (2048 bytes) is larger than Options.MaxValueBytes (1024 bytes): no value is ever compressed"},
		{"MaxValueBytes above LocalMaxBytes", func() Options {
			o := production()
			o.LocalMaxBytes = 512 << 10
			return o
		}, "hybrid: Options.MaxValueBytes (1048576 bytes) is larger than Options.LocalMaxBytes (524288 bytes): a value larger than L1 cannot stay in it, and every read of it goes to the shared tier or the load"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := adviceFor(t, tt.o())
			var want []string
			if tt.want != "" {
				want = []string{tt.want}
			}
			if !slices.Equal(got, want) {
				t.Errorf("advice:\n got %q\nwant %q", got, want)
			}
		})
	}
}

// warnings records what a logger gets.
type warnings struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnings) WithGroup(string) slog.Handler            { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recs = append(w.recs, r)
	return nil
}

func TestNewLogsAdvice(t *testing.T) {
	var w warnings
	c, err := New[string](Options{Namespace: "n", CompressAbove: 1024, Logger: slog.New(&w)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := adviceFor(t, Options{CompressAbove: 1024})
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.recs) != len(want) {
		t.Fatalf("New logged %d lines, want %d: %q", len(w.recs), len(want), want)
	}
	for i, r := range w.recs {
		if r.Level != slog.LevelWarn || r.Message != want[i] {
			t.Errorf("line %d: got %v %q, want WARN %q", i, r.Level, r.Message, want[i])
		}
	}
}
