package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/walhouse/walhouse/internal/failpoint"
	"github.com/walhouse/walhouse/internal/redact"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

var _ sink.Loader = (*Writer)(nil)

// Open connects to ClickHouse. dsn is a clickhouse-go DSN:
// "clickhouse://user:pass@host:9000/db" speaks the native protocol (use it
// for ClickHouse servers), "http://host:8123/db" speaks HTTP (the embedded
// engine of `walhouse chdb`, or servers behind an HTTP proxy). The database
// in the DSN is ignored for tables: Writer creates its tables in database.
func Open(ctx context.Context, dsn string) (driver.Conn, error) {
	conn, err := open(ctx, dsn, nil)
	// The driver's errors may quote the DSN: never print its password.
	return conn, redact.Error(err)
}

func open(ctx context.Context, dsn string, settings ch.Settings) (driver.Conn, error) {
	opts, err := ch.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse ClickHouse DSN %q: %w (want clickhouse://host:9000 or http://host:8123)", redact.String(dsn), err)
	}
	if opts.DialTimeout == 0 || opts.DialTimeout == 30*time.Second {
		opts.DialTimeout = 10 * time.Second
	}
	if len(settings) > 0 && opts.Settings == nil {
		opts.Settings = ch.Settings{}
	}
	for k, v := range settings {
		opts.Settings[k] = v // over the DSN's: they are what correctness needs
	}
	conn, err := ch.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open ClickHouse at %s: %w", redact.String(dsn), err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("reach ClickHouse at %s: %w; check that it is running (make services starts a local one)", redact.String(dsn), err)
	}
	return conn, nil
}

// OpenCluster connects, as Open does, to a host of the ClickHouse cluster
// name, for a Writer (OnCluster) or the query API on that cluster. It
// checks that the host knows the cluster (remote_servers) and defines the
// shard and replica macros the replicated tables' Keeper paths use, and
// gives every query of the session ClusterSettings.
func OpenCluster(ctx context.Context, dsn, name string) (driver.Conn, error) {
	conn, err := open(ctx, dsn, ClusterSettings())
	if err != nil {
		return nil, redact.Error(err)
	}
	if err := checkCluster(ctx, conn, name); err != nil {
		conn.Close()
		return nil, redact.Error(fmt.Errorf("ClickHouse at %s: %w", redact.String(dsn), err))
	}
	return conn, nil
}

// ClusterSettings are the settings of every session walhouse has with a
// cluster. Each keeps exactly-once effects or true reads whatever the
// users' profiles say:
//   - insert_distributed_sync: an INSERT into a Distributed table returns
//     only once every shard's part of it is written (a background insert
//     would return before, and the sink would commit Kafka offsets of rows
//     that sit in a queue on one host's disk). Each shard receives the
//     rows of its tenants as one block, with the insert's settings, its
//     deduplication token among them: a repeated batch splits the same way
//     and every shard drops its part as a duplicate (docs/clickhouse-cluster.md
//     argues this against inserting into the local tables);
//   - insert_deduplicate: the replicated tables deduplicate by that token;
//   - load_balancing in_order with prefer_localhost_replica off: every
//     session writes to and reads from the first healthy replica of each
//     shard in remote_servers order, so the sink reads back (unchanged TOAST
//     values, TRUNCATE tombstones) what it wrote, and serve what lastSyncAt
//     promises, without waiting for replication;
//   - optimize_skip_unused_shards: a read with WHERE tenant = x asks the
//     tenant's shard alone;
//   - skip_unavailable_shards off: a shard that cannot answer fails the
//     query rather than leaving its rows out;
//   - alter_sync 2: an ALTER returns once every replica applied it, so no
//     read through the Distributed table meets a replica without a column
//     it names.
//
// distributed_product_mode keeps its default, deny: walhouse builds no
// subquery over a Distributed table, and one would fail rather than read
// from one shard.
func ClusterSettings() ch.Settings {
	return ch.Settings{
		"insert_distributed_sync":     1,
		"insert_deduplicate":          1,
		"load_balancing":              "in_order",
		"prefer_localhost_replica":    0,
		"optimize_skip_unused_shards": 1,
		"skip_unavailable_shards":     0,
		"alter_sync":                  2,
	}
}

