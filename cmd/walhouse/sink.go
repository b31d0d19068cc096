package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/dedup"
	"github.com/walhouse/walhouse/erasure"
	"github.com/walhouse/walhouse/internal/failpoint"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/registry"
	"github.com/walhouse/walhouse/sink"
)

func runSink(ctx context.Context, inv *invocation) error {
	fs, ep := newFlagSet("sink", usesKafka|usesClickHouse|usesCluster)
	var (
		group       = fs.String("group", "walhouse-sink", "Kafka consumer group")
		prefix      = fs.String("topic-prefix", "walhouse", "consume every topic <prefix>.*")
		dlq         = fs.String("dlq-topic", "", "dead-letter topic for records that can never be loaded (default <prefix>-dlq; \"off\" stops the sink on such a record instead)")
		maxBatch    = fs.Int("max-batch", 50_000, "most records in one insert (one more where a row moved by its layout would be split from its delete)")
		maxWait     = fs.Duration("max-wait", 500*time.Millisecond, "longest a record waits for its batch to fill")
		parallel    = fs.Int("insert-parallelism", 2, "partitions loaded at the same time, each its own inserts in order: one partition's decoding and Layer 2 overlap another's insert (a ClickHouse server: up to the topics' partitions, which it inserts in parallel; the embedded engine runs one statement at a time)")
		partitionBy = fs.String("partition-by", "", "date/timestamp key column to partition tables by month (optional)")
		dedupAddr   = fs.String("dedup-addr", "", "Valkey/Redis host:port or redis:// (rediss:// for TLS) URL for Layer 2 eventId dedup; empty or \"off\" disables it")
		dedupPrefix = fs.String("dedup-prefix", "walhouse:dedup:", "key prefix in the dedup store")
		dedupTTL    = fs.Int("dedup-ttl-hours", 24, "hours an eventId is remembered")
		mismatch    = fs.String("mismatch-mode", "error", "eventId reused with another payload: error (dead-letter it) or warn (load it)")
		maxRecord   = maxRecordBytesFlag(fs)
		durability  = topicDurabilityFlag(fs)
		metricsAddr = fs.String("metrics-addr", "", "serve Prometheus /metrics on this address (e.g. 127.0.0.1:9464); empty: off")
		progress    = fs.Duration("progress-interval", 30*time.Second, "how often a progress line is logged: records and rate, batches, dead letters, consumer lag, stopped tables (0: off)")
		cleanEvery  = fs.Duration("cleanup-interval", 0, "how often the sink removes tombstones and superseded versions (walhouse cleanup); 0: never (the default: see docs/operations.md, Deleted rows)")
		cleanAge    = fs.Duration("cleanup-min-age", defaultCleanupMinAge, "with --cleanup-interval: clean only partitions whose newest tombstone is older than this; must exceed the topics' retention.ms")
		eraseEvery  = fs.Duration("erasure-refresh", erasure.DefaultRefresh, "how often the erasure ledger is read again (walhouse erase --settle waits for it)")
		recopyOnGap = fs.Bool("recopy-on-gap", false, "when Kafka deleted records of a table's topic before the sink read them, ask capture to copy the table again online (through the <prefix>-recopy topic) and load on after the gap, instead of stopping there; the table's lastSyncAt stays before the gap until the copy is loaded (docs/operations.md#records-lost)")
		relayout    = fs.Bool("relayout", false, "rebuild a table whose sorting key or partitions are not its layout's (--layout, or the default) when the sink first loads it: built beside the old one from the rows ClickHouse has, then swapped atomically; loading into it waits meanwhile (docs/shaping-tables.md#changing-a-layout)")
		dropOld     = fs.Bool("relayout-drop-old", false, "with --relayout: drop the old table once the new one is in place, instead of keeping it as _walhouse_old_<table>")
		eraseMaxAge = fs.Duration("erasure-max-age", 0, "longest the sink loads with a copy of the erasure ledger it could not read again: past it loading waits, committing nothing, until the ledger is read (default 2× --erasure-refresh; walhouse erase --settle must exceed it)")
	)
	var acceptLost listFlag
	fs.Var(&acceptLost, "accept-lost-records", "topic/partition (or topic: all its partitions) whose records Kafka deleted before the sink read them, to load on after the gap once its table was copied again (docs/operations.md#records-lost); for one start")
	erasureKey := registerErasureKey(fs)
	layouts := registerLayout(fs)
	var dedupSec dedupSecurity
	dedupSec.register(fs)
	if err := inv.parse(fs); err != nil {
		return err
	}
	if *dropOld && !*relayout {
		return usageErrorf("--relayout-drop-old: only with --relayout")
	}
	if *cleanEvery < 0 || *cleanAge <= 0 {
		return usageErrorf("--cleanup-interval %v, --cleanup-min-age %v: want a positive interval (or 0: off) and a positive age", *cleanEvery, *cleanAge)
	}
	mode, err := sink.ParseMismatchMode(*mismatch)
	if err != nil {
		return &usageError{fmt.Errorf("--mismatch-mode: %w", err)}
	}
	if err := record.ValidateMaxBytes(*maxRecord); err != nil {
		return usageErrorf("--max-record-bytes: %w", err)
	}
	durabilityMode, err := kafka.ParseDurabilityMode(*durability)
	if err != nil {
		return usageErrorf("--topic-durability %w", err)
	}
	if *dedupTTL < 1 {
		return usageErrorf("--dedup-ttl-hours %d: an eventId must be remembered for at least 1 hour", *dedupTTL)
	}
	// What needs no connection is checked before the first one.
	accept, err := parseAcceptLost(acceptLost)
	if err != nil {
		return &usageError{err}
	}
	fps, err := failpoint.Parse(os.Getenv(failpointsEnv))
	if err != nil {
		return usageErrorf("%s: %w", failpointsEnv, err)
	}
	kc, err := ep.kafkaConfig()
	if err != nil {
		return err
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// A batch with records at the bound holds each several times (the
		// fetched record, its decoded values, ClickHouse's block and its
		// compressed body); a soft limit collects between them instead of
		// letting garbage double the heap.
		debug.SetMemoryLimit(256<<20 + 4*int64(*maxRecord))
	}
	conn, err := ep.openClickHouse(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	registry := prometheus.NewRegistry()
	w, err := clickhouse.NewWriter(ctx, conn, ep.database, *partitionBy, clickhouse.OnCluster(ep.cluster), clickhouse.WithLayouts(layouts), clickhouse.WithMetrics(registry), relayoutOpt(*relayout, *dropOld))
	if err != nil {
		return err
	}
	// The ledger's reads have a pool of their own: in the writer's, they
	// would queue behind the parallel inserts, and the copy would age.
	ledgerConn, err := ep.openClickHouse(ctx)
	if err != nil {
		return err
	}
	defer ledgerConn.Close()
	// The ledger records this sink's max age under this name, for the
	// erasures' check of their settle time.
	host, _ := os.Hostname()
	reader := fmt.Sprintf("%s@%s/%d", *group, host, os.Getpid())
	ledger, err := openLedger(ctx, erasureKey, erasure.LedgerConfig{Conn: ledgerConn, Database: ep.database, Refresh: *eraseEvery, MaxAge: *eraseMaxAge, Reader: reader})
	if err != nil {
		return err
	}
	st := sinkSettings{acceptGap: accept, erasures: ledger, group: *group, prefix: *prefix, dlq: *dlq, maxBatch: *maxBatch, parallel: *parallel, maxWait: *maxWait, mismatch: mode, registry: registry, maxRecordBytes: *maxRecord, progress: *progress}
	if *dedupAddr != "" && *dedupAddr != "off" {
		store, err := openDedup(ctx, dedup.Config{Addr: *dedupAddr, Prefix: *dedupPrefix, TTL: time.Duration(*dedupTTL) * time.Hour}, &dedupSec)
		if err != nil {
			return err
		}
		defer store.Close()
		st.dedup = store
	}
	st.watermarks = w
	st.failpoints = fps
	st.health = newSinkHealth()
	st.registry.MustRegister(ledgerMetrics(ledger)...)
	schemas, closeSchemas, err := schemaReader(ctx, kc, *prefix)
	if err != nil {
		return err
	}
	defer closeSchemas()
	st.schemas = schemas
	if *recopyOnGap {
		recopies, closeRecopies, err := recopyTopic(ctx, kc, *prefix)
		if err != nil {
			return err
		}
		defer closeRecopies()
		st.recopies = recopies
	}
	// What it connects to, for an operator following the log; the logger
	// redacts passwords in the URLs.
	slog.Info("sink: starting", "kafka", ep.kafka, "kafka_tls", ep.kafkaSec.tls.enabled(), "kafka_sasl", ep.kafkaSec.mechanism, "clickhouse", ep.clickhouse, "database", ep.database, "cluster", ep.cluster,
		"group", *group, "topic_prefix", *prefix, "dedup", *dedupAddr, "dlq_topic", st.dlq, "metrics_addr", *metricsAddr)
	s, cl, err := newSink(ctx, kc, w, st)
	if err != nil {
		return err
	}
	defer cl.CloseAllowingRebalance()
	// The dead-letter topic exists now; the tables' topics are capture's.
	if err := kafka.EnforceDurability(ctx, cl, kafka.PipelineTopics(*prefix, *dlq), durabilityMode, slog.Default().With("component", "sink")); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	if *metricsAddr != "" {
		ready := func(ctx context.Context) []check {
			return append(st.health.checks(ctx), ledgerCheck(ledger), gapCheck(s))
		}
		g.Go(func() error { return serveMetrics(gctx, *metricsAddr, st.registry, ready) })
	}
	g.Go(func() error { return s.Run(gctx) })
	g.Go(func() error { return ledger.Run(gctx) })
	if *cleanEvery > 0 {
		g.Go(func() error { return cleanupLoop(gctx, conn, ep.database, *cleanEvery, *cleanAge) })
	}
	return g.Wait()
}

// openLedger reads the erasure ledger of cfg.Database, which the sink
// checks every record against (erasure.Ledger), with the key of keySrc.
func openLedger(ctx context.Context, keySrc *secretSource, cfg erasure.LedgerConfig) (*erasure.Ledger, error) {
	keys, err := erasureKeys(keySrc)
	if err != nil {
		return nil, err
	}
	cfg.Keys = keys
	refresh, maxAge := cfg.Refresh, cfg.MaxAge
	if refresh <= 0 {
		return nil, fmt.Errorf("--erasure-refresh %v: want a positive duration, e.g. 5s", refresh)
	}
	if maxAge < 0 || maxAge > 0 && maxAge <= refresh {
		return nil, fmt.Errorf("--erasure-max-age %v: want a duration above --erasure-refresh %v (a copy is one refresh old before the next read), or 0 for twice it", maxAge, refresh)
	}
	l, err := erasure.NewLedger(cfg)
	if err != nil {
		return nil, err
	}
	return l, l.Load(ctx)
}

// ledgerMetrics are the gauges of the erasure ledger's copy: its age and
// the bound past which the sink stops loading (alert
// WalhouseErasureLedgerStale), and the entries it cannot use (alert
// WalhouseErasureLedgerUnusable).
func ledgerMetrics(l *erasure.Ledger) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walhouse_sink_erasure_ledger_age_seconds",
			Help: "Since the last read of the erasure ledger that worked began; past walhouse_sink_erasure_ledger_max_age_seconds the sink loads nothing."},
			func() float64 { return l.Age().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walhouse_sink_erasure_ledger_max_age_seconds",
			Help: "The sink's --erasure-max-age: the oldest copy of the erasure ledger it loads with."},
			func() float64 { return l.MaxAge().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walhouse_sink_erasure_ledger_unusable_entries",
			Help: "Entries of the erasure ledger made under an erasure key the sink does not hold (or it holds none): the sink loads on, and does not recognise their subjects."},
			func() float64 { return float64(l.Unusable()) }),
	}
}

