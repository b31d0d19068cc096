# walhouse — see README.md. Every target that needs services starts them
# itself (deploy/local/services.sh is idempotent and fast when they run).

SERVICES := deploy/local/services.sh
ENVFILE  := .local/env
GO       ?= go
# Integration tests run one package at a time: they share the local services.
TESTFLAGS ?= -race -count=1 -p 1 -timeout 25m

# Where the services come from (docs/getting-started.md, "Local services"). By default the
# local ones of deploy/local/services.sh, whose .local/env each recipe
# sources. With WALHOUSE_SERVICES=containers (a Docker engine needed), the
# tests start their own containers, once per test binary, and the demo and
# benchmarks run under withcontainers, which starts them and removes them
# after; the tests of the embedded engine still need its libchdb.so.
ifeq ($(WALHOUSE_SERVICES),containers)
START     :=
TESTSTART := chdb-lib
TESTENV   := WALHOUSE_CHDB_LIB=$${WALHOUSE_LOCAL_DIR:-$(CURDIR)/.local}/chdb/libchdb.so
WITHENV   := $(GO) run ./harness/testenv/withcontainers --
else
START     := services
TESTSTART := services
TESTENV   := . ./$(ENVFILE) &&
WITHENV   := . ./$(ENVFILE) &&
endif

.PHONY: all build demo test test-ha test-relayout-scale unit vet lint rules lint-deploy services chdb-lib stop status clean fuzz help hostile bench bench-capture bench-sink bench-query bench-e2e bench-verify chaos chaos-quick chaos-cluster kafka-cluster kafka-cluster-stop test-pg-matrix release release-check

all: build

help:
	@echo "make demo      start local services, run capture, sink (Layer 2 on) and the query API on a demo workload (KEEP=1: until Ctrl-C)"
	@echo "make test      everything: vet, staticcheck, unit and integration tests against real services"
	@echo "make unit      quick unit tests only (no services)"
	@echo "make test-pg-matrix  capture's integration tests and the end-to-end basics on each PostgreSQL major (PG_MAJORS=\"13 18\" for some)"
	@echo "make services  start PostgreSQL, Kafka, Redis and ClickHouse locally (make stop to stop)"
	@echo "               WALHOUSE_SERVICES=containers make test|demo|services: as containers instead (needs Docker)"
	@echo "make test-ha   decoding on a standby and a failover with failover slots, on a primary/standby pair (deploy/local/ha.sh; PG_HA_MAJOR=16-18, default 17; ~2 min)"
	@echo "make test-relayout-scale  walhouse relayout of a RELAYOUT_ROWS-row table (default a million) under a write load, FINAL and the query API sampled throughout"
	@echo "make hostile   the hostile-input suites alone (bad rows, forged messages and records, large values, odd names, hostile tenants)"
	@echo "make bench     print throughput figures (bench-capture, bench-sink, bench-query)"
	@echo "make lint      staticcheck (staticcheck.conf) over the module, its nochdb build and the image writer (part of make test)"
	@echo "make rules     check the Prometheus alert rules and run their unit tests (part of make test)"
	@echo "make lint-deploy  validate deploy/ offline: rules, YAML/JSON, helm lint/template, compose config, Dockerfile"
	@echo "make chaos     the fault matrix (docs/reliability.md): every scenario ends in an exact comparison of PostgreSQL and ClickHouse FINAL"
	@echo "               (CHAOS_N=100 kills, CHAOS_ROWS=1000000 row changes; export the services' port variables: it restarts them)"
	@echo "make chaos-quick  the same, short (CHAOS_QUICK=1, for CI)"
	@echo "make kafka-cluster  a local three-broker Kafka cluster (RF 3, min.insync.replicas=2) on ports 59192-59197 (make kafka-cluster-stop)"
	@echo "make chaos-cluster  faults on that cluster (leader kill -9, rolling restart, ...) under a many-tenant load, each ending in the chaos matrix's exact comparison"
	@echo "make release   reproducible static binaries (linux/amd64, arm64), SBOMs, the image and SHA256SUMS in dist/ (docs/release.md)"
	@echo "make release-check  make release twice and compare the checksums"
	@echo "make bench-e2e the whole pipeline against the engine: initial loads (next to the engine's pull and its MaterializedPostgreSQL CDC), latency per offered rate, a new table's first row, CPU and memory (QUICK=1: ~3 min)"

