package erasure

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/internal/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// A broad value cannot run away: past the cap of rows the erasure refuses
// before it records anything; forced (Request.MaxRows), it records its
// ledger rows in chunks and removes with one mutation per table. The
// tenant column is never a subject.
func TestIntegrationEraseBroadSubject(t *testing.T) {
	env := testenv.Require(t, "pg", "clickhouse")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := pgx.Connect(ctx, env.PG)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())
	conn, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	db := testenv.Name("erasure")
	defer conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(db)) //nolint:errcheck
	name := testenv.Name("orders")
	if _, err := pg.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (tenant_id text, id bigint, status text, PRIMARY KEY (tenant_id, id))`, pgx.Identifier{name}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	defer pg.Exec(context.Background(), "DROP TABLE "+pgx.Identifier{name}.Sanitize()) //nolint:errcheck
	cols := []record.Column{{Name: "tenant_id", Type: "text", Key: true, TypMod: -1}, {Name: "id", Type: "int8", Key: true, TypMod: -1}, {Name: "status", Type: "text", TypMod: -1}}
	tbl, err := schema.NewTable(record.Source{Schema: "public", Table: name}, "tenant_id", cols, schema.Options{Database: db})
	if err != nil {
		t.Fatal(err)
	}
	// 1200 rows of the value, deleted in PostgreSQL: more than one
	// ledger insert's worth (ledgerRowsPerInsert).
	const rows = 1200
	for _, q := range []string{"CREATE DATABASE " + schema.QuoteIdent(db), tbl.CreateDDL(1),
		fmt.Sprintf("INSERT INTO %s (tenant_id, id, status, _version, _is_deleted, _commit_ts) SELECT 'acme', number, 'cancelled', number + 1, 0, now64() FROM numbers(%d)", tbl.QualifiedName(), rows)} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	keys, _ := NewKeys([]byte("erasure key of the test, 32 bytes"))
	er, err := NewEraser(Config{PG: pg, Conn: conn, Database: db, Keys: keys, Settle: time.Millisecond, MaxRows: 100})
	if err != nil {
		t.Fatal(err)
	}
	ledgerRows := func() uint64 {
		var n uint64
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.%s", schema.QuoteIdent(db), schema.QuoteIdent(LedgerTable))).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	req := Request{Tenant: "acme", Column: "status", Value: "cancelled", RequestedBy: "test"}
	_, err = er.Erase(ctx, req)
	if broad, ok := errors.AsType[*TooBroadError](err); !ok || broad.Max != 100 {
		t.Fatalf("erase a value of %d rows with a cap of 100: %v, want *TooBroadError", rows, err)
	}
	if n := ledgerRows(); n != 0 {
		t.Errorf("a refused erasure recorded %d ledger rows", n)
	}
	_, err = er.Erase(ctx, Request{Tenant: "acme", Column: "tenant_id", Value: "acme"})
	if bad, ok := errors.AsType[*RequestError](err); !ok || !strings.Contains(bad.Msg, "tenant column") {
		t.Errorf("erase by the tenant column: %v, want a *RequestError", err)
	}

	req.MaxRows = rows
	m, err := er.Erase(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tables) != 1 || m.Tables[0].Removed != rows || !m.Verified {
		t.Errorf("forced erasure: tables %+v verified %v, want %d versions removed", m.Tables, m.Verified, rows)
	}
	if n := ledgerRows(); n != rows+1 {
		t.Errorf("ledger rows %d, want %d (one per row, one for the subject)", n, rows+1)
	}
	var mutations uint64
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM system.mutations WHERE database = %s AND table = %s",
		schema.QuoteString(db), schema.QuoteString(tbl.Name))).Scan(&mutations); err != nil {
		t.Fatal(err)
	}
	if mutations != 1 {
		t.Errorf("%d mutations on the table, want one for the whole key set", mutations)
	}
}
