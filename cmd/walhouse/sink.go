package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/dedup"
	"github.com/walhouse/walhouse/erasure"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/pipeline"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/sink"
)

// sinkFlags are the sink's flags but the endpoints'.
type sinkFlags struct {
	group       *string
	prefix      *string
	dlq         *string
	maxBatch    *int
	maxWait     *time.Duration
	fetchMin    *int
	parallel    *int
	combine     *bool
	partitionBy *string
	dedupAddr   *string
	dedupPrefix *string
	dedupTTL    *int
	mismatch    *string
	maxRecord   *int
	durability  *string
	metricsAddr *string
	progress    *time.Duration
	cleanEvery  *time.Duration
	cleanAge    *time.Duration
	eraseEvery  *time.Duration
	recopyOnGap *bool
	relayout    *bool
	dropOld     *bool
	eraseMaxAge *time.Duration
	acceptLost  cli.ListFlag
	erasureKey  *cli.SecretSource
	layouts     cli.LayoutFlag
	dedupSec    cli.DedupSecurity
}

// register registers the flags on fs.
func (f *sinkFlags) register(fs *flag.FlagSet) {
	f.group = fs.String("group", "walhouse-sink", "Kafka consumer group")
	f.prefix = fs.String("topic-prefix", "walhouse", "consume every topic <prefix>.*")
	f.dlq = fs.String("dlq-topic", "", "dead-letter topic for records that can never be loaded (default <prefix>-dlq; \"off\" stops the sink on such a record instead)")
	f.maxBatch = fs.Int("max-batch", 50_000, "most records in one insert (one more where a row moved by its layout would be split from its delete)")
	f.maxWait = fs.Duration("max-wait", 500*time.Millisecond, "longest a record waits for its batch to fill")
	f.fetchMin = fs.Int("fetch-min-bytes", sink.DefaultFetchMinBytes, "bytes a fetch waits for, at most --max-wait: the default flushes a busy table faster than --max-wait, for lower lag; above what a table writes in --max-wait (e.g. 16777216) a table gets about one insert per --max-wait at any rate, at up to --max-wait more lag")
	f.parallel = fs.Int("insert-parallelism", 2, "tables (with --combine-partitions=false: partitions) loaded at the same time, each its own inserts in order, and the partitions of one insert decoded at the same time: decoding and Layer 2 overlap another insert (a ClickHouse server inserts in parallel; the embedded engine runs one statement at a time)")
	f.combine = fs.Bool("combine-partitions", true, "one insert for a table's partitions in a flush (up to --max-batch records and 32 MiB) instead of one per partition: fewer, larger inserts and parts, a crash rebuilds the same inserts; =false inserts each partition's chunk on its own, as earlier versions did (docs/scale-out.md)")
	f.partitionBy = fs.String("partition-by", "", "date/timestamp key column to partition tables by month (optional)")
	f.dedupAddr = fs.String("dedup-addr", "", "Valkey/Redis host:port or redis:// (rediss:// for TLS) URL for Layer 2 eventId dedup; empty or \"off\" disables it")
	f.dedupPrefix = fs.String("dedup-prefix", "walhouse:dedup:", "key prefix in the dedup store")
	f.dedupTTL = fs.Int("dedup-ttl-hours", 24, "hours an eventId is remembered")
	f.mismatch = fs.String("mismatch-mode", "error", "eventId reused with another payload: error (dead-letter it) or warn (load it)")
	f.maxRecord = cli.MaxRecordBytesFlag(fs)
	f.durability = cli.TopicDurabilityFlag(fs)
	f.metricsAddr = fs.String("metrics-addr", "", "serve Prometheus /metrics on this address (e.g. 127.0.0.1:9464); empty: off")
	f.progress = fs.Duration("progress-interval", 30*time.Second, "how often a progress line is logged: records and rate, batches, dead letters, consumer lag, stopped tables (0: off)")
	f.cleanEvery = fs.Duration("cleanup-interval", 0, "how often the sink removes tombstones and superseded versions (walhouse cleanup); 0: never (the default: see docs/operations.md, Deleted rows)")
	f.cleanAge = fs.Duration("cleanup-min-age", defaultCleanupMinAge, "with --cleanup-interval: clean only partitions whose newest tombstone is older than this; must exceed the topics' retention.ms")
	f.eraseEvery = fs.Duration("erasure-refresh", erasure.DefaultRefresh, "how often the erasure ledger is read again (walhouse erase --settle waits for it)")
	f.recopyOnGap = fs.Bool("recopy-on-gap", false, "when Kafka deleted records of a table's topic before the sink read them, ask capture to copy the table again online (through the <prefix>-recopy topic) and load on after the gap, instead of stopping there; the table's lastSyncAt stays before the gap until the copy is loaded (docs/operations.md#records-lost)")
	f.relayout = fs.Bool("relayout", false, "rebuild a table whose sorting key, partitions or overridden column types are not its layout's (--layout, or the default) when the sink first loads it: built beside the old one from the rows ClickHouse has, then swapped atomically; loading into it waits meanwhile (docs/shaping-tables.md#changing-a-layout)")
	f.dropOld = fs.Bool("relayout-drop-old", false, "with --relayout: drop the old table once the new one is in place, instead of keeping it as _walhouse_old_<table>")
	f.eraseMaxAge = fs.Duration("erasure-max-age", 0, "longest the sink loads with a copy of the erasure ledger it could not read again: past it loading waits, committing nothing, until the ledger is read (default 2× --erasure-refresh; walhouse erase --settle must exceed it)")
	fs.Var(&f.acceptLost, "accept-lost-records", "topic/partition (or topic: all its partitions) whose records Kafka deleted before the sink read them, to load on after the gap once its table was copied again (docs/operations.md#records-lost); for one start")
	f.erasureKey = registerErasureKey(fs)
	f.layouts = cli.RegisterLayout(fs)
	f.dedupSec.Register(fs)
}

