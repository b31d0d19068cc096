package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/pipeline"
)

// captureFlags are capture's flags but the endpoints'.
type captureFlags struct {
	slot        *string
	publication *string
	prefix      *string
	partitions  *int
	replication *int
	minInsync   *int
	durability  *string
	tenantCol   *string
	defTenant   *string
	status      *time.Duration
	heartbeat   *time.Duration
	markEvery   *time.Duration
	progress    *time.Duration
	snapshot    *string
	workers     *int
	chunkPages  *int64
	noCreate    *bool
	captureKeys *bool
	primaryURL  *string
	failover    *bool
	reconnect   *time.Duration
	maxRecord   *int
	metricsAddr *string
	envelope    *int
	batchRows   *int
	onBadRow    *string
	dlqTopic    *string
	rewriteCopy *string
	rewriteMax  *int64
	tables      cli.ListFlag
	exclude     cli.ListFlag
	tenantFor   cli.ListFlag
	resnapshot  cli.ListFlag
	layouts     cli.LayoutFlag
}

// register registers the flags on fs.
func (f *captureFlags) register(fs *flag.FlagSet) {
	f.slot = fs.String("slot", "walhouse", "logical replication slot, created if missing")
	f.publication = fs.String("publication", "walhouse", "publication, created or extended with --tables")
	f.prefix = fs.String("topic-prefix", "walhouse", "Kafka topic prefix: topics are <prefix>.<schema>.<table>")
	f.partitions = fs.Int("partitions", 6, "partitions of the topics walhouse creates")
	f.replication = fs.Int("replication-factor", -1, "replication factor of the topics walhouse creates, the tables' and its own state and schema registry topics (-1: broker default)")
	f.minInsync = fs.Int("min-insync-replicas", -1, "min.insync.replicas of the topics walhouse creates: how many replicas must have a record before Kafka acknowledges it (-1: the broker's default; 2 with replication factor 3, docs/scale-out.md)")
	f.durability = cli.TopicDurabilityFlag(fs)
	f.tenantCol = fs.String("tenant-column", "tenant_id", "column holding the tenant")
	f.defTenant = fs.String("default-tenant", "", "tenant of every table that has no tenant column (single-tenant tables; tables with one keep theirs); without it such tables are refused")
	f.status = fs.Duration("status-interval", 5*time.Second, "how often the confirmed position is reported to PostgreSQL")
	f.heartbeat = fs.Duration("heartbeat-interval", 10*time.Second, "how often a heartbeat goes through the WAL to every partition (0: off)")
	f.markEvery = fs.Duration("mark-interval", capture.DefaultMarkInterval, "how often, for 2 s after a table's change, a consistency mark goes to every partition of the table, so reads that wait for a write's consistency token need not wait for a heartbeat (0: off; docs/consistency.md)")
	f.progress = fs.Duration("progress-interval", 30*time.Second, "how often a progress line is logged: rows and rate, positions, slot lag, producer backlog, dead letters (0: off)")
	f.snapshot = fs.String("snapshot", "initial", "initial: copy each table's existing rows once: all tables before streaming when the slot is new; with an existing slot only the tables whose copy under this slot is unfinished or was never made (progress in <prefix>-state), next to the stream, logged as such; resumable; never: stream changes only, copy nothing")
	f.workers = fs.Int("snapshot-workers", 4, "connections reading snapshot chunks in parallel")
	f.chunkPages = fs.Int64("snapshot-chunk-pages", 4096, "snapshot chunk size in 8 KiB pages")
	f.noCreate = fs.Bool("no-create-slot", false, "fail instead of creating a missing replication slot (for slots managed by hand)")
	f.captureKeys = fs.Bool("capture-idempotency-keys", false, "also capture Layer 1's key table "+capture.IdempotencyKeyTable+" when published (left out by default: request fingerprints and stored responses, pruned daily)")
	f.primaryURL = fs.String("primary-url", "", "when --pg is a physical standby (PostgreSQL 16+): the primary's URL, where capture creates the publication and the DDL trigger and writes its heartbeats (the --pg password applies to it too; docs/ha.md)")
	f.failover = fs.Bool("failover-slot", false, "create the slot with failover = true (PostgreSQL 17+), or turn it on for an existing one, so that standbys with sync_replication_slots = on keep a copy to stream on from after a failover (docs/ha.md)")
	f.reconnect = fs.Duration("reconnect-timeout", 0, "when a connection is lost (PostgreSQL restarting or failing over, a network cut), reconnect for up to this long and stream on from the slot's confirmed position, instead of exiting (0: exit at once; give --pg both servers with target_session_attrs=read-write to follow a failover)")
	f.maxRecord = cli.MaxRecordBytesFlag(fs)
	f.metricsAddr = fs.String("metrics-addr", "", "serve Prometheus /metrics on this address (e.g. 127.0.0.1:9465); empty: off")
	f.envelope = fs.Int("envelope-version", 2, "record envelope: 2 refers to each table's columns in the schema registry topic <prefix>-schemas; 1 repeats them in every record, for consumers that cannot read the registry")
	f.batchRows = fs.Int("snapshot-batch-rows", 1000, "most snapshot rows in one Kafka record (row batches, envelope version 2; a batch also closes at 128 KiB); 1: a record per row, for consumers that read the topics and only know single records")
	f.onBadRow = fs.String("on-bad-row", "dead-letter", "a change that cannot become a record (NULL tenant, over the size bound): dead-letter sends it to the dead-letter topic and goes on; stop stops capture")
	f.dlqTopic = fs.String("dlq-topic", "", "dead-letter topic of the changes capture sets aside (default <prefix>-dlq, the sink's)")
	f.rewriteCopy = fs.String("rewrite-copy", "on", "on: copy a table again, next to the stream, after DDL rewrote its rows without row changes (ALTER COLUMN ... TYPE with a conversion, ADD COLUMN with a volatile default; docs/schema-changes.md); off: mark such a table inexact instead")
	f.rewriteMax = fs.Int64("rewrite-copy-max-rows", 0, "mark a rewritten table with more rows than this inexact instead of copying it again (0: no limit)")
	fs.Var(&f.resnapshot, "resnapshot", "copy these tables (schema.table, or * for all) again, e.g. after dropping their ClickHouse table")
	fs.Var(&f.tables, "tables", "tables to capture, comma-separated schema.table (default: the publication's tables)")
	fs.Var(&f.exclude, "exclude-tables", "published tables to leave out, comma-separated schema.table patterns with * ? [...] wildcards, e.g. audit.*,public.tmp_*")
	fs.Var(&f.tenantFor, "tenant-column-for", "per-table tenant column, schema.table=column (repeatable)")
	f.layouts = cli.RegisterLayout(fs)
}

