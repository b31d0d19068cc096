// Command sink prints the throughput of the walhouse sink from Kafka into
// ClickHouse with Layer 2 (eventId dedup in Valkey/Redis) off and on, side
// by side in one run against the local services (make bench-sink).
//
// It produces -records synthetic, valid records of one table (8 columns,
// two tenants) to a fresh topic: inserts, one record each, or with
// -snapshot an initial copy (version 0 rows in row batches of 1,000, as
// capture sends them). Then it runs the sink in-process, built as walhouse
// sink builds it (pipeline.Sink over clickhouse.NewWriter, with dedup.New
// for Layer 2), once per setting, each with its own consumer group
// and ClickHouse database, and times the load from the first poll until
// every record is in ClickHouse. It prints rows/s, the on/off ratio, the
// Redis round trips per 1,000 records, the wall time spent in inserts and
// in the dedup store, and the CPU seconds of the sink (this process) and
// of the local Redis, Kafka and ClickHouse (read from the pid files under
// .local); -cpuprofile writes a pprof of the sink per setting. With
// -first-row it measures instead how soon the first row of a new table's
// topic is loaded, for the old 10 s metadata refresh, the sink's own 1 s
// one, and that refresh forced by the table's schema registry entry
// (pipeline.TopicWatch, as walhouse sink runs it), and the CPU the sink and
// Kafka spend idle meanwhile. It never asserts.
//
// Everything it creates (topics, databases, dedup keys) carries a fresh
// bench_<hex> name and is removed at the end, also after a failure.
package main
