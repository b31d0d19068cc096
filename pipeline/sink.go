package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/dedup"
	"github.com/walhouse/walhouse/erasure"
	"github.com/walhouse/walhouse/internal/backoff"
	"github.com/walhouse/walhouse/internal/failpoint"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/registry"
	"github.com/walhouse/walhouse/sink"
)

// SinkRun is everything `walhouse sink` runs: the sink, its erasure
// ledger, its metrics and health, and the scheduled cleanup.
type SinkRun struct {
	Kafka      kafka.Config
	ClickHouse ClickHouse
	// PartitionBy is the date/timestamp key column tables are partitioned
	// by month by (empty: none); Writer the writer's further options
	// (layouts, relayout).
	PartitionBy string
	Writer      []clickhouse.WriterOption
	// Ledger configures the erasure ledger: Keys, Refresh and MaxAge (Conn,
	// Database and Reader are set here).
	Ledger erasure.LedgerConfig
	// Dedup is Layer 2's store, its login and TLS set (nil: off).
	Dedup *dedup.Config
	// Sink are the sink's settings; RunSink sets Registry, Health,
	// Watermarks, Erasures, Dedup, Schemas and Recopies.
	Sink SinkSettings
	// RecopyOnGap asks capture to copy a table again when Kafka deleted
	// records of its topic before the sink read them.
	RecopyOnGap bool
	// Durability is the check of the pipeline's topics at start.
	Durability kafka.DurabilityMode
	HTTP       HTTP
	// CleanupEvery is how often tombstones and superseded versions of
	// partitions older than CleanupMinAge are removed (0: never).
	CleanupEvery, CleanupMinAge time.Duration
	// LogAttrs are what the start line names: the endpoints as given,
	// without their secrets.
	LogAttrs []any
}

