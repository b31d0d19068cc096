// Command walhouse streams PostgreSQL changes into ClickHouse.
//
// It is one binary with subcommands; each subcommand has its own file of
// this package, which declares its flags (package cli binds them to the
// configuration file and WALHOUSE_* variables, and reads secret files)
// and resolves them into the settings of package pipeline, the
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
//	connect.go           the connections of the service flags (cli.Endpoints)
//	main.go              the command table: each command's summary, usage,
//	                     examples and run function; package cli parses, reads
//	                     the environment and the configuration file (package
//	                     config), prints help and completion, and runs
//	                     walhouse config
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