// checkCluster returns an error, with what to configure, when the host
// does not know cluster name or lacks the shard or replica macro.
func checkCluster(ctx context.Context, conn driver.Conn, name string) error {
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"cluster": schema.EscapeParam(name)}))
	var hosts uint64
	var macros []string
	row := conn.QueryRow(qctx, "SELECT (SELECT count() FROM system.clusters WHERE cluster = {cluster:String}), (SELECT groupArray(macro) FROM system.macros)")
	if err := row.Scan(&hosts, &macros); err != nil {
		return fmt.Errorf("read system.clusters and system.macros: %w", err)
	}
	var problems []error
	if hosts == 0 {
		problems = append(problems, fmt.Errorf("no cluster %q in its remote_servers: define it there (see docs/clickhouse-cluster.md) or give the cluster's name to --cluster", name))
	}
	for _, m := range []string{"shard", "replica"} {
		if !slices.Contains(macros, m) {
			problems = append(problems, fmt.Errorf("no macro %q in its <macros>: every host of the cluster needs <shard> and <replica> (see docs/clickhouse-cluster.md)", m))
		}
	}
	return errors.Join(problems...)
}

// Writer loads batches into ClickHouse. It is safe for concurrent use.
type Writer struct {
	conn      driver.Conn
	database  string
	placement schema.Placement
	layouts   map[string]schema.Layout
	opts      schema.Options
	log       *slog.Logger
	// clamped counts values stored as their type's bound (on_overflow
	// clamp), by source table and column; nil without WithMetrics.
	clamped *prometheus.CounterVec
	// missingToast counts unchanged TOAST values stored as NULL because
	// ClickHouse had no row to read them back from (fill).
	missingToast *prometheus.CounterVec

	mu          sync.Mutex
	ddl         sync.Mutex         // one table creation or evolution at a time (the sink loads partitions in parallel)
	tables      map[string]*target // by schema id + table name
	syncParts   map[string]int32   // partition counts in schema.SyncTable by table; nil until it is ready
	recopyReady bool               // RecopyTable was created (recopy.go)

	relayoutOn, relayoutDropOld bool  // WithRelayout
	maxReadBack                 int64 // WithMaxReadBackBytes
	failpoints                  *failpoint.Set
}

// WriterOption configures a Writer.
type WriterOption func(*Writer)

// OnCluster makes the Writer keep its tables on the ClickHouse cluster
// name (a cluster of the servers' remote_servers): replicated local tables
// and a Distributed table over them, sharded by tenant, all created and
// altered ON CLUSTER (see schema.Placement). conn must come from
// OpenCluster. An empty name keeps the tables on the one server.
func OnCluster(name string) WriterOption {
	return func(w *Writer) { w.placement.Cluster = name }
}

// WithLayouts gives some tables the shape their users chose, by source
// table "schema.table" (schema.Layout); the others keep the default shape.
// A table ClickHouse already has keeps the shape it was created with.
func WithLayouts(layouts map[string]schema.Layout) WriterOption {
	return func(w *Writer) { w.layouts = layouts }
}