build:
	@[ -x bin/walhouse ] || echo "==> building walhouse (the first build takes a minute or two)"
	@$(GO) build -ldflags "$$(deploy/release/version.sh --ldflags)" -o bin/walhouse ./cmd/walhouse

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags nochdb ./cmd/walhouse  # the container image's build
	$(GO) -C deploy/release/image vet ./...  # make release's image writer, a module of its own

# staticcheck, every check (staticcheck.conf), pinned as a tool of go.mod
# (go tool staticcheck; the binary does not link it): the module, the
# container image's build (nochdb) and make release's image writer, a
# module of its own.
lint:
	$(GO) tool staticcheck ./...
	$(GO) tool staticcheck -tags nochdb ./cmd/walhouse
	sc=$$($(GO) tool -n staticcheck) && cd deploy/release/image && $$sc ./...

unit:
	WALHOUSE_INTEGRATION=0 $(GO) test -race -count=1 ./...
	$(GO) -C deploy/release/image test -count=1 ./...

# The alert rules of deploy/prometheus: promtool check rules and their unit
# tests (installs Debian's prometheus package for promtool if missing).
rules:
	deploy/lint.sh rules

# Everything under deploy/ that can be validated without a Docker engine
# or a cluster (deploy/README.md says what is and is not checked).
lint-deploy:
	deploy/lint.sh all

# Under containers: start them, write .local/containers.env, keep them
# until Ctrl-C.
services:
ifeq ($(WALHOUSE_SERVICES),containers)
	@mkdir -p .local
	$(GO) run ./harness/testenv/withcontainers -env-file .local/containers.env
else
	@echo "==> starting PostgreSQL, Kafka, Redis and ClickHouse (the first run installs them: a few minutes)"
	@$(SERVICES) start
endif

# libchdb.so alone, for the tests of the embedded engine under containers.
chdb-lib:
	$(SERVICES) install clickhouse

stop:
	deploy/local/ha.sh stop
	$(SERVICES) stop

status:
	$(SERVICES) status

clean:
	deploy/local/ha.sh stop
	$(SERVICES) clean
	rm -rf bin

# The memory tests measure heap on a million rows; under the race detector
# that takes minutes, so they run again in a second pass without it.
test: vet lint rules $(TESTSTART)
	$(TESTENV) WALHOUSE_INTEGRATION=1 $(GO) test $(TESTFLAGS) ./...
	$(GO) -C deploy/release/image test -count=1 ./...
	$(TESTENV) WALHOUSE_INTEGRATION=1 $(GO) test -count=1 -timeout 10m -run 'MemoryBounded' ./query/

# docs/release.md: the artifacts of a release in dist/, built from the
# commit HEAD (not the work tree) with the commit's time everywhere, so
# release-check's second build must give the same checksums. Not part of
# make test: two cross-compiles take minutes.
release:
	deploy/release/release.sh dist

release-check:
	deploy/release/check.sh dist

# docs/ha.md: capture on a physical standby (PostgreSQL 16+), and a failover
# of the primary under a failover slot (17+), with its unhappy path. They run
# on a primary/standby pair of their own (deploy/local/ha.sh, PostgreSQL
# $(PG_HA_MAJOR): 17 unless given), next to the other services; not part of
# make test. About 1-2½ minutes on 2 cores once the services run (17's slot
# sync worker may take a minute to copy a new slot; 18's is quicker), 4-5 on
# a first run that installs them.
PG_HA_MAJOR ?= 17
test-ha: $(TESTSTART)
	PG_HA_MAJOR=$(PG_HA_MAJOR) deploy/local/ha.sh start
	$(TESTENV) . ./.local/ha.env && WALHOUSE_INTEGRATION=1 WALHOUSE_HA=1 $(GO) test $(TESTFLAGS) -v -run '^TestIntegrationHA' ./harness/e2e/

