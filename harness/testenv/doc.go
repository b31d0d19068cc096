// Package testenv is the harness of walhouse's integration tests and
// benchmarks: it gives them the addresses of the real services they run
// against, and the helpers they share (fresh names, waiting for
// convergence, building and running the walhouse binary as a process,
// decoding the records of a pipeline's topics as the sink does, sampling
// the heap).
//
// The services come from one of two backends, picked by WALHOUSE_SERVICES:
//
//   - local (the default): the local services that deploy/local/services.sh
//     starts, found through the environment (WALHOUSE_* variables, else
//     .local/env at the repository root; Load).
//   - containers: PostgreSQL, Kafka, a ClickHouse server (native protocol)
//     and Valkey as containers (testcontainers-go; containers.go), started
//     once per test binary by the first Require that needs them and removed
//     by testcontainers' reaper when the binary exits. StartContainers and
//     the withcontainers command start a set for other programs.
//
// Tests call Require: without the services it skips the test with a clear
// message, unless WALHOUSE_INTEGRATION=1 (set by `make test` and CI), where
// a missing service — or, under containers, a missing Docker engine —
// fails the test, so a broken start-up can never pass as "skipped".
// WALHOUSE_INTEGRATION=0 (make unit) skips them even when the services run.
//
// Data enters from the environment and leaves as an Env and as processes,
// containers and clients the caller's test owns. It imports package
// testing (and testcontainers-go), so the walhouse binary must never
// import it (cmd/walhouse's deps_test.go checks); what the binary shares
// with the tests lives in packages that do not (internal/pgslot).
package testenv