// WithMetrics registers the Writer's metrics with reg:
// walhouse_sink_values_clamped_total, the values a layout's on_overflow
// clamp stored as their type's bound, by table and column, and
// walhouse_sink_unchanged_values_missing_total, the unchanged TOAST values
// stored as NULL for want of a row to read them back from, by table (a
// batch inserted again after a failure counts again). Without it, nothing
// is counted.
func WithMetrics(reg prometheus.Registerer) WriterOption {
	return func(w *Writer) {
		w.clamped = promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "walhouse_sink_values_clamped_total",
			Help: "Values beyond the range of a Decimal(P, S) override with on_overflow clamp, stored as the type's bound instead (docs/shaping-tables.md), by source table and column.",
		}, []string{"table", "column"})
		w.missingToast = promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "walhouse_sink_unchanged_values_missing_total",
			Help: "Unchanged TOAST values of updated rows that ClickHouse had no row to read back from, stored as NULL (see the sink's warning and docs/limits.md), by source table.",
		}, []string{"table"})
	}
}

// WithMaxReadBackBytes bounds the stored values one insert reads back
// from ClickHouse for its records' unchanged TOAST values (an UPDATE that
// leaves a large value alone carries none): an insert whose values pass
// it is cut into pieces that each read at most n bytes (one row at least).
// The default, DefaultMaxReadBackBytes, keeps a sink's memory within a
// few times that per table loading at once; n <= 0 keeps the default.
func WithMaxReadBackBytes(n int64) WriterOption {
	return func(w *Writer) {
		if n > 0 {
			w.maxReadBack = n
		}
	}
}

// NewWriter returns a Writer that creates its tables in database (created if
// missing). Tables are partitioned by month of partitionBy when it is set
// and names a key column of a date or timestamp type. It refuses a server
// older than the inserts need (ClickHouse 23.3; docs/limits.md), or than
// a layout's JSON override needs, naming the version found and the one to
// upgrade to.
func NewWriter(ctx context.Context, conn driver.Conn, database, partitionBy string, opts ...WriterOption) (*Writer, error) {
	if database == "" {
		return nil, errors.New("clickhouse: database name is empty")
	}
	w := &Writer{
		conn:      conn,
		database:  database,
		placement: schema.Placement{Database: database},
		log:       slog.Default().With("component", "clickhouse"),
		tables:    map[string]*target{},
		// The default unless WithMaxReadBackBytes says otherwise.
		maxReadBack: DefaultMaxReadBackBytes,
	}
	for _, o := range opts {
		o(w)
	}
	w.opts = schema.Options{Database: database, Cluster: w.placement.Cluster, PartitionBy: partitionBy, Layouts: w.layouts}
	// First, before anything is created: a server the inserts cannot load
	// into would otherwise refuse every insert, one at a time.
	if err := checkServerVersion(ctx, conn, w.layouts); err != nil {
		return nil, err
	}
	for _, stmt := range w.placement.CreateDatabases() {
		if err := conn.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("create ClickHouse database (%s): %w", stmt, err)
		}
	}
	if err := w.checkPlacement(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// checkPlacement refuses a database whose tables were made for the other
// placement: a sink with --cluster would otherwise insert into the plain
// tables a sink on one server left (on one host only), and a sink without
// it into Distributed tables with background inserts.
func (w *Writer) checkPlacement(ctx context.Context) error {
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"db": schema.EscapeParam(w.database)}))
	rows, err := w.conn.Query(qctx, "SELECT engine = 'Distributed', groupArray(5)(name) FROM system.tables WHERE database = {db:String} AND (engine = 'Distributed' OR engine LIKE '%MergeTree') GROUP BY 1")
	if err != nil {
		return fmt.Errorf("read the tables of %s: %w", w.database, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			distributed bool
			names       []string
		)
		if err := rows.Scan(&distributed, &names); err != nil {
			return fmt.Errorf("read the tables of %s: %w", w.database, err)
		}
		switch {
		case w.placement.OnCluster() && !distributed:
			return fmt.Errorf("database %s holds MergeTree tables, not Distributed tables (%s): a sink without --cluster made them; give the cluster another --database, or move them (docs/clickhouse-cluster.md)", w.database, strings.Join(names, ", "))
		case !w.placement.OnCluster() && distributed:
			return fmt.Errorf("database %s holds Distributed tables (%s): a sink with --cluster made them; give this sink the same --cluster", w.database, strings.Join(names, ", "))
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the tables of %s: %w", w.database, err)
	}
	return nil
}