# walhouse relayout of a table of RELAYOUT_ROWS rows (a million unless
# given) under a steady write load, FINAL and the query API sampled the
# whole time (docs/shaping-tables.md#changing-a-layout); make test runs
# the same tests on 20,000 rows. A few minutes on 2 cores.
RELAYOUT_ROWS ?= 1000000
test-relayout-scale: $(TESTSTART)
	$(TESTENV) WALHOUSE_INTEGRATION=1 WALHOUSE_RELAYOUT_ROWS=$(RELAYOUT_ROWS) $(GO) test -count=1 -timeout 30m -v -run '^TestIntegrationRelayoutAtScale$$' ./harness/e2e/

# The PostgreSQL version matrix (docs/postgres-versions.md): for each major
# of PG_MAJORS, PostgreSQL restarts on it (the other services stay up) and
# capture's integration tests and the end-to-end basics below run against
# it; a table of the results ends the output, and the major that ran
# before is put back. The basics are the happy paths of every stage: types
# round trip, inserts, updates and deletes, TRUNCATE, schema changes, the
# snapshot of a partitioned table, TOAST, a table joining while streaming.
PG_MAJORS ?= 13 14 15 16 17 18
PG_MATRIX_E2E := ^TestIntegration(EndToEnd|Types|SchemaChanges|Truncate|PartitionedTable|UnchangedToastKeepsValue|TableJoinsWhileStreaming)$$
test-pg-matrix:
	PG_MAJORS='$(PG_MAJORS)' PG_MATRIX_E2E='$(PG_MATRIX_E2E)' GO='$(GO)' TESTFLAGS='$(TESTFLAGS)' deploy/local/pg-matrix.sh

# The hostile-input suites (docs/security.md), also part of make test: a
# workload that mixes every kind of bad input with ordinary changes, then
# the per-point tests.
HOSTILE := Hostile|WithinBudget|FuturePositions|RowsHeader|Anchors|LoadedPosition|LargeValues|BoundedReader|Oversized|SizedBeforeEncoding|KeyValueSize|Collid|OddTableNames|ClickHouseLimits|TablesOnlyTenants|ExportCaps|FailedConnectHidesPassword|DedupAuthTLS|KafkaStateOverTLS
hostile: $(TESTSTART)
	$(TESTENV) WALHOUSE_INTEGRATION=1 $(GO) test $(TESTFLAGS) -run '$(HOSTILE)' ./...

# The chaos matrix (docs/reliability.md, harness/e2e/chaos_test.go): each
# scenario injects its faults (kill -9, failpoints, duplicates, service
# outages) while a workload writes, then compares PostgreSQL with
# ClickHouse FINAL per tenant, exactly. It restarts the local services with
# services.sh, so export the port variables they were started with. A full
# run rewrites the table in docs/reliability.md; both print it and leave it
# in .local/chaos/table.md. CHAOS_N (kills, default 100), CHAOS_ROWS (row
# changes of the randomized run, default 1,000,000), CHAOS_SCENARIO_ROWS
# (of the others, 20,000), CHAOS_TENANTS (50); CHAOSRUN picks scenarios
# (a -run pattern below TestChaos/, e.g. CHAOSRUN=ClickHouse).
CHAOSCMD = $(TESTENV) WALHOUSE_INTEGRATION=1 WALHOUSE_CHAOS=1 CHAOS_QUICK=$(CHAOS_QUICK) $(GO) test -count=1 -timeout 6h -run '^TestChaos$$/$(CHAOSRUN)' ./harness/e2e/; \
	status=$$?; cat .local/chaos/table.md 2>/dev/null; exit $$status

chaos: $(TESTSTART)
	@$(CHAOSCMD)

chaos-quick: $(TESTSTART)
	@$(MAKE) --no-print-directory chaos CHAOS_QUICK=1