// run checks the flags that need no connection, and returns what they
// set of pipeline.RunSink's run.
func (f *sinkFlags) run() (pipeline.SinkRun, error) {
	if *f.dropOld && !*f.relayout {
		return pipeline.SinkRun{}, cli.Usagef("--relayout-drop-old: only with --relayout")
	}
	if *f.cleanEvery < 0 || *f.cleanAge <= 0 {
		return pipeline.SinkRun{}, cli.Usagef("--cleanup-interval %v, --cleanup-min-age %v: want a positive interval (or 0: off) and a positive age", *f.cleanEvery, *f.cleanAge)
	}
	mode, err := sink.ParseMismatchMode(*f.mismatch)
	if err != nil {
		return pipeline.SinkRun{}, cli.Usage(fmt.Errorf("--mismatch-mode: %w", err))
	}
	if err := record.ValidateMaxBytes(*f.maxRecord); err != nil {
		return pipeline.SinkRun{}, cli.Usagef("--max-record-bytes: %w", err)
	}
	durabilityMode, err := kafka.ParseDurabilityMode(*f.durability)
	if err != nil {
		return pipeline.SinkRun{}, cli.Usagef("--topic-durability %w", err)
	}
	if *f.dedupTTL < 1 {
		return pipeline.SinkRun{}, cli.Usagef("--dedup-ttl-hours %d: an eventId must be remembered for at least 1 hour", *f.dedupTTL)
	}
	// What needs no connection is checked before the first one.
	accept, err := parseAcceptLost(f.acceptLost)
	if err != nil {
		return pipeline.SinkRun{}, cli.Usage(err)
	}
	fps, err := cli.Failpoints()
	if err != nil {
		return pipeline.SinkRun{}, err
	}
	return pipeline.SinkRun{
		PartitionBy: *f.partitionBy,
		Writer:      []clickhouse.WriterOption{clickhouse.WithLayouts(f.layouts), relayoutOpt(*f.relayout, *f.dropOld)},
		Ledger:      erasure.LedgerConfig{Refresh: *f.eraseEvery, MaxAge: *f.eraseMaxAge},
		Sink:        pipeline.SinkSettings{AcceptGap: accept, Group: *f.group, Prefix: *f.prefix, DLQ: *f.dlq, MaxBatch: *f.maxBatch, Parallel: *f.parallel, CombinePartitions: *f.combine, MaxWait: *f.maxWait, FetchMinBytes: int32(*f.fetchMin), Mismatch: mode, MaxRecordBytes: *f.maxRecord, Progress: *f.progress, Failpoints: fps},
		RecopyOnGap: *f.recopyOnGap, Durability: durabilityMode, HTTP: metricsHTTP(*f.metricsAddr),
		CleanupEvery: *f.cleanEvery, CleanupMinAge: *f.cleanAge,
	}, nil
}

