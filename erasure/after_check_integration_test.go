package erasure

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/record"
)

// A row PostgreSQL got after the erasure's check — the subject back (a
// customer who signs up again), a deleted key used again — and that a sink
// loaded before the removal (the settle time) is not removed: the check
// did not clear it, its change is past the as-of LSN, so the ledger lets it
// load, and removing it would leave ClickHouse without a row PostgreSQL
// holds, silently. The versions from before the check go.
func TestIntegrationEraseKeepsRowsMadeAfterTheCheck(t *testing.T) {
	f := newFixture(t, 2*time.Minute)
	ctx, pg, conn, db := f.ctx, f.pg, f.ch, f.db
	f.createDatabase()
	tbl := f.table("orders", "tenant_id text, id bigint, customer_id bigint, PRIMARY KEY (tenant_id, id)", keyedColumns("customer_id", "int8"))
	qn := pgx.Identifier{tbl.Source.Table}.Sanitize()
	// Customer 42's order 5 was deleted in PostgreSQL: its insert and its
	// tombstone are in ClickHouse.
	// (Two inserts: one would keep only the newest version of the key.)
	f.insert(tbl, "('acme', 5, 42, 10, 0, now64())")
	f.insert(tbl, "('acme', 5, NULL, 11, 1, now64())")
	keys, _ := NewKeys([]byte("erasure key of the test, 32 bytes"))
	er, err := NewEraser(Config{PG: pg, Conn: conn, Database: db, Keys: keys, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	id, run, err := er.Begin(ctx, Request{Tenant: "acme", Column: "customer_id", Value: "42", RequestedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	// After the check: customer 42 orders again (order 6), and order 5's
	// key is used again; a sink loads both before the removal.
	if _, err := pg.Exec(ctx, fmt.Sprintf("INSERT INTO %s VALUES ('acme', 6, 42), ('acme', 5, 7)", qn)); err != nil {
		t.Fatal(err)
	}
	var lsn string
	if err := pg.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	after, err := record.ParseLSN(lsn)
	if err != nil {
		t.Fatal(err)
	}
	f.insert(tbl, fmt.Sprintf("('acme', 6, 42, %d, 0, now64()), ('acme', 5, 7, %d, 0, now64())", record.Version(after), record.Version(after)))
	m, err := run(ctx)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if st, err := er.Status(ctx, "acme", id); err != nil || st.State != StateFinished {
		t.Errorf("status %+v (%v), want finished", st, err)
	}
	var got []string
	rows, err := conn.Query(ctx, "SELECT toString(id), ifNull(toString(customer_id), 'NULL'), _is_deleted FROM "+tbl.QualifiedName()+" ORDER BY id, _version")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, cust string
		var del uint8
		if err := rows.Scan(&id, &cust, &del); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s:%s:%d", id, cust, del))
	}
	rows.Close()
	if want := []string{"5:7:0", "6:42:0"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("versions after the erasure %v, want %v (those from before the check gone, the rows PostgreSQL got after it kept); manifest %+v", got, want, m)
	}
}