// options are capture's options of the flags of fs, or the first usage
// error among them.
func (f *captureFlags) options(fs *flag.FlagSet) ([]capture.Option, error) {
	opts := []capture.Option{
		capture.WithSlot(*f.slot),
		capture.WithPublication(*f.publication),
		capture.WithTables(f.tables...),
		capture.WithExcludeTables(f.exclude...),
		capture.WithTopicPrefix(*f.prefix),
		capture.WithTopicPartitions(int32(*f.partitions)),
		capture.WithTopicReplication(int16(*f.replication)),
		capture.WithTenantColumn(*f.tenantCol),
		capture.WithDefaultTenant(*f.defTenant),
		capture.WithStatusInterval(*f.status),
		capture.WithHeartbeatInterval(*f.heartbeat),
		capture.WithMarkInterval(*f.markEvery),
		capture.WithProgressInterval(*f.progress),
		capture.WithEnvelopeVersion(*f.envelope),
		capture.WithSnapshotWorkers(*f.workers),
		capture.WithSnapshotChunkPages(*f.chunkPages),
		capture.WithSnapshotBatchRows(*f.batchRows),
		capture.WithResnapshot(f.resnapshot...),
		capture.WithMaxRecordBytes(*f.maxRecord),
		capture.WithReconnect(*f.reconnect),
	}
	if *f.failover {
		opts = append(opts, capture.WithFailoverSlot())
	}
	policy, err := capture.ParseBadRowPolicy(*f.onBadRow)
	if err != nil {
		return nil, cli.Usage(fmt.Errorf("--on-bad-row: %w", err))
	}
	opts = append(opts, capture.WithOnBadRow(policy))
	if *f.dlqTopic == "" {
		*f.dlqTopic = kafka.DeadLetterTopic(*f.prefix)
	}
	opts = append(opts, capture.WithDeadLetterTopic(*f.dlqTopic))
	fps, err := cli.Failpoints()
	if err != nil {
		return nil, err
	}
	opts = append(opts, capture.WithFailpoints(fps))
	if *f.envelope == 1 && *f.batchRows > 1 && cli.Given(fs, "snapshot-batch-rows") {
		return nil, cli.Usagef("--snapshot-batch-rows %d needs --envelope-version 2: version 1 records carry one row each", *f.batchRows)
	}
	if *f.envelope == 1 {
		opts = append(opts, capture.WithSnapshotBatchRows(1))
	}
	if *f.noCreate {
		opts = append(opts, capture.WithoutSlotCreation())
	}
	if *f.captureKeys {
		opts = append(opts, capture.WithIdempotencyKeys())
	}
	switch *f.rewriteCopy {
	case "on":
	case "off":
		opts = append(opts, capture.WithoutRewriteCopy())
	default:
		return nil, cli.Usagef("--rewrite-copy %q: want on or off", *f.rewriteCopy)
	}
	opts = append(opts, capture.WithRewriteCopyMaxRows(*f.rewriteMax))
	switch *f.snapshot {
	case "initial":
	case "never":
		opts = append(opts, capture.WithoutSnapshot())
	default:
		return nil, cli.Usagef("--snapshot %q: want initial or never", *f.snapshot)
	}
	for _, tf := range f.tenantFor {
		table, col, ok := strings.Cut(tf, "=")
		if !ok || table == "" || col == "" {
			return nil, cli.Usagef("--tenant-column-for %q: want schema.table=column", tf)
		}
		opts = append(opts, capture.WithTableTenantColumn(table, col))
	}
	for table, l := range f.layouts {
		opts = append(opts, capture.WithTableLayout(table, l))
	}
	return opts, nil
}