// Load inserts b as the sink cut and named its inserts (sink.Batch.Inserts:
// runs of equal source schema, named so that a retry names each as
// before), one after another under their tokens. Each run's table is
// created or altered before its rows are inserted, so a column added in
// PostgreSQL is present before the first row that has it. Errors name
// records and runs by their positions in b.Records.
func (w *Writer) Load(ctx context.Context, b sink.Batch) error {
	for _, in := range b.Inserts() {
		if len(in.Records) == 0 {
			continue // every record of the run was left out
		}
		if err := w.loadRun(ctx, in); err != nil {
			var te *sink.TableError
			if errors.As(err, &te) {
				te.Index = in.Start // the runs before it were inserted
			}
			var re *sink.RecordError
			if errors.As(err, &re) {
				re.Index = in.Position(re.Index)
				for i := range re.More {
					re.More[i].Index = in.Position(re.More[i].Index)
				}
			}
			return err
		}
	}
	return nil
}

// loadRun inserts the records of in under its token.
func (w *Writer) loadRun(ctx context.Context, in sink.Insert) error {
	tg, err := w.table(ctx, in.Records[0])
	if err != nil {
		return err
	}
	if err := w.insert(ctx, tg, in); err != nil {
		// The table may have been evolved by a newer shape meanwhile: read
		// its columns again before the retry.
		w.forget(in.Records[0].Source)
		return err
	}
	return nil
}

