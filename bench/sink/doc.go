// Command sink prints the throughput of the walhouse sink from Kafka into
// ClickHouse with Layer 2 (eventId dedup in Valkey/Redis) off and on, side
// by side in one run against the local services (make bench-sink).
//
// It produces -records synthetic, valid records of one table (8 columns,
// two tenants) to a fresh topic, then runs the sink in-process (sink.New
// over clickhouse.NewWriter, with dedup.New for Layer 2) once per setting,
// each with its own consumer group and ClickHouse database, and times the
// load from the first poll until every record is in ClickHouse. It prints
// rows/s, the on/off ratio and the Redis round trips per 1,000 records; it
// never asserts.
//
// Everything it creates (topic, databases, dedup keys) carries a fresh
// bench_<hex> name and is removed at the end, also after a failure.
package main
