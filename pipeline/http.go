package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/walhouse/walhouse/capture"
)

// HTTP is where a long-running stage serves its metrics and health.
type HTTP struct {
	// Addr is the stage's --metrics-addr; empty: nothing is served.
	Addr string
	// Pprof also serves Go's profiling endpoints (/debug/pprof/), but
	// /debug/pprof/cmdline: a command line may hold a DSN with its
	// password. Off by default: a profile exposes the process's code paths
	// and costs CPU while it runs (WALHOUSE_PPROF=1 turns it on).
	Pprof bool
}

// Serve serves h on s.Addr until ctx ends, and then returns ctx's error;
// what names what is served, for the error when the server cannot start.
func (s HTTP) Serve(ctx context.Context, h http.Handler, what string) error {
	srv := &http.Server{Addr: s.Addr, Handler: withPprof(h, s.Pprof), ReadHeaderTimeout: 5 * time.Second}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	if err := srv.ListenAndServe(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("serve %s on %s: %w; pass another --metrics-addr", what, s.Addr, err)
	}
	return ctx.Err()
}

// ServeMetrics serves reg at /metrics, and /healthz and /readyz with
// ready, until ctx ends.
func (s HTTP) ServeMetrics(ctx context.Context, reg *prometheus.Registry, ready Readiness) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	HandleHealth(mux, ready)
	return s.Serve(ctx, mux, "metrics")
}

// ServeCapture serves capture's Prometheus metrics at /metrics, its
// status document at /status (CaptureStatus), and /healthz and /readyz
// (CaptureReadiness) until ctx ends.
func (s HTTP) ServeCapture(ctx context.Context, reg *prometheus.Registry, status CaptureStatus) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /status", status)
	HandleHealth(mux, NewCaptureReadiness(status.slot, status.stats).Checks)
	return s.Serve(ctx, mux, "capture metrics and status")
}

// withPprof serves net/http/pprof's handlers beside h when on, all but
// /debug/pprof/cmdline.
func withPprof(h http.Handler, on bool) http.Handler {
	if !on {
		return h
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/", h)
	return mux
}

// CaptureStatus serves GET /status on capture's --metrics-addr: capture's
// progress as a record.CaptureStatus JSON document. Capture is a separate
// process, so this is how `walhouse serve --capture-url` learns the
// producer backlog (and capture's own view of the slot) for /v1/lag and its
// /metrics; Prometheus keeps scraping /metrics beside it.
type CaptureStatus struct {
	slot  string
	stats func() capture.Stats // (*capture.Capturer).Stats
	now   func() time.Time
}

// NewCaptureStatus reports c's progress on slot.
func NewCaptureStatus(slot string, c *capture.Capturer) CaptureStatus {
	return CaptureStatus{slot: slot, stats: c.Stats, now: time.Now}
}

// ServeHTTP answers GET (and HEAD) /status.
func (cs CaptureStatus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := json.Marshal(capture.StatusOf(cs.slot, cs.stats(), cs.now()))
	if err != nil {
		http.Error(w, "encode the capture status: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}
