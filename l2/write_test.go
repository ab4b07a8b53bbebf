package l2_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/internal/message"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
	"github.com/hybridcache/hybridcache/tier"
)

// Tests of Write batches: what goes as a plain command and what as the
// script, in one pipeline, in order.

// TestWriteBatch: one batch of every kind of write is one pipeline, plain
// writes as SET and SET NX, the others as the script; each stores as its
// condition says, and the messages go out in the order of the writes.
func TestWriteBatch(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 20)
	for k, v := range map[string]string{"old": "o", "eq": "e1", "n": string(stamped(5, "n"))} {
		if _, err := s.Write(ctx, []tier.Write{{Key: k, Value: []byte(v), TTL: time.Minute}}, tier.Feed{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.TakeLeases(ctx, []string{"lk", "quiet"}, []string{"l", "q"}, "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	askFor(t, s, "lk")
	var c counter
	rdb.AddHook(&c)
	ws := []tier.Write{
		{Key: "a", Value: []byte("A"), TTL: time.Minute},                      // SET
		{Key: "old", Value: []byte("x"), TTL: time.Minute, If: tier.IfAbsent}, // SET NX, not stored
		{Key: "b", Value: []byte("B"), Msg: []byte("mb"), Else: []byte("never")},
		{Key: "eq", Value: []byte("e2"), If: tier.IfEqual, Old: []byte("e1"), KeepTTL: true, Msg: []byte("meq"), Else: []byte("never")},
		{Key: "eq", Value: []byte("e3"), If: tier.IfEqual, Old: []byte("e1"), Msg: []byte("never"), Else: []byte("neq")},
		{Key: "l", Value: []byte("L"), If: tier.IfAbsent, TTL: time.Minute, Lease: "lk", Token: "tok", Msg: []byte("ml"), Else: []byte("never")},
		{Key: "q", Value: []byte("Q"), If: tier.IfAbsent, TTL: time.Minute, Lease: "quiet", Token: "tok", Msg: []byte("never")},
		{Key: "g", Value: []byte("G"), Msg: []byte("mg"), Log: []byte("eg")},
		{Key: "n", Value: stamped(6, "n"), If: tier.IfNewer, StampAt: 3, Msg: []byte("mn")},
		{Key: "n", Value: stamped(6, "n"), If: tier.IfNewer, StampAt: 3, Msg: []byte("never")}, // holds it already
		{Key: "silent", Value: []byte("S"), If: tier.IfAbsent},                                 // no message: SET NX
	}
	f := tier.Feed{Channel: channel, Log: "log", LogLen: 100}
	// Load the script: the count below meets no NOSCRIPT.
	if _, err := s.Write(ctx, []tier.Write{{Key: "warm", If: tier.IfEqual}}, f); err != nil {
		t.Fatal(err)
	}
	c.reset()
	stored, err := s.Write(ctx, ws, f)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, true, true, false, true, true, true, true, true, true}; !slices.Equal(stored, want) {
		t.Errorf("stored: got %v, want %v", stored, want)
	}
	const sent = "commands [], pipelines [[set set evalsha evalsha evalsha evalsha evalsha evalsha evalsha evalsha set]]"
	if got := c.String(); got != sent {
		t.Errorf("sent %s; want %s", got, sent)
	}
	for k, want := range map[string]string{"a": "A", "old": "o", "b": "B", "eq": "e2", "l": "L", "q": "Q", "g": "G", "n": string(stamped(6, "n")), "silent": "S"} {
		if vs, err := s.Get(ctx, []string{k}); err != nil || string(vs[0]) != want {
			t.Errorf("%s holds %q, %v; want %q", k, vs, err, want)
		}
	}
	if d := pttl(t, rdb, prefix+"eq"); d <= 50*time.Second || d > time.Minute {
		t.Errorf("PTTL of eq = %v, want the minute it had (KeepTTL)", d)
	}
	for _, l := range []string{"lk", "quiet"} {
		if got := holder(t, rdb, prefix+l); got != "" {
			t.Errorf("lease %s holds %q after the write, want it released", l, got)
		}
	}
	log := streamIDs(t, rdb, prefix+"log")
	if len(log) != 1 {
		t.Fatalf("log: %v, want one entry", log)
	}
	want := []string{"mb", "meq", "neq", "ml", string(append([]byte{2, byte(len(log[0]))}, log[0]...)) + "mg", "mn"}
	if got := wait(t, msgs, len(want)); !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
	quiet(t, rdb, "", channel, msgs, "the writes whose messages do not go out")

	// With no channel, a logged message is logged and not published.
	if _, err := s.Write(ctx, []tier.Write{{Key: "g", Value: []byte("G2"), Msg: []byte("m"), Log: []byte("eg2")}},
		tier.Feed{Log: "log", LogLen: 100}); err != nil {
		t.Fatal(err)
	}
	if got := streamIDs(t, rdb, prefix+"log"); len(got) != 2 {
		t.Errorf("log: %v, want a second entry", got)
	}
	quiet(t, rdb, "", channel, msgs, "a write with no channel")
}

// TestWriteBatchScriptReloaded: after SCRIPT FLUSH, the scripts of a batch
// go again by EVAL, in order, and a key written by script and by plain
// command in one batch keeps the order of its writes: its plain writes go
// as the script too.
func TestWriteBatchScriptReloaded(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	var c counter
	rdb.AddHook(&c)
	ws := []tier.Write{
		{Key: "k", Value: []byte("1"), Msg: []byte("m1")},
		{Key: "p", Value: []byte("P")},
		{Key: "k", Value: []byte("2")},
		{Key: "k", Value: []byte("3"), If: tier.IfAbsent},
		{Key: "q", Value: []byte("Q"), If: tier.IfAbsent},
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c.reset()
	stored, err := s.Write(ctx, ws, tier.Feed{Channel: prefix + "ch"})
	if want := []bool{true, true, true, false, true}; err != nil || !slices.Equal(stored, want) {
		t.Fatalf("Write = %v, %v; want %v, nil", stored, err, want)
	}
	const want = "commands [], pipelines [[evalsha set evalsha evalsha set] [eval eval eval]]"
	if got := c.String(); got != want {
		t.Errorf("sent %s; want %s", got, want)
	}
	for k, want := range map[string]string{"k": "2", "p": "P", "q": "Q"} {
		if vs, err := s.Get(ctx, []string{k}); err != nil || string(vs[0]) != want {
			t.Errorf("%s holds %q, %v; want %q", k, vs, err, want)
		}
	}
}

// TestWriteFailedLogWritesNothing: a logged write whose XADD fails (the log
// is not a stream) writes nothing, releases no lease and publishes
// nothing; in a batch, the others are made, and reported stored.
func TestWriteFailedLogWritesNothing(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 4)
	if err := rdb.Set(ctx, prefix+"log", "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TakeLeases(ctx, []string{"lk"}, []string{"k"}, "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	askFor(t, s, "lk")
	ws := []tier.Write{
		{Key: "a", Value: []byte("A")},
		{Key: "k", Value: []byte("v"), If: tier.IfAbsent, Lease: "lk", Token: "tok", Msg: []byte("m"), Log: []byte("e")},
		{Key: "b", Value: []byte("B")},
	}
	stored, err := s.Write(ctx, ws, tier.Feed{Channel: channel, Log: "log", LogLen: 10})
	if err == nil || !strings.Contains(err.Error(), `"k"`) {
		t.Errorf("Write to a log that is not a stream: error %v, want one naming \"k\"", err)
	}
	if want := []bool{true, false, true}; !slices.Equal(stored, want) {
		t.Errorf("stored: got %v, want %v", stored, want)
	}
	if vs, err := s.Get(ctx, []string{"k"}); err != nil || vs[0] != nil {
		t.Errorf("k after the failed write: Get = %q, %v; want [nil], nil: nothing written", vs, err)
	}
	if got := holder(t, rdb, prefix+"lk"); got != "tok*" {
		t.Errorf("lease after the failed write holds %q, want \"tok*\" (not released)", got)
	}
	quiet(t, rdb, "", channel, msgs, "a failed logged write")
}

// TestWriteIfNewerReleases: a holder's IfNewer write releases its lease
// whether it stores or not; it announces Else when it does not, and
// nothing when the key holds its value already.
func TestWriteIfNewerReleases(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := t.Context()
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 4)
	if _, err := s.Write(ctx, []tier.Write{{Key: "k", Value: stamped(10, "a"), TTL: time.Minute}}, tier.Feed{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		value  []byte
		stored bool
		heard  string // "": none
	}{
		{stamped(10, "a"), true, ""},   // holds it already
		{stamped(5, "b"), false, "no"}, // older
		{stamped(20, "c"), true, "yes"},
	} {
		if _, err := s.TakeLeases(ctx, []string{"lk"}, []string{"k"}, "tok", time.Minute); err != nil {
			t.Fatal(err)
		}
		askFor(t, s, "lk")
		stored, err := s.Write(ctx, []tier.Write{{Key: "k", Value: c.value, If: tier.IfNewer, StampAt: 3,
			Lease: "lk", Token: "tok", Msg: []byte("yes"), Else: []byte("no")}}, tier.Feed{Channel: channel})
		if err != nil || stored[0] != c.stored {
			t.Errorf("write of %x = %v, %v; want [%v]", c.value, stored, err, c.stored)
		}
		if got := holder(t, rdb, prefix+"lk"); got != "" {
			t.Errorf("write of %x: lease holds %q, want it released", c.value, got)
		}
		if c.heard == "" {
			quiet(t, rdb, "", channel, msgs, fmt.Sprintf("write of %x", c.value))
		} else if got := wait(t, msgs, 1); got[0] != c.heard {
			t.Errorf("write of %x: heard %q, want %q", c.value, got[0], c.heard)
		}
	}
	if vs, err := s.Get(ctx, []string{"k"}); err != nil || !bytes.Equal(vs[0], stamped(20, "c")) {
		t.Errorf("k holds %x, %v; want %x", vs, err, stamped(20, "c"))
	}
}

// TestWriteRefusedConnection: a server that refuses the connection itself
// (a wrong password: no command is answered) fails the call, one write or
// a batch, rather than reporting the writes not stored.
func TestWriteRefusedConnection(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "no-such-user-" + redistest.Prefix(t), Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	s := l2.New(rdb, l2.Options{})
	ctx := t.Context()
	for _, ws := range [][]tier.Write{
		{{Key: "a", Value: []byte("v"), TTL: time.Minute, If: tier.IfAbsent}},
		{{Key: "a", Value: []byte("v"), TTL: time.Minute, If: tier.IfAbsent}, {Key: "b", Value: []byte("v"), TTL: time.Minute}},
	} {
		if stored, err := s.Write(ctx, ws, tier.Feed{}); err == nil {
			t.Errorf("Write of %d on a refused connection: stored %v, nil error; want an error", len(ws), stored)
		}
	}
	for _, keys := range [][]string{{"a"}, {"a", "b"}} {
		if vals, err := s.Get(ctx, keys); err == nil {
			t.Errorf("Get of %d on a refused connection: %q, nil error; want an error", len(keys), vals)
		}
	}
}

// TestWriteAnnouncedBatch: a batch announced as a whole (Feed.Msg) goes,
// on one server, as one MULTI/EXEC transaction, its scripts by EVAL even
// after SCRIPT FLUSH (no NOSCRIPT inside the transaction): one round trip,
// the writes (each with its own message), one log entry, then the batch's
// message positioned at it.
func TestWriteAnnouncedBatch(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 10)
	if _, err := s.Write(ctx, []tier.Write{{Key: "eq", Value: []byte("e1"), TTL: time.Minute}}, tier.Feed{}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var c counter
	rdb.AddHook(&c)
	ws := []tier.Write{
		{Key: "a", Value: []byte("A"), TTL: time.Minute},
		{Key: "eq", Value: []byte("e2"), If: tier.IfEqual, Old: []byte("e1"), Msg: []byte("meq")},
		{Key: "b", Value: []byte("B"), TTL: time.Minute, If: tier.IfAbsent},
	}
	f := tier.Feed{Channel: channel, Log: "log", LogLen: 100, Msg: []byte("batch"), Entry: []byte("entry")}
	stored, err := s.Write(ctx, ws, f)
	if want := []bool{true, true, true}; err != nil || !slices.Equal(stored, want) {
		t.Fatalf("Write = %v, %v; want %v, nil", stored, err, want)
	}
	const sent = "commands [], pipelines [[multi set eval set eval exec]]"
	if got := c.String(); got != sent {
		t.Errorf("sent %s; want %s", got, sent)
	}
	log := streamIDs(t, rdb, prefix+"log")
	if len(log) != 1 {
		t.Fatalf("log: %v, want one entry", log)
	}
	want := []string{"meq", string(append([]byte{2, byte(len(log[0]))}, log[0]...)) + "batch"}
	if got := wait(t, msgs, len(want)); !slices.Equal(got, want) {
		t.Errorf("messages: got %q, want %q", got, want)
	}
	if info := s.Info(); !info.AtomicBatch {
		t.Error("Info().AtomicBatch is false on one server")
	}
}

// TestWriteSequencedMessage: a message of a write with a counter and no
// log goes out sequenced at the counter's value after the write; one with
// a log goes out positioned instead, and one whose counter is missing
// goes out as it is.
func TestWriteSequencedMessage(t *testing.T) {
	s, rdb, prefix := newJournal(t)
	ctx := t.Context()
	channel := prefix + "ch"
	msgs := receive(subscribe(t, srv.Client(t), channel), 5)
	f := tier.Feed{Channel: channel, Log: "log", LogLen: 100}
	write := func(w tier.Write) {
		t.Helper()
		if _, err := s.Write(ctx, []tier.Write{w}, f); err != nil {
			t.Fatal(err)
		}
	}
	write(tier.Write{Key: "a", Value: []byte("1"), Seq: "seq", Msg: []byte("m1")}) // counter made from the clock
	made, err := rdb.Get(ctx, prefix+"seq").Uint64()
	if err != nil || made < 1e15 {
		t.Fatalf("counter after the first write: %d, %v; want a value from the clock", made, err)
	}
	write(tier.Write{Key: "a", Value: []byte("2"), Seq: "seq", Msg: []byte("m2")})                                       // bumped by one
	write(tier.Write{Key: "a", Value: []byte("3"), If: tier.IfSeq, Seq: "seq", SeqWas: []byte("x"), Else: []byte("e3")}) // not stored, not bumped
	write(tier.Write{Key: "b", Value: []byte("4"), Seq: "seq", Msg: []byte("m4"), Log: []byte("e4")})                    // logged: positioned
	rdb.Del(ctx, prefix+"seq")
	write(tier.Write{Key: "c", Value: []byte("5"), If: tier.IfSeq, Seq: "seq", SeqWas: []byte("x"), Else: []byte("e5")}) // no counter: as it is
	want := []string{
		string(message.Sequenced(made, []byte("m1"))),
		string(message.Sequenced(made+1, []byte("m2"))),
		string(message.Sequenced(made+1, []byte("e3"))),
	}
	for i, w := range want {
		got, err := msgs.next()
		if err != nil || got != w {
			t.Fatalf("message %d: %q, %v; want %q", i, got, err, w)
		}
	}
	if got, err := msgs.next(); err != nil || len(got) == 0 || got[0] != message.VersionPositioned || !strings.HasSuffix(got, "m4") {
		t.Fatalf("logged message: %q, %v; want it positioned", got, err)
	}
	if got, err := msgs.next(); err != nil || got != "e5" {
		t.Fatalf("message of a write whose counter is missing: %q, %v; want it as it is", got, err)
	}
}
