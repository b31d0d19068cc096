package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/dedup"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/pipeline"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/sink"
)

func main() { testenv.BenchMain("bench sink", run) }

// options are the benchmark's settings.
type options struct {
	env        testenv.Env
	records    int
	partitions int
	combine    bool // one insert for the partitions of a flush (sink.Config.CombinePartitions)
	maxBatch   int
	parallel   int
	snapshot   bool   // row batches of snapshot rows instead of single inserts
	cpuProfile string // file prefix of a CPU profile per setting; empty: none
	firstRow   bool   // measure the first row of new tables instead of throughput
	// firstRowTables is how many new tables -first-row adds per setting.
	firstRowTables int
	timeout        time.Duration
}

func run() error {
	var o options
	flag.IntVar(&o.records, "records", 200_000, "records to produce and load")
	flag.IntVar(&o.partitions, "partitions", 6, "partitions of the topic")
	flag.IntVar(&o.maxBatch, "max-batch", 50_000, "the sink's most records in one insert")
	flag.IntVar(&o.parallel, "insert-parallelism", 1, "tables (partitions without -combine-partitions) the sink loads at the same time (sink.Config.InsertParallelism)")
	flag.BoolVar(&o.combine, "combine-partitions", false, "one insert for the partitions of a flush, as walhouse sink --combine-partitions (sink.Config.CombinePartitions)")
	flag.BoolVar(&o.snapshot, "snapshot", false, "produce an initial copy (snapshot rows, version 0, in row batches of 1,000) instead of single inserts")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write the sink's CPU profile of each setting's load to `prefix`-l2-off.pprof and prefix-l2-on.pprof")
	flag.BoolVar(&o.firstRow, "first-row", false, "measure instead how soon the first row of a new table's topic is loaded, and what the sink's metadata refresh costs while idle, for the old 10s refresh, the sink's own 1s one, and that one forced by the schema registry")
	flag.IntVar(&o.firstRowTables, "first-row-tables", 6, "with -first-row: new tables per metadata refresh setting")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	o.env = testenv.Load()
	var missing []string
	for name, v := range map[string]string{"WALHOUSE_KAFKA_BROKERS": o.env.Kafka, "WALHOUSE_CLICKHOUSE_URL": o.env.ClickHouse, "WALHOUSE_REDIS_ADDR": o.env.Redis} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s not set: run `make services` (or deploy/local/services.sh start) and source .local/env", strings.Join(missing, ", "))
	}
	if o.records < 1 || o.partitions < 1 || o.maxBatch < 1 || o.firstRowTables < 1 {
		return fmt.Errorf("-records %d, -partitions %d, -max-batch %d and -first-row-tables %d must be positive", o.records, o.partitions, o.maxBatch, o.firstRowTables)
	}
	ctx, cancel := testenv.BenchContext(o.timeout)
	defer cancel()

	b := &bench{o: o, name: testenv.Name("bench")}
	err := b.run(ctx)
	if cerr := b.cleanup(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
	}
	return err
}

// bench is one run: a topic of synthetic records, loaded once per setting.
type bench struct {
	o         options
	name      string // fresh name of the table, topic prefix and dedup keys
	topic     string
	topics    []string // every topic it created, to delete
	databases []string
	schemas   record.SchemaSet // what a registry would hold for the synthetic records
}

// staticSchemas serves the benchmark's one schema to the sink without a
// registry topic: reading the registry is a one-off cost, not a rate.
type staticSchemas struct{ *record.SchemaSet }

func (staticSchemas) Refresh(context.Context) error { return nil }

// result is one setting's measurement.
type result struct {
	layer2     bool
	elapsed    time.Duration
	rows       uint64 // rows in ClickHouse afterwards
	roundTrips int64
	cpu        cpuUse // CPU seconds of the sink and the services during the load
	inserts    timed  // the sink's calls of the loader
	dedup      timed  // its calls of the dedup store
}

// timed sums the wall time of calls.
type timed struct {
	calls atomic.Int64
	took  atomic.Int64 // nanoseconds
}

func (t *timed) since(start time.Time) {
	t.calls.Add(1)
	t.took.Add(int64(time.Since(start)))
}

func (t *timed) seconds() float64 { return time.Duration(t.took.Load()).Seconds() }