// runSink loads the tables' topics into ClickHouse until ctx ends
// (pipeline.RunSink).
func runSink(ctx context.Context, inv *cli.Invocation) error {
	fs, ep := cli.NewFlagSet("sink", cli.UsesKafka|cli.UsesClickHouse|cli.UsesCluster)
	var f sinkFlags
	f.register(fs)
	if err := inv.Parse(fs); err != nil {
		return err
	}
	run, err := f.run()
	if err != nil {
		return err
	}
	if run.Kafka, err = ep.KafkaConfig(); err != nil {
		return err
	}
	// A batch with records at the bound holds each several times (the
	// fetched record, its decoded values, ClickHouse's block and its
	// compressed body); a soft limit collects between them instead of
	// letting garbage double the heap.
	cli.SetMemoryLimit(256<<20 + 4*int64(*f.maxRecord))
	if run.Ledger.Keys, err = erasureKeys(f.erasureKey); err != nil {
		return err
	}
	if run.ClickHouse, err = clickHouse(ep); err != nil {
		return err
	}
	// What it connects to, for an operator following the log; the logger
	// redacts passwords in the URLs.
	run.LogAttrs = []any{"kafka", ep.Kafka, "kafka_tls", ep.KafkaSec.TLS.Enabled(), "kafka_sasl", ep.KafkaSec.Mechanism, "clickhouse", ep.ClickHouse, "database", ep.Database, "cluster", ep.Cluster,
		"group", *f.group, "topic_prefix", *f.prefix, "dedup", *f.dedupAddr}
	if *f.dedupAddr != "" && *f.dedupAddr != "off" {
		cfg := dedup.Config{Addr: *f.dedupAddr, Prefix: *f.dedupPrefix, TTL: time.Duration(*f.dedupTTL) * time.Hour}
		if err := f.dedupSec.Apply(&cfg); err != nil {
			return err
		}
		run.Dedup = &cfg
	}
	return pipeline.RunSink(ctx, run)
}

// parseAcceptLost reads --accept-lost-records: "topic/partition" or
// "topic" (every partition of it) entries.
func parseAcceptLost(entries []string) (func(topic string, partition int32) bool, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	topics := map[string]bool{}
	parts := map[string]map[int32]bool{}
	for _, e := range entries {
		i := strings.LastIndexByte(e, '/')
		if i < 0 {
			topics[e] = true
			continue
		}
		p, err := strconv.ParseInt(e[i+1:], 10, 32)
		if err != nil || p < 0 || i == 0 {
			return nil, cli.Usagef("--accept-lost-records %q: want topic/partition (a partition number) or a topic", e)
		}
		if parts[e[:i]] == nil {
			parts[e[:i]] = map[int32]bool{}
		}
		parts[e[:i]][int32(p)] = true
	}
	return func(topic string, partition int32) bool { return topics[topic] || parts[topic][partition] }, nil
}

// relayoutOpt is the Writer's option for --relayout and
// --relayout-drop-old (a no-op without --relayout).
func relayoutOpt(on, dropOld bool) clickhouse.WriterOption {
	if !on {
		return func(*clickhouse.Writer) {}
	}
	return clickhouse.WithRelayout(dropOld)
}