// schemaReader returns a reader of the pipeline's schema registry and the
// function that closes it. It has a client of its own: the sink's group
// client consumes only the tables' topics.
func schemaReader(ctx context.Context, kc kafka.Config, prefix string) (*registry.Reader, func(), error) {
	cl, err := kafka.NewClient(ctx, kc)
	if err != nil {
		return nil, nil, err
	}
	return registry.NewReader(cl, kafka.SchemasTopic(prefix), slog.Default().With("component", "registry")), cl.Close, nil
}

// recopyTopic returns the re-copy topic (--recopy-on-gap) and the function
// that closes it. It has a client of its own, as schemaReader's: a reader
// derived from the group client would join the group.
func recopyTopic(ctx context.Context, kc kafka.Config, prefix string) (*kafka.Recopies, func(), error) {
	cl, err := kafka.NewClient(ctx, kc)
	if err != nil {
		return nil, nil, err
	}
	r, err := kafka.NewRecopies(ctx, cl, prefix, -1, slog.Default().With("component", "sink"))
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return r, func() { r.Close(); cl.Close() }, nil
}

// serveMetrics serves reg at /metrics, and /healthz and /readyz with ready
// (health.go), until ctx ends.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, ready readiness) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	handleHealth(mux, ready)
	return serveHTTP(ctx, addr, mux, "metrics")
}

