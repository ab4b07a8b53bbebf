package hybridtest

import (
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"slices"
	"strconv"
	"strings"

	"github.com/hybridcache/hybridcache/internal/message"
)

// This file holds the suite's checks of the log: Write.Log and ReadLog.

// needLog skips a check of the log on a Remote that keeps none.
func (e *env) needLog() {
	e.t.Helper()
	if !e.r.Info().Log {
		e.t.Skip("Info().Log is false: the Remote keeps no log")
	}
}

// readLog reads e.feed.Log after after, failing the test on an error.
func (e *env) readLog(after string, max int) tier.LogPage {
	e.t.Helper()
	p, err := e.r.ReadLog(e.ctx, e.feed.Log, after, max)
	if err != nil {
		e.t.Fatalf("ReadLog(%q, %d): %v", after, max, err)
	}
	if len(p.Entries) != len(p.Positions) {
		e.t.Fatalf("ReadLog(%q, %d): %d entries at %d positions", after, max, len(p.Entries), len(p.Positions))
	}
	return p
}

// openLog opens e.feed.Log and returns its newest position.
func (e *env) openLog() string {
	e.t.Helper()
	p := e.readLog("", 10)
	if len(p.Entries) != 0 {
		e.t.Errorf("opening a log returned entries %q, want none", p.Entries)
	}
	if !validPosition(p.Last) {
		e.t.Fatalf("opening a log returned Last %q, want a stream id", p.Last)
	}
	return p.Last
}

// validPosition reports whether p is a stream id after "0-0".
func validPosition(p string) bool { return message.ComparePositions(p, "0-0") > 0 }

// next returns the stream id right after p.
func next(p string) string {
	ms, seq, _ := strings.Cut(p, "-")
	n, _ := strconv.ParseUint(seq, 10, 64)
	return ms + "-" + strconv.FormatUint(n+1, 10)
}

// checkLogOpen: a missing log is incomplete; opening creates it, and
// opening it again changes nothing.
func checkLogOpen(e *env) {
	e.needLog()
	if p := e.readLog("1-0", 10); p.Complete || len(p.Entries) != 0 {
		e.t.Errorf("ReadLog of a missing log: %+v, want no entries, Complete false", p)
	}
	last := e.openLog()
	if again := e.openLog(); again != last {
		e.t.Errorf("opening a log twice: Last %q, then %q", last, again)
	}
	if p := e.readLog(last, 10); !p.Complete || len(p.Entries) != 0 || p.Last != last {
		e.t.Errorf("ReadLog of a log just opened at %q: %+v, want no entries, Complete, that Last", last, p)
	}
}

// positioned splits a positioned message: byte 2, the length of the
// position, the position, the message.
func positioned(m string) (pos, msg string, err error) {
	if len(m) < 2 || m[0] != message.VersionPositioned || len(m) < 2+int(m[1]) {
		return "", "", fmt.Errorf("%q is not a positioned message", m)
	}
	return m[2 : 2+int(m[1])], m[2+int(m[1]):], nil
}

// checkLogEntries: a message that goes out with Log set appends Log to the
// log and goes out positioned at the new entry; no message, no entry.
func checkLogEntries(e *env) {
	e.needLog()
	e.listen()
	opened := e.openLog()
	st := e.write(
		tier.Write{Key: "k", Value: raw("v1"), Msg: raw("m1"), Log: raw("e1")},
		tier.Write{Key: "k", Value: raw("v2"), If: tier.IfAbsent, Msg: raw("m2"), Else: raw("u2"), Log: raw("e2")},
		tier.Write{Key: "k", Value: raw("v3"), If: tier.IfAbsent, Msg: raw("m3"), Log: raw("e3")},
		tier.Write{Key: "k", Value: raw("v4"), Msg: raw("m4"), Log: raw("e4")},
		tier.Write{Key: "k", Value: raw("v5"), Log: raw("e5")},
	)
	e.expectStored("logged writes", st, true, false, false, true, true)
	msgs := e.drain("k")
	var positions, payloads []string
	for _, m := range msgs {
		p, msg, err := positioned(m)
		if err != nil {
			e.t.Fatalf("logged writes published %q: %v", msgs, err)
		}
		positions, payloads = append(positions, p), append(payloads, msg)
	}
	if want := []string{"m1", "u2", "m4"}; !slices.Equal(payloads, want) {
		e.t.Fatalf("logged writes published %q, want %q positioned", payloads, want)
	}
	for i, p := range positions {
		if !validPosition(p) || message.ComparePositions(p, opened) <= 0 || (i > 0 && message.ComparePositions(p, positions[i-1]) <= 0) {
			e.t.Errorf("logged writes published at %q, after the log opened at %q: want stream ids, rising", positions, opened)
			break
		}
	}
	p := e.readLog(opened, 10)
	if want := [][]byte{raw("e1"), raw("e2"), raw("e4")}; !slices.EqualFunc(p.Entries, want, same) || !slices.Equal(p.Positions, positions) ||
		!p.Complete || p.Last != positions[2] {
		e.t.Errorf("ReadLog after %q: %+v; want entries %q at %q, Complete, Last %q", opened, p, want, positions, positions[2])
	}
	if p := e.readLog(positions[0], 1); !slices.EqualFunc(p.Entries, [][]byte{raw("e2")}, same) || !slices.Equal(p.Positions, positions[1:2]) || !p.Complete {
		e.t.Errorf("ReadLog of 1 after %q: %+v; want e2 at %q, Complete", positions[0], p, positions[1])
	}
	if p := e.readLog(positions[2], 10); len(p.Entries) != 0 || !p.Complete || p.Last != positions[2] {
		e.t.Errorf("ReadLog after the newest entry %q: %+v; want no entries, Complete, that Last", positions[2], p)
	}
}

