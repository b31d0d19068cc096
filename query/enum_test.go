package query

import (
	"strings"
	"testing"
	"time"
)

// TestEnumFilters: a filter on an Enum column compares its label's text,
// so a value that is none of its labels matches nothing instead of
// failing the query (ClickHouse refuses it in IN and !=, and startsWith
// on an Enum); reading the column is unchanged.
func TestEnumFilters(t *testing.T) {
	tbl := testTable("tickets", []string{"tenant_id", "id"},
		"tenant_id", "String", "id", "Int64",
		"mood", "Nullable(Enum8('sad' = 1, 'ok' = 2))",
		"_version", "UInt64", "_is_deleted", "UInt8")
	req := decodeRequest(t, `{"columns":["id","mood"],"filters":[
		{"column":"mood","op":"in","value":["ok","gone"]},
		{"column":"mood","op":"!=","value":"gone"},
		{"column":"mood","op":"prefix","value":"s"}]}`)
	st, err := BuildSelect(SelectInput{Table: tbl, Tenant: "acme", Req: req, Limits: Limits{MaxExecutionTime: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"toString(`mood`) IN (", "toString(`mood`) != ", "startsWith(toString(`mood`), "} {
		if !strings.Contains(st.SQL, want) {
			t.Errorf("SQL has no %s:\n%s", want, st.SQL)
		}
	}
	if !strings.Contains(st.SQL, "SELECT `id`, `mood`") {
		t.Errorf("the column is not read as it is:\n%s", st.SQL)
	}
}
