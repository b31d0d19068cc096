package monitor

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walhouse/walhouse/harness/testenv"
)

func TestCaptureStatusURL(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  string
	}{
		{in: "127.0.0.1:9465", want: "http://127.0.0.1:9465/status"},
		{in: " capture-1:9465 ", want: "http://capture-1:9465/status"},
		{in: "http://capture:9465", want: "http://capture:9465/status"},
		{in: "http://capture:9465/", want: "http://capture:9465/status"},
		{in: "https://capture.internal/status", want: "https://capture.internal/status"},
		{in: "http://proxy/capture-a/status#x", want: "http://proxy/capture-a/status"},
		{in: "", wantErr: "empty"},
		{in: "ftp://capture:21", wantErr: "scheme"},
		{in: "http://", wantErr: "no host"},
		{in: "http://cap ture:1", wantErr: "capture URL"},
	}
	for _, tt := range tests {
		got, err := CaptureStatusURL(tt.in)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("CaptureStatusURL(%q) = %q, %v; want an error about %q", tt.in, got, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || got != tt.want):
			t.Errorf("CaptureStatusURL(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// TestCaptureProbe reads a healthy capture, and captures that fail in each
// way a real one can: down, hanging, wrong endpoint, not a status. Every
// failure is reported per capture, the healthy one still counts, and the
// metrics say which captures are up.
func TestCaptureProbe(t *testing.T) {
	serve := func(h http.HandlerFunc) string {
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		return s.URL
	}
	healthy := serve(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"slot":"walhouse","receivedLsn":"0/3000","confirmedLsn":"0/2000","serverWalEnd":"0/3000","slotLagBytes":4096,"pendingBytes":1234,"rows":99,"lastEventAt":"2024-05-01T10:00:00Z","lagSeconds":1.5,"now":"2024-05-01T10:00:01.5Z"}`))
	})
	release := make(chan struct{})
	hanging := serve(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) })
	notFound := serve(http.NotFound)
	garbage := serve(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("# HELP walhouse_x\n")) })
	down := "http://" + testenv.FreeAddr(t)

	p := NewProbe(Config{
		Captures:       []string{strings.TrimPrefix(healthy, "http://"), hanging, notFound, garbage, down, healthy + "/status"},
		CaptureTimeout: 300 * time.Millisecond,
	})
	pl := p.Probe(context.Background())
	want := map[string]string{ // URL → "" when up, else part of the reason
		healthy + "/status":  "",
		hanging + "/status":  "deadline exceeded",
		notFound + "/status": "HTTP 404",
		garbage + "/status":  "not a capture status",
		down + "/status":     "unreachable",
	}
	if len(pl.Captures) != len(want) {
		t.Fatalf("%d captures reported, want %d (the healthy one given twice counts once): %+v", len(pl.Captures), len(want), pl.Captures)
	}
	for _, c := range pl.Captures {
		reason, ok := want[c.URL]
		switch {
		case !ok:
			t.Errorf("unexpected capture %+v", c)
		case reason == "" && (!c.Up || c.Status == nil || c.Status.PendingBytes != 1234 || c.Status.ConfirmedLSN != 0x2000 || c.Status.Slot != "walhouse"):
			t.Errorf("healthy capture read as %+v (status %+v)", c, c.Status)
		case reason != "" && (c.Up || c.Status != nil || !strings.Contains(c.Error, reason)):
			t.Errorf("capture %s: up %v, error %q; want down with %q", c.URL, c.Up, c.Error, reason)
		}
	}
	if pl.ProducerBacklogBytes == nil || *pl.ProducerBacklogBytes != 1234 {
		t.Errorf("producer backlog %v, want 1234 (the one healthy capture)", pl.ProducerBacklogBytes)
	}
	if len(pl.Errors) != 4 {
		t.Errorf("errors %q, want one per capture that is down", pl.Errors)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(p.Probe))
	got := gatherGauges(t, reg)
	wantMetrics := map[string]float64{
		`walhouse_capture_up{capture="` + healthy + `/status"}`:                             1,
		`walhouse_capture_up{capture="` + hanging + `/status"}`:                             0,
		`walhouse_capture_up{capture="` + notFound + `/status"}`:                            0,
		`walhouse_capture_up{capture="` + garbage + `/status"}`:                             0,
		`walhouse_capture_up{capture="` + down + `/status"}`:                                0,
		`walhouse_producer_backlog_bytes{capture="` + healthy + `/status",slot="walhouse"}`: 1234,
	}
	if len(got) != len(wantMetrics) {
		t.Errorf("metrics %v, want %v", got, wantMetrics)
	}
	for k, v := range wantMetrics {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("metric %s = %v (present %v), want %v", k, g, ok, v)
		}
	}

	none := NewProbe(Config{}).Probe(context.Background())
	if none.Captures != nil || none.ProducerBacklogBytes != nil || none.Errors != nil {
		t.Errorf("without captures the report has %+v", none)
	}
}

// A capture URL with a password (a capture behind an authenticating proxy)
// is used with it, but shown without it in /v1/lag, its errors and the
// metrics' labels.
func TestCaptureProbeHidesPassword(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "u" || p != "s3cret" {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"slot":"walhouse","pendingBytes":1,"now":"2024-05-01T10:00:01.5Z"}`))
	}))
	defer s.Close()
	down := "http://u:s3cret@" + testenv.FreeAddr(t)
	p := NewProbe(Config{
		Captures:       []string{strings.Replace(s.URL, "http://", "http://u:s3cret@", 1), down + "/status?password=s3cret"},
		CaptureTimeout: time.Second,
	})
	pl := p.Probe(context.Background())
	if len(pl.Captures) != 2 || !pl.Captures[0].Up {
		t.Fatalf("captures %+v, want the first one up (its password used)", pl.Captures)
	}
	shown := fmt.Sprintf("%+v %q", pl.Captures, pl.Errors)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(p.Probe))
	shown += fmt.Sprint(gatherGauges(t, reg))
	if strings.Contains(shown, "s3cret") {
		t.Errorf("the report shows the password: %s", shown)
	}
}

// gatherGauges returns every gauge of reg as name{label="value",…} → value,
// labels in the order Prometheus sorts them.
func gatherGauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			out[name] = m.GetGauge().GetValue()
		}
	}
	return out
}
