package hybridhttp_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hybridcache/hybridcache/codec"
	"github.com/hybridcache/hybridcache/hybrid"
	"github.com/hybridcache/hybridcache/hybridhttp"
	"github.com/hybridcache/hybridcache/internal/envelope"
	"github.com/hybridcache/hybridcache/internal/redistest"
	"github.com/hybridcache/hybridcache/invalidate"
	"github.com/hybridcache/hybridcache/l2"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	redistest.MainCheck(m, &srv, func() error { return goleak.Find() })
}

// quiet drops the caches' log lines.
var quiet = slog.New(slog.DiscardHandler)

// newCache returns a cache of namespace ns on the test's Redis, with a
// bus, or on rdb without one when rdb is not nil; closed when t ends.
func newCache(t *testing.T, ns string, rdb redis.UniversalClient) *hybrid.Cache[string] {
	t.Helper()
	o := hybrid.Options{Namespace: ns, TTL: time.Minute, MaxKeyBytes: 64, Logger: quiet}
	if rdb == nil {
		rdb = srv.Client(t)
		bus := invalidate.New(rdb, invalidate.Options{Logger: quiet})
		t.Cleanup(func() { bus.Close() })
		o.Bus = bus
	}
	o.Remote = l2.New(rdb, l2.Options{})
	c, err := hybrid.New[string](o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ranked is a cache that ranks its keys, as the hot-keys endpoint wants.
type ranked struct {
	*hybrid.Cache[string]
	keys []hybridhttp.HotKey
}

func (r ranked) HotKeys(n int) []hybridhttp.HotKey { return r.keys[:min(n, len(r.keys))] }

// unranked is a Cache without HotKeys: the hot-keys endpoint answers 501
// for it.
type unranked struct{ hybridhttp.Cache }

// server serves h under /debug/cache/, as a service mounts it.
func server(t *testing.T, h http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/debug/cache/", http.StripPrefix("/debug/cache", h))
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s.URL + "/debug/cache"
}

// call makes a request and decodes its JSON answer into out (if not nil),
// failing t unless the status is want and the body is JSON.
func call(t *testing.T, method, url string, want int, out any) http.Header {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatalf("%s %s: body is not JSON: %v", method, url, err)
	}
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, url, resp.StatusCode, want, raw)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, url, ct)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, raw)
		}
	}
	return resp.Header
}

type apiError struct {
	Error string `json:"error"`
}

// wantError checks that a request fails with status and a JSON error.
func wantError(t *testing.T, method, url string, status int) {
	t.Helper()
	var e apiError
	call(t, method, url, status, &e)
	if e.Error == "" {
		t.Errorf("%s %s: no error message", method, url)
	}
}

