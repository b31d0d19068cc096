// Package pipeline is walhouse's composition root as a library: it builds
// the stages (capture, the sink, the query API, an export to a file) and
// what they need around them (the clients of PostgreSQL, Kafka, ClickHouse
// and the dedup store, the health and readiness endpoints, the metrics
// server, the loader's wrappers, the erasure ledger, the schema reader, the
// re-copy topic, the sink's watch for new tables' topics) from plain
// settings structs, and runs them.
//
// It owns the wiring, not the stages' logic (that is in capture, sink,
// clickhouse, query...) nor the command line: it parses no flag, reads no
// environment variable (cmd/walhouse resolves flags, the configuration file,
// the environment and the secrets into the settings), and never exits the
// process; every blocking call takes a context and returns an error.
//
// cmd/walhouse and the demo (package demo) build the pipeline through it,
// bench/capture wires capture to Kafka with it and bench/sink builds its
// sink with it (Sink), so that each runs the stages wired the same way.
package pipeline
