// Package schema maps PostgreSQL relations to ClickHouse tables: the type
// mapping, the conversion of PostgreSQL text values to the Go values the
// ClickHouse client appends, the DDL of the ReplacingMergeTree tables and
// the ALTERs that follow a source schema change.
//
// It is pure: it builds values and SQL text from typed inputs and talks to
// no server. Package clickhouse executes what it builds.
package schema