// serveHTTP serves h on addr (a --metrics-addr) until ctx ends, and then
// returns ctx's error; what names what is served, for the error when the
// server cannot start.
func serveHTTP(ctx context.Context, addr string, h http.Handler, what string) error {
	srv := &http.Server{Addr: addr, Handler: withPprof(h, os.Getenv(pprofEnv) == "1"), ReadHeaderTimeout: 5 * time.Second}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	if err := srv.ListenAndServe(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("serve %s on %s: %w; pass another --metrics-addr", what, addr, err)
	}
	return ctx.Err()
}

type sinkSettings struct {
	group, prefix, dlq string
	maxBatch           int
	parallel           int // partitions loaded at once
	maxWait            time.Duration
	progress           time.Duration // 0: off
	dedup              sink.Deduper
	mismatch           sink.MismatchMode
	registry           *prometheus.Registry
	watermarks         sink.Watermarker
	schemas            sink.Schemas
	// maxRecordBytes is capture's record bound (0: the default): the
	// client reads such records and dead-letters them.
	maxRecordBytes int
	// erasures is the erasure ledger (nil: none).
	erasures *erasure.Ledger
	// health, when set, follows the assignment and the loads for /readyz.
	health *sinkHealth
	// failpoints are the fault tests' crash and error points (nil: off).
	failpoints *failpoint.Set
	// acceptGap is --accept-lost-records (nil: none).
	acceptGap func(topic string, partition int32) bool
	// recopies is the re-copy topic with --recopy-on-gap (nil: off).
	recopies sink.Recopier
}

