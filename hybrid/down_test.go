package hybrid_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridtest"
	"github.com/hybridcache/hybridcache/internal/keyslot"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/l2"
)

// On Redis Cluster, a read that fails on one master during a bus loss
// takes only that master's slot as unreachable: held entries of keys on
// the masters that answer are still read again once LossGrace has passed,
// so a write there that the lost bus did not announce is seen; the held
// entry of a key on the hung master is served as it is, without a wait.
// With one flag for the whole shared tier, the first read served A's old
// value of healthy for a second after the failure.
func TestClusterHeldDownPerSlot(t *testing.T) {
	t.Cleanup(func() {
		if err := redistest.WaitRedials(3 * time.Second); err != nil {
			t.Error(err)
		}
	})
	// A long node timeout: the paused master is not taken for failed
	// (which would take the whole cluster down, as it has no replica).
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, NodeTimeout: 20 * time.Second})
	ctx := t.Context()
	ns := redistest.Prefix(t)
	// Two keys on two masters, neither of them the hung one holding the
	// Clear record, which every read of a value reads too (a value whose
	// records cannot be read is a miss).
	clearMaster, err := cl.MasterOf(ctx, int(keyslot.Of(ns+":\x00clear")))
	if err != nil {
		t.Fatal(err)
	}
	var healthy, hung, hungMaster string
	for i := 0; healthy == "" || hung == ""; i++ {
		k := "{d" + strconv.Itoa(i) + "}k"
		m, err := cl.MasterOf(ctx, int(keyslot.Of(ns+":"+k)))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case hung == "" && m != clearMaster:
			hung, hungMaster = k, m
		case hung != "" && m != hungMaster:
			healthy = k
		}
	}
	client := func() *redis.ClusterClient {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: 2 * time.Second})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	const grace = 100 * time.Millisecond
	bus := &hybridtest.Bus{}
	t.Cleanup(func() { bus.Close() })
	a := newTestCache[string](t, hybrid.Options{Namespace: ns, Remote: l2.New(client(), l2.Options{ReadTimeout: 300 * time.Millisecond}), Bus: bus, LossGrace: grace})
	// B writes while A's bus is lost: A hears of nothing.
	b := newTestCache[string](t, hybrid.Options{Namespace: ns, Remote: l2.New(client(), l2.Options{})})
	for _, k := range []string{healthy, hung} {
		if err := a.Set(ctx, k, "a1"); err != nil {
			t.Fatal(err)
		}
	}
	bus.SimulateDrop()
	if err := bus.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * grace)

	resume, err := cl.Pause(t, hungMaster)
	if err != nil {
		t.Fatal(err)
	}
	// The held entry of hung is checked, the read fails: served as it is.
	if v, ok, err := a.Get(ctx, hung); err != nil || !ok || v != "a1" {
		t.Fatalf("Get(%q) on the hung master = %q, %v, %v, want the held %q", hung, v, ok, err, "a1")
	}
	if err := b.Set(ctx, healthy, "b2"); err != nil {
		t.Fatal(err)
	}
	// healthy's master answers: its held entry is read again.
	if v, ok, err := a.Get(ctx, healthy); err != nil || !ok || v != "b2" {
		t.Errorf("Get(%q) on a master that answers, after a read failed on another, during a bus loss, past LossGrace = %q, %v, %v, want %q (B's write, which Redis holds)", healthy, v, ok, err, "b2")
	}
	// hung's slot is down: its held entry is served without a wait.
	before := a.Stats()
	if v, ok, err := a.Get(ctx, hung); err != nil || !ok || v != "a1" {
		t.Errorf("Get(%q) on the hung master, again = %q, %v, %v, want the held %q", hung, v, ok, err, "a1")
	}
	after := a.Stats()
	if after.L2.Errors != before.L2.Errors || after.Bus.HeldServed != before.Bus.HeldServed+1 {
		t.Errorf("Get(%q) of a slot taken as down: L2.Errors %d -> %d, Bus.HeldServed %d -> %d; want it served from L1 without a read (errors unchanged, one more served)", hung, before.L2.Errors, after.L2.Errors, before.Bus.HeldServed, after.Bus.HeldServed)
	}
	resume()
	// Once the master answers again, the probe ends the slot's down time
	// and the held entry is checked again: B's write is seen.
	if err := b.Set(context.Background(), hung, "b2"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, ok, err := a.Get(ctx, hung)
		if err == nil && ok && v == "b2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Get(%q) 5s after its master answered again = %q, %v, %v, want %q", hung, v, ok, err, "b2")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
