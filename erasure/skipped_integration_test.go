package erasure

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/walhouse/walhouse/schema"
)

// A table with the subject column but without walhouse's comment cannot
// be covered: when the tenant has versions of the subject there it is
// named in the manifest (tablesSkipped), which is then not verified; a
// such table of another tenant stays unnamed.
func TestIntegrationEraseNamesSkippedTables(t *testing.T) {
	f := newFixture(t, 2*time.Minute)
	ctx, pg, conn, db := f.ctx, f.pg, f.ch, f.db
	f.createDatabase()
	tbl := f.table("orders", "tenant_id text, id bigint, customer_id bigint, PRIMARY KEY (tenant_id, id)", keyedColumns("customer_id", "int8"))
	f.insert(tbl, "('acme', 1, 42, 10, 0, now64())")
	bare := func(table string) string {
		return fmt.Sprintf("CREATE TABLE %s.%s (tenant_id String, id Int64, customer_id Nullable(Int64), _version UInt64, _is_deleted UInt8) ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY (tenant_id, id)",
			schema.QuoteIdent(db), schema.QuoteIdent(table))
	}
	f.exec(bare("legacy_acme"), bare("legacy_globex"),
		fmt.Sprintf("INSERT INTO %s.legacy_acme VALUES ('acme', 1, 42, 10, 0)", schema.QuoteIdent(db)),
		fmt.Sprintf("INSERT INTO %s.legacy_globex VALUES ('globex', 1, 42, 10, 0)", schema.QuoteIdent(db)),
	)
	keys, _ := NewKeys([]byte("erasure key of the test, 32 bytes"))
	er, err := NewEraser(Config{PG: pg, Conn: conn, Database: db, Keys: keys, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m, err := er.Erase(ctx, Request{Tenant: "acme", Column: "customer_id", Value: "42", RequestedBy: "test"})
	if err == nil || m.Verified || !slices.Equal(m.TablesSkipped, []string{"legacy_acme"}) || len(m.Tables) != 1 || m.Tables[0].Removed != 1 {
		t.Errorf("erase beside tables without the comment: %v, manifest tables %+v skipped %v verified %v; want legacy_acme named, not verified, the walhouse table erased", err, m.Tables, m.TablesSkipped, m.Verified)
	}

}
