// Package httpapi serves the signals listener's read endpoints: the
// site's signals (GET /v1/site/signals, Prometheus text exposition as the
// upstream operator serves it) and the provider discovery API (GET
// /v1/grid/providers, JSON). What a caller gets is decided by who the
// listener named it: the co-located gateway reads everything this site
// holds, its peers' rows included; a peer site reads this site's own
// providers that the network's and the providers' policies let it use.
package httpapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gridsync/gridsync/controller"
	siglisten "github.com/gridsync/gridsync/listener"
	"github.com/gridsync/gridsync/signals"
)

// Paths of the endpoints.
const (
	SignalsPath   = signals.Path
	ProvidersPath = "/v1/grid/providers"
)

// API serves both endpoints.
type API struct {
	Site      string
	Store     *signals.Store
	Directory *controller.Directory
	Logger    *slog.Logger
	Now       func() time.Time
}

// Register adds the endpoints to mux.
func (a *API) Register(mux *http.ServeMux) {
	mux.HandleFunc(SignalsPath, a.signals)
	mux.HandleFunc(ProvidersPath, a.providers)
}

func (a *API) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// readable is the providers a caller may read the signals of: nil for
// everything (the gateway).
func (a *API) readable(r *http.Request, caller siglisten.Caller) (map[string]bool, error) {
	if caller.Kind == siglisten.Gateway {
		return nil, nil
	}
	entries, err := a.Directory.Providers(r.Context(), caller.Site, false)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range entries {
		out[e.Name] = true
	}
	return out, nil
}

func (a *API) signals(w http.ResponseWriter, r *http.Request) {
	caller, ok := a.named(w, r)
	if !ok {
		return
	}
	allowed, err := a.readable(r, caller)
	if err != nil {
		a.unavailable(w, err)
		return
	}
	q := r.URL.Query()
	target := q.Get("target")
	rows := a.Store.Rows(func(site, provider string) bool {
		if target != "" && provider != target {
			return false
		}
		if allowed == nil {
			return true
		}
		// A peer reads this site's own rows only, never a third site's.
		return site == a.Site && allowed[provider]
	})
	w.Header().Set("Content-Type", signals.ContentType)
	w.Header().Set("Cache-Control", "no-store")
	now := a.now()
	var body bytes.Buffer
	oldest, _, _ := signals.Render(&body, rows, q["collect[]"], now)
	// Age bounds the whole answer by its oldest sample; Date and the
	// samples' stamps come from one clock, so a reader's age of a sample
	// is Date minus its stamp whatever the clocks of the two sites.
	w.Header().Set("Age", strconv.Itoa(int(oldest.Seconds())))
	w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
	_, _ = w.Write(body.Bytes())
}

func (a *API) providers(w http.ResponseWriter, r *http.Request) {
	caller, ok := a.named(w, r)
	if !ok {
		return
	}
	site, own := caller.Site, caller.Kind == siglisten.Gateway
	if own {
		site = a.Site
	}
	entries, err := a.Directory.Providers(r.Context(), site, own)
	if err != nil {
		a.unavailable(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{"site": a.Site, "providers": entries})
}

// named answers a GET from a named caller; anything else is refused.
func (a *API) named(w http.ResponseWriter, r *http.Request) (siglisten.Caller, bool) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return siglisten.Caller{}, false
	}
	caller, ok := siglisten.CallerFrom(r.Context())
	if !ok || caller.Kind == siglisten.Anonymous {
		// The listener closes unnamed callers before this; kept as a
		// second wall.
		http.Error(w, "a site certificate is required", http.StatusForbidden)
		return siglisten.Caller{}, false
	}
	return caller, true
}

func (a *API) unavailable(w http.ResponseWriter, err error) {
	if a.Logger != nil {
		a.Logger.Warn("signals_api_unavailable", "error", err)
	}
	http.Error(w, "not available now", http.StatusServiceUnavailable)
}
