package erasure

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/schema"
)

// A hostile tenant learns nothing of another tenant's tables through an
// erasure: a table mapped to another tenant by default (no tenant column
// in PostgreSQL) is not counted, so no refusal tells whether it holds the
// value; listing it answers as a table that does not exist; a value of
// the wrong type is refused without naming tables or types.
func TestIntegrationEraseStaysInTheTenant(t *testing.T) {
	f := newFixture(t, 2*time.Minute)
	ctx, pg, conn, db := f.ctx, f.pg, f.ch, f.db
	f.createDatabase()
	cols := keyedColumns("customer_id", "int8")
	newTable := func(base, pgColumns, pgRows, chRows string) *schema.Table {
		tbl := f.table(base, pgColumns, cols)
		f.pgExec(fmt.Sprintf("INSERT INTO %s VALUES %s", pgx.Identifier{tbl.Source.Table}.Sanitize(), pgRows))
		f.insert(tbl, chRows)
		return tbl
	}
	// acme's orders: customer 42's order 5 was deleted in PostgreSQL.
	orders := newTable("orders", "tenant_id text, id bigint, customer_id bigint, PRIMARY KEY (tenant_id, id)",
		"('acme', 6, 7)", "('acme', 5, 42, 10, 0, now64()), ('acme', 6, 7, 11, 0, now64())")
	// globex's invoices, mapped to globex by default: customer 42 is live.
	invoices := newTable("invoices", "id bigint PRIMARY KEY, customer_id bigint",
		"(1, 42)", "('globex', 1, 42, 10, 0, now64())")

	// acme's notes, mapped to acme by default: note 1 (customer 42) was
	// deleted in PostgreSQL.
	notes := newTable("notes", "id bigint PRIMARY KEY, customer_id bigint",
		"(2, 9)", "('acme', 1, 42, 10, 0, now64()), ('acme', 2, 9, 11, 0, now64())")

	keys, _ := NewKeys([]byte("erasure key of the test, 32 bytes"))
	er, err := NewEraser(Config{PG: pg, Conn: conn, Database: db, Keys: keys, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	req := func(value string, tables ...string) Request {
		return Request{Tenant: "acme", Column: "customer_id", Value: value, Tables: tables, RequestedBy: "test"}
	}

	// Listing globex's table answers as a table that does not exist.
	_, errForeign := er.Erase(ctx, req("42", invoices.Name))
	_, errMissing := er.Erase(ctx, req("42", "no_such_table"))
	foreign, ok1 := errors.AsType[*RequestError](errForeign)
	missing, ok2 := errors.AsType[*RequestError](errMissing)
	if !ok1 || !ok2 || strings.ReplaceAll(foreign.Msg, invoices.Name, "no_such_table") != missing.Msg {
		t.Errorf("erase listing another tenant's table: %v; listing a table that does not exist: %v; want the same *RequestError", errForeign, errMissing)
	}

	// A value of the wrong type: refused, naming no table or type.
	_, err = er.Erase(ctx, req("forty-two"))
	if bad, ok := errors.AsType[*RequestError](err); !ok || strings.Contains(bad.Msg, invoices.Name) || strings.Contains(bad.Msg, orders.Name) || strings.Contains(bad.Msg, "bigint") {
		t.Errorf("erase a value of the wrong type: %v, want a *RequestError whose message names no table or type", err)
	}

	// Customer 42 is live in globex's table: acme's erasure neither
	// counts it (a refusal would reveal it) nor touches it.
	m, err := er.Erase(ctx, req("42"))
	if err != nil {
		t.Fatalf("acme's erasure of a value globex's default table holds: %v, want it to go ahead without that table", err)
	}
	var got []string
	for _, r := range m.Tables {
		got = append(got, fmt.Sprintf("%s:%d", r.Table, r.Removed))
	}
	if want := []string{notes.Name + ":1", orders.Name + ":1"}; fmt.Sprint(got) != fmt.Sprint(want) && fmt.Sprint(got) != fmt.Sprint([]string{want[1], want[0]}) {
		t.Errorf("manifest tables %v, want %v (acme's own default table included, globex's not)", got, want)
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+invoices.QualifiedName()).Scan(&n); err != nil || n != 1 {
		t.Errorf("globex's table after acme's erasure: %d rows (%v), want 1", n, err)
	}
}
