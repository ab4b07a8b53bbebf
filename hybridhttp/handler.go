// Package hybridhttp is the debug endpoint of hybrid caches: an
// http.Handler that serves their stats, hot keys and Explain as JSON, for
// mounting under a service's debug mux.
//
//	h, err := hybridhttp.New(products, users)
//	mux.Handle("/debug/cache/", http.StripPrefix("/debug/cache", h))
//
// Endpoints (GET or HEAD; ns picks a cache by namespace, and may be left
// out when the handler serves one):
//
//	/stats[?ns=N]         Stats of every cache, as a list, or of one
//	/explain?key=K[&ns=N] the Explanation of key K (see hybrid.Cache.Explain)
//	/hotkeys[?n=N&ns=N]   the N most-read keys (default 10, at most 1000)
//	                      of every cache that ranks them, or of one
//
// Errors are JSON objects {"error": "..."}: 400 for a missing or bad
// parameter (key, n, ns among several), 404 for an unknown path or
// namespace, 405 for another method, 501 for hot keys of a cache that does
// not rank them, 503 when the shared tier could not be read or the cache
// is closed (with the partial explanation), 500 otherwise. A time of an
// explanation that JSON cannot hold (past year 9999, or before year 0) is
// left out, and named in its detail.
//
// NOTE: explain and hot keys reveal keys: mount the handler behind the
// service's debug authentication.
package hybridhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
)

// Cache is what the handler serves of a cache; every *hybrid.Cache[V]
// has it.
type Cache interface {
	Stats() hybrid.Stats
	Explain(ctx context.Context, key string) (hybrid.Explanation, error)
}

// HotKey is one key of a cache's hot set, as the hot-keys endpoint serves
// it (see hybrid.Cache.HotKeys): every *hybrid.Cache[V] is served there,
// and any other Cache with a method HotKeys(n int) []HotKey.
type HotKey = hybrid.HotKey

// hotKeyer is the optional capability of a Cache to rank its keys by
// reads; the hot-keys endpoint serves the caches that have it.
type hotKeyer interface {
	HotKeys(n int) []HotKey
}

// The bounds of the hot-keys endpoint's n.
const (
	defaultHotKeys = 10
	maxHotKeys     = 1000
)

// Handler serves the endpoints of the package comment for a set of
// caches, each under its namespace. It is safe for concurrent use.
type Handler struct {
	caches map[string]Cache
	names  []string // sorted
}

// New returns a Handler for caches, keyed by their namespace
// (Stats().Namespace), or an error for a nil cache or two caches of one
// namespace.
func New(caches ...Cache) (*Handler, error) {
	h := &Handler{caches: make(map[string]Cache, len(caches))}
	for i, c := range caches {
		if c == nil {
			return nil, fmt.Errorf("hybridhttp: cache %d is nil", i)
		}
		ns := c.Stats().Namespace
		if _, dup := h.caches[ns]; dup {
			return nil, fmt.Errorf("hybridhttp: two caches of namespace %q", ns)
		}
		h.caches[ns] = c
		h.names = append(h.names, ns)
	}
	slices.Sort(h.names)
	return h, nil
}

// ServeHTTP serves r, whose path is one of the endpoints once the mount
// point is stripped ("/stats" or "stats").
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, r.Method+" not allowed")
		return
	}
	switch strings.Trim(r.URL.Path, "/") {
	case "stats":
		h.stats(w, r)
	case "explain":
		h.explain(w, r)
	case "hotkeys":
		h.hotKeys(w, r)
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %q: stats, explain, hotkeys", r.URL.Path))
	}
}

// pick returns the cache that ns names, or the only one when ns is empty;
// all is true when ns is empty and every cache is wanted (allowAll). On
// an error it has written the response and returns ok false.
func (h *Handler) pick(w http.ResponseWriter, r *http.Request, allowAll bool) (c Cache, all, ok bool) {
	q := r.URL.Query()
	if !q.Has("ns") {
		switch {
		case allowAll:
			return nil, true, true
		case len(h.caches) == 1:
			return h.caches[h.names[0]], false, true
		}
		writeError(w, http.StatusBadRequest, fmt.Sprintf("ns is required: one of %q", h.names))
		return nil, false, false
	}
	ns := q.Get("ns")
	if c, ok = h.caches[ns]; !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no cache of namespace %q: %q", ns, h.names))
	}
	return c, false, ok
}

