package hybridtest

import (
	"github.com/hybridcache/hybridcache/tier"
	"time"
)

// This file holds the suite's check of Write.Touch: a value changed in
// place, on a prefix that leaves out the bytes the touch overwrites.

// checkTouch: a touch overwrites only its bytes where the key begins with
// Old but for them, sets the lifetime (or keeps it), announces as any
// write, and never creates or grows a value.
func checkTouch(e *env) {
	e.listen()
	// The keys share a hash tag: on Redis Cluster their messages come from
	// one node, in the order of the writes.
	key := func(name string) string { return "{touch}" + name }
	start := time.Now()
	e.put(key("k"), raw("head-OLD-tail"), shortTTL)
	e.put(key("short"), raw("head-O"), longTTL)
	e.put(key("kept"), raw("ab-CD-ef"), shortTTL)
	touch := func(name, old string, at int, value string, ttl time.Duration) tier.Write {
		return tier.Write{Key: key(name), If: tier.IfEqual, Touch: true, TouchAt: at, Old: raw(old), Value: raw(value), TTL: ttl,
			Msg: raw("touched " + name), Else: raw("untouched " + name)}
	}
	kept := touch("kept", "ab-xx-", 3, "GH", 0)
	kept.KeepTTL = true
	st := e.write(
		touch("k", "head-xxx", 5, "NEW", longTTL),     // differs only where it writes
		touch("k", "hexd-NEW", 5, "ZZZ", longTTL),     // differs elsewhere
		touch("missing", "", 0, "x", longTTL),         // nothing to touch
		touch("short", "head-", 5, "NEW", longTTL),    // would grow the value
		touch("nothing", "", 0, "", longTTL),          // an empty touch of nothing
		kept,                                          // its lifetime kept
		touch("k", "head-NEW-tail!", 5, "N", longTTL), // Old longer than the value
	)
	e.expectStored("touches", st, true, false, false, false, false, true, false)
	e.expect(key("k"), raw("head-NEW-tail"))
	e.expect(key("missing"), nil)
	e.expect(key("short"), raw("head-O"))
	e.expect(key("nothing"), nil)
	e.expect(key("kept"), raw("ab-GH-ef"))
	e.expires(key("kept"), start, shortTTL)
	if time.Since(start) > shortTTL+patience {
		return // the next check would not tell a kept lifetime from a new one
	}
	e.expect(key("k"), raw("head-NEW-tail")) // its new lifetime outlived the old
	e.expectMsgs(key("k"), "touches", "touched k", "untouched k", "untouched missing", "untouched short",
		"untouched nothing", "touched kept", "untouched k")

	e.put(key("life"), raw("v"), longTTL)
	start = time.Now()
	st = e.write(touch("life", "", 0, "", shortTTL)) // an empty Old and Value: the lifetime only
	e.expectStored("a touch of the lifetime only", st, true)
	e.expect(key("life"), raw("v"))
	e.expires(key("life"), start, shortTTL)

	e.put("k", raw("head-OLD-tail"), longTTL)
	for _, w := range []tier.Write{
		{Key: "k", Touch: true, Value: raw("x")},
		{Key: "k", Touch: true, If: tier.IfAbsent, Value: raw("x")},
		{Key: "k", Touch: true, If: tier.IfEqual, TouchAt: -1, Value: raw("x")},
	} {
		if _, err := e.r.Write(e.ctx, []tier.Write{w}, e.feed); err == nil {
			e.t.Errorf("Write(%+v): no error, want one", w)
		}
	}
	e.expect("k", raw("head-OLD-tail"))
}