// timedLoader times a loader's calls.
type timedLoader struct {
	sink.Loader
	t *timed
}

func (l timedLoader) Load(ctx context.Context, b sink.Batch) error {
	defer l.t.since(time.Now())
	return l.Loader.Load(ctx, b)
}

// timedDedup times a dedup store's calls.
type timedDedup struct {
	sink.Deduper
	t *timed
}

func (d timedDedup) Lookup(ctx context.Context, ids []string) ([]string, error) {
	defer d.t.since(time.Now())
	return d.Deduper.Lookup(ctx, ids)
}

func (d timedDedup) Remember(ctx context.Context, ids, hashes []string) error {
	defer d.t.since(time.Now())
	return d.Deduper.Remember(ctx, ids, hashes)
}

func (b *bench) run(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(b.o.env.Kafka, ",")...),
		kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100_000),
		// Records name their partition: a row batch its own, like
		// capture's, and an insert one by its position (each row is
		// inserted once, so any spread keeps its order).
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	if b.o.firstRow {
		return b.firstRows(ctx, cl)
	}
	b.topic = b.name + ".public." + b.name
	if err := b.createTopic(ctx, cl, b.topic, b.o.partitions); err != nil {
		return err
	}
	fmt.Printf("producing %d records of one 8-column table to %s (%d partitions)...\n", b.o.records, b.topic, b.o.partitions)
	start := time.Now()
	if err := b.produce(ctx, cl); err != nil {
		return err
	}
	fmt.Printf("produced in %v\n", time.Since(start).Round(time.Millisecond))

	var results []*result
	for _, layer2 := range []bool{false, true} {
		r, err := b.load(ctx, layer2)
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	b.print(results)
	return nil
}

// createTopic creates a topic that cleanup deletes.
func (b *bench) createTopic(ctx context.Context, cl *kgo.Client, topic string, partitions int) error {
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, int32(partitions), -1, nil, topic); err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	b.topics = append(b.topics, topic)
	return nil
}

