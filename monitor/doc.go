// Package monitor reads how far behind the pipeline is, outside ClickHouse:
// the replication slot in PostgreSQL, each capture process's status
// document, the sink's consumer group and the dead-letter topic in Kafka.
// `walhouse serve` shows what it reads in GET /v1/lag, /metrics and the
// status page's charts.
//
// What it owns: the Probe over those sources (Config says which; a part
// that cannot be read is named in PipelineLag.Errors and never fails the
// rest), with the records retention deleted before the sink's group read
// them or is about to (retention.go), the reading of capture's status
// document (record.CaptureStatus, which capture writes; CaptureStatusURL
// normalises serve's --capture-url), the
// Prometheus collector of the probed figures (NewCollector), and the lag
// History, a bounded ring of samples kept in memory. What it does not own:
// the HTTP API and the table freshness read from _walhouse_sync (package
// query, which asks a Probe through its own PipelineProbe interface and
// samples the History with its own lag report), nor any write: it only
// reads, and holds no connection of its own (the composition root,
// package pipeline, opens the database pool and the Kafka admin client).
//
// Data enters as rows of pg_replication_slots and pg_stat_replication,
// Kafka offsets (committed and listed), and capture status documents over
// HTTP (untrusted: bounded in size and time, decoded into
// record.CaptureStatus with unknown fields ignored so a newer capture still reads, passwords in
// their URLs never shown); it leaves as PipelineLag values, Prometheus
// gauges and LagHistory snapshots.
package monitor
