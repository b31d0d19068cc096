// Package demo runs walhouse's demo (`walhouse demo`, `make demo`): it
// resets a PostgreSQL database, slot, topics and ClickHouse database of
// its own, runs capture, the sink and the query API in one process (built
// by package pipeline) on a multi-tenant workload written through Layer 1
// (harness/writeapi serves it over HTTP, with retries), compares both
// sides, verifies them, and reads a write back with its consistency token.
//
// It owns the demo's workload, its report on Out and its two APIs; not
// the stages (pipeline builds them) nor the command line (cmd/walhouse
// parses the flags into a Config). Data enters as a Config and leaves as
// the report, the demo's tables and the APIs it serves.
package demo
