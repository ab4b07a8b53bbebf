package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

// cacheCommands are the commands a cache (l2.Store and invalidate.Bus over
// go-redis) needs: reads and writes of its keys, the write-and-publish
// scripts, the bus, and what go-redis sends when it connects.
var cacheCommands = []string{
	"+get", "+set", "+mget", // l2.Store
	"+evalsha", "+eval", // SetAndPublish, CompareAndSet (EVAL after NOSCRIPT)
	"+publish", "+subscribe", "+unsubscribe", "+ping", // invalidate.Bus
	"+hello", "+auth", "+client|setname", // go-redis's connection set-up
}

// aclUser creates on the shared server a user with a random password who
// may use only cacheCommands, only on the keys of namespace ns ("ns:*") and
// only on its bus channel. The user is deleted when t ends (which also
// disconnects its clients).
func aclUser(t *testing.T, ns string) (user, password string) {
	t.Helper()
	admin := srv.Client(t)
	user = "u-" + randomHex(8)
	password = "pw-" + randomHex(16)
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">" + password, "~" + ns + ":*", "&hybridcache:" + ns}
	for _, c := range cacheCommands {
		args = append(args, c)
	}
	ctx := context.Background()
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() {
		if err := admin.Do(context.Background(), "ACL", "DELUSER", user).Err(); err != nil {
			t.Errorf("ACL DELUSER %s: %v", user, err)
		}
	})
	return user, password
}

// asUser makes clients of the package's Redis that log in as user.
func asUser(user, password string, tune func(*redis.Options)) clientFactory {
	return singleNode(func(o *redis.Options) {
		o.Username, o.Password = user, password
		if tune != nil {
			tune(o)
		}
	})
}

// TestFaultACL: a Redis user limited by ACL to the namespace's keys, its
// bus channel and the commands in cacheCommands is enough for the cache:
// reads, writes, batches and invalidation between two instances work. The
// same user cannot touch a key outside the namespace, publish elsewhere or
// run a dangerous command (NOPERM), and a cache in another namespace gets
// errors on writes while its reads degrade to load.
func TestFaultACL(t *testing.T) {
	srv.NeedReal(t)
	ctx := context.Background()
	ns := redistest.Prefix(t)
	user, password := aclUser(t, ns)
	newClient := asUser(user, password, nil)
	o := hybrid.Options{Namespace: ns, Secret: []byte("acl-secret")}
	a := newInstance(t, "A", newClient, o, invalidate.Options{})
	b := newInstance(t, "B", newClient, o, invalidate.Options{})
	raw := newClient(t)

	if v, err := a.c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) { return "v1", nil }); err != nil || v != "v1" {
		t.Fatalf("A: GetOrCreate as %s: got %q, %v", user, v, err)
	}
	waitFor(t, 5*time.Second, "A's write-back", func() bool { return a.remote.setIfAbsents.Load() >= 1 }, nil)
	fill(t, b, "k", "v1")
	setStr(t, a, "k", "v2")
	waitStat(t, b, "Received", statReceived, 1)
	if v, ok := getStr(t, b, "k"); !ok || v != "v2" {
		t.Errorf("B: Get after A's Set: got %q, %v, want \"v2\"", v, ok)
	}
	if err := a.c.Delete(ctx, "k"); err != nil {
		t.Errorf("A: Delete as %s: %v", user, err)
	}
	waitStat(t, b, "Received", statReceived, 2)
	batch := []string{"m1", "m2", "m3"}
	got, err := a.c.GetOrCreateMany(ctx, batch, func(_ context.Context, missing []string) (map[string]string, error) {
		out := map[string]string{}
		for _, k := range missing {
			out[k] = "loaded:" + k
		}
		return out, nil
	})
	if err != nil || len(got) != len(batch) {
		t.Errorf("A: GetOrCreateMany as %s: got %v, %v", user, got, err)
	}
	waitFor(t, 5*time.Second, "A's batch write-back", func() bool { return a.remote.setManyKey.Load() >= int64(len(batch)) }, nil)
	many, err := b.c.GetMany(ctx, batch)
	if err != nil || len(many) != len(batch) {
		t.Errorf("B: GetMany as %s: got %v, %v, want the 3 values A wrote", user, many, err)
	}
	for _, in := range []*instance{a, b} {
		st := in.c.Stats()
		t.Logf("%s as ACL user %s: L2Hits %d, Loads %d, Published %d, Received %d, L2Errors %d, BusLosses %d",
			in.name, user, st.L2Hits, st.Loads, st.Published, st.Received, st.L2Errors, st.BusLosses)
		if st.L2Errors != 0 || st.PublishErrors != 0 || st.BusLosses != 0 {
			t.Errorf("%s: L2Errors %d, PublishErrors %d, BusLosses %d, want 0: the cache needs more than the user may do",
				in.name, st.L2Errors, st.PublishErrors, st.BusLosses)
		}
	}

	// What the user may not do.
	outside := "other:" + ns + ":k"
	denied := []struct {
		what string
		err  error
	}{
		{"SET " + outside, raw.Set(ctx, outside, "x", time.Minute).Err()},
		{"GET " + outside, raw.Get(ctx, outside).Err()},
		{"PUBLISH another channel", raw.Publish(ctx, "hybridcache:other", "x").Err()},
		{"FLUSHDB", raw.FlushDB(ctx).Err()},
		{"KEYS *", raw.Keys(ctx, "*").Err()},
		{"CONFIG GET requirepass", raw.ConfigGet(ctx, "requirepass").Err()},
	}
	for _, d := range denied {
		t.Logf("as %s: %s: %v", user, d.what, d.err)
		if !redis.IsPermissionError(d.err) {
			t.Errorf("as %s: %s: got %v, want NOPERM", user, d.what, d.err)
		}
	}
	// A script run by the user is held to the same rules.
	if err := raw.Eval(ctx, "return redis.call('SET', KEYS[1], 'x')", []string{outside}).Err(); err == nil {
		t.Errorf("as %s: EVAL SET %s: got nil, want refused", user, outside)
	}
	admin := srv.Client(t)
	if n, err := admin.Exists(ctx, outside).Result(); err != nil || n != 0 {
		t.Errorf("%s exists (%d, %v) after the refused writes", outside, n, err)
	}

	// A cache in a namespace the user may not touch: writes fail, reads
	// degrade to load, nothing is written.
	other := "other." + ns
	c := newSplitInstance(t, "C", newClient(t), nil, l2.Options{}, hybrid.Options{Namespace: other}, invalidate.Options{})
	if err := c.c.Set(ctx, "k", "x"); err == nil || !redis.IsPermissionError(err) {
		t.Errorf("C: Set outside the user's keys: got %v, want a NOPERM error", err)
	} else {
		t.Logf("C: Set outside the user's keys: %v", err)
	}
	if v, err := c.c.GetOrCreate(ctx, "k", func(context.Context, string) (string, error) { return "loaded", nil }); err != nil || v != "loaded" {
		t.Errorf("C: GetOrCreate outside the user's keys: got %q, %v, want \"loaded\" (reads degrade)", v, err)
	}
	if st := c.c.Stats(); st.L2Errors == 0 {
		t.Error("C: L2Errors 0, want the refused read counted")
	}
	keys, err := admin.Keys(ctx, other+":*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("keys under %s: %v, %v, want none", other, keys, err)
	}
	t.Logf("C (namespace %s): L2Errors %d", other, c.c.Stats().L2Errors)
}
