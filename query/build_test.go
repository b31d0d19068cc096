package query

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/golden"
)

// testTable builds a Table as the catalog would discover it.
func testTable(name string, sortingKey []string, cols ...string) *Table {
	t := &Table{Database: "walhouse", Name: name, SortingKey: sortingKey, TenantColumn: sortingKey[0]}
	for i := 0; i+1 < len(cols); i += 2 {
		ct := parseColType(cols[i+1])
		t.Columns = append(t.Columns, Column{Name: cols[i], Type: cols[i+1], Filterable: ct.Kind != kindOther, typ: ct})
	}
	return t
}

func ordersTable() *Table {
	return testTable("orders", []string{"tenant_id", "id"},
		"tenant_id", "String",
		"id", "Int64",
		"customer_id", "Nullable(String)",
		"status", "Nullable(String)",
		"amount", "Nullable(Decimal(12, 2))",
		"paid", "Nullable(Bool)",
		"ref", "Nullable(UUID)",
		"created_at", "Nullable(DateTime64(6, 'UTC'))",
		"due", "Nullable(Date32)",
		"tags", "Array(Nullable(String))",
		"_version", "UInt64",
		"_is_deleted", "UInt8",
		"_commit_ts", "DateTime64(6, 'UTC')",
		"_synced_at", "DateTime64(6, 'UTC')",
	)
}

func decodeRequest(t *testing.T, s string) Request {
	t.Helper()
	var r Request
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return r
}

// render writes a statement in the golden file form.
func render(st Statement) string {
	var b strings.Builder
	b.WriteString(st.SQL)
	b.WriteString("\n-- params\n")
	keys := make([]string, 0, len(st.Params))
	for k := range st.Params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %q\n", k, st.Params[k])
	}
	b.WriteString("-- settings\n")
	keys = keys[:0]
	for k := range st.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %v\n", k, st.Settings[k])
	}
	if len(st.Columns) > 0 {
		fmt.Fprintf(&b, "-- columns %s, page %d\n", strings.Join(st.Columns, ", "), st.PageSize)
	}
	return b.String()
}

