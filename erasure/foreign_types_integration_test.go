package erasure

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// Another tenant's table whose tenant column (a uuid) cannot hold the
// tenant, or whose subject column (a uuid) cannot hold the value, neither
// stops the tenant's erasure nor tells the caller, through a refusal, that
// a table with that column and type exists: it cannot hold a row of the
// subject, and is left out.
func TestIntegrationEraseIgnoresOtherTenantsColumnTypes(t *testing.T) {
	f := newFixture(t, 2*time.Minute)
	ctx, pg, conn, db := f.ctx, f.pg, f.ch, f.db
	f.createDatabase()
	newTable := func(base, pgColumns, pgRows string, cols []record.Column, chRows string) *schema.Table {
		tbl := f.table(base, pgColumns, cols)
		f.pgExec(fmt.Sprintf("INSERT INTO %s VALUES %s", pgx.Identifier{tbl.Source.Table}.Sanitize(), pgRows))
		f.insert(tbl, chRows)
		return tbl
	}
	col := func(name, typ string, key bool) record.Column {
		return record.Column{Name: name, Type: typ, Key: key, TypMod: -1}
	}
	const globex = "0f8fad5b-d9cb-469f-a165-70867728950e"
	// acme's orders: customer 42's order 5 was deleted in PostgreSQL.
	orders := newTable("orders", "tenant_id text, id bigint, customer_id bigint, PRIMARY KEY (tenant_id, id)", "('acme', 6, 7)",
		[]record.Column{col("tenant_id", "text", true), col("id", "int8", true), col("customer_id", "int8", false)},
		"('acme', 5, 42, 10, 0, now64()), ('acme', 6, 7, 11, 0, now64())")
	// globex's accounts: tenants are uuids there, "acme" is none.
	accounts := newTable("accounts", "tenant_id uuid, id bigint, customer_id bigint, PRIMARY KEY (tenant_id, id)", "('"+globex+"', 1, 42)",
		[]record.Column{col("tenant_id", "uuid", true), col("id", "int8", true), col("customer_id", "int8", false)},
		"('"+globex+"', 1, 42, 10, 0, now64())")
	// globex's leads: customers are uuids there, 42 is none.
	leads := newTable("leads", "tenant_id text, id bigint, customer_id uuid, PRIMARY KEY (tenant_id, id)", "('globex', 1, '"+globex+"')",
		[]record.Column{col("tenant_id", "text", true), col("id", "int8", true), col("customer_id", "uuid", false)},
		"('globex', 1, '"+globex+"', 10, 0, now64())")

	keys, _ := NewKeys([]byte("erasure key of the test, 32 bytes"))
	er, err := NewEraser(Config{PG: pg, Conn: conn, Database: db, Keys: keys, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m, err := er.Erase(ctx, Request{Tenant: "acme", Column: "customer_id", Value: "42", RequestedBy: "test"})
	if err != nil {
		t.Fatalf("acme's erasure with globex's tables of other column types present: %v, want it to go ahead without them", err)
	}
	if len(m.Tables) != 1 || m.Tables[0].Table != orders.Name || m.Tables[0].Removed != 1 || !m.Verified {
		t.Errorf("manifest %+v, want %s alone, its one version removed, verified", m, orders.Name)
	}
	for _, tbl := range []*schema.Table{accounts, leads} {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+tbl.QualifiedName()).Scan(&n); err != nil || n != 1 {
			t.Errorf("globex's %s after acme's erasure: %d rows (%v), want 1", tbl.Name, n, err)
		}
	}
}
