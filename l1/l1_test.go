package l1_test

import (
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hybridcache/hybridcache/l1"
	"go.uber.org/goleak"
)

func newCache(t *testing.T, o l1.Options) *l1.Cache[string] {
	t.Helper()
	c, err := l1.New[string](o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestNewValidates(t *testing.T) {
	for _, o := range []l1.Options{{}, {MaxWeight: 1, Resolution: -time.Second}} {
		if _, err := l1.New[string](o); err == nil {
			t.Errorf("New(%+v): got nil error, want one", o)
		}
	}
}

func TestSetGetDelete(t *testing.T) {
	c := newCache(t, l1.Options{MaxWeight: 1 << 20})
	if _, ok := c.Get("k"); ok {
		t.Fatal("Get on an empty cache: got a value")
	}
	c.Set("k", "v", 10, time.Minute)
	if v, ok := c.Get("k"); !ok || v != "v" {
		t.Fatalf("Get: got %q %v, want \"v\" true", v, ok)
	}
	c.Delete("k")
	if _, ok := c.Get("k"); ok {
		t.Fatal("Get after Delete: got a value")
	}
	s := c.Stats()
	if s.Hits != 1 || s.Misses != 2 {
		t.Errorf("Stats: got %d hits %d misses, want 1 and 2", s.Hits, s.Misses)
	}
}

// GetCounted answers as Get does, and numbers the hits of each stripe
// from 1: over a run of hits, the numbers it gives add up to what the
// stripes counted.
func TestGetCounted(t *testing.T) {
	c := newCache(t, l1.Options{MaxWeight: 1 << 20})
	if _, n, ok := c.GetCounted("k"); ok || n != 0 {
		t.Fatalf("GetCounted on an empty cache: got %d, %v, want 0, false", n, ok)
	}
	c.Set("k", "v", 10, time.Minute)
	firsts := 0 // hits numbered 1: at most one per stripe
	for range 1000 {
		v, n, ok := c.GetCounted("k")
		if !ok || v != "v" || n == 0 || n > 1000 {
			t.Fatalf("GetCounted: got %q, %d, %v; want \"v\", a count from 1 to 1000, true", v, n, ok)
		}
		if n == 1 {
			firsts++
		}
	}
	if firsts == 0 || firsts > 8 {
		t.Errorf("%d hits numbered 1, want 1 to 8 (one per stripe used)", firsts)
	}
	if s := c.Stats(); s.Hits != 1000 || s.Misses != 1 {
		t.Errorf("Stats: got %d hits %d misses, want 1000 and 1", s.Hits, s.Misses)
	}
}

func TestSetNonPositiveTTLDrops(t *testing.T) {
	c := newCache(t, l1.Options{MaxWeight: 1 << 20})
	c.Set("k", "v", 10, time.Minute)
	c.Set("k", "w", 10, 0)
	if v, ok := c.Get("k"); ok {
		t.Fatalf("Get after Set with ttl 0: got %q, want a miss", v)
	}
}

func TestReplaceOnlyWhenPresent(t *testing.T) {
	c := newCache(t, l1.Options{MaxWeight: 1 << 20})
	if c.Replace("k", "new", 10, time.Minute) {
		t.Error("Replace of an absent key reported true")
	}
	if _, ok := c.Get("k"); ok {
		t.Error("Replace created an absent key")
	}
	c.Set("k", "old", 10, time.Minute)
	if !c.Replace("k", "new", 10, time.Minute) {
		t.Error("Replace of a present key reported false")
	}
	if v, _ := c.Get("k"); v != "new" {
		t.Errorf("Get after Replace: got %q, want \"new\"", v)
	}
}

func TestUpdate(t *testing.T) {
	c := newCache(t, l1.Options{MaxWeight: 1 << 20})
	called := false
	if c.Update("k", func(v string) (string, uint32, time.Duration, bool) { called = true; return "x", 10, time.Minute, true }) || called {
		t.Error("Update of an absent key reported true or called f")
	}
	if _, ok := c.Get("k"); ok {
		t.Error("Update created an absent key")
	}
	c.Set("k", "old", 10, time.Minute)
	if !c.Update("k", func(v string) (string, uint32, time.Duration, bool) { return v + "+", 10, time.Minute, true }) {
		t.Error("Update of a present key reported false")
	}
	if v, _ := c.Get("k"); v != "old+" {
		t.Errorf("Get after Update: got %q, want \"old+\"", v)
	}
	c.Update("k", func(v string) (string, uint32, time.Duration, bool) { return "ignored", 10, time.Minute, false })
	if v, _ := c.Get("k"); v != "old+" {
		t.Errorf("Get after an Update that kept the entry: got %q, want \"old+\"", v)
	}
	c.Update("k", func(v string) (string, uint32, time.Duration, bool) { return v, 10, 0, true })
	if v, ok := c.Get("k"); ok {
		t.Errorf("Get after an Update with lifetime 0: got %q, want a miss", v)
	}
	if s := c.Stats(); s.Hits != 2 || s.Misses != 2 {
		t.Errorf("Stats: got %d hits %d misses, want 2 and 2 (Update counts neither)", s.Hits, s.Misses)
	}
}

func TestExpiry(t *testing.T) {
	c := newCache(t, l1.Options{MaxWeight: 1 << 20, Resolution: time.Millisecond})
	c.Set("short", "v", 10, 30*time.Millisecond)
	c.Set("long", "v", 10, time.Hour)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := c.Get("short"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an entry with a 30ms lifetime was still served after 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, ok := c.Get("long"); !ok {
		t.Error("an entry with a 1h lifetime expired")
	}
}

func TestWeightBound(t *testing.T) {
	var mu sync.Mutex
	evicted := 0
	c := newCache(t, l1.Options{MaxWeight: 1000, OnEvict: func(string, bool) {
		mu.Lock()
		evicted++
		mu.Unlock()
	}})
	for i := range 1000 {
		c.Set(strconv.Itoa(i), "v", 100, time.Hour)
	}
	deadline := time.Now().Add(5 * time.Second)
	// Eviction runs in otter's maintenance, soon after the writes.
	sawEvict := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return evicted > 0
	}
	for c.Weight() > 1000 || c.Len() > 10 || c.Stats().Evictions == 0 || !sawEvict() {
		if time.Now().After(deadline) {
			t.Fatalf("weight %d, %d entries, %d evictions: want at most 1000, at most 10 and some", c.Weight(), c.Len(), c.Stats().Evictions)
		}
		c.Get("0") // reads drive otter's maintenance
		time.Sleep(time.Millisecond)
	}

}

func TestClear(t *testing.T) {
	c := newCache(t, l1.Options{MaxWeight: 1 << 20})
	for i := range 10 {
		c.Set(strconv.Itoa(i), "v", 1, time.Hour)
	}
	c.Clear()
	for i := range 10 {
		if _, ok := c.Get(strconv.Itoa(i)); ok {
			t.Fatalf("key %d survived Clear", i)
		}
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c, err := l1.New[string](l1.Options{MaxWeight: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	c.Set("k", "v", 1, time.Hour)
	c.Close()
	if v, ok := c.Get("k"); !ok || v != "v" {
		t.Errorf("Get after Close: got %q %v, want \"v\" true", v, ok)
	}
}

func TestConcurrentHitsCounted(t *testing.T) {
	c := newCache(t, l1.Options{MaxWeight: 1 << 20})
	c.Set("k", "v", 1, time.Hour)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Get("k")
			}
		})
	}
	wg.Wait()
	if got := c.Stats().Hits; got != 8000 {
		t.Errorf("Hits: got %d, want 8000", got)
	}
}

func TestDeleteIf(t *testing.T) {
	c := newCache(t, l1.Options{MaxWeight: 1 << 20})
	for _, k := range []string{"a1", "a2", "b1", "b2", "b3"} {
		c.Set(k, k[:1], 10, time.Minute)
	}
	if n := c.DeleteIf(func(_ string, v string) bool { return v == "b" }); n != 3 {
		t.Errorf("DeleteIf deleted %d, want 3", n)
	}
	for _, k := range []string{"a1", "a2"} {
		if _, ok := c.Get(k); !ok {
			t.Errorf("%s: gone, want kept", k)
		}
	}
	for _, k := range []string{"b1", "b2", "b3"} {
		if _, ok := c.Get(k); ok {
			t.Errorf("%s: kept, want deleted", k)
		}
	}
}

// TestUpkeepOnWrite: the upkeep a write causes (here, eviction to the
// weight bound) is done by the time the write returns, on the writer's
// goroutine, with no other goroutine needed.
func TestUpkeepOnWrite(t *testing.T) {
	evicted := 0 // written by OnEvict on this goroutine only
	c := newCache(t, l1.Options{MaxWeight: 1000, OnEvict: func(string, bool) { evicted++ }})
	for i := range 1000 {
		c.Set(strconv.Itoa(i), "v", 100, time.Hour)
		if w := c.Weight(); w > 1000 {
			t.Fatalf("after write %d: weight %d, want at most 1000", i, w)
		}
	}
	if evicted < 990 || c.Stats().Evictions != uint64(evicted) {
		t.Errorf("OnEvict ran %d times, Stats counts %d evictions; want 990 or more of each, equal", evicted, c.Stats().Evictions)
	}
}

// TestUpkeepWithoutWrites: upkeep that reads alone ask for (here, the
// notice of an expired entry) still runs when nothing writes.
func TestUpkeepWithoutWrites(t *testing.T) {
	expired := make(chan string, 1)
	c := newCache(t, l1.Options{MaxWeight: 1 << 20, Resolution: time.Millisecond, OnEvict: func(key string, exp bool) {
		if exp {
			select {
			case expired <- key:
			default:
			}
		}
	}})
	c.Set("short", "v", 10, 20*time.Millisecond)
	c.Set("long", "v", 10, time.Hour)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case k := <-expired:
			if k != "short" {
				t.Fatalf("OnEvict(%q, expired): want \"short\"", k)
			}
			return
		case <-deadline:
			t.Fatal("no expiry notice for a 20ms entry after 10s of reads")
		default:
		}
		for range 64 {
			c.Get("long")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestExpiredReadStartsNoGoroutine: the upkeep that a read of an expired
// entry asks for waits for the write that follows it (the fill), and runs
// there: the read starts no goroutine.
func TestExpiredReadStartsNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCache(t, l1.Options{MaxWeight: 1 << 20, Resolution: time.Millisecond})
		const n = 10
		for i := range n {
			c.Set(strconv.Itoa(i), "v", 10, time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
		runtime.GC() // so that no GC worker starts in what is counted
		before := goroutinesCreated()
		for i := range n {
			k := strconv.Itoa(i)
			if _, ok := c.Get(k); ok {
				t.Fatalf("%s: served 5ms into a 1ms lifetime", k)
			}
			c.Set(k, "v", 10, time.Hour)
		}
		if got := goroutinesCreated() - before; got != 0 {
			t.Errorf("%d reads of expired entries, each followed by a write: %d goroutines started, want 0", n, got)
		}
	})
}

// TestExpiredReadNoticeWithoutWrite: when no write follows the read of an
// expired entry, the entry's expiry notice still comes, from otter's
// periodic clean-up (which removes it within about two seconds) by way of
// the queue that no write runs.
func TestExpiredReadNoticeWithoutWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var expired []string // appended to by OnEvict, read after synctest.Wait
		c := newCache(t, l1.Options{MaxWeight: 1 << 20, Resolution: time.Millisecond, OnEvict: func(key string, exp bool) {
			if exp {
				expired = append(expired, key)
			}
		}})
		c.Set("k", "v", 10, time.Millisecond)
		time.Sleep(5 * time.Millisecond)
		if _, ok := c.Get("k"); ok {
			t.Fatal("served 5ms into a 1ms lifetime")
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if len(expired) != 1 || expired[0] != "k" {
			t.Errorf("5s after the read, with no write: expiry notices for %q, want [k]", expired)
		}
	})
}