// checkLogIncomplete: a log is incomplete after a position newer than its
// newest entry, and after entries it trimmed; it keeps about LogLen.
func checkLogIncomplete(e *env) {
	e.needLog()
	opened := e.openLog()
	e.write(tier.Write{Key: "k", Value: raw("v"), Msg: raw("m"), Log: raw("first")})
	p := e.readLog(opened, 10)
	if len(p.Entries) != 1 || !p.Complete {
		e.t.Fatalf("ReadLog after one logged write: %+v, want one entry, Complete", p)
	}
	first := p.Positions[0]
	if p := e.readLog(next(first), 10); p.Complete || len(p.Entries) != 0 {
		e.t.Errorf("ReadLog after %q, past the newest entry %q: %+v, want no entries, Complete false", next(first), first, p)
	}
	const n, keep = 300, 10
	ws := make([]tier.Write, n)
	for i := range ws {
		ws[i] = tier.Write{Key: "k", Value: raw("v"), Msg: raw("m"), Log: raw(fmt.Sprint("e", i))}
	}
	e.writeFeed(tier.Feed{Channel: e.feed.Channel, Log: e.feed.Log, LogLen: keep}, ws...)
	p = e.readLog(first, 2*n)
	switch {
	case p.Complete:
		e.t.Errorf("ReadLog after %q, %d entries later, with LogLen %d: Complete", first, n, keep)
	case len(p.Entries) == 0 || len(p.Entries) >= n:
		e.t.Errorf("ReadLog after %q, %d entries later, with LogLen %d: %d entries, want about %d", first, n, keep, len(p.Entries), keep)
	case string(p.Entries[len(p.Entries)-1]) != fmt.Sprint("e", n-1) || p.Positions[len(p.Positions)-1] != p.Last:
		e.t.Errorf("ReadLog after %q: the newest entry %q at %q, Last %q; want e%d at Last", first, p.Entries[len(p.Entries)-1], p.Positions[len(p.Positions)-1], p.Last, n-1)
	}
	if q := e.readLog(p.Last, 10); !q.Complete || len(q.Entries) != 0 {
		e.t.Errorf("ReadLog after the newest entry %q of a trimmed log: %+v, want no entries, Complete", p.Last, q)
	}
}

// checkLogUnsupported: a Remote that keeps no log fails every use of one
// with errors.ErrUnsupported.
func checkLogUnsupported(e *env) {
	if e.r.Info().Log {
		e.t.Skip("Info().Log is true: the Remote keeps a log")
	}
	w := []tier.Write{{Key: "k", Value: raw("v"), Msg: raw("m"), Log: raw("e")}}
	if _, err := e.r.Write(e.ctx, w, e.feed); !errors.Is(err, errors.ErrUnsupported) {
		e.t.Errorf("Write with Log: got %v, want errors.ErrUnsupported", err)
	}
	for _, after := range []string{"", "1-0"} {
		if _, err := e.r.ReadLog(e.ctx, e.feed.Log, after, 10); !errors.Is(err, errors.ErrUnsupported) {
			e.t.Errorf("ReadLog(%q): got %v, want errors.ErrUnsupported", after, err)
		}
	}
}
