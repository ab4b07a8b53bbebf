package hybridtest_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/hybridcache/hybridcache/tier"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
)

// This file checks that the checks of TestRemote can fail: each mutant is
// a Remote that breaks one promise of the contract, and the subtest named
// for it must fail against it.

// mutant is a Remote with some of its methods replaced.
type mutant struct {
	*hybridtest.Remote
	bus     *hybridtest.Bus
	info    func(m *mutant) tier.Info
	get     func(m *mutant, ctx context.Context, keys []string) ([][]byte, error)
	write   func(m *mutant, w tier.Write) tier.Write // applied to each write
	writes  func(m *mutant, ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error)
	take    func(m *mutant, ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]tier.Lease, error)
	extend  func(m *mutant, ctx context.Context, keys []string, token string, ttl time.Duration) ([]bool, error)
	release func(m *mutant, ctx context.Context, keys []string, token string, msg []byte, f tier.Feed) error
	readLog func(m *mutant, ctx context.Context, log, after string, max int) (tier.LogPage, error)
}

func (m *mutant) Info() tier.Info {
	if m.info != nil {
		return m.info(m)
	}
	return m.Remote.Info()
}

func (m *mutant) Get(ctx context.Context, keys []string) ([][]byte, error) {
	if m.get != nil {
		return m.get(m, ctx, keys)
	}
	return m.Remote.Get(ctx, keys)
}

func (m *mutant) Write(ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error) {
	if m.writes != nil {
		return m.writes(m, ctx, ws, f)
	}
	if m.write != nil {
		ws = append([]tier.Write(nil), ws...)
		for i := range ws {
			ws[i] = m.write(m, ws[i])
		}
	}
	return m.Remote.Write(ctx, ws, f)
}

func (m *mutant) TakeLeases(ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]tier.Lease, error) {
	if m.take != nil {
		return m.take(m, ctx, keys, guards, token, ttl)
	}
	return m.Remote.TakeLeases(ctx, keys, guards, token, ttl)
}

func (m *mutant) ExtendLeases(ctx context.Context, keys []string, token string, ttl time.Duration) ([]bool, error) {
	if m.extend != nil {
		return m.extend(m, ctx, keys, token, ttl)
	}
	return m.Remote.ExtendLeases(ctx, keys, token, ttl)
}

func (m *mutant) ReleaseLeases(ctx context.Context, keys []string, token string, msg []byte, f tier.Feed) error {
	if m.release != nil {
		return m.release(m, ctx, keys, token, msg, f)
	}
	return m.Remote.ReleaseLeases(ctx, keys, token, msg, f)
}

func (m *mutant) ReadLog(ctx context.Context, log, after string, max int) (tier.LogPage, error) {
	if m.readLog != nil {
		return m.readLog(m, ctx, log, after, max)
	}
	return m.Remote.ReadLog(ctx, log, after, max)
}

// takeThen returns a take that changes what TakeLeases found.
func takeThen(change func(l *tier.Lease)) func(*mutant, context.Context, []string, []string, string, time.Duration) ([]tier.Lease, error) {
	return func(m *mutant, ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]tier.Lease, error) {
		ls, err := m.Remote.TakeLeases(ctx, keys, guards, token, ttl)
		for i := range ls {
			change(&ls[i])
		}
		return ls, err
	}
}

// writeIf returns a write that changes the writes of one Cond.
func writeIf(c tier.Cond, change func(m *mutant, w *tier.Write)) func(*mutant, tier.Write) tier.Write {
	return func(m *mutant, w tier.Write) tier.Write {
		if w.If == c {
			change(m, &w)
		}
		return w
	}
}

