package monitor

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	slotLagBytesDesc = prometheus.NewDesc("walhouse_slot_lag_bytes",
		"WAL the replication slot holds back (current WAL position − confirmed position).", []string{"slot"}, nil)
	slotLagSecondsDesc = prometheus.NewDesc("walhouse_slot_lag_seconds",
		"PostgreSQL's replay lag of capture's walsender.", []string{"slot"}, nil)
	slotActiveDesc = prometheus.NewDesc("walhouse_slot_active",
		"1 while a walsender (capture) streams from the replication slot, 0 when none does.", []string{"slot"}, nil)
	slotWALStatusDesc = prometheus.NewDesc("walhouse_slot_wal_status",
		"Always 1, labelled with the slot's wal_status (reserved, extended, unreserved, lost): unreserved is about to be invalidated, lost is invalidated.", []string{"slot", "wal_status"}, nil)
	consumerLagDesc = prometheus.NewDesc("walhouse_consumer_lag_records",
		"Records the sink has not consumed yet, per topic and partition.", []string{"topic", "partition"}, nil)
	recordsLostDesc = prometheus.NewDesc("walhouse_consumer_records_lost",
		"Offsets Kafka deleted (retention, DeleteRecords) before the sink's group read them: log start − committed offset, per topic and partition (docs/operations.md#records-lost).", []string{"topic", "partition"}, nil)
	nearRetentionDesc = prometheus.NewDesc("walhouse_consumer_records_near_retention",
		"Records the sink has not consumed that Kafka's retention deletes before the sink reads them, per topic and partition: older than half their topic's retention.ms, or past its retention.bytes once the bytes still produced before the sink reads them at the current pace are added.", []string{"topic", "partition"}, nil)
	dlqDepthDesc = prometheus.NewDesc("walhouse_dlq_depth_records",
		"Records in the dead-letter topic.", nil, nil)
	producerBacklogDesc = prometheus.NewDesc("walhouse_producer_backlog_bytes",
		"Bytes capture produced to Kafka and Kafka has not acknowledged yet, read from capture's status (serve --capture-url).", []string{"capture", "slot"}, nil)
	captureUpDesc = prometheus.NewDesc("walhouse_capture_up",
		"1 if the last scrape read capture's status (serve --capture-url), 0 if it could not.", []string{"capture"}, nil)
)

// NewCollector reports, on every scrape, the figures probe reads (usually
// (*Probe).Probe): slot lag, consumer lag, records lost to or near
// retention, dead-letter depth, and each
// capture's producer backlog and whether it answered. A scrape probes
// for at most 5 s.
func NewCollector(probe func(context.Context) PipelineLag) prometheus.Collector {
	return collector{probe: probe}
}

type collector struct {
	probe func(context.Context) PipelineLag
}

// Describe sends the descriptors of the pipeline metrics.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- slotLagBytesDesc
	ch <- slotLagSecondsDesc
	ch <- slotActiveDesc
	ch <- slotWALStatusDesc
	ch <- consumerLagDesc
	ch <- recordsLostDesc
	ch <- nearRetentionDesc
	ch <- dlqDepthDesc
	ch <- producerBacklogDesc
	ch <- captureUpDesc
}

// Collect probes the pipeline and sends what it read.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pl := c.probe(ctx)
	if s := pl.Slot; s != nil {
		ch <- prometheus.MustNewConstMetric(slotLagBytesDesc, prometheus.GaugeValue, float64(s.LagBytes), s.Name)
		if s.LagSeconds != nil {
			ch <- prometheus.MustNewConstMetric(slotLagSecondsDesc, prometheus.GaugeValue, *s.LagSeconds, s.Name)
		}
		active := 0.0
		if s.Active {
			active = 1
		}
		ch <- prometheus.MustNewConstMetric(slotActiveDesc, prometheus.GaugeValue, active, s.Name)
		if s.WALStatus != "" {
			ch <- prometheus.MustNewConstMetric(slotWALStatusDesc, prometheus.GaugeValue, 1, s.Name, s.WALStatus)
		}
	}
	for topic, parts := range pl.ConsumerLag {
		for p, l := range parts {
			ch <- prometheus.MustNewConstMetric(consumerLagDesc, prometheus.GaugeValue, float64(l), topic, strconv.Itoa(int(p)))
		}
	}
	for topic, parts := range pl.RecordsLost {
		for p, n := range parts {
			ch <- prometheus.MustNewConstMetric(recordsLostDesc, prometheus.GaugeValue, float64(n), topic, strconv.Itoa(int(p)))
		}
	}
	for topic, parts := range pl.NearRetention {
		for p, n := range parts {
			ch <- prometheus.MustNewConstMetric(nearRetentionDesc, prometheus.GaugeValue, float64(n), topic, strconv.Itoa(int(p)))
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
