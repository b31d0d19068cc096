package query

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpMetrics counts requests and their latency by route and status.
type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walhouse_http_requests_total",
			Help: "HTTP requests of the query API, by route pattern and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "walhouse_http_request_duration_seconds",
			Help:    "Time to answer a query API request (for exports, to finish streaming), by route pattern and status code.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}, []string{"route", "code"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("query: register HTTP metrics: %w", err)
		}
	}
	return m, nil
}

// wrap records every request that h serves. h must be (or end in) the
// ServeMux, which sets r.Pattern.
func (m *httpMetrics) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		// Deferred: a read cut off mid-page (http.ErrAbortHandler) is
		// counted too.
		defer func() {
			route := r.Pattern
			if route == "" || route == "/" {
				route = "unmatched"
			}
			code := strconv.Itoa(rec.status)
			m.requests.WithLabelValues(route, code).Inc()
			m.latency.WithLabelValues(route, code).Observe(time.Since(start).Seconds())
		}()
		h.ServeHTTP(rec, r)
	})
}

// statusRecorder remembers the status code; it keeps flushing (for
// streamed exports) working.
type statusRecorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wroteHeader {
		s.status, s.wroteHeader = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	s.wroteHeader = true
	return s.ResponseWriter.Write(p)
}

// Flush sends buffered data to the client.
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{ErrorLog: slogPrinter{s.log}}).ServeHTTP(w, r)
}

type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("metrics: " + fmt.Sprint(v...)) }

// freshnessCollector reports, on every scrape, how old each table's
// lastSyncAt is, read from _walhouse_sync.
type freshnessCollector struct {
	conn     Conn
	database string
	log      *slog.Logger
}

var (
	freshnessDesc = prometheus.NewDesc("walhouse_table_freshness_seconds",
		"Seconds between now and the table's lastSyncAt (min loaded_through over its Kafka partitions): changes committed since may not be readable yet.",
		[]string{"table"}, nil)
	lastSyncDesc = prometheus.NewDesc("walhouse_table_last_sync_timestamp_seconds",
		"The table's lastSyncAt as a Unix time: every change committed at or before it is loaded.",
		[]string{"table"}, nil)
	syncUpDesc = prometheus.NewDesc("walhouse_sync_state_up",
		"1 if the last scrape read _walhouse_sync from ClickHouse, 0 if it failed.", nil, nil)
)

// Describe sends the descriptors of the freshness metrics.
func (c *freshnessCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- freshnessDesc
	ch <- lastSyncDesc
	ch <- syncUpDesc
}

// Collect reads _walhouse_sync (bounded to 5 s) and sends one gauge per
// table that has recorded progress.
func (c *freshnessCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	states, err := syncStates(ctx, c.conn, c.database, "")
	if err != nil {
		c.log.Warn("metrics: read sync progress", "err", err)
		ch <- prometheus.MustNewConstMetric(syncUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(syncUpDesc, prometheus.GaugeValue, 1)
	now := time.Now()
	for name, st := range states {
		if st.LastSyncAt == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(freshnessDesc, prometheus.GaugeValue, now.Sub(*st.LastSyncAt).Seconds(), name)
		ch <- prometheus.MustNewConstMetric(lastSyncDesc, prometheus.GaugeValue, float64(st.LastSyncAt.UnixMicro())/1e6, name)
	}
}