// mutants are the broken Remotes, each with the subtest that must fail.
var mutants = map[string]struct {
	fails string
	m     mutant
}{
	"NegativeReadBound": {"Read/Info", mutant{info: func(*mutant) tier.Info { return tier.Info{Log: true, ReadBound: -1} }}},
	"MissIsEmpty": {"Read/Get", mutant{get: func(m *mutant, ctx context.Context, keys []string) ([][]byte, error) {
		vs, err := m.Remote.Get(ctx, keys)
		for i := range vs {
			vs[i] = append([]byte{}, vs[i]...)
		}
		return vs, err
	}}},
	"NoKeysFails": {"Read/EmptyInput", mutant{get: func(m *mutant, ctx context.Context, keys []string) ([][]byte, error) {
		if len(keys) == 0 {
			return nil, errors.New("no keys")
		}
		return m.Remote.Get(ctx, keys)
	}}},
	"NilNotEmpty": {"Write/Always", mutant{write: writeIf(tier.Always, func(_ *mutant, w *tier.Write) {
		if w.Value == nil {
			w.Value = []byte("nil")
		}
	})}},
	"IfAbsentOverwrites": {"Write/IfAbsent", mutant{write: writeIf(tier.IfAbsent, func(_ *mutant, w *tier.Write) { w.If = tier.Always })}},
	"IfEqualOnPrefix": {"Write/IfEqual", mutant{write: writeIf(tier.IfEqual, func(m *mutant, w *tier.Write) {
		if v, ok := m.Peek(w.Key); ok && bytes.HasPrefix(v, w.Old) {
			w.Old = v
		}
	})}},
	"EmptyOldMatchesMissing": {"Write/IfEqual", mutant{write: writeIf(tier.IfEqual, func(_ *mutant, w *tier.Write) {
		if len(w.Old) == 0 {
			w.If = tier.IfAbsent
		}
	})}},
	"IfNewerOverwrites": {"Write/IfNewer", mutant{write: writeIf(tier.IfNewer, func(_ *mutant, w *tier.Write) { w.If = tier.Always })}},
	"IfNewerFoundPublishes": {"Write/IfNewer", mutant{write: writeIf(tier.IfNewer, func(m *mutant, w *tier.Write) {
		if v, _ := m.Peek(w.Key); bytes.Equal(v, w.Value) {
			w.If = tier.Always
		}
	})}},
	"IfNewerTieLoses": {"Write/IfNewer", mutant{write: writeIf(tier.IfNewer, func(m *mutant, w *tier.Write) {
		if v, _ := m.Peek(w.Key); len(v) >= w.StampAt+8 && !bytes.Equal(v, w.Value) && bytes.Equal(v[w.StampAt:w.StampAt+8], w.Value[w.StampAt:w.StampAt+8]) {
			w.If = tier.IfAbsent
		}
	})}},
	"TouchAnyOld": {"Write/Touch", mutant{write: func(m *mutant, w tier.Write) tier.Write {
		if v, ok := m.Peek(w.Key); ok && w.Touch && len(v) >= len(w.Old) {
			w.Old = v[:len(w.Old)]
		}
		return w
	}}},
	"TouchReplaces": {"Write/Touch", mutant{write: func(m *mutant, w tier.Write) tier.Write {
		if v, ok := m.Peek(w.Key); ok && w.Touch {
			w.Touch, w.Old = false, v
		}
		return w
	}}},
	"TTLIgnored":     {"Write/TTL", mutant{write: func(_ *mutant, w tier.Write) tier.Write { w.TTL = 0; return w }}},
	"TTLHalved":      {"Write/TTL", mutant{write: func(_ *mutant, w tier.Write) tier.Write { w.TTL /= 2; return w }}},
	"KeepTTLIgnored": {"Write/KeepTTL", mutant{write: writeIf(tier.IfEqual, func(_ *mutant, w *tier.Write) { w.KeepTTL = false })}},
	"ElseDropped":    {"Write/MsgElse", mutant{write: func(_ *mutant, w tier.Write) tier.Write { w.Else = nil; return w }}},
	"ElseIsMsg":      {"Write/MsgElse", mutant{write: func(_ *mutant, w tier.Write) tier.Write { w.Else = w.Msg; return w }}},
	"BatchElseDropped": {"Write/Batch", mutant{write: func(_ *mutant, w tier.Write) tier.Write {
		if w.If == tier.IfNewer {
			w.Else = nil
		}
		return w
	}}},
	"BatchResultsShifted": {"Write/Batch", mutant{writes: func(m *mutant, ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error) {
		st, err := m.Remote.Write(ctx, ws, f)
		if len(st) > 1 {
			st = append(st[1:], st[0])
		}
		return st, err
	}}},
	"LogDropped": {"Log/Entries", mutant{write: func(_ *mutant, w tier.Write) tier.Write { w.Log = nil; return w }}},
	"CompleteAlways": {"Log/Open", mutant{readLog: func(m *mutant, ctx context.Context, log, after string, max int) (tier.LogPage, error) {
		p, err := m.Remote.ReadLog(ctx, log, after, max)
		p.Complete = true
		return p, err
	}}},
	"TrimmedComplete": {"Log/Incomplete", mutant{readLog: func(m *mutant, ctx context.Context, log, after string, max int) (tier.LogPage, error) {
		p, err := m.Remote.ReadLog(ctx, log, after, max)
		p.Complete = p.Complete || len(p.Entries) > 0
		return p, err
	}}},
	"OpenCreatesNothing": {"Log/Open", mutant{readLog: func(m *mutant, ctx context.Context, log, after string, max int) (tier.LogPage, error) {
		if after == "" {
			return tier.LogPage{Last: "1-0"}, nil
		}
		return m.Remote.ReadLog(ctx, log, after, max)
	}}},
	"LogDespiteNoLog": {"Log/Unsupported", mutant{info: func(*mutant) tier.Info { return tier.Info{} }}},
	"TakeNoValue":     {"Lease/Take", mutant{take: takeThen(func(l *tier.Lease) { l.Value = nil })}},
	"TakeNoHolder":    {"Lease/Take", mutant{take: takeThen(func(l *tier.Lease) { l.Holder = "" })}},
	"LeftInSeconds":   {"Lease/Take", mutant{take: takeThen(func(l *tier.Lease) { l.Left /= 1000 })}},
	"ExtendAnyToken": {"Lease/Extend", mutant{extend: func(m *mutant, ctx context.Context, keys []string, token string, ttl time.Duration) ([]bool, error) {
		held := make([]bool, len(keys))
		for i := range held {
			held[i] = true
		}
		return held, nil
	}}},
	"ExtendIgnoresTTL": {"Lease/Extend", mutant{extend: func(m *mutant, ctx context.Context, keys []string, token string, ttl time.Duration) ([]bool, error) {
		return m.Remote.ExtendLeases(ctx, keys, token, time.Second)
	}}},
	"ReleaseSilent": {"Lease/Release", mutant{release: func(m *mutant, ctx context.Context, keys []string, token string, msg []byte, f tier.Feed) error {
		return m.Remote.ReleaseLeases(ctx, keys, token, nil, f)
	}}},
	"ReleaseLoud": {"Lease/Release", mutant{release: func(m *mutant, ctx context.Context, keys []string, token string, msg []byte, f tier.Feed) error {
		if err := m.bus.Publish(ctx, f.Channel, msg); err != nil {
			return err
		}
		return m.Remote.ReleaseLeases(ctx, keys, token, nil, f)
	}}},
	"ReleaseAnyToken": {"Lease/Release", mutant{release: func(m *mutant, ctx context.Context, keys []string, token string, msg []byte, f tier.Feed) error {
		if v, ok := m.Peek(keys[0]); ok {
			token = strings.TrimSuffix(string(v), "*")
		}
		return m.Remote.ReleaseLeases(ctx, keys, token, msg, f)
	}}},
	"TakenOverReleaseSilent": {"Lease/Expiry", mutant{write: func(_ *mutant, w tier.Write) tier.Write {
		if w.Lease != "" {
			w.Msg = nil
		}
		return w
	}}},
	"FillKeepsLease": {"Lease/Write", mutant{write: func(_ *mutant, w tier.Write) tier.Write { w.Lease, w.Token = "", ""; return w }}},
	"FillAlwaysLoud": {"Lease/Write", mutant{writes: func(m *mutant, ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error) {
		w := ws[0]
		w.Lease, w.Token = "", ""
		st, err := m.Remote.Write(ctx, []tier.Write{w}, f)
		if err == nil && ws[0].Lease != "" {
			err = m.Remote.ReleaseLeases(ctx, []string{ws[0].Lease}, ws[0].Token, nil, f)
		}
		return st, err
	}}},
	"BatchMsgSilent": {"Write/BatchMsg", mutant{writes: func(m *mutant, ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error) {
		f.Msg = nil
		return m.Remote.Write(ctx, ws, f)
	}}},
	"BatchMsgTwice": {"Write/BatchMsg", mutant{writes: func(m *mutant, ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error) {
		st, err := m.Remote.Write(ctx, ws, f)
		if err == nil && f.Msg != nil && f.Channel != "" {
			err = m.bus.Publish(ctx, f.Channel, f.Msg)
		}
		return st, err
	}}},
	"BatchMsgFirst": {"Write/BatchMsg", mutant{writes: func(m *mutant, ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error) {
		if f.Msg != nil && f.Channel != "" {
			if err := m.bus.Publish(ctx, f.Channel, f.Msg); err != nil {
				return nil, err
			}
			time.Sleep(50 * time.Millisecond) // the listener reads meanwhile
			f.Msg = nil
		}
		return m.Remote.Write(ctx, ws, f)
	}}},
	"BatchEntryUnlogged": {"Write/BatchLog", mutant{writes: func(m *mutant, ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error) {
		f.Entry = nil
		return m.Remote.Write(ctx, ws, f)
	}}},
	"BatchNotAtomic": {"Write/BatchAtomic", mutant{writes: func(m *mutant, ctx context.Context, ws []tier.Write, f tier.Feed) ([]bool, error) {
		if f.Msg == nil {
			return m.Remote.Write(ctx, ws, f)
		}
		msg := f.Msg
		f.Msg = nil
		st := make([]bool, len(ws))
		for i := range ws {
			s, err := m.Remote.Write(ctx, ws[i:i+1], f)
			if err != nil {
				return st, err
			}
			st[i] = s[0]
			time.Sleep(time.Millisecond) // another writer comes between
		}
		return st, m.bus.Publish(ctx, f.Channel, msg)
	}}},
	"LeaseTTLClamped": {"Lease/TTL", mutant{take: func(m *mutant, ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]tier.Lease, error) {
		return m.Remote.TakeLeases(ctx, keys, guards, token, max(ttl, time.Millisecond))
	}}},
	"GuardsIndexed": {"Lease/MismatchedLengths", mutant{take: func(m *mutant, ctx context.Context, keys, guards []string, token string, ttl time.Duration) ([]tier.Lease, error) {
		for i := range keys {
			_ = guards[i]
		}
		return m.Remote.TakeLeases(ctx, keys, guards[:len(keys)], token, ttl)
	}}},
}