// newSink wires a Sink to a consumer-group client: manual commits after a
// successful load, no revocation while a batch is in flight,
// cooperative-sticky balancing (franz-go's default), and the sink's fetch
// and metadata settings (sink.ClientOpts: batches grow on the broker, a new
// table's topic is consumed within a second).
func newSink(ctx context.Context, kc kafka.Config, l sink.Loader, st sinkSettings) (*sink.Sink, *kgo.Client, error) {
	var snk *sink.Sink
	onRevoked := func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
		if snk != nil {
			snk.OnRevoked(ctx, cl, m)
		}
		st.health.revoke(m)
	}
	onAssigned := func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
		if snk != nil {
			snk.OnAssigned(ctx, cl, m)
		}
		st.health.assign(m)
	}
	if st.health != nil {
		l = st.health.watch(l)
	}
	if st.maxRecordBytes == 0 {
		st.maxRecordBytes = record.DefaultMaxBytes
	}
	// The client also produces the dead letters: acks=all, idempotent.
	opts := append(append(kafka.RecordLimitOpts(st.maxRecordBytes), kafka.SafeProducerOpts()...), sink.ClientOpts(st.maxWait)...)
	cl, err := kafka.NewClient(ctx, kc, append(opts,
		kgo.ConsumerGroup(st.group),
		kgo.ConsumeRegex(),
		kgo.ConsumeTopics("^"+regexp.QuoteMeta(st.prefix)+`\..+`),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(onRevoked),
		kgo.OnPartitionsLost(onRevoked),
		kgo.OnPartitionsAssigned(onAssigned),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		return nil, nil, err
	}
	cfg := sink.Config{Group: st.group, TopicPrefix: st.prefix, ProgressInterval: cmp.Or(st.progress, -1), MaxBatchRecords: st.maxBatch, InsertParallelism: st.parallel, Dedup: st.dedup, Mismatch: st.mismatch, Watermarks: st.watermarks, Schemas: st.schemas, Failpoints: st.failpoints, AcceptGap: st.acceptGap}
	if st.erasures != nil {
		cfg.Erasures = st.erasures
	}
	if p, ok := st.watermarks.(sink.Positions); ok { // the ClickHouse writer: bounds start where loading stopped
		cfg.Positions = p
		if st.health != nil {
			cfg.Positions = st.health.watchPositions(p)
		}
	}
	if st.registry != nil {
		cfg.Metrics = sink.NewMetrics(st.registry)
	}
	if st.dlq != "off" {
		if err := kafka.CheckProducer(cl); err != nil {
			cl.Close()
			return nil, nil, err
		}
		topic := st.dlq
		if topic == "" {
			topic = kafka.DeadLetterTopic(st.prefix)
		}
		if err := kafka.Topics(cl, st.maxRecordBytes).CreateTopic(ctx, topic, 1, -1); err != nil {
			cl.Close()
			return nil, nil, fmt.Errorf("dead-letter topic: %w", err)
		}
		cfg.DeadLetters = kafka.DeadLetters(cl, topic)
	}
	cfg.Admin = kadm.NewClient(cl)
	if st.recopies != nil {
		cfg.Recopies = st.recopies
		if b, ok := st.watermarks.(sink.RecopyBarrier); ok { // the ClickHouse writer
			cfg.RecopyBarrier = b
		}
	}
	snk, err = sink.New(kafka.Consumer(cl), kadm.NewClient(cl), l, cfg)
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return snk, cl, nil
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
			return nil, usageErrorf("--accept-lost-records %q: want topic/partition (a partition number) or a topic", e)
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
