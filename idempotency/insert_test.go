package idempotency

import (
	"strings"
	"testing"
)

func TestInsertStatements(t *testing.T) {
	k := NewKey()
	for _, tc := range []struct {
		name       string
		ins        Insert
		insertSQL  string
		selectSQL  string
		wantErrSub string
	}{
		{
			name:      "seed pattern",
			ins:       Insert{Table: "module_shop.records", Tenant: "t1", Key: k, Columns: []string{"id", "payload"}, Values: []any{1, "x"}, Returning: []string{"id", "created_at"}},
			insertSQL: `INSERT INTO "module_shop"."records" ("tenant_id", "idempotency_key", "idempotency_fingerprint", "id", "payload") VALUES ($1, $2, $3, $4, $5) ON CONFLICT ("idempotency_key") DO NOTHING RETURNING "id", "created_at"`,
			selectSQL: `SELECT "tenant_id" = $1, "idempotency_fingerprint" = $3, "id", "created_at" FROM "module_shop"."records" WHERE "idempotency_key" = $2`,
		},
		{
			name:      "own column names, no returning, quoting",
			ins:       Insert{Table: `orders`, Tenant: "t1", Key: k, Columns: []string{`we"ird`}, Values: []any{1}, TenantColumn: "org", KeyColumn: "req", FingerprintColumn: "req_fp"},
			insertSQL: `INSERT INTO "orders" ("org", "req", "req_fp", "we""ird") VALUES ($1, $2, $3, $4) ON CONFLICT ("req") DO NOTHING RETURNING true`,
			selectSQL: `SELECT "org" = $1, "req_fp" = $3 FROM "orders" WHERE "req" = $2`,
		},
		{name: "no tenant", ins: Insert{Table: "t", Key: k}, wantErrSub: "tenant is required"},
		{name: "no key", ins: Insert{Table: "t", Tenant: "a"}, wantErrSub: "Key is zero"},
		{name: "columns and values", ins: Insert{Table: "t", Tenant: "a", Key: k, Columns: []string{"a"}}, wantErrSub: "1 columns and 0 values"},
		{name: "unencodable value", ins: Insert{Table: "t", Tenant: "a", Key: k, Columns: []string{"a"}, Values: []any{make(chan int)}}, wantErrSub: "give Insert.Fingerprint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := tc.ins.normalize()
			if tc.wantErrSub != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrSub) {
					t.Fatalf("err %v, want one with %q", err, tc.wantErrSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ins, sel := q.statements()
			if ins != tc.insertSQL {
				t.Errorf("insert:\n got %s\nwant %s", ins, tc.insertSQL)
			}
			if sel != tc.selectSQL {
				t.Errorf("select:\n got %s\nwant %s", sel, tc.selectSQL)
			}
			if q.Fingerprint == (Fingerprint{}) {
				t.Error("no fingerprint computed")
			}
		})
	}
}

func TestRowLevelSecurityStatements(t *testing.T) {
	got := strings.Join(RowLevelSecurity("app.orders", "tenant_id"), ";\n")
	want := `ALTER TABLE "app"."orders" ENABLE ROW LEVEL SECURITY;
ALTER TABLE "app"."orders" FORCE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS walhouse_tenant ON "app"."orders";
CREATE POLICY walhouse_tenant ON "app"."orders" USING ("tenant_id" = NULLIF(current_setting('walhouse.tenant', true), '')) WITH CHECK ("tenant_id" = NULLIF(current_setting('walhouse.tenant', true), ''))`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
