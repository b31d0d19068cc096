package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/internal/failpoint"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/pipeline"
)

func runCapture(ctx context.Context, inv *invocation) error {
	fs, ep := newFlagSet("capture", usesPG|usesKafka)
	var (
		slot        = fs.String("slot", "walhouse", "logical replication slot, created if missing")
		publication = fs.String("publication", "walhouse", "publication, created or extended with --tables")
		prefix      = fs.String("topic-prefix", "walhouse", "Kafka topic prefix: topics are <prefix>.<schema>.<table>")
		partitions  = fs.Int("partitions", 6, "partitions of the topics walhouse creates")
		replication = fs.Int("replication-factor", -1, "replication factor of the topics walhouse creates, the tables' and its own state and schema registry topics (-1: broker default)")
		minInsync   = fs.Int("min-insync-replicas", -1, "min.insync.replicas of the topics walhouse creates: how many replicas must have a record before Kafka acknowledges it (-1: the broker's default; 2 with replication factor 3, docs/scale-out.md)")
		durability  = topicDurabilityFlag(fs)
		tenantCol   = fs.String("tenant-column", "tenant_id", "column holding the tenant")
		defTenant   = fs.String("default-tenant", "", "tenant of every table that has no tenant column (single-tenant tables; tables with one keep theirs); without it such tables are refused")
		status      = fs.Duration("status-interval", 5*time.Second, "how often the confirmed position is reported to PostgreSQL")
		heartbeat   = fs.Duration("heartbeat-interval", 10*time.Second, "how often a heartbeat goes through the WAL to every partition (0: off)")
		markEvery   = fs.Duration("mark-interval", capture.DefaultMarkInterval, "how often, for 2 s after a table's change, a consistency mark goes to every partition of the table, so reads that wait for a write's consistency token need not wait for a heartbeat (0: off; docs/consistency.md)")
		progress    = fs.Duration("progress-interval", 30*time.Second, "how often a progress line is logged: rows and rate, positions, slot lag, producer backlog, dead letters (0: off)")
		snapshot    = fs.String("snapshot", "initial", "initial: copy each table's existing rows once: all tables before streaming when the slot is new; with an existing slot only the tables whose copy under this slot is unfinished or was never made (progress in <prefix>-state), next to the stream, logged as such; resumable; never: stream changes only, copy nothing")
		workers     = fs.Int("snapshot-workers", 4, "connections reading snapshot chunks in parallel")
		chunkPages  = fs.Int64("snapshot-chunk-pages", 4096, "snapshot chunk size in 8 KiB pages")
		noCreate    = fs.Bool("no-create-slot", false, "fail instead of creating a missing replication slot (for slots managed by hand)")
		captureKeys = fs.Bool("capture-idempotency-keys", false, "also capture Layer 1's key table "+capture.IdempotencyKeyTable+" when published (left out by default: request fingerprints and stored responses, pruned daily)")
		primaryURL  = fs.String("primary-url", "", "when --pg is a physical standby (PostgreSQL 16+): the primary's URL, where capture creates the publication and the DDL trigger and writes its heartbeats (the --pg password applies to it too; docs/ha.md)")
		failover    = fs.Bool("failover-slot", false, "create the slot with failover = true (PostgreSQL 17+), or turn it on for an existing one, so that standbys with sync_replication_slots = on keep a copy to stream on from after a failover (docs/ha.md)")
		reconnect   = fs.Duration("reconnect-timeout", 0, "when a connection is lost (PostgreSQL restarting or failing over, a network cut), reconnect for up to this long and stream on from the slot's confirmed position, instead of exiting (0: exit at once; give --pg both servers with target_session_attrs=read-write to follow a failover)")
		maxRecord   = maxRecordBytesFlag(fs)
		metricsAddr = fs.String("metrics-addr", "", "serve Prometheus /metrics on this address (e.g. 127.0.0.1:9465); empty: off")
		envelope    = fs.Int("envelope-version", 2, "record envelope: 2 refers to each table's columns in the schema registry topic <prefix>-schemas; 1 repeats them in every record, for consumers that cannot read the registry")
		batchRows   = fs.Int("snapshot-batch-rows", 1000, "most snapshot rows in one Kafka record (row batches, envelope version 2; a batch also closes at 128 KiB); 1: a record per row, for consumers that read the topics and only know single records")
		onBadRow    = fs.String("on-bad-row", "dead-letter", "a change that cannot become a record (NULL tenant, over the size bound): dead-letter sends it to the dead-letter topic and goes on; stop stops capture")
		dlqTopic    = fs.String("dlq-topic", "", "dead-letter topic of the changes capture sets aside (default <prefix>-dlq, the sink's)")
		rewriteCopy = fs.String("rewrite-copy", "on", "on: copy a table again, next to the stream, after DDL rewrote its rows without row changes (ALTER COLUMN ... TYPE with a conversion, ADD COLUMN with a volatile default; docs/schema-changes.md); off: mark such a table inexact instead")
		rewriteMax  = fs.Int64("rewrite-copy-max-rows", 0, "mark a rewritten table with more rows than this inexact instead of copying it again (0: no limit)")
		tables      listFlag
		exclude     listFlag
		tenantFor   listFlag
		resnapshot  listFlag
	)
	fs.Var(&resnapshot, "resnapshot", "copy these tables (schema.table, or * for all) again, e.g. after dropping their ClickHouse table")
	fs.Var(&tables, "tables", "tables to capture, comma-separated schema.table (default: the publication's tables)")
	fs.Var(&exclude, "exclude-tables", "published tables to leave out, comma-separated schema.table patterns with * ? [...] wildcards, e.g. audit.*,public.tmp_*")
	fs.Var(&tenantFor, "tenant-column-for", "per-table tenant column, schema.table=column (repeatable)")
	layouts := registerLayout(fs)
	if err := inv.parse(fs); err != nil {
		return err
	}
	opts := []capture.Option{
		capture.WithSlot(*slot),
		capture.WithPublication(*publication),
		capture.WithTables(tables...),
		capture.WithExcludeTables(exclude...),
		capture.WithTopicPrefix(*prefix),
		capture.WithTopicPartitions(int32(*partitions)),
		capture.WithTopicReplication(int16(*replication)),
		capture.WithTenantColumn(*tenantCol),
		capture.WithDefaultTenant(*defTenant),
		capture.WithStatusInterval(*status),
		capture.WithHeartbeatInterval(*heartbeat),
		capture.WithMarkInterval(*markEvery),
		capture.WithProgressInterval(*progress),
		capture.WithEnvelopeVersion(*envelope),
		capture.WithSnapshotWorkers(*workers),
		capture.WithSnapshotChunkPages(*chunkPages),
		capture.WithSnapshotBatchRows(*batchRows),
		capture.WithResnapshot(resnapshot...),
		capture.WithMaxRecordBytes(*maxRecord),
		capture.WithReconnect(*reconnect),
	}
	if *failover {
		opts = append(opts, capture.WithFailoverSlot())
	}
	policy, err := capture.ParseBadRowPolicy(*onBadRow)
	if err != nil {
		return &usageError{fmt.Errorf("--on-bad-row: %w", err)}
	}
	opts = append(opts, capture.WithOnBadRow(policy))
	if *dlqTopic == "" {
		*dlqTopic = kafka.DeadLetterTopic(*prefix)
	}
	opts = append(opts, capture.WithDeadLetterTopic(*dlqTopic))
	fps, err := failpoint.Parse(os.Getenv(failpointsEnv))
	if err != nil {
		return usageErrorf("%s: %w", failpointsEnv, err)
	}
	opts = append(opts, capture.WithFailpoints(fps))
	if *envelope == 1 && *batchRows > 1 && flagSet(fs, "snapshot-batch-rows") {
		return usageErrorf("--snapshot-batch-rows %d needs --envelope-version 2: version 1 records carry one row each", *batchRows)
	}
	if *envelope == 1 {
		opts = append(opts, capture.WithSnapshotBatchRows(1))
	}
	if *noCreate {
		opts = append(opts, capture.WithoutSlotCreation())
	}
	if *captureKeys {
		opts = append(opts, capture.WithIdempotencyKeys())
	}
	switch *rewriteCopy {
	case "on":
	case "off":
		opts = append(opts, capture.WithoutRewriteCopy())
	default:
		return usageErrorf("--rewrite-copy %q: want on or off", *rewriteCopy)
	}
	opts = append(opts, capture.WithRewriteCopyMaxRows(*rewriteMax))
	switch *snapshot {
	case "initial":
	case "never":
		opts = append(opts, capture.WithoutSnapshot())
	default:
		return usageErrorf("--snapshot %q: want initial or never", *snapshot)
	}
	for _, tf := range tenantFor {
		table, col, ok := strings.Cut(tf, "=")
		if !ok || table == "" || col == "" {
			return usageErrorf("--tenant-column-for %q: want schema.table=column", tf)
		}
		opts = append(opts, capture.WithTableTenantColumn(table, col))
	}
	for table, l := range layouts {
		opts = append(opts, capture.WithTableLayout(table, l))
	}
	if *replication == 0 || *replication < -1 || *replication > math.MaxInt16 {
		return usageErrorf("--replication-factor %d: want -1 (the broker's default) or a number of replicas from 1", *replication)
	}
	if *minInsync == 0 || *minInsync < -1 {
		return usageErrorf("--min-insync-replicas %d: want -1 (the broker's default) or a number of replicas from 1", *minInsync)
	}
	durabilityMode, err := kafka.ParseDurabilityMode(*durability)
	if err != nil {
		return usageErrorf("--topic-durability %w", err)
	}
	if *partitions < 1 || *partitions > math.MaxInt32 {
		return usageErrorf("--partitions %d: want at least 1", *partitions)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// A soft limit keeps capture's heap near its working set instead of
		// letting garbage grow to twice the live size between collections;
		// a record at the bound is held about twice (the WAL message, its
		// encoding), so the limit makes room for that.
		debug.SetMemoryLimit(128<<20 + 2*int64(*maxRecord))
	}
	pgURL, err := ep.pgURL()
	if err != nil {
		return err
	}
	if *primaryURL != "" {
		primary, err := ep.pgConnString(*primaryURL)
		if err != nil {
			return err
		}
		opts = append(opts, capture.WithPrimary(primary))
	}
	kc, err := ep.kafkaConfig()
	if err != nil {
		return err
	}
	return pipeline.RunCapture(ctx, pipeline.CaptureRun{
		PG: pgURL, Kafka: kc, Slot: *slot, Prefix: *prefix, DLQ: *dlqTopic,
		Replication: int16(*replication), MinInsync: *minInsync, MaxRecordBytes: *maxRecord,
		Durability: durabilityMode, Options: opts, HTTP: metricsHTTP(*metricsAddr),
		// What it connects to, for an operator following the log; the
		// logger redacts passwords in the URL.
		LogAttrs: []any{"pg", ep.pg, "primary_url", *primaryURL, "failover_slot", *failover, "kafka", ep.kafka, "kafka_tls", ep.kafkaSec.tls.enabled(), "kafka_sasl", ep.kafkaSec.mechanism, "slot", *slot, "publication", *publication,
			"topic_prefix", *prefix, "snapshot", *snapshot, "on_bad_row", *onBadRow, "metrics_addr", *metricsAddr},
	})
}