// insert inserts the records of in into tg's table under its token: as one
// insert, or, when their unchanged TOAST values read back more than the
// writer's bound, as pieces named token@first (the position in the batch
// of the piece's first record, which a record left out does not move),
// which a retry cuts and names the same way (see toast.go). A record that
// cannot be stored is named by its index in in.Records.
func (w *Writer) insert(ctx context.Context, tg *target, in sink.Insert) error {
	recs, token := in.Records, in.Token
	u, err := w.planUnchanged(ctx, tg, recs)
	if err != nil {
		return err
	}
	pieces := u.pieces(len(recs), w.maxReadBack)
	if len(pieces) > 1 {
		w.log.Debug("insert cut into pieces by the stored values it reads back", "table", tg.table.QualifiedName(), "token", token, "pieces", len(pieces))
	}
	for _, p := range pieces {
		fills, err := w.fill(ctx, tg, u, recs, p)
		if err != nil {
			return err
		}
		name := token
		if len(pieces) > 1 {
			name = fmt.Sprintf("%s@%d", token, in.Position(p.lo))
		}
		err = w.send(ctx, tg, recs[p.lo:p.hi], fills, name)
		u.release()
		var re *sink.RecordError
		if errors.As(err, &re) {
			re.Index += p.lo
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// send appends recs to one insert into tg's table, column by column (see
// buildColumns), and sends it. A record that cannot be stored is named by
// its index in recs.
func (w *Writer) send(ctx context.Context, tg *target, recs []*record.Record, fills filled, token string) error {
	batch, err := w.prepare(ctx, tg, token)
	if err != nil {
		return err
	}
	defer batch.Abort()
	built, first := buildColumns(tg, recs, fills)
	dst := make([]appender, len(built))
	for p := range built {
		dst[p] = batch.Column(p)
	}
	if f := tg.appendColumns(dst, built, recs, first); f != nil {
		return &sink.RecordError{Index: f.index, Err: f.err}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("insert %d rows into %s: %w", len(recs), tg.table.QualifiedName(), err)
	}
	for _, c := range built {
		if c.clamped > 0 && w.clamped != nil {
			w.clamped.WithLabelValues(tg.table.Source.Schema+"."+tg.table.Source.Table, c.name).Add(float64(c.clamped))
		}
	}
	return nil
}

// prepare starts an insert into tg's table of its insert columns, with
// deduplication token token.
//
// The server's conversion of Native input is off: the block's types are
// the columns' as describeInsert read them, so it converts nothing unless
// the table changed since (another sink widened a column, a relayout
// changed a type and swapped the tables). Then the insert fails with a
// type mismatch, and its retry reads the columns again (loadRun), rather
// than the server converting values by its own rules, which are not
// walhouse's (a Decimal's text loses PostgreSQL's trailing zeros).
func (w *Writer) prepare(ctx context.Context, tg *target, token string) (driver.Batch, error) {
	t := tg.table
	cols := tg.insertColumns()
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = schema.QuoteIdent(c)
	}
	settings := ch.Settings{"insert_deduplication_token": token, "input_format_native_allow_types_conversion": 0}
	ictx := ch.Context(ctx, ch.WithSettings(settings), ch.WithColumnNamesAndTypes(tg.insert))
	batch, err := w.conn.PrepareBatch(ictx, fmt.Sprintf("INSERT INTO %s (%s)", t.QualifiedName(), strings.Join(quoted, ", ")))
	if err != nil {
		return nil, fmt.Errorf("prepare insert into %s: %w", t.QualifiedName(), err)
	}
	return batch, nil
}

// target is how records of one shape are written: the table and, for each
// source column, the ClickHouse column that holds it (renames are followed
// by attnum) and the type its values are converted for (which may be wider
// than the source's current type), as the evolution plan said.
type target struct {
	table   *schema.Table
	columns []schema.Target
	// insert lists the insert's columns with their types as ClickHouse
	// reports them (see describeInsert).
	insert []ch.ColumnNameAndType
}

// describeInsert records the insert columns' types as the server has them.
// Handing them to the driver spares it a DESCRIBE per batch on the HTTP
// interface, and, above all, spares it parsing the column list of the
// INSERT, which it gets wrong for names holding backticks or quotes.
func (w *Writer) describeInsert(ctx context.Context, tg *target) error {
	have, err := w.columns(ctx, tg.table)
	if err != nil {
		return err
	}
	types := make(map[string]string, len(have))
	for _, c := range have {
		types[c.Name] = c.Type
	}
	names := tg.insertColumns()
	tg.insert = make([]ch.ColumnNameAndType, len(names))
	for i, n := range names {
		typ, ok := types[n]
		if !ok {
			return fmt.Errorf("table %s has no column %s after creating or evolving it; is another writer altering it?", tg.table.QualifiedName(), n)
		}
		tg.insert[i] = ch.ColumnNameAndType{Name: n, Type: typ}
	}
	return nil
}

// insertColumns lists the insert's columns in the order buildColumns
// builds them.
func (tg *target) insertColumns() []string {
	t := tg.table
	cols := make([]string, 0, len(tg.columns)+4)
	if t.TenantSynthetic {
		cols = append(cols, t.TenantColumn)
	}
	for _, c := range tg.columns {
		cols = append(cols, c.Name)
	}
	return append(cols, schema.VersionColumn, schema.DeletedColumn, schema.CommitColumn)
}

// table returns the target for the record's shape, creating or evolving
// the ClickHouse table the first time the shape is seen.
func (w *Writer) table(ctx context.Context, r *record.Record) (*target, error) {
	key := r.SchemaID + "\x00" + r.Source.Schema + "\x00" + r.Source.Table
	w.mu.Lock()
	st, ok := w.tables[key]
	w.mu.Unlock()
	if ok {
		return st, nil
	}
	// Partitions of one table loading at the same time would otherwise
	// read the same columns and plan the same changes twice.
	w.ddl.Lock()
	defer w.ddl.Unlock()
	w.mu.Lock()
	st, ok = w.tables[key]
	w.mu.Unlock()
	if ok {
		return st, nil
	}
	t, err := schema.NewTable(r.Source, r.TenantColumn, r.Columns, w.opts)
	if err != nil {
		var ie *schema.IncompatibleError
		if errors.As(err, &ie) {
			return nil, stop(err) // a layout's override the columns do not take: the whole table waits for a fix
		}
		return nil, fmt.Errorf("%w: %v", sink.ErrPermanent, err)
	}
	for _, c := range t.Columns {
		if c.Type.Fallback != "" {
			w.log.Warn("column stored as text", "table", t.QualifiedName(), "column", c.Name, "reason", c.Type.Fallback)
		}
	}
	if _, err := w.claim(ctx, r.Source, t.Name); err != nil {
		return nil, err
	}
	for _, ddl := range []string{t.CreateDDL(r.LSN), t.DistributedDDL()} {
		if ddl == "" {
			continue // no Distributed table on one server
		}
		if err := w.conn.Exec(ctx, ddl); err != nil {
			return nil, fmt.Errorf("create table %s: %w", t.QualifiedName(), err)
		}
	}
	if err := w.reshape(ctx, t); err != nil {
		return nil, err
	}
	tg, changed, err := w.evolve(ctx, t, r.LSN)
	if err != nil {
		return nil, err
	}
	if err := w.describeInsert(ctx, tg); err != nil {
		return nil, err
	}
	if changed {
		// The other shapes' targets were planned against the columns
		// before this change: their typed values may no longer be what a
		// widened column takes (the native protocol builds the batch from
		// the server's types), so they are planned again on next use.
		w.forget(r.Source)
	}
	w.mu.Lock()
	w.tables[key] = tg
	w.mu.Unlock()
	return tg, nil
}

// forget drops the cached targets of a table, so the next load reads its
// columns again (after a failed insert, the table may have been evolved by
// a newer shape).
func (w *Writer) forget(src record.Source) {
	w.mu.Lock()
	defer w.mu.Unlock()
	suffix := "\x00" + src.Schema + "\x00" + src.Table
	for k := range w.tables {
		if strings.HasSuffix(k, suffix) {
			delete(w.tables, k)
		}
	}
}

// evolve brings the table to the shape of records first seen at lsn: it
// reads the table's columns, asks schema for the plan and runs its
// statements in order. changed reports that the plan altered the table.
func (w *Writer) evolve(ctx context.Context, t *schema.Table, lsn record.LSN) (tg *target, changed bool, err error) {
	have, err := w.columns(ctx, t)
	if err != nil {
		return nil, false, err
	}
	plan, err := schema.PlanEvolution(t, have, lsn)
	if err != nil {
		return nil, false, stop(err)
	}
	for _, c := range plan.Changes {
		if c.Warning != "" {
			w.log.Warn(c.Warning, "table", t.QualifiedName(), "column", c.Column)
		}
		for _, stmt := range []string{c.SQL, c.Distributed} {
			if stmt == "" {
				continue // no Distributed table on one server
			}
			if err := w.conn.Exec(ctx, stmt); err != nil {
				return nil, false, stop(plan.Failed(c, err))
			}
		}
		w.log.Info(c.Op.String(), "table", t.QualifiedName(), "column", c.Column, "from", c.From, "to", c.To)
	}
	return &target{table: t, columns: plan.Columns}, len(plan.Changes) > 0, nil
}

// columns reads the table's columns, in order.
func (w *Writer) columns(ctx context.Context, t *schema.Table) ([]schema.ExistingColumn, error) {
	return schema.ReadColumns(ctx, w.conn, t.Database, t.Name)
}

// stop turns a schema change walhouse cannot apply into the sink's
// TableError: the sink stops loading the table (other tables go on) until
// an operator resolves it. Other errors pass through.
func stop(err error) error {
	var ie *schema.IncompatibleError
	if !errors.As(err, &ie) {
		return err
	}
	return &sink.TableError{Table: ie.Table, Err: ie.Err, Fix: ie.Fix}
}