func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	c, all, ok := h.pick(w, r, true)
	if !ok {
		return
	}
	if !all {
		writeJSON(w, http.StatusOK, c.Stats())
		return
	}
	out := struct {
		Caches []hybrid.Stats `json:"caches"`
	}{Caches: make([]hybrid.Stats, 0, len(h.names))}
	for _, ns := range h.names {
		out.Caches = append(out.Caches, h.caches[ns].Stats())
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) explain(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !q.Has("key") {
		writeError(w, http.StatusBadRequest, "key is required")
		return
	}
	c, _, ok := h.pick(w, r, false)
	if !ok {
		return
	}
	x, err := c.Explain(r.Context(), q.Get("key"))
	x = encodable(x)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, x)
	case errors.Is(err, hybrid.ErrEmptyKey), errors.Is(err, hybrid.ErrKeyTooLong), errors.Is(err, hybrid.ErrReservedKey):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, hybrid.ErrClosed), x.L1.Present || x.Key != "":
		// The shared tier could not be read: what L1 holds is still news.
		writeJSON(w, http.StatusServiceUnavailable, struct {
			Error       string              `json:"error"`
			Explanation *hybrid.Explanation `json:"explanation,omitempty"`
		}{err.Error(), partial(x)})
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// encodable returns x with the times JSON holds (years 0 to 9999) as they
// are, and any other left out (zero) and named in Detail, so that whatever
// an Explain returns is served.
func encodable(x hybrid.Explanation) hybrid.Explanation {
	for _, f := range [...]struct {
		name string
		t    *time.Time
	}{{"at", &x.At}, {"l1.written", &x.L1.Written}, {"remote.written", &x.Remote.Written}, {"remote.expires", &x.Remote.Expires}} {
		if y := f.t.Year(); y < 0 || y > 9999 {
			x.Detail += fmt.Sprintf(" [%s %v is outside the years JSON holds: left out]", f.name, *f.t)
			*f.t = time.Time{}
		}
	}
	return x
}

// partial is x, or nil when Explain returned none.
func partial(x hybrid.Explanation) *hybrid.Explanation {
	if x.Key == "" {
		return nil
	}
	return &x
}

// hotKeysOf is one cache's hot keys as the endpoint serves them.
type hotKeysOf struct {
	Namespace string   `json:"namespace"`
	Keys      []HotKey `json:"keys"`
}

func (h *Handler) hotKeys(w http.ResponseWriter, r *http.Request) {
	n := defaultHotKeys
	if s := r.URL.Query().Get("n"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > maxHotKeys {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("n=%q: want a number from 1 to %d", s, maxHotKeys))
			return
		}
	}
	c, all, ok := h.pick(w, r, true)
	if !ok {
		return
	}
	if !all {
		hk, ok := c.(hotKeyer)
		if !ok {
			writeError(w, http.StatusNotImplemented, "the cache does not rank its keys")
			return
		}
		writeJSON(w, http.StatusOK, hotKeysOf{Namespace: c.Stats().Namespace, Keys: orEmpty(hk.HotKeys(n))})
		return
	}
	out := struct {
		Caches []hotKeysOf `json:"caches"`
	}{Caches: []hotKeysOf{}}
	for _, ns := range h.names {
		if hk, ok := h.caches[ns].(hotKeyer); ok {
			out.Caches = append(out.Caches, hotKeysOf{Namespace: ns, Keys: orEmpty(hk.HotKeys(n))})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// orEmpty is keys, or an empty slice for nil, so that JSON lists it.
func orEmpty(keys []HotKey) []HotKey {
	if keys == nil {
		return []HotKey{}
	}
	return keys
}

// writeError writes the JSON error {"error": msg} with status.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, struct {
		Error string `json:"error"`
	}{msg})
}

// writeJSON writes v as indented JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error": "hybridhttp: response does not encode"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
