package sink

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the sink's Prometheus metrics. Create them with NewMetrics
// and pass them in Config; a nil *Metrics in Config gets unregistered ones.
type Metrics struct {
	consumed   prometheus.Counter
	loaded     *prometheus.CounterVec
	dedupHits  *prometheus.CounterVec
	dead       prometheus.Counter
	mismatches prometheus.Counter
	failOpen   prometheus.Counter
	batchSize  prometheus.Histogram
	insertTime prometheus.Histogram
	lag        *prometheus.GaugeVec
	stopped    prometheus.Gauge
	truncates  *prometheus.CounterVec
	erased     *prometheus.CounterVec
	future     *prometheus.CounterVec
	jumps      *prometheus.CounterVec
	// offsetsLost and partitionsLost count records Kafka deleted before
	// the sink read them (gap.go).
	offsetsLost    *prometheus.CounterVec
	partitionsLost *prometheus.GaugeVec
	// recopiesPending and recopiesDone follow the re-copies that repair
	// gaps (recopy.go).
	recopiesPending *prometheus.GaugeVec
	recopiesDone    *prometheus.CounterVec
}

// NewMetrics creates the sink metrics and registers them with reg (nil:
// not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg) // registers each metric it makes, with reg
	return &Metrics{
		consumed: f.NewCounter(prometheus.CounterOpts{
			Name: "walhouse_sink_records_consumed_total", Help: "Records read from Kafka."}),
		loaded: f.NewCounterVec(prometheus.CounterOpts{
			Name: "walhouse_sink_records_loaded_total", Help: "Records loaded into ClickHouse, by table."}, []string{"table"}),
		dedupHits: f.NewCounterVec(prometheus.CounterOpts{
			Name: "walhouse_sink_dedup_hits_total", Help: "Duplicate records skipped, by dedup layer."}, []string{"layer"}),
		dead: f.NewCounter(prometheus.CounterOpts{
			Name: "walhouse_sink_dead_letters_total", Help: "Records sent to the dead-letter topic."}),
		mismatches: f.NewCounter(prometheus.CounterOpts{
			Name: "walhouse_sink_eventid_mismatches_total", Help: "Records whose eventId was seen before with another payload."}),
		failOpen: f.NewCounter(prometheus.CounterOpts{
			Name: "walhouse_sink_dedup_fail_open_total", Help: "Dedup store calls that failed, so records were loaded without Layer 2."}),
		batchSize: f.NewHistogram(prometheus.HistogramOpts{
			Name: "walhouse_sink_batch_records", Help: "Records per insert.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10)}),
		insertTime: f.NewHistogram(prometheus.HistogramOpts{
			Name: "walhouse_sink_insert_seconds", Help: "Time to load one batch, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		lag: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "walhouse_sink_consumer_lag_records", Help: "Records in a partition not yet consumed (high watermark − next offset)."}, []string{"topic", "partition"}),
		stopped: f.NewGauge(prometheus.GaugeOpts{
			Name: "walhouse_sink_tables_stopped", Help: "Tables whose loading stopped on a schema change walhouse cannot apply (see the log)."}),
		truncates: f.NewCounterVec(prometheus.CounterOpts{
			Name: "walhouse_sink_truncates_applied_total", Help: "Truncate markers applied (one per partition of the table's topic per TRUNCATE), by table."}, []string{"table"}),
		erased: f.NewCounterVec(prometheus.CounterOpts{
			Name: "walhouse_sink_erased_records_dropped_total", Help: "Records of erased data subjects, committed before their erasure, not loaded (see docs/erasure.md), by table."}, []string{"table"}),
		future: f.NewCounterVec(prometheus.CounterOpts{
			Name: "walhouse_sink_future_positions_total", Help: "Records, heartbeats and truncate markers dead-lettered for a WAL position or time PostgreSQL cannot have reached (sink/future.go): forged, or a bug. By topic and kind."}, []string{"topic", "kind"}),
		jumps: f.NewCounterVec(prometheus.CounterOpts{
			Name: "walhouse_sink_position_jumps_total", Help: "Records, heartbeats and truncate markers accepted although their WAL position is further ahead than PostgreSQL writes since the partition's last one (within the margin sink/future.go allows; a real stream never needs it): a sign of forged items. By topic and kind."}, []string{"topic", "kind"}),
		offsetsLost: f.NewCounterVec(prometheus.CounterOpts{
			Name: "walhouse_sink_offsets_lost_total", Help: "Offsets of a table's topic that Kafka deleted (retention, DeleteRecords) before the sink read them, counted when the gap is found (again after each restart while it is not resolved)."}, []string{"topic", "partition"}),
		partitionsLost: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "walhouse_sink_partitions_records_lost", Help: "1 for a partition whose loading stopped at records Kafka deleted before the sink read them (see the log; alert WalhouseRecordsLost)."}, []string{"topic", "partition"}),
		recopiesPending: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "walhouse_sink_recopies_pending", Help: "1 for a table whose re-copy after a gap (--recopy-on-gap) is requested and not yet loaded and swept: its lastSyncAt stays before the gap (alert WalhouseRecopyPending)."}, []string{"table"}),
		recopiesDone: f.NewCounterVec(prometheus.CounterOpts{
			Name: "walhouse_sink_recopies_done_total", Help: "Re-copies after a gap (--recopy-on-gap) loaded in every partition and swept, by table."}, []string{"table"}),
	}
}