# A three-broker KRaft cluster of its own (deploy/local/kafka-cluster.sh),
# next to the single broker the tests and the demo use: ports 59192-59194
# (controllers 59195-59197), data in .local/kafka-cluster, topics at
# replication factor 3 with min.insync.replicas=2.
kafka-cluster:
	deploy/local/kafka-cluster.sh start

kafka-cluster-stop:
	deploy/local/kafka-cluster.sh stop

# Faults on the three-broker cluster (docs/reliability.md, "On a Kafka
# cluster"): capture and sinks stream through it while a many-tenant
# workload writes, brokers are killed and restarted, and every scenario
# ends in the chaos matrix's exact comparison. PostgreSQL, Redis and
# ClickHouse are the local services; the single broker is not touched.
# CHAOSRUN picks scenarios (a -run pattern below TestChaosCluster/; put an
# alternation in parentheses, or go test reads it as one of whole tests).
# The durability check's integration test runs first, on the same cluster.
chaos-cluster: $(TESTSTART) kafka-cluster
	@$(TESTENV) . ./.local/kafka-cluster/env && export WALHOUSE_INTEGRATION=1 WALHOUSE_KAFKA_BROKERS=$$WALHOUSE_KAFKA_CLUSTER && \
		$(GO) test -count=1 -timeout 5m -run '^TestIntegrationKafkaClusterDurability$$' ./kafka/ && \
		$(GO) test -count=1 -timeout 2h -v -run '^TestChaosCluster$$/$(CHAOSRUN)' ./harness/e2e/; \
		status=$$?; cat .local/chaos/cluster-table.md 2>/dev/null; exit $$status

# The services' environment names PostgreSQL and Redis by the tests'
# WALHOUSE_PG_URL and WALHOUSE_REDIS_ADDR, which the CLI reads only as
# deprecated names: the demo gets them as --pg and --dedup-addr (Layer 2
# on). KEEP=1 leaves the pipeline, the query API and the write API running
# until Ctrl-C; DEMOFLAGS passes more flags (walhouse demo -h lists them,
# e.g. DEMOFLAGS='--name my_demo --listen 127.0.0.1:9080').
demo: $(START)
	@$(MAKE) --no-print-directory build
	@$(WITHENV) sh -c 'exec ./bin/walhouse demo --pg "$$WALHOUSE_PG_URL" --dedup-addr "$$WALHOUSE_REDIS_ADDR" $(if $(KEEP),--keep) $(DEMOFLAGS)'

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 30s ./record
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeMatchesReference$$' -fuzztime 30s ./record
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeBatch$$' -fuzztime 30s ./record
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRowChange$$' -fuzztime 30s ./capture/pgoutput

# Benchmarks print figures; they never assert timings. Each is a Go program
# under bench/ that talks to the local services (-h lists its flags; pass
# them with BENCHFLAGS, e.g. make bench-query BENCHFLAGS='-rows 1000000').
bench: bench-capture bench-sink bench-query

bench-capture: $(START)
	$(WITHENV) $(GO) run ./bench/capture $(BENCHFLAGS)

bench-sink: $(START)
	$(WITHENV) $(GO) run ./bench/sink $(BENCHFLAGS)

bench-query: $(START)
	$(WITHENV) $(GO) run ./bench/query $(BENCHFLAGS)

# walhouse verify on a 10M-row table with nothing different, then the
# repair of 1,000 scattered rows (BENCHFLAGS='-rows 1000000' for less).
bench-verify: $(START)
	$(WITHENV) $(GO) run ./bench/verify $(BENCHFLAGS)

# The whole pipeline as a user runs it, writing bench/out/e2e*.{csv,json,png}
# and bench/out/e2e-profiles/ (QUICK=1: bench/out/e2e-quick*), which git
# ignores; docs/benchmarks.md is the committed summary.
bench-e2e: $(START)
	$(WITHENV) $(GO) run ./bench/e2e $(if $(QUICK),-quick) $(BENCHFLAGS)
