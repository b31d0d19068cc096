package erasure

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/schema"
)

// A broad value cannot run away: past the cap of rows the erasure refuses
// before it records anything; forced (Request.MaxRows), it records its
// ledger rows in chunks and removes with one mutation per table. The
// tenant column is never a subject.
func TestIntegrationEraseBroadSubject(t *testing.T) {
	f := newFixture(t, 2*time.Minute)
	ctx, pg, conn, db := f.ctx, f.pg, f.ch, f.db
	f.createDatabase()
	tbl := f.table("orders", "tenant_id text, id bigint, status text, PRIMARY KEY (tenant_id, id)", keyedColumns("status", "text"))
	// 1200 rows of the value, deleted in PostgreSQL: more than one
	// ledger insert's worth (ledgerRowsPerInsert).
	const rows = 1200
	f.exec(fmt.Sprintf("INSERT INTO %s (tenant_id, id, status, _version, _is_deleted, _commit_ts) SELECT 'acme', number, 'cancelled', number + 1, 0, now64() FROM numbers(%d)", tbl.QualifiedName(), rows))
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
