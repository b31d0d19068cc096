// Command walhouse streams PostgreSQL changes into ClickHouse.
//
// It is one binary with subcommands; each subcommand has its own file of
// this package, which reads configuration (flags, WALHOUSE_* variables,
// secret files) and resolves it into the settings of package pipeline, the
// composition root as a library: it opens the connections (PostgreSQL,
// Kafka with its TLS and SASL settings, Valkey/Redis, ClickHouse), builds
// the components and runs them until a signal ends them. The components live
// in the packages named for their stage:
//
//	capture.go           capture: PostgreSQL → Kafka (pipeline.RunCapture)
//	sink.go              sink: Kafka → ClickHouse (pipeline.RunSink)
//	serve.go             serve: the query API (query.Server) with monitor.Probe
//	                     for the pipeline's lag; export: one subject to a file
//	dlq.go               dlq list / replay of the dead-letter topic
//	keys.go              keys prune: Layer 1's expired idempotency keys
//	                     (idempotency.Pruner), once or daily
//	demo.go              demo: its flags; package demo runs capture, the sink
//	                     and the query API in one process on a workload
//	chdb.go              chdb: the embedded ClickHouse (harness/chdb) over HTTP;
//	                     chdb_off.go stands in for it with -tags nochdb
//	                     (the static container image)
//	flags.go, connect.go, kafka*.go, dedupauth.go, secrets.go
//	                     the shared flags and how they become settings
//	main.go, cli.go      the command table, exit statuses, parsing with the
//	                     configuration file (package config) under the
//	                     environment and the flags, help
//	commands.go          config example|check, completion scripts
//	version.go           version: what make build/release stamp (-X), else
//	                     Go's build information (docs/release.md)
//
// What it does not own: any pipeline logic (it wires, the packages work).
// Data enters as command-line flags, environment variables, the configuration
// file and secret files, and leaves as the components' effects, logs on
// stderr (secrets redacted with internal/redact) and the exit status. The
// binary links no test package, and every package of the module keeps the
// import rules of docs/architecture.md (deps_test.go checks both).
package main
