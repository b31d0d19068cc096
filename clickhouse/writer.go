package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

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
	opts, err := ch.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse ClickHouse DSN %q: %w (want clickhouse://host:9000 or http://host:8123)", redact(dsn), err)
	}
	if opts.DialTimeout == 0 || opts.DialTimeout == 30*time.Second {
		opts.DialTimeout = 10 * time.Second
	}
	conn, err := ch.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open ClickHouse at %s: %w", redact(dsn), err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("reach ClickHouse at %s: %w; check that it is running (make services starts a local one)", redact(dsn), err)
	}
	return conn, nil
}

func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "<unparsable DSN>"
	}
	return u.Redacted()
}

// Writer loads batches into ClickHouse. It is safe for concurrent use.
type Writer struct {
	conn     driver.Conn
	database string
	opts     schema.Options
	log      *slog.Logger

	mu        sync.Mutex
	tables    map[string]*tableState // by schema id + table name
	syncReady bool                   // SyncTable exists
}

type tableState struct {
	table *schema.Table
}

// NewWriter returns a Writer that creates its tables in database (created if
// missing). Tables are partitioned by month of partitionBy when it is set
// and names a key column of a date or timestamp type.
func NewWriter(ctx context.Context, conn driver.Conn, database, partitionBy string) (*Writer, error) {
	if database == "" {
		return nil, errors.New("clickhouse: database name is empty")
	}
	if err := conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+schema.QuoteIdent(database)); err != nil {
		return nil, fmt.Errorf("create ClickHouse database %s: %w", database, err)
	}
	return &Writer{
		conn:     conn,
		database: database,
		opts:     schema.Options{Database: database, PartitionBy: partitionBy},
		log:      slog.Default().With("component", "clickhouse"),
		tables:   map[string]*tableState{},
	}, nil
}

// Load inserts b. Records are split into runs of equal source schema; each
// run's table is created or altered before its rows are inserted, so a
// column added in PostgreSQL is present before the first row that has it.
func (w *Writer) Load(ctx context.Context, b sink.Batch) error {
	start := 0
	for i := 1; i <= len(b.Records); i++ {
		if i < len(b.Records) && b.Records[i].SchemaID == b.Records[start].SchemaID {
			continue
		}
		run := b.Records[start:i]
		token := b.Token
		if start > 0 || i < len(b.Records) {
			token = fmt.Sprintf("%s#%d", b.Token, start)
		}
		if err := w.loadRun(ctx, run, token, start); err != nil {
			return err
		}
		start = i
	}
	return nil
}

// loadRun inserts recs, which start at index base of the batch.
func (w *Writer) loadRun(ctx context.Context, recs []*record.Record, token string, base int) error {
	t, err := w.table(ctx, recs[0])
	if err != nil {
		return err
	}
	fills, err := w.fillUnchanged(ctx, t, recs)
	if err != nil {
		return err
	}
	cols := t.InsertColumns()
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = schema.QuoteIdent(c)
	}
	ictx := ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplication_token": token}))
	batch, err := w.conn.PrepareBatch(ictx, fmt.Sprintf("INSERT INTO %s (%s)", t.QualifiedName(), strings.Join(quoted, ", ")))
	if err != nil {
		return fmt.Errorf("prepare insert into %s: %w", t.QualifiedName(), err)
	}
	defer batch.Abort()
	row := make([]any, 0, len(cols))
	for i, r := range recs {
		row, err = appendRow(row[:0], t, r, fills[i])
		if err == nil {
			if aerr := batch.Append(row...); aerr != nil {
				err = fmt.Errorf("%w: record %s: %v", sink.ErrPermanent, r.EventID, aerr)
			}
		}
		if err != nil {
			return &sink.RecordError{Index: base + i, Err: err}
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("insert %d rows into %s: %w", len(recs), t.QualifiedName(), err)
	}
	return nil
}

// appendRow converts one record to the insert's column values.
func appendRow(row []any, t *schema.Table, r *record.Record, fill map[int]any) ([]any, error) {
	if t.TenantSynthetic {
		row = append(row, r.TenantID)
	}
	for i, c := range t.Columns {
		v := r.Values[i]
		switch {
		case v.Unchanged:
			x, ok := fill[i]
			if !ok || x == nil {
				x = c.Type.Null() // a row never loaded before
			}
			row = append(row, x)
		case v.Null:
			row = append(row, c.Type.Null())
		default:
			x, err := c.Type.Convert(v.Text)
			if err != nil {
				return nil, fmt.Errorf("%w: record %s, column %s (%s → %s): %v", sink.ErrPermanent, r.EventID, c.Name, c.Source.Type, c.Type.DDL, err)
			}
			row = append(row, x)
		}
	}
	deleted := uint8(0)
	if r.Op == record.Delete {
		deleted = 1
	}
	return append(row, r.Version, deleted, r.OccurredAt), nil
}

// table returns the ClickHouse table for the record's shape, creating or
// altering it the first time this shape is seen.
func (w *Writer) table(ctx context.Context, r *record.Record) (*schema.Table, error) {
	key := r.SchemaID + "\x00" + r.Source.Schema + "\x00" + r.Source.Table
	w.mu.Lock()
	st, ok := w.tables[key]
	w.mu.Unlock()
	if ok {
		return st.table, nil
	}
	t, err := schema.NewTable(r.Source, r.TenantColumn, r.Columns, w.opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sink.ErrPermanent, err)
	}
	for _, c := range t.Columns {
		if c.Type.Fallback != "" {
			w.log.Warn("column stored as text", "table", t.QualifiedName(), "column", c.Name, "reason", c.Type.Fallback)
		}
	}
	if err := w.conn.Exec(ctx, t.CreateDDL()); err != nil {
		return nil, fmt.Errorf("create table %s: %w", t.QualifiedName(), err)
	}
	if err := w.evolve(ctx, t); err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.tables[key] = &tableState{table: t}
	w.mu.Unlock()
	return t, nil
}

// evolve adds the columns the table lacks. Columns that disappeared from the
// source stay (with NULL in new rows), so history is never dropped.
func (w *Writer) evolve(ctx context.Context, t *schema.Table) error {
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"db": t.Database, "tbl": t.Name}))
	rows, err := w.conn.Query(qctx, "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = {tbl:String}")
	if err != nil {
		return fmt.Errorf("read the columns of %s: %w", t.QualifiedName(), err)
	}
	defer rows.Close()
	have := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return fmt.Errorf("read the columns of %s: %w", t.QualifiedName(), err)
		}
		have[name] = typ
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the columns of %s: %w", t.QualifiedName(), err)
	}
	for _, c := range t.Columns {
		existing, ok := have[c.Name]
		if !ok {
			stmt := fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s %s", t.QualifiedName(), schema.QuoteIdent(c.Name), c.Type.DDL)
			if err := w.conn.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("add column %s to %s: %w", c.Name, t.QualifiedName(), err)
			}
			w.log.Info("added column", "table", t.QualifiedName(), "column", c.Name, "type", c.Type.DDL)
			continue
		}
		if existing != c.Type.DDL {
			return fmt.Errorf("%w: column %s of %s is %s in ClickHouse but the source now maps to %s; walhouse does not change column types yet: recreate the table and resync", sink.ErrPermanent, c.Name, t.QualifiedName(), existing, c.Type.DDL)
		}
	}
	return nil
}
