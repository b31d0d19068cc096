// Command query prints the latency of a typical dashboard through the
// walhouse query API, read with FINAL (the default consistency) and with
// "consistency": "approximate", side by side in one run against the local
// ClickHouse (make bench-query).
//
// It creates a fresh ClickHouse database holding one table per layout of
// -compare, each exactly as the sink creates it for that layout
// (schema.NewTable(...).CreateDDL): default (ReplacingMergeTree ordered by
// tenant, then id, no partitions), monthly (the layout ordered by tenant,
// created_at, id and partitioned by toYYYYMM(created_at)),
// monthly-closed-merged (monthly, every past month merged into one part,
// the current month's parts as loaded) and tenant8 (8 partitions by a hash
// of the tenant). It fills each server-side with the same rows: -rows rows
// over -tenants tenants, plus -old-versions (a fraction) older versions of
// existing rows (same key, lower _version) so that FINAL has versions to
// collapse, and -tombstones deletes of existing rows, and a _walhouse_sync
// table so that responses carry lastSyncAt. Merges of the tables are
// stopped (unless -merges) so that the older versions and tombstones stay
// unmerged and both variants read the same parts.
// It then serves query.NewServer in-process on 127.0.0.1:0 with one
// generated read key per tenant and loads a dashboard -requests times per
// layout and variant after -warmup loads, rotating the layouts,
// alternating the variants and rotating the tenants. A dashboard is two
// requests: per-status count and sum(amount) over the last 30 days, and
// the 50 most recent orders of that period.
//
// It prints, per layout, p50, p99 and mean latency per variant and
// request, the rows each request returned or counted, and the
// FINAL/approximate ratio; then the dashboard's figures of every layout
// side by side, and a warning if FINAL counted different rows in two
// layouts (they hold the same rows).
//
// Then, unless -sweep-rows is 0, it sweeps what FINAL costs: one more
// table per layout (the sink's DDL; partitions by a hash of the tenant;
// ClickHouse's index_granularity 8192; no, 50% older versions; tombstones;
// merged into one part by OPTIMIZE … FINAL; the monthly layout), each
// loaded with -sweep-rows rows the same way (-layouts picks some), and the
// dashboard's two statements as the API builds them (query.BuildSelect)
// run directly, FINAL and plain alternating, with FINAL query settings
// added one at a time on the sink's DDL and the monthly layout. It prints
// p50/p99 of both, their ratio and the rows and marks EXPLAIN ESTIMATE
// selects.
//
// It never asserts. The database is dropped at the end, also after a
// failure.
package main
