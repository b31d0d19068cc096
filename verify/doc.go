// Package verify reconciles PostgreSQL with ClickHouse FINAL: `walhouse
// verify` compares each table row by row and reports the rows that differ,
// and --repair loads PostgreSQL's rows again for them.
//
// It owns the comparison (buckets by tenant and key range, their digests,
// the rows of a bucket whose digests differ), the consistency rules that
// keep a steady write load from showing up as differences (a PostgreSQL
// REPEATABLE READ snapshot compared only once the table's load watermark
// in _walhouse_sync has passed the snapshot's WAL position; rows whose
// ClickHouse version is newer than the snapshot are "changed since";
// suspects checked again in a later snapshot before they are reported),
// the report (written with mode 0600: it holds values; logs hold none) and
// the repair. It does not own how values are stored: each value is
// compared in the canonical form of package schema (schema.Type.Canonical),
// PostgreSQL's text output converted exactly as the sink converts it, so
// a documented lossy mapping compares equal and is counted as lossy.
//
// Data enters from a PostgreSQL connection (a primary or a standby), read
// in text form with the session settings capture uses, and from a
// ClickHouse connection (clickhouse.Open); results leave as TableResult
// values, a Report file (WriteReport), Prometheus metrics (Metrics) and,
// with Repair, rows inserted into the table, converted by schema as the
// sink converts them, at a version that never beats a newer change
// (repair.go). docs/verify.md describes the design and its limits.
package verify