// RunSink builds the sink of r and runs it until ctx ends or it fails.
func RunSink(ctx context.Context, r SinkRun) error {
	conn, err := r.ClickHouse.Open(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	st := r.Sink
	st.Registry = prometheus.NewRegistry()
	w, err := clickhouse.NewWriter(ctx, conn, r.ClickHouse.Database, r.PartitionBy, append(r.Writer, clickhouse.OnCluster(r.ClickHouse.Cluster), clickhouse.WithMetrics(st.Registry), clickhouse.WithFailpoints(st.Failpoints))...)
	if err != nil {
		return err
	}
	// The ledger's reads have a pool of their own: in the writer's, they
	// would queue behind the parallel inserts, and the copy would age.
	ledgerConn, err := r.ClickHouse.Open(ctx)
	if err != nil {
		return err
	}
	defer ledgerConn.Close()
	lc := r.Ledger
	lc.Conn, lc.Database = ledgerConn, r.ClickHouse.Database
	// The ledger records this sink's max age under this name, for the
	// erasures' check of their settle time.
	host, _ := os.Hostname()
	lc.Reader = fmt.Sprintf("%s@%s/%d", st.Group, host, os.Getpid())
	ledger, err := Ledger(ctx, lc)
	if err != nil {
		return err
	}
	st.Erasures = ledger
	if r.Dedup != nil {
		store, err := OpenDedup(ctx, *r.Dedup)
		if err != nil {
			return err
		}
		defer store.Close()
		st.Dedup = store
	}
	st.Watermarks, st.Health = w, NewSinkHealth()
	st.Registry.MustRegister(LedgerMetrics(ledger)...)
	schemas, closeSchemas, err := SchemaReader(ctx, r.Kafka, st.Prefix)
	if err != nil {
		return err
	}
	defer closeSchemas()
	st.Schemas = schemas
	if r.RecopyOnGap {
		recopies, closeRecopies, err := RecopyTopic(ctx, r.Kafka, st.Prefix)
		if err != nil {
			return err
		}
		defer closeRecopies()
		st.Recopies = recopies
	}
	slog.Info("sink: starting", append(r.LogAttrs, "dlq_topic", st.DLQ, "metrics_addr", r.HTTP.Addr)...)
	s, cl, err := Sink(ctx, r.Kafka, w, st)
	if err != nil {
		return err
	}
	defer cl.CloseAllowingRebalance()
	// The dead-letter topic exists now; the tables' topics are capture's.
	if err := kafka.EnforceDurability(ctx, cl, kafka.PipelineTopics(st.Prefix, st.DLQ), r.Durability, slog.Default().With("component", "sink")); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	if len(st.Topics) == 0 { // a pattern subscription: new tables' topics join it
		watch, err := WatchTopics(ctx, r.Kafka, st.Prefix, cl)
		if err != nil {
			return err
		}
		st.Registry.MustRegister(watch.Metrics()...)
		g.Go(func() error { return watch.Run(gctx) })
	}
	if r.HTTP.Addr != "" {
		ready := func(ctx context.Context) []Check {
			return append(st.Health.Checks(ctx), LedgerCheck(ledger), GapCheck(s))
		}
		g.Go(func() error { return r.HTTP.ServeMetrics(gctx, st.Registry, ready) })
	}
	g.Go(func() error { return s.Run(gctx) })
	g.Go(func() error { return ledger.Run(gctx) })
	if r.CleanupEvery > 0 {
		g.Go(func() error { return CleanupLoop(gctx, conn, r.ClickHouse.Database, r.CleanupEvery, r.CleanupMinAge) })
	}
	return g.Wait()
}

// Ledger reads the erasure ledger of cfg.Database, which the sink checks
// every record against (erasure.Ledger).
func Ledger(ctx context.Context, cfg erasure.LedgerConfig) (*erasure.Ledger, error) {
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

// LedgerMetrics are the gauges of the erasure ledger's copy: its age and
// the bound past which the sink stops loading (alert
// WalhouseErasureLedgerStale), and the entries it cannot use (alert
// WalhouseErasureLedgerUnusable).
func LedgerMetrics(l *erasure.Ledger) []prometheus.Collector {
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

// SchemaReader returns a reader of the pipeline's schema registry and the
// function that closes it. It has a client of its own: the sink's group
// client consumes only the tables' topics.
func SchemaReader(ctx context.Context, kc kafka.Config, prefix string) (*registry.Reader, func(), error) {
	cl, err := kafka.NewClient(ctx, kc)
	if err != nil {
		return nil, nil, err
	}
	return registry.NewReader(cl, kafka.SchemasTopic(prefix), slog.Default().With("component", "registry")), cl.Close, nil
}

// RecopyTopic returns the re-copy topic (--recopy-on-gap) and the function
// that closes it. It has a client of its own, as SchemaReader's: a reader
// derived from the group client would join the group.
func RecopyTopic(ctx context.Context, kc kafka.Config, prefix string) (*kafka.Recopies, func(), error) {
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

// CleanupLoop runs clickhouse.Cleanup every interval until ctx ends; a
// failed run is logged and tried again at the next.
func CleanupLoop(ctx context.Context, conn driver.Conn, database string, every, minAge time.Duration) error {
	for {
		if err := backoff.Sleep(ctx, every); err != nil {
			return err
		}
		if _, err := clickhouse.Cleanup(ctx, conn, clickhouse.CleanupRequest{Database: database, Before: time.Now().Add(-minAge)}, slog.Default()); err != nil && ctx.Err() == nil {
			slog.Warn("cleanup of deleted rows failed; trying again at the next interval", "err", err)
		}
	}
}

// SinkSettings are what a sink is built from besides its Kafka and its
// loader (Sink).
type SinkSettings struct {
	// Group is the consumer group; Prefix the topic prefix (every topic
	// <Prefix>.* is consumed); DLQ the dead-letter topic (empty:
	// <Prefix>-dlq; "off": stop on a record that can never be loaded).
	Group, Prefix, DLQ string
	// Topics, when set, are the topics consumed instead of every
	// <Prefix>.*: bench/sink's one topic, assigned at the group's first
	// join instead of after the client's first metadata read.
	Topics []string
	// MaxBatch is the most records in one insert; Parallel the partitions
	// (or, combined, the tables) loaded at once.
	MaxBatch, Parallel int
	// CombinePartitions makes one insert of the partitions of a table
	// that a flush holds (--combine-partitions; sink.Config's
	// CombinePartitions) instead of one per partition.
	CombinePartitions bool
	// MaxWait is the longest a record waits for its batch to fill;
	// Progress how often a progress line is logged (0: off).
	MaxWait, Progress time.Duration
	// FetchMinBytes is what a fetch waits for, at most MaxWait (0:
	// sink.DefaultFetchMinBytes).
	FetchMinBytes int32
	// Dedup is Layer 2's eventId check (nil: off); Mismatch what an
	// eventId reused with another payload does.
	Dedup    sink.Deduper
	Mismatch sink.MismatchMode
	// Registry receives the sink's metrics (nil: none).
	Registry *prometheus.Registry
	// Watermarks records the load watermarks (the ClickHouse writer, which
	// also gives the loaded positions and the re-copy barrier).
	Watermarks sink.Watermarker
	// Schemas resolves version 2 records' schemaIds (SchemaReader).
	Schemas sink.Schemas
	// MaxRecordBytes is capture's record bound (0: the default): the
	// client reads such records and dead-letters them.
	MaxRecordBytes int
	// Erasures is the erasure ledger (nil: none).
	Erasures *erasure.Ledger
	// Health, when set, follows the assignment and the loads for /readyz.
	Health *SinkHealth
	// Failpoints are the fault tests' crash and error points (nil: off).
	Failpoints *failpoint.Set
	// AcceptGap is --accept-lost-records (nil: none).
	AcceptGap func(topic string, partition int32) bool
	// Recopies is the re-copy topic with --recopy-on-gap (nil: off).
	Recopies sink.Recopier
	// ClientOpts are further options of the group client, after Sink's
	// own, so they override them: bench/sink's older metadata refresh
	// (nil for walhouse sink). They must not replace what the sink
	// requires (the group, its topics, manual commits, the rebalance
	// callbacks).
	ClientOpts []kgo.Opt
}

// Sink wires a sink.Sink to a consumer-group client: manual commits after
// a successful load, no revocation while a batch is in flight,
// cooperative-sticky balancing (franz-go's default), and the sink's fetch
// and metadata settings (sink.ClientOpts: batches grow on the broker, a new
// table's topic is consumed within a second), then st.ClientOpts. Every
// in-process sink (walhouse sink, the demo, bench/sink) is built here, so
// these options are listed once. The caller closes the client
// (CloseAllowingRebalance) after the sink's Run returned.
func Sink(ctx context.Context, kc kafka.Config, l sink.Loader, st SinkSettings) (*sink.Sink, *kgo.Client, error) {
	var snk *sink.Sink
	onRevoked := func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
		if snk != nil {
			snk.OnRevoked(ctx, cl, m)
		}
		st.Health.Revoke(m)
	}
	onAssigned := func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
		if snk != nil {
			snk.OnAssigned(ctx, cl, m)
		}
		st.Health.Assign(m)
	}
	if st.Health != nil {
		l = st.Health.Watch(l)
	}
	if st.MaxRecordBytes == 0 {
		st.MaxRecordBytes = record.DefaultMaxBytes
	}
	// The client also produces the dead letters: acks=all, idempotent.
	opts := append(append(kafka.RecordLimitOpts(st.MaxRecordBytes), kafka.SafeProducerOpts()...), sink.ClientOpts(st.MaxWait, st.FetchMinBytes)...)
	opts = append(opts,
		kgo.ConsumerGroup(st.Group),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(onRevoked),
		kgo.OnPartitionsLost(onRevoked),
		kgo.OnPartitionsAssigned(onAssigned),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if len(st.Topics) > 0 {
		opts = append(opts, kgo.ConsumeTopics(st.Topics...))
	} else {
		opts = append(opts, kgo.ConsumeRegex(), kgo.ConsumeTopics("^"+regexp.QuoteMeta(st.Prefix)+`\..+`))
	}
	cl, err := kafka.NewClient(ctx, kc, append(opts, st.ClientOpts...)...)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := sinkConfig(ctx, cl, st)
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	snk, err = sink.New(kafka.Consumer(cl), kadm.NewClient(cl), l, cfg)
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return snk, cl, nil
}

// sinkConfig is the sink.Config of st over the group client cl; it
// creates the dead-letter topic.
func sinkConfig(ctx context.Context, cl *kgo.Client, st SinkSettings) (sink.Config, error) {
	cfg := sink.Config{Group: st.Group, TopicPrefix: st.Prefix, ProgressInterval: cmp.Or(st.Progress, -1), MaxBatchRecords: st.MaxBatch, InsertParallelism: st.Parallel, CombinePartitions: st.CombinePartitions, Dedup: st.Dedup, Mismatch: st.Mismatch, Watermarks: st.Watermarks, Schemas: st.Schemas, Failpoints: st.Failpoints, AcceptGap: st.AcceptGap}
	if st.Erasures != nil {
		cfg.Erasures = st.Erasures
	}
	if p, ok := st.Watermarks.(sink.Positions); ok { // the ClickHouse writer: bounds start where loading stopped
		cfg.Positions = p
		if st.Health != nil {
			cfg.Positions = st.Health.WatchPositions(p)
		}
	}
	if st.Registry != nil {
		cfg.Metrics = sink.NewMetrics(st.Registry)
	}
	if st.DLQ != "off" {
		if err := kafka.CheckProducer(cl); err != nil {
			return cfg, err
		}
		topic := st.DLQ
		if topic == "" {
			topic = kafka.DeadLetterTopic(st.Prefix)
		}
		if err := kafka.Topics(cl, st.MaxRecordBytes).CreateTopic(ctx, topic, 1, -1); err != nil {
			return cfg, fmt.Errorf("dead-letter topic: %w", err)
		}
		cfg.DeadLetters = kafka.DeadLetters(cl, topic)
	}
	cfg.Admin = kadm.NewClient(cl)
	if st.Recopies != nil {
		cfg.Recopies = st.Recopies
	}
	// Also without --recopy-on-gap: capture ends the copy after a DDL
	// rewrite with done markers too, and the sweep they lead to removes
	// rows the rewrite moved from their old ClickHouse positions.
	if b, ok := st.Watermarks.(sink.RecopyBarrier); ok { // the ClickHouse writer
		cfg.RecopyBarrier = b
	}
	return cfg, nil
}
