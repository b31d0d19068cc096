package main

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/walhouse/walhouse/capture"
)

// captureStatus serves GET /status on capture's --metrics-addr: capture's
// progress as a record.CaptureStatus JSON document. Capture is a separate
// process, so this is how `walhouse serve --capture-url` learns the
// producer backlog (and capture's own view of the slot) for /v1/lag and its
// /metrics; Prometheus keeps scraping /metrics beside it.
type captureStatus struct {
	slot  string
	stats func() capture.Stats // (*capture.Capturer).Stats
	now   func() time.Time
}

// newCaptureStatus reports c's progress on slot.
func newCaptureStatus(slot string, c *capture.Capturer) captureStatus {
	return captureStatus{slot: slot, stats: c.Stats, now: time.Now}
}

// ServeHTTP answers GET (and HEAD) /status.
func (cs captureStatus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := json.Marshal(capture.StatusOf(cs.slot, cs.stats(), cs.now()))
	if err != nil {
		http.Error(w, "encode the capture status: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

// serveCaptureHTTP serves capture's Prometheus metrics at /metrics, its
// status document at /status, and /healthz and /readyz (health.go) on addr
// until ctx ends.
func serveCaptureHTTP(ctx context.Context, addr string, reg *prometheus.Registry, status captureStatus) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /status", status)
	handleHealth(mux, newCaptureReadiness(status.slot, status.stats).checks)
	return serveHTTP(ctx, addr, mux, "capture metrics and status")
}
