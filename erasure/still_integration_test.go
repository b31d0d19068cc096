package erasure

import (
	"context"
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

// A value PostgreSQL still holds in many rows (a status, not a data
// subject) is refused after counting at most maxStillInSource+1 of them:
// a refusal asked through the API must not make the primary count every
// row of a broad value.
func TestIntegrationEraseCountsStillHeldRowsBounded(t *testing.T) {
	env := testenv.Require(t, "pg", "clickhouse")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
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
	qn := pgx.Identifier{name}.Sanitize()
	for _, q := range []string{
		fmt.Sprintf(`CREATE TABLE %s (tenant_id text, id bigint, status text, PRIMARY KEY (tenant_id, id))`, qn),
		fmt.Sprintf(`INSERT INTO %s SELECT 'acme', i, 'open' FROM generate_series(1, %d) AS i`, qn, 3*maxStillInSource),
	} {
		if _, err := pg.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	defer pg.Exec(context.Background(), "DROP TABLE "+qn) //nolint:errcheck
	cols := []record.Column{{Name: "tenant_id", Type: "text", Key: true, TypMod: -1}, {Name: "id", Type: "int8", Key: true, TypMod: -1}, {Name: "status", Type: "text", TypMod: -1}}
	tbl, err := schema.NewTable(record.Source{Schema: "public", Table: name}, "tenant_id", cols, schema.Options{Database: db})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE DATABASE " + schema.QuoteIdent(db), tbl.CreateDDL(1),
		"INSERT INTO " + tbl.QualifiedName() + " (tenant_id, id, status, _version, _is_deleted, _commit_ts) VALUES ('acme', 1, 'open', 10, 0, now64())"} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	keys, _ := NewKeys([]byte("erasure key of the test, 32 bytes"))
	er, err := NewEraser(Config{PG: pg, Conn: conn, Database: db, Keys: keys, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = er.Erase(ctx, Request{Tenant: "acme", Column: "status", Value: "open", RequestedBy: "test"})
	still, ok := err.(*StillInSourceError)
	if !ok {
		t.Fatalf("erase a value PostgreSQL holds in %d rows: %v, want *StillInSourceError", 3*maxStillInSource, err)
	}
	owner := `"public".` + qn
	if n := still.Rows[owner]; n != maxStillInSource+1 || !strings.Contains(still.Error(), fmt.Sprintf("more than %d rows", maxStillInSource)) {
		t.Errorf("counted %d rows (%v), want the count to stop at %d and the message to say more than %d", n, still, maxStillInSource+1, maxStillInSource)
	}
}
