package capture

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics registers gauges that read c's progress on every scrape:
// rows produced, the producer backlog, the slot's WAL lag in bytes (server WAL end − confirmed
// position) and in seconds (now − the newest commit or heartbeat read), and
// the counters of dead letters, skipped messages and tables left out.
func RegisterMetrics(reg prometheus.Registerer, c *Capturer) error {
	cs := []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "walhouse_capture_records_total", Help: "Records produced to Kafka (snapshot and stream)."},
			func() float64 { return float64(c.Stats().Rows) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walhouse_capture_slot_lag_bytes", Help: "WAL the replication slot holds back: server WAL end minus the confirmed position."},
			func() float64 {
				st := c.Stats()
				if st.ServerWALEnd < st.Confirmed {
					return 0
				}
				return float64(st.ServerWALEnd - st.Confirmed)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walhouse_capture_lag_seconds", Help: "Seconds since the commit (or heartbeat) of the newest transaction read from the stream; grows when capture falls behind or the stream stalls."},
			func() float64 {
				st := c.Stats()
				if st.LastEvent.IsZero() {
					return 0
				}
				return time.Since(st.LastEvent).Seconds()
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walhouse_capture_producer_backlog_bytes", Help: "Bytes produced but not yet acknowledged by Kafka."},
			func() float64 { return float64(c.Stats().PendingBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walhouse_capture_confirmed_lsn", Help: "Position confirmed to the slot, as a number."},
			func() float64 { return float64(c.Stats().Confirmed) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "walhouse_capture_consistency_marks_total", Help: "Consistency marks sent: a heartbeat to every partition of a recently changed table, at most one per table per --mark-interval (docs/consistency.md)."},
			func() float64 { return float64(c.marks.Load()) }),
		c.dlq.counter,
		c.ignored.counter,
		c.ignored.oversized.counter,
		c.refused.gauge,
		c.refused.changes,
		c.refused.inexact,
		c.rewrites,
	}
	for _, col := range cs {
		if err := reg.Register(col); err != nil {
			return err
		}
	}
	return nil
}
