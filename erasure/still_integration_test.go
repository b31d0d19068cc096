package erasure

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A value PostgreSQL still holds in many rows (a status, not a data
// subject) is refused after counting at most maxStillInSource+1 of them:
// a refusal asked through the API must not make the primary count every
// row of a broad value.
func TestIntegrationEraseCountsStillHeldRowsBounded(t *testing.T) {
	f := newFixture(t, time.Minute)
	ctx, pg, conn, db := f.ctx, f.pg, f.ch, f.db
	f.createDatabase()
	tbl := f.table("orders", "tenant_id text, id bigint, status text, PRIMARY KEY (tenant_id, id)", keyedColumns("status", "text"))
	qn := pgx.Identifier{tbl.Source.Table}.Sanitize()
	f.pgExec(fmt.Sprintf(`INSERT INTO %s SELECT 'acme', i, 'open' FROM generate_series(1, %d) AS i`, qn, 3*maxStillInSource))
	f.insert(tbl, "('acme', 1, 'open', 10, 0, now64())")
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