func TestBuildSelectGolden(t *testing.T) {
	lim := Limits{MaxExecutionTime: 20 * time.Second}
	tests := []struct {
		name   string
		tenant string
		offset int
		req    string
	}{
		{"select_default", "acme", 0, `{}`},
		{"select_filters", "acme", 0, `{"columns":["id","status","amount"],"filters":[
			{"column":"status","op":"=","value":"paid"},
			{"column":"amount","op":">=","value":"10.5"},
			{"column":"id","op":"in","value":[1,2,3]},
			{"column":"customer_id","op":"not_in","value":["a'b","c\\d\te"]},
			{"column":"paid","op":"!=","value":false},
			{"column":"ref","op":"not_null"},
			{"column":"due","op":"is_null"},
			{"column":"status","op":"like","value":"pa%"},
			{"column":"customer_id","op":"prefix","value":"cus_"}],
			"timeRange":{"column":"created_at","from":"2024-05-01T00:00:00+02:00","to":"2024-06-01"},
			"orderBy":[{"column":"amount","desc":true}],"limit":50}`},
		{"select_group", "acme", 0, `{"groupBy":["status"],"aggregates":[
			{"fn":"count","as":"n"},{"fn":"sum","column":"amount"},{"fn":"avg","column":"amount","as":"mean"},
			{"fn":"min","column":"created_at"},{"fn":"max","column":"created_at"},{"fn":"uniq","column":"customer_id"}],
			"orderBy":[{"column":"n","desc":true}]}`},
		{"select_approximate_page", "acme", 200, `{"columns":["id"],"consistency":"approximate","limit":100}`},
		{"select_hostile_tenant", "x' OR 1=1 --\\", 0, `{"columns":["id"]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := BuildSelect(SelectInput{Table: ordersTable(), Tenant: tt.tenant, Req: decodeRequest(t, tt.req), Offset: tt.offset, Limits: lim})
			if err != nil {
				t.Fatal(err)
			}
			golden.Assert(t, render(st), tt.name+".golden")
		})
	}
}

func TestBuildExportGolden(t *testing.T) {
	st, err := BuildExport(ExportInput{Table: ordersTable(), Tenant: "acme", Subject: Subject{Column: "customer_id", Value: "cus_42"}, Limits: Limits{MaxExportTime: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, render(st), "export_orders.golden")
}

func TestBuildSelectRejects(t *testing.T) {
	tests := []struct {
		name, req, field string
	}{
		{"unknown column", `{"columns":["nope"]}`, "columns[0]"},
		{"sql in column", `{"columns":["id; DROP TABLE orders"]}`, "columns[0]"},
		{"backtick column", "{\"columns\":[\"id`\"]}", "columns[0]"},
		{"hidden deleted column", `{"columns":["_is_deleted"]}`, "columns[0]"},
		{"filter on deleted", `{"filters":[{"column":"_is_deleted","op":"=","value":1}]}`, "filters[0].column"},
		{"duplicate column", `{"columns":["id","id"]}`, "columns[1]"},
		{"string for int", `{"filters":[{"column":"id","op":"=","value":"x"}]}`, "filters[0].value"},
		{"int out of range", `{"filters":[{"column":"id","op":"=","value":9223372036854775808}]}`, "filters[0].value"},
		{"number for string", `{"filters":[{"column":"status","op":"=","value":1}]}`, "filters[0].value"},
		{"bad uuid", `{"filters":[{"column":"ref","op":"=","value":"nope"}]}`, "filters[0].value"},
		{"bad date", `{"filters":[{"column":"due","op":"<","value":"tomorrow"}]}`, "filters[0].value"},
		{"decimal scale", `{"filters":[{"column":"amount","op":"=","value":"1.234"}]}`, "filters[0].value"},
		{"unknown op", `{"filters":[{"column":"id","op":"~","value":1}]}`, "filters[0].op"},
		{"like on int", `{"filters":[{"column":"id","op":"like","value":"1%"}]}`, "filters[0].op"},
		{"in not array", `{"filters":[{"column":"id","op":"in","value":1}]}`, "filters[0].value"},
		{"in empty", `{"filters":[{"column":"id","op":"in","value":[]}]}`, "filters[0].value"},
		{"null with value", `{"filters":[{"column":"id","op":"is_null","value":1}]}`, "filters[0].value"},
		{"missing value", `{"filters":[{"column":"id","op":"="}]}`, "filters[0].value"},
		{"array column filter", `{"filters":[{"column":"tags","op":"=","value":"a"}]}`, "filters[0].column"},
		{"bool order op", `{"filters":[{"column":"paid","op":"<","value":true}]}`, "filters[0].op"},
		{"time range on string", `{"timeRange":{"column":"status","from":"2024-01-01"}}`, "timeRange.column"},
		{"time range empty", `{"timeRange":{"column":"created_at"}}`, "timeRange"},
		{"over limit", `{"limit":10001}`, "limit"},
		{"negative limit", `{"limit":-1}`, "limit"},
		{"bad consistency", `{"consistency":"eventual"}`, "consistency"},
		{"columns with group", `{"columns":["id"],"groupBy":["status"]}`, "columns"},
		{"sum of string", `{"aggregates":[{"fn":"sum","column":"status"}]}`, "aggregates[0].column"},
		{"unknown fn", `{"aggregates":[{"fn":"median","column":"amount"}]}`, "aggregates[0].fn"},
		{"alias injection", "{\"aggregates\":[{\"fn\":\"count\",\"as\":\"n` FROM x\"}]}", "aggregates[0].as"},
		{"alias shadows column", `{"aggregates":[{"fn":"count","as":"status"}]}`, "aggregates[0].as"},
		{"duplicate alias", `{"aggregates":[{"fn":"count","as":"n"},{"fn":"uniq","column":"id","as":"n"}]}`, "aggregates[1].as"},
		{"order by not grouped", `{"groupBy":["status"],"aggregates":[{"fn":"count"}],"orderBy":[{"column":"id"}]}`, "orderBy[0].column"},
		{"order by unknown", `{"orderBy":[{"column":"nope"}]}`, "orderBy[0].column"},
		{"unicode column", `{"columns":["ïd"]}`, "columns[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BuildSelect(SelectInput{Table: ordersTable(), Tenant: "acme", Req: decodeRequest(t, tt.req)})
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v, want a *RequestError", err)
			}
			if re.Field != tt.field {
				t.Errorf("field = %q, want %q (%v)", re.Field, tt.field, err)
			}
		})
	}
}

func TestBuildSelectTenantType(t *testing.T) {
	tbl := testTable("n", []string{"tenant_id", "id"}, "tenant_id", "Int32", "id", "Int64", "_is_deleted", "UInt8")
	_, err := BuildSelect(SelectInput{Table: tbl, Tenant: "acme"})
	if !errors.Is(err, ErrTenantType) {
		t.Fatalf("err = %v, want ErrTenantType", err)
	}
	st, err := BuildSelect(SelectInput{Table: tbl, Tenant: "42"})
	if err != nil || st.Params["tenant"] != "42" || !strings.Contains(st.SQL, "{tenant:Int32}") {
		t.Fatalf("numeric tenant: %v %v %s", err, st.Params, st.SQL)
	}
}