// TestMutant runs TestRemote against the mutant named by
// $HYBRIDTEST_MUTANT, for TestSuiteCatchesMutants.
func TestMutant(t *testing.T) {
	name := os.Getenv("HYBRIDTEST_MUTANT")
	if name == "" {
		t.Skip("run by TestSuiteCatchesMutants")
	}
	mu, ok := mutants[name]
	if !ok {
		t.Fatalf("no mutant %q", name)
	}
	hybridtest.TestRemote(t, func(t *testing.T) (tier.Remote, hybrid.Bus) {
		bus := new(hybridtest.Bus)
		t.Cleanup(func() { bus.Close() })
		m := mu.m
		m.Remote, m.bus = &hybridtest.Remote{Bus: bus}, bus
		return &m, bus
	})
}

// TestSuiteCatchesMutants runs, for each mutant, the subtest of TestRemote
// that must catch it, in a test process of its own, and checks that it
// fails.
func TestSuiteCatchesMutants(t *testing.T) {
	if os.Getenv("HYBRIDTEST_MUTANT") != "" {
		t.Skip("in a mutant's process")
	}
	if testing.Short() {
		t.Skip("starts a test process per mutant")
	}
	for name, mu := range mutants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			parts := strings.Split(mu.fails, "/")
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.count=1", "-test.v",
				"-test.run=^TestMutant$/^"+parts[0]+"$/^"+parts[1]+"$")
			cmd.Env = append(os.Environ(), "HYBRIDTEST_MUTANT="+name)
			out, err := cmd.CombinedOutput()
			want := "--- FAIL: TestMutant/" + mu.fails + " "
			if err == nil || !strings.Contains(string(out), want) || strings.Contains(string(out), "panic:") {
				t.Errorf("the suite did not catch mutant %s in %s (%v):\n%s", name, mu.fails, err, out)
			}
		})
	}
}
