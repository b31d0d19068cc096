// Package e2e holds the end-to-end tests: they build the walhouse binary,
// run `walhouse capture` and `walhouse sink` as processes against the real
// local services, change rows in PostgreSQL and compare ClickHouse's
// `SELECT … FINAL` with PostgreSQL row for row.
//
// It owns the fault scenarios that cross processes (kills at named points,
// services stopped mid-stream, several sinks in one group and several
// captures feeding it, hostile input, schema changes, copies) and
// the row-by-row comparison (compare.go); it has no code outside tests but
// that comparison. Data enters as SQL statements on PostgreSQL and faults
// on the processes, and leaves as test verdicts: comparisons of values,
// never counts.
package e2e