// topicChecks checks the flags of the topics capture creates, and returns
// the check of the pipeline's topics at start.
func (f *captureFlags) topicChecks() (kafka.DurabilityMode, error) {
	if *f.replication == 0 || *f.replication < -1 || *f.replication > math.MaxInt16 {
		return 0, cli.Usagef("--replication-factor %d: want -1 (the broker's default) or a number of replicas from 1", *f.replication)
	}
	if *f.minInsync == 0 || *f.minInsync < -1 {
		return 0, cli.Usagef("--min-insync-replicas %d: want -1 (the broker's default) or a number of replicas from 1", *f.minInsync)
	}
	mode, err := kafka.ParseDurabilityMode(*f.durability)
	if err != nil {
		return 0, cli.Usagef("--topic-durability %w", err)
	}
	if *f.partitions < 1 || *f.partitions > math.MaxInt32 {
		return 0, cli.Usagef("--partitions %d: want at least 1", *f.partitions)
	}
	return mode, nil
}

// runCapture streams PostgreSQL's changes into Kafka until ctx ends
// (pipeline.RunCapture).
func runCapture(ctx context.Context, inv *cli.Invocation) error {
	fs, ep := cli.NewFlagSet("capture", cli.UsesPG|cli.UsesKafka)
	var f captureFlags
	f.register(fs)
	if err := inv.Parse(fs); err != nil {
		return err
	}
	opts, err := f.options(fs)
	if err != nil {
		return err
	}
	durabilityMode, err := f.topicChecks()
	if err != nil {
		return err
	}
	// A soft limit keeps capture's heap near its working set instead of
	// letting garbage grow to twice the live size between collections;
	// a record at the bound is held about twice (the WAL message, its
	// encoding), so the limit makes room for that.
	cli.SetMemoryLimit(128<<20 + 2*int64(*f.maxRecord))
	pgURL, err := ep.PGURL()
	if err != nil {
		return err
	}
	if *f.primaryURL != "" {
		primary, err := ep.PGConnString(*f.primaryURL)
		if err != nil {
			return err
		}
		opts = append(opts, capture.WithPrimary(primary))
	}
	kc, err := ep.KafkaConfig()
	if err != nil {
		return err
	}
	return pipeline.RunCapture(ctx, pipeline.CaptureRun{
		PG: pgURL, Kafka: kc, Slot: *f.slot, Prefix: *f.prefix, DLQ: *f.dlqTopic,
		Replication: int16(*f.replication), MinInsync: *f.minInsync, MaxRecordBytes: *f.maxRecord,
		Durability: durabilityMode, Options: opts, HTTP: metricsHTTP(*f.metricsAddr),
		// What it connects to, for an operator following the log; the
		// logger redacts passwords in the URL.
		LogAttrs: []any{"pg", ep.PG, "primary_url", *f.primaryURL, "failover_slot", *f.failover, "kafka", ep.Kafka, "kafka_tls", ep.KafkaSec.TLS.Enabled(), "kafka_sasl", ep.KafkaSec.Mechanism, "slot", *f.slot, "publication", *f.publication,
			"topic_prefix", *f.prefix, "snapshot", *f.snapshot, "on_bad_row", *f.onBadRow, "metrics_addr", *f.metricsAddr},
	})
}