func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestBatch: writes in a batch are stored as SetIf stores them, and by the
// time Done returns their upkeep is done (the weight is back within bound).
func TestBatch(t *testing.T) {
	evicted := 0 // written by OnEvict on this goroutine only
	c := newCache(t, l1.Options{MaxWeight: 1000, OnEvict: func(string, bool) { evicted++ }})
	b := c.Batch()
	for i := range 100 {
		if got := b.SetIf(strconv.Itoa(i), "v", 100, time.Hour, func() bool { return i%2 == 0 }); got != (i%2 == 0) {
			t.Fatalf("SetIf of key %d: stored %v, want %v", i, got, i%2 == 0)
		}
	}
	b.Done()
	if w := c.Weight(); w > 1000 {
		t.Errorf("after Done: weight %d, want at most 1000", w)
	}
	if evicted < 40 {
		t.Errorf("after Done: %d evictions, want 40 or more", evicted)
	}
	if _, ok := c.Get("1"); ok {
		t.Error("a key whose condition was false was stored")
	}
}

// TestLongLifetimes: a lifetime beyond what a cell holds is cut to it, not
// wrapped around to a short one.
func TestLongLifetimes(t *testing.T) {
	c := newCache(t, l1.Options{MaxWeight: 1 << 20, Resolution: time.Millisecond})
	c.Set("century", "v", 1, 100*365*24*time.Hour)
	c.Set("wrap", "v", 1, (1<<32+1)*time.Millisecond) // 1ms if wrapped to 32 bits
	time.Sleep(50 * time.Millisecond)
	for _, k := range []string{"century", "wrap"} {
		if _, ok := c.Get(k); !ok {
			t.Errorf("%s: expired after 50ms", k)
		}
	}
}