func TestHandler(t *testing.T) {
	ns := redistest.Prefix(t)
	ctx := context.Background()
	plain, hot := newCache(t, ns+".plain", nil), newCache(t, ns+".hot", nil)
	if err := plain.Set(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	h, err := hybridhttp.New(unranked{plain}, ranked{hot, []hybridhttp.HotKey{{Key: "a", Reads: 9}, {Key: "b", Reads: 4}, {Key: "c", Reads: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	base := server(t, h)

	t.Run("stats", func(t *testing.T) {
		var all struct{ Caches []hybrid.Stats }
		call(t, "GET", base+"/stats", http.StatusOK, &all)
		var names []string
		for _, s := range all.Caches {
			names = append(names, s.Namespace)
		}
		if want := []string{ns + ".hot", ns + ".plain"}; !slices.Equal(names, want) {
			t.Errorf("/stats: caches %q, want %q", names, want)
		}
		var one hybrid.Stats
		call(t, "GET", base+"/stats?ns="+ns+".plain", http.StatusOK, &one)
		if one.Namespace != ns+".plain" || one.L1.Entries != 1 {
			t.Errorf("/stats?ns=plain: namespace %q, %d L1 entries; want %q, 1", one.Namespace, one.L1.Entries, ns+".plain")
		}
		wantError(t, "GET", base+"/stats?ns=nope", http.StatusNotFound)
	})

	t.Run("explain", func(t *testing.T) {
		before := plain.Stats()
		var x hybrid.Explanation
		call(t, "GET", base+"/explain?ns="+ns+".plain&key=k", http.StatusOK, &x)
		if x.Key != "k" || x.Agreement != hybrid.AgreementSame || x.L1.State != "live" || x.Remote.State != "value" || x.Remote.Size == 0 {
			t.Errorf("explain k: got %+v, want k live in L1 and in Redis, agreeing", x)
		}
		call(t, "GET", base+"/explain?ns="+ns+".plain&key=none", http.StatusOK, &x)
		if x.Key != "none" || x.Agreement != hybrid.AgreementNowhere || x.L1.Present || x.Remote.Present || x.Remote.State != "missing" {
			t.Errorf("explain none: got %+v, want nowhere", x)
		}
		if after := plain.Stats(); !reflect.DeepEqual(after.L1, before.L1) || after.L2.Hits != before.L2.Hits || after.L2.Misses != before.L2.Misses {
			t.Errorf("explain counted: before %+v, after %+v", before, after)
		}
		wantError(t, "GET", base+"/explain?ns="+ns+".plain", http.StatusBadRequest)                              // no key
		wantError(t, "GET", base+"/explain?ns="+ns+".plain&key=", http.StatusBadRequest)                         // empty key
		wantError(t, "GET", base+"/explain?ns="+ns+".plain&key="+strings.Repeat("x", 65), http.StatusBadRequest) // too long
		wantError(t, "GET", base+"/explain?key=k", http.StatusBadRequest)                                        // which cache?
		wantError(t, "GET", base+"/explain?ns=nope&key=k", http.StatusNotFound)
	})

	t.Run("hotkeys", func(t *testing.T) {
		var all struct {
			Caches []struct {
				Namespace string
				Keys      []hybridhttp.HotKey
			}
		}
		call(t, "GET", base+"/hotkeys?n=2", http.StatusOK, &all)
		if len(all.Caches) != 1 || all.Caches[0].Namespace != ns+".hot" ||
			!slices.Equal(all.Caches[0].Keys, []hybridhttp.HotKey{{Key: "a", Reads: 9}, {Key: "b", Reads: 4}}) {
			t.Errorf("/hotkeys?n=2: got %+v, want a and b of the ranked cache only", all)
		}
		var one struct{ Keys []hybridhttp.HotKey }
		call(t, "GET", base+"/hotkeys?ns="+ns+".hot", http.StatusOK, &one)
		if len(one.Keys) != 3 {
			t.Errorf("/hotkeys?ns=hot: got %+v, want 3 keys", one)
		}
		wantError(t, "GET", base+"/hotkeys?ns="+ns+".plain", http.StatusNotImplemented)
		for _, n := range []string{"0", "-1", "x", "1001"} {
			wantError(t, "GET", base+"/hotkeys?n="+n, http.StatusBadRequest)
		}
	})

	t.Run("routes", func(t *testing.T) {
		hdr := call(t, "POST", base+"/stats", http.StatusMethodNotAllowed, nil)
		if hdr.Get("Allow") != "GET, HEAD" {
			t.Errorf("405: Allow %q", hdr.Get("Allow"))
		}
		wantError(t, "GET", base+"/nope", http.StatusNotFound)
	})
}

// TestHandlerOneCache: with one cache, ns may be left out.
func TestHandlerOneCache(t *testing.T) {
	ns := redistest.Prefix(t)
	c := newCache(t, ns, nil)
	h, err := hybridhttp.New(c)
	if err != nil {
		t.Fatal(err)
	}
	base := server(t, h)
	var x hybrid.Explanation
	call(t, "GET", base+"/explain?key=none", http.StatusOK, &x)
	if x.Agreement != hybrid.AgreementNowhere {
		t.Errorf("explain none: got %+v, want nowhere", x)
	}
	// A *hybrid.Cache ranks its keys by sampled L1 hits (one in 16).
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	for range 400 {
		if _, _, err := c.Get(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	var one struct{ Keys []hybridhttp.HotKey }
	call(t, "GET", base+"/hotkeys?n=5&ns="+ns, http.StatusOK, &one)
	if len(one.Keys) != 1 || one.Keys[0].Key != "k" || one.Keys[0].Reads == 0 {
		t.Errorf("/hotkeys of a cache read 400 times: got %+v, want k", one)
	}
}

// TestHandlerRedisDown: explain answers 503 with the error and what L1
// holds; stats still answer.
func TestHandlerRedisDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	c := newCache(t, redistest.Prefix(t), rdb)
	h, err := hybridhttp.New(c)
	if err != nil {
		t.Fatal(err)
	}
	base := server(t, h)
	var got struct {
		Error       string
		Explanation *hybrid.Explanation
	}
	call(t, "GET", base+"/explain?key=k", http.StatusServiceUnavailable, &got)
	if got.Error == "" || got.Explanation == nil || got.Explanation.Key != "k" || got.Explanation.Remote.Checked || got.Explanation.Remote.Error == "" {
		t.Errorf("Redis down: got %+v, want an error and the explanation without Redis", got)
	}
	call(t, "GET", base+"/stats", http.StatusOK, nil)
	c.Close()
	wantError(t, "GET", base+"/explain?key=k", http.StatusServiceUnavailable)
}

func TestNewRefuses(t *testing.T) {
	ns := redistest.Prefix(t)
	if _, err := hybridhttp.New(newCache(t, ns, nil), newCache(t, ns, nil)); err == nil {
		t.Error("New with two caches of one namespace: no error")
	}
	if _, err := hybridhttp.New(nil); err == nil {
		t.Error("New with a nil cache: no error")
	}
}

// absurd returns an envelope of "v" whose write time (at offset 3) or
// logical expiry (at envelope.ExpiresAt) is ms Unix milliseconds, as no
// writer stores.
func absurd(off int, ms int64) []byte {
	now := time.Now()
	b := envelope.Append(nil, envelope.Header{Codec: codec.IDJSON, Written: now, Expires: now.Add(time.Minute)}, []byte(`"v"`))
	binary.BigEndian.PutUint64(b[off:off+8], uint64(ms))
	return b
}

// TestHandlerAbsurdTimes: a stored value whose write time or expiry no
// writer makes (past year 9999, or before 1970) is corrupt, and explain
// answers 200 with JSON saying so.
func TestHandlerAbsurdTimes(t *testing.T) {
	ns := redistest.Prefix(t)
	c := newCache(t, ns, nil)
	h, err := hybridhttp.New(c)
	if err != nil {
		t.Fatal(err)
	}
	base := server(t, h)
	rdb := srv.Client(t)
	year10000 := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	for key, b := range map[string][]byte{
		"written-10000": absurd(3, year10000),
		"written-neg":   absurd(3, -1),
		"expires-10000": absurd(envelope.ExpiresAt, year10000),
		"expires-neg":   absurd(envelope.ExpiresAt, -1),
	} {
		t.Run(key, func(t *testing.T) {
			if err := rdb.Set(context.Background(), ns+":"+key, b, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			var x hybrid.Explanation
			call(t, "GET", base+"/explain?key="+key, http.StatusOK, &x)
			if x.Remote.State != "corrupt" || x.Remote.DecodeError == "" {
				t.Errorf("explain %s: remote state %q (%q), want corrupt", key, x.Remote.State, x.Remote.DecodeError)
			}
		})
	}
}

// fixed is a Cache whose Explain returns x: any Cache's explanation is
// served.
type fixed struct{ x hybrid.Explanation }

func (f fixed) Stats() hybrid.Stats { return hybrid.Stats{Namespace: f.x.Namespace} }

func (f fixed) Explain(context.Context, string) (hybrid.Explanation, error) { return f.x, nil }

// TestHandlerEncodesAnyExplanation: times JSON cannot hold are left out of
// the answer, and named in its detail; the rest is served as it is.
func TestHandlerEncodesAnyExplanation(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	far := time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)
	x := hybrid.Explanation{Namespace: "n", Key: "k", At: now, Agreement: hybrid.AgreementL1Older, Detail: "d",
		L1:     hybrid.LocalView{Present: true, State: "live", Written: time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC)},
		Remote: hybrid.RemoteView{Checked: true, Present: true, State: "value", Written: far, Expires: now}}
	h, err := hybridhttp.New(fixed{x})
	if err != nil {
		t.Fatal(err)
	}
	var got hybrid.Explanation
	call(t, "GET", server(t, h)+"/explain?key=k", http.StatusOK, &got)
	if !got.L1.Written.IsZero() || !got.Remote.Written.IsZero() || !got.At.Equal(now) || !got.Remote.Expires.Equal(now) ||
		got.Remote.State != "value" || got.Agreement != hybrid.AgreementL1Older {
		t.Errorf("got %+v; want the times outside JSON's years left out, the rest as Explain gave it", got)
	}
	for _, name := range []string{"l1.written", "remote.written"} {
		if !strings.Contains(got.Detail, name) {
			t.Errorf("detail %q does not name %s", got.Detail, name)
		}
	}
}
