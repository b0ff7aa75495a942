// Package health serves a binary's probes and metrics on one address:
// /livez, /readyz, /startupz, /status (JSON) and /metrics.
//
// The address is bound before anything else starts, so that a port that
// cannot be bound fails the process at once with a non-zero exit instead
// of leaving a pod that never becomes ready for reasons nobody can see.
package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Checks are the answers behind the endpoints.
type Checks struct {
	// Ready answers /readyz, with a reason when not ready.
	Ready func() (bool, string)
	// Started answers /startupz.
	Started func() bool
	// Status is the /status document, encoded as JSON.
	Status func() any
}

// NewRegistry returns a metrics registry with the Go runtime and process
// collectors and a build-info series for binary.
func NewRegistry(binary, version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	RegisterBuildInfo(reg, binary, version)
	return reg
}

// RegisterBuildInfo adds the build-info series to a registry that already
// has the runtime collectors (controller-runtime's, for the agent).
func RegisterBuildInfo(reg prometheus.Registerer, binary, version string) {
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gridsync_build_info",
		Help: "Build information of the running binary; always 1.",
	}, []string{"binary", "version", "goversion"})
	info.WithLabelValues(binary, version, runtime.Version()).Set(1)
	reg.MustRegister(info)
}

// Handler routes the endpoints; /metrics only with a gatherer (nil when the
// metrics are served on a port of their own, over TLS).
func Handler(checks Checks, gatherer prometheus.Gatherer) http.Handler {
	mux := probeMux(checks)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		body, err := json.Marshal(checks.Status(), jsontext.Multiline(true), jsontext.WithIndent("  "))
		if err != nil {
			writeText(w, http.StatusInternalServerError, "encode status: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(body, '\n'))
	})
	if gatherer != nil {
		mux.Handle("GET /metrics", MetricsHandler(gatherer))
	}
	return mux
}

// MetricsHandler serves /metrics from gatherer. A render holds a copy of
// every series: a few at a time is plenty for Prometheus and the kubelet,
// and more would let anyone who can reach the port grow the process past
// its memory limit.
func MetricsHandler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{MaxRequestsInFlight: MaxMetricsInFlight}))
	return mux
}

// ProbeHandler routes the kubelet's endpoints alone (/livez, /readyz,
// /startupz), for a port of their own: what they answer costs nothing,
// and no scrape shares their connections.
func ProbeHandler(checks Checks) http.Handler { return probeMux(checks) }

func probeMux(checks Checks) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := checks.Ready(); !ok {
			writeText(w, http.StatusServiceUnavailable, "not ready: "+why)
			return
		}
		// The upstream sidecar's words, which probes and scripts match.
		writeText(w, http.StatusOK, "ready")
	})
	mux.HandleFunc("GET /startupz", func(w http.ResponseWriter, _ *http.Request) {
		if !checks.Started() {
			writeText(w, http.StatusServiceUnavailable, "not started: no valid overlay on disk yet")
			return
		}
		writeText(w, http.StatusOK, "ok")
	})
	return mux
}

// Limits of the health server. The port is reachable by whatever can reach
// the pod; these keep a flood of requests or idle connections from growing
// the process (the sidecar runs within 32 MiB) rather than queueing them
// in the kernel or refusing them.
const (
	// MaxConnections are served at once; a newcomer past them takes the
	// place of one that carries no request (see connTable).
	MaxConnections = 64
	// MaxMetricsInFlight renders of /metrics at once; more get 503.
	MaxMetricsInFlight = 2
	// MaxHeaderBytes of a request: probes and scrapes send a few hundred.
	MaxHeaderBytes = 8 << 10
	// readHeaderTimeout frees the slot of a connection that sends
	// nothing, or half a request.
	readHeaderTimeout = 2 * time.Second
)

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, msg)
}

// Listen binds addr. Call it before starting the work the endpoints
// report on, and exit non-zero when it fails.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bind health address %s: %w", addr, err)
	}
	return ln, nil
}

// Serve serves handler on ln until ctx is done, then shuts down within
// shutdownGrace.
func Serve(ctx context.Context, ln net.Listener, handler http.Handler, shutdownGrace time.Duration) error {
	table := newConnTable(MaxConnections)
	srv := &http.Server{
		Handler:           withoutBodies(handler),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       10 * time.Second,
		// A response (a /metrics render to a slow reader) holds its
		// place at most this long.
		WriteTimeout: 10 * time.Second,
		// Probes and scrapes come every few seconds: a kept connection
		// idle longer is closed.
		IdleTimeout:    5 * time.Second,
		MaxHeaderBytes: MaxHeaderBytes,
		ConnState:      table.track,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(&evictingListener{Listener: ln, table: table}) }()
	select {
	case err := <-errc:
		return fmt.Errorf("health server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// A client still mid-request when the grace ends (a probe that
		// sent half its headers) is no reason to fail a clean stop: its
		// answer no longer matters, so its connection is closed.
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("health server: %w", err)
	}
	return nil
}

// withoutBodies answers a request without reading its body, then closes
// the connection. No endpoint takes a body, but net/http reads what a
// handler left of one after it returns (up to 256 KiB, to reuse the
// connection), and the connection carries a request until it has: a
// client sending a chunked body one byte at a time would keep its slot
// for the whole ReadTimeout, beyond the reach of eviction, and a few
// dozen of them would leave the port to nobody else. A read deadline
// already passed ends that read at once, and "Connection: close" keeps
// the server from waiting for the next request on a stream that may
// still hold the rest of the body.
func withoutBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 { // -1: chunked, of unknown length
			w.Header().Set("Connection", "close")
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		}
		h.ServeHTTP(w, r)
	})
}

// ServeWhile serves handler on ln while work runs, and returns when either
// ends, having stopped the other. The work ending (done, or ctx ended)
// stops the server. The server ending stops the work, and is an error
// unless ctx ended: a dead health server would leave the pod unready for
// reasons nobody could see, so it must stop the process.
func ServeWhile(ctx context.Context, ln net.Listener, handler http.Handler, shutdownGrace time.Duration, work func(context.Context) error) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	serveErr := make(chan error, 1)
	go func() { serveErr <- Serve(runCtx, ln, handler, shutdownGrace) }()
	workErr := make(chan error, 1)
	go func() { workErr <- work(runCtx) }()

	var errWork, errServe error
	select {
	case errWork = <-workErr:
		cancel()
		errServe = <-serveErr
	case errServe = <-serveErr:
		cancel()
		errWork = <-workErr
		if errServe == nil && ctx.Err() == nil {
			errServe = errors.New("health server stopped")
		}
	}
	return errors.Join(errWork, errServe)
}
