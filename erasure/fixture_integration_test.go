package erasure

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// fixture is what an erasure integration test runs against: a context
// bounded by the test's time, connections to PostgreSQL (nil for a
// ClickHouse-only fixture) and ClickHouse, and a ClickHouse database name
// of the test's own. All of it is released when the test ends: the
// PostgreSQL tables it made and the database are dropped, the connections
// closed, the context cancelled.
type fixture struct {
	t   *testing.T
	ctx context.Context
	pg  *pgx.Conn
	ch  driver.Conn
	// db is named, not created: createDatabase (or ensureTables) creates
	// it, so a test can also start from a database that does not exist.
	db string
}

// newFixture connects to PostgreSQL and ClickHouse, skipping or failing t
// as testenv.Require does. pgConfig adjusts the PostgreSQL connection's
// settings before it connects (a session time zone, say).
func newFixture(t *testing.T, timeout time.Duration, pgConfig ...func(*pgx.ConnConfig)) *fixture {
	t.Helper()
	env := testenv.Require(t, "pg", "clickhouse")
	f := openClickHouse(t, env, timeout)
	cfg, err := pgx.ParseConfig(env.PG)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pgConfig {
		c(cfg)
	}
	pg, err := pgx.ConnectConfig(f.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close(context.Background()) }) //nolint:errcheck
	f.pg = pg
	return f
}

// erasureDatabase returns a fixture on ClickHouse alone whose database
// holds the erasure tables (ledger, runs, readers).
func erasureDatabase(t *testing.T, timeout time.Duration) *fixture {
	t.Helper()
	f := openClickHouse(t, testenv.Require(t, "clickhouse"), timeout)
	if err := ensureTables(f.ctx, f.ch, f.db); err != nil {
		t.Fatal(err)
	}
	return f
}

// openClickHouse starts a fixture: its context, its ClickHouse connection
// and its database's name, the database dropped when t ends.
func openClickHouse(t *testing.T, env testenv.Env, timeout time.Duration) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	ch, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	db := testenv.Name("erasure")
	t.Cleanup(func() {
		ch.Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(db)) //nolint:errcheck
		ch.Close()
	})
	return &fixture{t: t, ctx: ctx, ch: ch, db: db}
}

// createDatabase creates the fixture's ClickHouse database.
func (f *fixture) createDatabase() {
	f.t.Helper()
	f.exec("CREATE DATABASE " + schema.QuoteIdent(f.db))
}

// exec runs each ClickHouse statement in turn, failing the test on the
// first that fails.
func (f *fixture) exec(stmts ...string) {
	f.t.Helper()
	for _, q := range stmts {
		if err := f.ch.Exec(f.ctx, q); err != nil {
			f.t.Fatalf("%s: %v", q, err)
		}
	}
}

// pgExec runs each PostgreSQL statement in turn, failing the test on the
// first that fails.
func (f *fixture) pgExec(stmts ...string) {
	f.t.Helper()
	for _, q := range stmts {
		if _, err := f.pg.Exec(f.ctx, q); err != nil {
			f.t.Fatalf("%s: %v", q, err)
		}
	}
}

// table creates a PostgreSQL table named from base (testenv.Name) with
// the column definitions pgColumns, dropped when the test ends, and the
// ClickHouse table walhouse makes for it from cols (tenant column
// tenant_id) in the fixture's database, which must exist.
func (f *fixture) table(base, pgColumns string, cols []record.Column) *schema.Table {
	f.t.Helper()
	name := testenv.Name(base)
	qn := pgx.Identifier{name}.Sanitize()
	f.pgExec(fmt.Sprintf("CREATE TABLE %s (%s)", qn, pgColumns))
	f.t.Cleanup(func() { f.pg.Exec(context.Background(), "DROP TABLE "+qn) }) //nolint:errcheck
	tbl, err := schema.NewTable(record.Source{Schema: "public", Table: name}, "tenant_id", cols, schema.Options{Database: f.db})
	if err != nil {
		f.t.Fatal(err)
	}
	f.exec(tbl.CreateDDL(1))
	return tbl
}

// insert inserts values (rows of the table's columns, then _version,
// _is_deleted and _commit_ts) into tbl in one statement, so one part.
func (f *fixture) insert(tbl *schema.Table, values string) {
	f.t.Helper()
	names := make([]string, 0, len(tbl.Columns)+3)
	for _, c := range tbl.Columns {
		names = append(names, c.Name)
	}
	names = append(names, schema.VersionColumn, schema.DeletedColumn, schema.CommitColumn)
	f.exec("INSERT INTO " + tbl.QualifiedName() + " (" + strings.Join(names, ", ") + ") VALUES " + values)
}

// ledgerEntry records a ledger row by hand, as an erasure of acme's
// public.orders rows whose customer_id is value would under keys, stamped
// recordedAt (a ClickHouse expression). The database must hold the
// erasure tables (erasureDatabase).
func (f *fixture) ledgerEntry(keys Keys, value, recordedAt string) {
	f.t.Helper()
	h := keys.Hash(Subject{Tenant: "acme", Schema: "public", Table: "orders", Column: "customer_id", Value: value})
	f.exec(fmt.Sprintf("INSERT INTO %s.%s (source_schema, source_table, column, subject_hash, as_of_lsn, key_id, erasure_id, recorded_at) VALUES ('public', 'orders', 'customer_id', '%s', 100, '%s', 'era_test', %s)",
		schema.QuoteIdent(f.db), schema.QuoteIdent(LedgerTable), h, keys.KeyID(), recordedAt))
}

// keyedColumns are the columns of a table keyed by (tenant_id text, id
// int8) with one more column, name of type typ.
func keyedColumns(name, typ string) []record.Column {
	return []record.Column{
		{Name: "tenant_id", Type: "text", Key: true, TypMod: -1},
		{Name: "id", Type: "int8", Key: true, TypMod: -1},
		{Name: name, Type: typ, TypMod: -1},
	}
}
