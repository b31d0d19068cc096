package query

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
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
		h.ServeHTTP(rec, r)
		route := r.Pattern
		if route == "" || route == "/" {
			route = "unmatched"
		}
		code := strconv.Itoa(rec.status)
		m.requests.WithLabelValues(route, code).Inc()
		m.latency.WithLabelValues(route, code).Observe(time.Since(start).Seconds())
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

// LagTable is one table of GET /v1/lag.
type LagTable struct {
	SyncState
	// FreshnessSeconds is now - LastSyncAt; null when unknown.
	FreshnessSeconds *float64 `json:"freshnessSeconds"`
	// ConsumerLag is, per Kafka partition of the table's topic, the records
	// the sink has not consumed yet (with a PipelineProbe only).
	ConsumerLag map[int32]int64 `json:"consumerLag,omitempty"`
}

// LagReport is the body of GET /v1/lag.
type LagReport struct {
	Now    time.Time  `json:"now"`
	Tables []LagTable `json:"tables"`
	// Pipeline is the slot, consumer and dead-letter state (with a
	// PipelineProbe only).
	Pipeline *PipelineLag `json:"pipeline,omitempty"`
}

// lagReport lists every replicated table (and every table with recorded
// progress), with its freshness and per-partition progress.
func lagReport(ctx context.Context, conn Conn, cat *Catalog, database string, probe PipelineProbe, now time.Time) (LagReport, error) {
	tables, err := cat.Tables(ctx)
	if err != nil {
		return LagReport{}, err
	}
	states, err := syncStates(ctx, conn, database, "")
	if err != nil {
		return LagReport{}, err
	}
	names := map[string]bool{}
	for _, t := range tables {
		names[t.Name] = true
	}
	for n := range states {
		names[n] = true
	}
	rep := LagReport{Now: now.UTC(), Tables: []LagTable{}}
	for n := range names {
		lt := LagTable{SyncState: SyncState{Table: n, Partitions: []PartitionSync{}}}
		if st, ok := states[n]; ok {
			lt.SyncState = *st
			if st.LastSyncAt != nil {
				f := now.Sub(*st.LastSyncAt).Seconds()
				lt.FreshnessSeconds = &f
			}
		}
		rep.Tables = append(rep.Tables, lt)
	}
	sort.Slice(rep.Tables, func(i, j int) bool { return rep.Tables[i].Table < rep.Tables[j].Table })
	if probe != nil {
		pl := probe.Probe(ctx)
		rep.Pipeline = &pl
		for i := range rep.Tables {
			rep.Tables[i].ConsumerLag = topicLagOf(pl.ConsumerLag, rep.Tables[i].Table)
		}
	}
	return rep, nil
}

// topicLagOf finds the consumer lag of a ClickHouse table's topic
// (<prefix>.<schema>.<table>, named as schema.TableName names tables).
func topicLagOf(lag map[string]map[int32]int64, table string) map[int32]int64 {
	for topic, parts := range lag {
		rest := topic
		// Topic prefixes may contain dots: try each split from the right.
		for {
			i := strings.Index(rest, ".")
			if i < 0 {
				break
			}
			rest = rest[i+1:]
			sch, tbl, ok := strings.Cut(rest, ".")
			if ok && !strings.Contains(tbl, ".") && schema.TableName(record.Source{Schema: sch, Table: tbl}) == table {
				return parts
			}
		}
	}
	return nil
}

var (
	slotLagBytesDesc = prometheus.NewDesc("walhouse_slot_lag_bytes",
		"WAL the replication slot holds back (current WAL position − confirmed position).", []string{"slot"}, nil)
	slotLagSecondsDesc = prometheus.NewDesc("walhouse_slot_lag_seconds",
		"PostgreSQL's replay lag of capture's walsender.", []string{"slot"}, nil)
	consumerLagDesc = prometheus.NewDesc("walhouse_consumer_lag_records",
		"Records the sink has not consumed yet, per topic and partition.", []string{"topic", "partition"}, nil)
	dlqDepthDesc = prometheus.NewDesc("walhouse_dlq_depth_records",
		"Records in the dead-letter topic.", nil, nil)
	producerBacklogDesc = prometheus.NewDesc("walhouse_producer_backlog_bytes",
		"Bytes capture produced to Kafka and Kafka has not acknowledged yet, read from capture's status (serve --capture-url).", []string{"capture", "slot"}, nil)
	captureUpDesc = prometheus.NewDesc("walhouse_capture_up",
		"1 if the last scrape read capture's status (serve --capture-url), 0 if it could not.", []string{"capture"}, nil)
)

// pipelineCollector reports the probe's figures on every scrape.
type pipelineCollector struct{ probe PipelineProbe }

func (c pipelineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- slotLagBytesDesc
	ch <- slotLagSecondsDesc
	ch <- consumerLagDesc
	ch <- dlqDepthDesc
	ch <- producerBacklogDesc
	ch <- captureUpDesc
}

func (c pipelineCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pl := c.probe.Probe(ctx)
	if s := pl.Slot; s != nil {
		ch <- prometheus.MustNewConstMetric(slotLagBytesDesc, prometheus.GaugeValue, float64(s.LagBytes), s.Name)
		if s.LagSeconds != nil {
			ch <- prometheus.MustNewConstMetric(slotLagSecondsDesc, prometheus.GaugeValue, *s.LagSeconds, s.Name)
		}
	}
	for topic, parts := range pl.ConsumerLag {
		for p, l := range parts {
			ch <- prometheus.MustNewConstMetric(consumerLagDesc, prometheus.GaugeValue, float64(l), topic, strconv.Itoa(int(p)))
		}
	}
	if pl.DLQDepth != nil {
		ch <- prometheus.MustNewConstMetric(dlqDepthDesc, prometheus.GaugeValue, float64(*pl.DLQDepth))
	}
	for _, c := range pl.Captures {
		up := 0.0
		if c.Up {
			up = 1
			ch <- prometheus.MustNewConstMetric(producerBacklogDesc, prometheus.GaugeValue, float64(c.Status.PendingBytes), c.URL, c.Status.Slot)
		}
		ch <- prometheus.MustNewConstMetric(captureUpDesc, prometheus.GaugeValue, up, c.URL)
	}
}