func TestGetExpiry(t *testing.T) {
	c := newCache(t, l1.Options{MaxWeight: 1 << 20})
	if _, _, ok := c.GetExpiry("k"); ok {
		t.Fatal("GetExpiry on an empty cache: got a value")
	}
	before := c.Now()
	c.Set("k", "v", 10, time.Minute)
	v, exp, ok := c.GetExpiry("k")
	if !ok || v != "v" {
		t.Fatalf("GetExpiry: got %q %v, want \"v\" true", v, ok)
	}
	if left := time.Duration(exp - before); left < time.Minute-time.Second || left > time.Minute+time.Second {
		t.Errorf("GetExpiry: expires %v after the Set, want about a minute", left)
	}
	if s := c.Stats(); s.Hits != 1 || s.Misses != 1 {
		t.Errorf("Stats: got %d hits %d misses, want 1 and 1", s.Hits, s.Misses)
	}
}

func TestPeekCountsNothing(t *testing.T) {
	c := newCache(t, l1.Options{MaxWeight: 1 << 20})
	if _, _, _, ok := c.Peek("k"); ok {
		t.Fatal("Peek on an empty cache: got a value")
	}
	before := c.Now()
	c.Set("k", "v", 10, time.Minute)
	v, exp, w, ok := c.Peek("k")
	if !ok || v != "v" || w != 10 {
		t.Fatalf("Peek: got %q weight %d %v, want \"v\" weight 10 true", v, w, ok)
	}
	if left := time.Duration(exp - before); left < time.Minute-time.Second || left > time.Minute+time.Second {
		t.Errorf("Peek: expires %v after the Set, want about a minute", left)
	}
	if s := c.Stats(); s.Hits != 0 || s.Misses != 0 {
		t.Errorf("Stats after two Peeks: got %d hits %d misses, want none", s.Hits, s.Misses)
	}
}

// TestAll walks every live entry once, without counting a hit or a miss.
func TestAll(t *testing.T) {
	c := newCache(t, l1.Options{MaxWeight: 1 << 20})
	want := map[string]string{"a": "1", "b": "2", "c": "3"}
	for k, v := range want {
		c.Set(k, v, 10, time.Minute)
	}
	got := map[string]string{}
	for k, v := range c.All() {
		if _, dup := got[k]; dup {
			t.Errorf("%s walked twice", k)
		}
		got[k] = v
	}
	if len(got) != len(want) {
		t.Errorf("All walked %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("All: %s = %q, want %q", k, got[k], v)
		}
	}
	if s := c.Stats(); s.Hits != 0 || s.Misses != 0 {
		t.Errorf("All counted %d hits and %d misses, want none", s.Hits, s.Misses)
	}
}
