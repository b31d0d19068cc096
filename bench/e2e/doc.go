// Command e2e prints what a user of the whole pipeline sees, measured in
// one run against the local services with `walhouse capture` and `walhouse
// sink` (Layer 2 on) as processes (make bench-e2e; QUICK=1 for a short run):
//
//   - load: the initial load of a table already in PostgreSQL, from the
//     start of both processes until every row is in ClickHouse, next to the
//     engine's own pull of the same rows into a table of the same shape
//     (INSERT INTO … SELECT … FROM postgresql(…), through the ClickHouse
//     HTTP front), and their ratio; for a narrow table (6 columns) and a
//     wide one (30 columns, about 1 KB a row), and the narrow one again with
//     Layer 2 off, for what Layer 2 costs; and ClickHouse's own CDC, a
//     MaterializedPostgreSQL database on the same table, from CREATE
//     DATABASE until its table holds every row (materialized.go), with
//     walhouse's rows/s and CPU over its (-materialized=false: not); with
//     -profile, CPU profiles of capture and sink over each walhouse load,
//     and the engine process's side of every load (engine.go; by shared
//     object with -perf);
//   - steady: a sweep of offered rates (pgbench inserting 10-row
//     transactions across 100 tenants at --rate), each followed by a drain,
//     with p50/p99/max of commit → visible (the row's _synced_at, ClickHouse's
//     clock when the sink's insert wrote it, minus its _commit_ts, the source
//     transaction's commit time) and the highest rate whose p99 stays ≤ 1 s;
//     during each step, the token wait: 4 writers each write a row through
//     Layer 1 (package idempotency) and read it back through the query API
//     (in this process, as `walhouse serve` runs it) with the write's
//     consistency token, one after another; p50/p99/max from the write's
//     commit until the read returned, and the reads whose wait ended
//     without the write (stale); and the lag of walhouse and of a
//     MaterializedPostgreSQL database on the same table by one sampler,
//     the age of the newest visible row every 250 ms (lag.go);
//   - first row: a table added to the publication while everything runs,
//     from the commit of its first row until that row can be read;
//   - usage: CPU seconds and peak memory of every process in each phase
//     (capture, sink, PostgreSQL, Kafka, ClickHouse, Redis, pgbench).
//
// -steady=false stops after the loads. It prints tables and writes them as CSV and JSON, with a PNG chart
// (latency against offered rate, load ratios), under -out; it never
// asserts. The machine is shared: the figures are noisy, the ratios less so.
//
// Everything it creates (tables, publications, slots, topics, ClickHouse
// databases, dedup keys) carries a fresh bench_e2e_<hex> name and is
// removed at the end, also after a failure.
package main
