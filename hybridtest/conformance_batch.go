package hybridtest

import (
	"errors"
	"fmt"
	"github.com/hybridcache/hybridcache/tier"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// This file holds the suite's checks of a batch announced as a whole
// (Feed.Msg and Feed.Entry).

// batchKeys are the keys of an announced batch: plain keys, on several
// nodes of a Redis Cluster.
var batchKeys = []string{"a", "b", "c", "d", "e", "f"}

// checkBatchMsg: Feed.Msg goes out once, after the batch's writes and their
// own messages, whether they stored or not: whoever hears it finds every
// write of the batch made.
func checkBatchMsg(e *env) {
	e.listen()
	// A second subscriber reads the batch's keys when Msg arrives.
	var mu sync.Mutex
	var seen [][]byte
	heard := make(chan struct{}, 1)
	unsub, err := e.bus.Subscribe(e.ctx, e.feed.Channel, func(msg []byte) {
		if string(msg) != "batch" {
			return
		}
		vs, err := e.r.Get(e.ctx, batchKeys)
		if err != nil {
			e.t.Errorf("Get when the batch's message arrived: %v", err)
		}
		mu.Lock()
		seen = vs
		mu.Unlock()
		heard <- struct{}{}
	}, func(bool) {})
	if err != nil {
		e.t.Fatalf("Subscribe(%q): %v", e.feed.Channel, err)
	}
	defer unsub()
	e.put("c", raw("old"), longTTL)
	ws := make([]tier.Write, len(batchKeys))
	want := make([][]byte, len(batchKeys))
	for i, k := range batchKeys {
		ws[i] = tier.Write{Key: k, Value: raw("new " + k), TTL: longTTL}
		want[i] = ws[i].Value
	}
	ws[0].Msg = raw("own a")
	ws[2].If, ws[2].Else = tier.IfAbsent, raw("unstored c") // holds "old": not stored
	want[2] = raw("old")
	f := e.feed
	f.Msg = raw("batch")
	st := e.writeFeed(f, ws...)
	e.expectStored("an announced batch", st, true, true, false, true, true, true)
	select {
	case <-heard:
	case <-time.After(patience):
		e.t.Fatalf("the batch's message did not arrive within %v", patience)
	}
	mu.Lock()
	if !slices.EqualFunc(seen, want, same) {
		e.t.Errorf("when the batch's message arrived, its keys held %s, want %s", showAll(seen), showAll(want))
	}
	mu.Unlock()
	got := e.receive(3) // keys on several nodes: the writes' own in any order
	slices.Sort(got)
	if w := []string{"batch", "own a", "unstored c"}; !slices.Equal(got, w) {
		e.t.Errorf("an announced batch published %q, want %q", got, w)
	}
	e.expectMsgs("f", "after an announced batch") // and none more
	// Without Msg, the writes announce as they would alone; without a
	// Channel, nothing goes out.
	w := tier.Write{Key: "a", Value: raw("again"), TTL: longTTL, Msg: raw("own again")}
	e.writeFeed(tier.Feed{Channel: e.feed.Channel}, w)
	e.writeFeed(tier.Feed{Msg: raw("unheard")}, w)
	e.expectMsgs("a", "batches with no Msg, or no Channel", "own again")
}

// checkBatchLog: with Feed.Entry, the batch appends one entry to the log,
// and Feed.Msg goes out positioned at it; without a log, Entry fails the
// call with errors.ErrUnsupported, before any write.
func checkBatchLog(e *env) {
	e.listen()
	f := e.feed
	f.Msg, f.Entry = raw("batch"), raw("entry")
	ws := []tier.Write{
		{Key: "a", Value: raw("1"), TTL: longTTL},
		{Key: "b", Value: raw("2"), TTL: longTTL},
		{Key: "c", Value: raw("3"), TTL: longTTL},
	}
	if !e.r.Info().Log {
		if _, err := e.r.Write(e.ctx, ws, f); !errors.Is(err, errors.ErrUnsupported) {
			e.t.Errorf("an announced batch with Feed.Entry: got %v, want errors.ErrUnsupported", err)
		}
		e.expect("a", nil)
		e.expectMsgs("a", "a batch refused")
		return
	}
	opened := e.openLog()
	e.writeFeed(f, ws...)
	msgs := e.drain("a")
	if len(msgs) != 1 {
		e.t.Fatalf("a logged batch published %q, want one message", msgs)
	}
	p, msg, err := positioned(msgs[0])
	if err != nil || msg != "batch" {
		e.t.Fatalf("a logged batch published %q, want %q positioned (%v)", msgs[0], "batch", err)
	}
	page := e.readLog(opened, 10)
	if !slices.EqualFunc(page.Entries, [][]byte{raw("entry")}, same) || !slices.Equal(page.Positions, []string{p}) || !page.Complete {
		e.t.Errorf("ReadLog after a logged batch: %+v; want one entry %q at %q, Complete", page, "entry", p)
	}
	e.writeFeed(tier.Feed{Channel: f.Channel, Log: f.Log, LogLen: f.LogLen, Entry: raw("no msg")}, ws[0])
	if page := e.readLog(p, 10); len(page.Entries) != 0 {
		e.t.Errorf("a batch with Feed.Entry and no Msg logged %q, want nothing", page.Entries)
	}
}

// checkBatchAtomic: where Info().AtomicBatch holds, no write comes between
// a batch's writes and its message: a single write of one of its keys that
// runs at the same time comes before the batch, message included, or after
// it, so the last message that names the key names what the key holds. Each
// trial starts the single write at a random moment of the batch.
func checkBatchAtomic(e *env) {
	if !e.r.Info().AtomicBatch {
		e.t.Skip("Info().AtomicBatch is false")
	}
	e.listen()
	const trials = 40
	for trial := range trials {
		keys := []string{fmt.Sprint("a", trial), fmt.Sprint("b", trial), fmt.Sprint("c", trial)}
		ws := make([]tier.Write, len(keys))
		for j, k := range keys {
			ws[j] = tier.Write{Key: k, Value: raw("batch"), TTL: longTTL}
		}
		f := e.feed
		f.Msg = raw("batch " + strings.Join(keys, " "))
		k := keys[trial%len(keys)]
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := e.r.Write(e.ctx, ws, f); err != nil {
				e.t.Errorf("Write of a batch: %v", err)
			}
		})
		wg.Go(func() {
			time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
			if _, err := e.r.Write(e.ctx, []tier.Write{{Key: k, Value: raw("single"), TTL: longTTL, Msg: raw("single " + k)}}, e.feed); err != nil {
				e.t.Errorf("Write: %v", err)
			}
		})
		wg.Wait()
		if e.t.Failed() {
			return
		}
		msgs := e.receive(2)
		last := strings.Fields(msgs[len(msgs)-1])[0]
		if got := e.get(k)[0]; string(got) != last {
			e.t.Fatalf("trial %d: a batch and a write of %q at once published %q, and %q holds %s: want the last message to name what it holds", trial, k, msgs, k, show(got))
		}
	}
}
