// Package e2e holds the end-to-end tests: they build the walhouse binary,
// run `walhouse capture` and `walhouse sink` as processes against the real
// local services, change rows in PostgreSQL and compare ClickHouse's
// `SELECT … FINAL` with PostgreSQL row for row.
package e2e
