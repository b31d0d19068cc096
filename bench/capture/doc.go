// Command capture prints the throughput of walhouse capture next to
// PostgreSQL's own tools, measured in one run against the local services
// (make bench-capture):
//
//   - streaming: a backlog of row changes made while the slots were idle,
//     read by pg_recvlogical and by `walhouse capture --snapshot never`;
//   - snapshot: the same table read by `walhouse capture` (initial snapshot)
//     and by psql's COPY ... TO STDOUT;
//   - produce (only when asked for with -phases): snapshot-shaped records
//     produced straight into Kafka with each compression codec, for the
//     broker's own cost per record.
//
// It prints rows/s, the ratio walhouse/PostgreSQL and walhouse's peak RSS; it
// never asserts. With -profile DIR it also runs the streaming phase
// in-process under a CPU profile and reports allocations per row.
//
// Everything it creates (table, publication, slots, topics) carries a fresh
// bench_<hex> name and is dropped at the end, also after a failure.
package main
