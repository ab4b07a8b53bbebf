package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

type semResult struct {
	name                 string
	na                   string
	putGetMisses         int
	putGetN              int
	putGetNote           string
	sameObject           string
	mutationVisible      string
	ttlSeen300, ttlGone8 string
}

func scenarioSemantics(ctx context.Context, e *env) (*section, error) {
	const n = 2000
	sec := &section{id: 7, title: "Semantics"}
	sec.intro = fmt.Sprintf("What a caller sees, per implementation, on one instance. Put-then-get: %s times, a key is written, read "+
		"(so the local tier holds it), overwritten, and read again at once; a read that does not return the second value counts as a "+
		"miss. Same object: two reads of one key return the same pointer. Mutation: the caller changes the value after putting it; "+
		"does a later read see the change? TTL: %d keys written with a 500 ms lifetime, read at 300 ms and at 800 ms (the implementations run "+
		"in parallel; each keeps its defaults otherwise: a 10-minute local lifetime for the peers' local tiers).", fmtCount(n), ttlKeys)
	kinds := []struct {
		name string
		s    spec
	}{
		{nameOurs, spec{kind: nameOurs, prefix: e.k("sem-ours"), f: fmtMsgpack}},
		{nameGoCache, spec{kind: nameGoCache, prefix: e.k("sem-gocache"), f: fmtMsgpack}},
		{nameRueidis, spec{kind: nameRueidis, prefix: e.k("sem-rueidis"), f: fmtMsgpack}},
		{nameCSC, spec{kind: nameCSC, prefix: e.k("sem-csc"), f: fmtMsgpack}},
	}
	results := make([]*semResult, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		res := &semResult{name: k.name}
		results[i] = res
		c, err := open[*Record](e, k.s)
		if err != nil {
			res.na = err.Error()
			continue
		}
		defer c.Close()
		// TTL, in the background while the rest runs.
		wg.Add(1)
		go func() {
			defer wg.Done()
			res.ttlSeen300, res.ttlGone8 = ttlCheck(ctx, c)
		}()
		if err := semChecks(ctx, c, n, res); err != nil {
			res.na = err.Error()
		}
	}
	wg.Wait()

	var t table
	t.Header = []string{"Implementation", "put-then-get misses", "same object on two gets", "mutation of the original after put visible", "TTL 500 ms: seen at 300 ms", "gone at 800 ms"}
	for _, r := range results {
		if r.na != "" {
			t.Rows = append(t.Rows, []string{r.name, "n/a: " + r.na})
			continue
		}
		pg := fmt.Sprintf("%d of %d", r.putGetMisses, r.putGetN)
		if r.putGetNote != "" {
			pg += " (" + r.putGetNote + ")"
		}
		t.Rows = append(t.Rows, []string{r.name, pg, r.sameObject, r.mutationVisible, r.ttlSeen300, r.ttlGone8})
		if r.name == nameOurs {
			sec.headline("put-then-get misses (ours)", pg, "0 (published: Spring's async put misses 1,944 of 2,000)")
		}
	}
	sec.addTable(t)
	sec.add("Our L1 returns the stored value itself (promise 7: fast, no allocation), so a caller that mutates a value after Set, or " +
		"one it got from the cache, changes what every reader sees; the docs say not to. Peers that cache bytes decode a fresh copy " +
		"on every read. go-redis/cache replaces a TTL under one second with its one-hour default (and logs it), and its TinyLFU " +
		"has one lifetime for all entries. go-redis CSC has no lifetime of its own (MaxStaleness is off by default): a cached reply " +
		"lives until Redis sends an invalidation, which for an expiring key happens when Redis actually deletes it (lazily on access, " +
		"or by its active expiry cycle, so it varies from run to run). rueidis and go-redis CSC results for put-then-get depend on when " +
		"the invalidation push for a client's own write is processed relative to the write's reply (Redis 7.0 here); they vary between runs.")
	return sec, nil
}

func semChecks(ctx context.Context, c impl[*Record], n int, res *semResult) error {
	res.putGetN = n
	var stale, absent int
	for i := range n {
		k := "pg:" + strconv.Itoa(i)
		if err := c.Set(ctx, k, &Record{ID: i, Name: "first"}, benchTTL); err != nil {
			return err
		}
		if _, _, err := c.Get(ctx, k); err != nil {
			return err
		}
		if err := c.Set(ctx, k, &Record{ID: i, Name: "second"}, benchTTL); err != nil {
			return err
		}
		v, ok, err := c.Get(ctx, k)
		switch {
		case err != nil:
			return err
		case !ok:
			absent++
		case v.Name != "second":
			stale++
		}
	}
	res.putGetMisses = stale + absent
	if res.putGetMisses > 0 {
		res.putGetNote = fmt.Sprintf("%d returned the first value, %d nothing", stale, absent)
	}

	if err := c.Set(ctx, "same", &Record{ID: 1, Name: "same"}, benchTTL); err != nil {
		return err
	}
	a, okA, err := c.Get(ctx, "same")
	if err != nil {
		return err
	}
	b, okB, err := c.Get(ctx, "same")
	if err != nil {
		return err
	}
	switch {
	case !okA || !okB:
		res.sameObject = "n/a: not found"
	case a == b:
		res.sameObject = "yes (shared)"
	default:
		res.sameObject = "no (a copy per read)"
	}

	orig := &Record{ID: 2, Name: "original"}
	if err := c.Set(ctx, "mut", orig, benchTTL); err != nil {
		return err
	}
	orig.Name = "mutated"
	v, ok, err := c.Get(ctx, "mut")
	switch {
	case err != nil:
		return err
	case !ok:
		res.mutationVisible = "n/a: not found"
	case v.Name == "mutated":
		res.mutationVisible = "yes"
	default:
		res.mutationVisible = "no"
	}
	return nil
}

// ttlKeys is how many keys the TTL check writes: whether an expired key
// is still served can depend on when Redis's expiry cycle reaches it.
const ttlKeys = 5

func ttlCheck(ctx context.Context, c impl[*Record]) (at300, at800 string) {
	start := time.Now()
	for i := range ttlKeys {
		k := "ttl:" + strconv.Itoa(i)
		if err := c.Set(ctx, k, &Record{ID: i, Name: "ttl"}, 500*time.Millisecond); err != nil {
			return "error: " + err.Error(), ""
		}
		// Read once right away so that a local tier holds it.
		_, _, _ = c.Get(ctx, k)
	}
	count := func(at time.Duration) (seen int, err error) {
		time.Sleep(time.Until(start.Add(at)))
		for i := range ttlKeys {
			_, ok, err := c.Get(ctx, "ttl:"+strconv.Itoa(i))
			if err != nil {
				return 0, err
			}
			if ok {
				seen++
			}
		}
		return seen, nil
	}
	s300, err := count(300 * time.Millisecond)
	if err != nil {
		return "error: " + err.Error(), ""
	}
	s800, err := count(800 * time.Millisecond)
	if err != nil {
		return "", "error: " + err.Error()
	}
	at300 = fmt.Sprintf("yes (%d of %d)", s300, ttlKeys)
	if s300 < ttlKeys {
		at300 = fmt.Sprintf("no: %d of %d gone early", ttlKeys-s300, ttlKeys)
	}
	at800 = fmt.Sprintf("yes (%d of %d)", ttlKeys-s800, ttlKeys)
	if s800 > 0 {
		at800 = fmt.Sprintf("no: %d of %d still served", s800, ttlKeys)
	}
	return at300, at800
}