// produce writes the synthetic records: inserts of distinct rows, as
// capture would write them for a table with a tenant column.
func (b *bench) produce(ctx context.Context, cl *kgo.Client) error {
	src := record.Source{ID: b.name, Schema: "public", Table: b.name}
	b.schemas.Add(record.Schema{TenantColumn: "tenant_id", Columns: columns})
	var perr error
	onDone := func(_ *kgo.Record, err error) {
		if err != nil && perr == nil {
			perr = err
		}
	}
	// A snapshot's rows share the envelope (consistent point, times) and
	// travel in row batches of up to 1,000 rows, one open batch per
	// partition, as capture sends them.
	enc := record.NewEncoder(src, "tenant_id", columns, record.SchemaID("tenant_id", columns), 2)
	batches := make([]record.RowBatch, b.o.partitions)
	send := func(part int) {
		rows := batches[part].Rows()
		value := batches[part].Finish()
		cl.Produce(ctx, &kgo.Record{Topic: b.topic, Partition: int32(part), Value: value,
			Headers: []kgo.RecordHeader{{Key: record.HeaderRows, Value: []byte(strconv.Itoa(rows))}}}, onDone)
	}
	for i := range b.o.records {
		r := syntheticRow(src, i, b.o.snapshot)
		if b.o.snapshot {
			part := i % b.o.partitions
			if batches[part].Rows() == 0 {
				enc.StartBatch(&batches[part], nil, r)
			}
			enc.AddRow(&batches[part], r.Values)
			if batches[part].Rows() == 1000 || batches[part].Size() >= 128<<10 {
				send(part)
			}
			continue
		}
		value := record.AppendJSON(nil, r)
		if i == 0 {
			if _, err := record.Decode(value, &b.schemas); err != nil {
				return fmt.Errorf("the synthetic record is invalid: %w", err)
			}
		}
		cl.Produce(ctx, &kgo.Record{Topic: b.topic, Partition: int32(i % b.o.partitions), Key: []byte(r.PartitionKey()), Value: value}, onDone)
	}
	for part := range batches {
		if batches[part].Rows() > 0 {
			send(part)
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	return perr
}

// columns are the synthetic table's, as capture describes them.
var columns = []record.Column{
	{Name: "tenant_id", Type: "text", TypMod: -1, Key: true},
	{Name: "id", Type: "int8", TypMod: -1, Key: true},
	{Name: "amount", Type: "numeric", TypMod: (12<<16 | 2) + 4},
	{Name: "status", Type: "text", TypMod: -1},
	{Name: "qty", Type: "int4", TypMod: -1},
	{Name: "active", Type: "bool", TypMod: -1},
	{Name: "note", Type: "text", TypMod: -1},
	{Name: "created_at", Type: "timestamptz", TypMod: -1},
}

// syntheticRow returns row i of table src: an insert of a distinct row,
// or, when copied, that row as a snapshot reads it.
func syntheticRow(src record.Source, i int, copied bool) *record.Record {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	statuses := []string{"new", "paid", "shipped", "cancelled"}
	lsn := record.LSN(0x1000000 + uint64(i)*256)
	at := base.Add(time.Duration(i) * time.Millisecond)
	tenant := "acme"
	if i%3 == 0 {
		tenant = "globex"
	}
	id := strconv.Itoa(i + 1)
	r := &record.Record{
		EventID:      record.EventID(src.ID, lsn, 0, at),
		OccurredAt:   at,
		IngestedAt:   at.Add(time.Millisecond),
		TenantID:     tenant,
		TenantColumn: "tenant_id",
		Source:       src,
		LSN:          lsn,
		CommitLSN:    lsn,
		Version:      record.Version(lsn),
		Op:           record.Insert,
		Columns:      columns,
		SchemaID:     record.SchemaID("tenant_id", columns),
		Values: []record.Value{
			{Text: tenant}, {Text: id},
			{Text: fmt.Sprintf("%d.%02d", i%100_000, i%100)},
			{Text: statuses[i%len(statuses)]},
			{Text: strconv.Itoa(i % 1000)},
			{Text: strconv.FormatBool(i%2 == 0)[:1]}, // PostgreSQL writes t or f
			{Text: "synthetic row " + id + " for the sink benchmark"},
			{Text: at.Add(-time.Hour).Format("2006-01-02 15:04:05.999999-07")},
		},
	}
	if copied {
		cp := record.LSN(0x1000000)
		r.Op, r.Version, r.LSN, r.CommitLSN, r.OccurredAt, r.IngestedAt = record.Read, record.SnapshotVersion, cp, cp, base, base
		r.EventID = record.SnapshotEventID(src.ID, cp, src.Schema+"."+src.Table, []string{tenant, id}, base)
	}
	return r
}

// newSink returns a sink of st over a consumer-group client of st.Group,
// built as walhouse sink builds it (pipeline.Sink), with the sink's max wait
// (500ms) and no dead-letter topic: a record the sink cannot load stops the
// benchmark instead of being counted as loaded.
func (b *bench) newSink(ctx context.Context, st pipeline.SinkSettings, l sink.Loader) (*sink.Sink, *kgo.Client, error) {
	st.MaxWait, st.DLQ = 500*time.Millisecond, "off"
	return pipeline.Sink(ctx, b.kafkaConfig(), l, st)
}

// kafkaConfig is how the bench's in-process sinks reach Kafka.
func (b *bench) kafkaConfig() kafka.Config {
	return kafka.Config{Brokers: strings.Split(b.o.env.Kafka, ",")}
}

// load runs an in-process sink on the topic with its own group and
// database until every record is loaded, and times it.
func (b *bench) load(ctx context.Context, layer2 bool) (*result, error) {
	res := &result{layer2: layer2}
	setting := "off"
	if layer2 {
		setting = "on"
	}
	group := b.name + "_l2_" + setting
	database := b.name + "_l2_" + setting
	b.databases = append(b.databases, database)

	conn, err := clickhouse.Open(ctx, b.o.env.ClickHouse)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	w, err := clickhouse.NewWriter(ctx, conn, database, "")
	if err != nil {
		return res, err
	}
	var store *dedup.Store
	st := pipeline.SinkSettings{Group: group, Prefix: b.name, Topics: []string{b.topic}, MaxBatch: b.o.maxBatch, Parallel: b.o.parallel, CombinePartitions: b.o.combine, Schemas: staticSchemas{&b.schemas}}
	if layer2 {
		if store, err = dedup.New(dedup.Config{Addr: b.o.env.Redis, Prefix: b.name + ":", TTL: time.Hour}); err != nil {
			return res, err
		}
		defer store.Close()
		st.Dedup = timedDedup{store, &res.dedup}
	}

	snk, cl, err := b.newSink(ctx, st, timedLoader{w, &res.inserts})
	if err != nil {
		return res, err
	}
	// The sink blocks rebalances while it holds polled records; Close alone
	// would wait for that forever once Run has returned.
	defer cl.CloseAllowingRebalance()

	fmt.Printf("loading with Layer 2 %s...\n", setting)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	if b.o.cpuProfile != "" {
		f, err := os.Create(b.o.cpuProfile + "-l2-" + setting + ".pprof")
		if err != nil {
			return res, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer pprof.StopCPUProfile()
	}
	cpu0 := cpuSeconds()
	start := time.Now()
	go func() { done <- snk.Run(rctx) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for snk.Loaded() < int64(b.o.records) {
		select {
		case err := <-done:
			return res, fmt.Errorf("sink stopped after %d of %d records: %w", snk.Loaded(), b.o.records, err)
		case <-ctx.Done():
			return res, fmt.Errorf("%d of %d records loaded: %w", snk.Loaded(), b.o.records, ctx.Err())
		case <-tick.C:
		}
	}
	res.elapsed = time.Since(start)
	res.cpu = cpuSeconds().minus(cpu0)
	stop()
	<-done
	if store != nil {
		res.roundTrips = store.RoundTrips()
	}
	q := fmt.Sprintf("SELECT count() FROM `%s`.`%s`", database, b.name)
	if err := conn.QueryRow(ctx, q).Scan(&res.rows); err != nil {
		return res, fmt.Errorf("count the loaded rows: %w", err)
	}
	return res, nil
}

func (b *bench) print(rs []*result) {
	kind := "inserts, one record each"
	if b.o.snapshot {
		kind = "snapshot rows in row batches of 1,000"
	}
	fmt.Printf("\nsink: %d records (%s), 1 table of 8 columns, %d partitions, max batch %d, insert parallelism %d\n\n", b.o.records, kind, b.o.partitions, b.o.maxBatch, b.o.parallel)
	fmt.Printf("%-9s %10s %9s %10s %13s %9s %10s   %s\n", "layer 2", "rows/s", "elapsed", "rows in CH", "Redis trips/1k", "insert s", "dedup s", "CPU s: sink redis kafka clickhouse")
	rate := map[bool]float64{}
	for _, r := range rs {
		rate[r.layer2] = float64(b.o.records) / r.elapsed.Seconds()
		trips := "-"
		if r.layer2 {
			trips = fmt.Sprintf("%.3f", float64(r.roundTrips)*1000/float64(b.o.records))
		}
		setting := "off"
		if r.layer2 {
			setting = "on"
		}
		fmt.Printf("%-9s %10.0f %9s %10d %13s %9.2f %10.2f   %s\n", setting, rate[r.layer2], r.elapsed.Round(time.Millisecond), r.rows, trips, r.inserts.seconds(), r.dedup.seconds(), r.cpu)
	}
	if rate[false] > 0 {
		fmt.Printf("\nratio on/off: %.2f\n", rate[true]/rate[false])
	}
}

// cleanup removes the topic, the databases and the dedup keys.
func (b *bench) cleanup() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if len(b.topics) > 0 {
		if cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(b.o.env.Kafka, ",")...)); err != nil {
			errs = append(errs, err)
		} else {
			if _, err := kadm.NewClient(cl).DeleteTopics(ctx, b.topics...); err != nil {
				errs = append(errs, fmt.Errorf("delete topics %v: %w", b.topics, err))
			}
			cl.Close()
		}
	}
	if len(b.databases) > 0 {
		if conn, err := clickhouse.Open(ctx, b.o.env.ClickHouse); err != nil {
			errs = append(errs, err)
		} else {
			for _, db := range b.databases {
				if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS `"+db+"`"); err != nil {
					errs = append(errs, fmt.Errorf("drop database %s: %w", db, err))
				}
			}
			conn.Close()
		}
	}
	if err := testenv.DeleteKeys(ctx, b.o.env.Redis, b.name+":*"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
