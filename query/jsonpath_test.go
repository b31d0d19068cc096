package query

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/golden"
)

func eventsTable() *Table {
	return testTable("events", []string{"tenant_id", "id"},
		"tenant_id", "String",
		"id", "Int64",
		"payload", "Nullable(JSON)",
		"payload.v2", "Nullable(JSON)", // a JSON column whose name has a dot: the longest name wins
		"note", "Nullable(String)",
		"_version", "UInt64",
		"_is_deleted", "UInt8",
	)
}

// TestBuildSelectJSONPaths: paths into a JSON column in columns, filters
// (text, and numbers as numbers), groupBy, orderBy and aggregates, each
// key a checked plain name in a constant, each value bound.
func TestBuildSelectJSONPaths(t *testing.T) {
	lim := Limits{MaxExecutionTime: 20 * time.Second}
	for _, tt := range []struct{ name, req string }{
		{"select_json_paths", `{"columns":["id","payload","payload.customer.id","payload.v2.a"],"filters":[
			{"column":"payload.customer.id","op":">","value":10},
			{"column":"payload.customer.id","op":"in","value":[42,43]},
			{"column":"payload.status","op":"=","value":"paid"},
			{"column":"payload.status","op":"prefix","value":"pa"},
			{"column":"payload.note","op":"is_null"}],
			"orderBy":[{"column":"payload.created","desc":true}]}`},
		{"select_json_group", `{"groupBy":["payload.customer.id"],"aggregates":[
			{"fn":"count","as":"n"},{"fn":"uniq","column":"payload.status","as":"statuses"},{"fn":"max","column":"payload.created","as":"last"}],
			"orderBy":[{"column":"payload.customer.id"}]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, err := BuildSelect(SelectInput{Table: eventsTable(), Tenant: "acme", Req: decodeRequest(t, tt.req), Limits: lim})
			if err != nil {
				t.Fatal(err)
			}
			golden.Assert(t, render(st), tt.name+".golden")
		})
	}
}

func TestBuildSelectJSONPathRejects(t *testing.T) {
	for _, tt := range []struct{ name, req, field string }{
		{"path into a text column", `{"columns":["note.a"]}`, "columns[0]"},
		{"quote in key", `{"columns":["payload.a'b"]}`, "columns[0]"},
		{"backtick in key", "{\"columns\":[\"payload.a`b\"]}", "columns[0]"},
		{"empty key", `{"columns":["payload.a..b"]}`, "columns[0]"},
		{"function in key", `{"filters":[{"column":"payload.a)","op":"=","value":"x"}]}`, "filters[0].column"},
		{"too deep", `{"columns":["payload.a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q"]}`, "columns[0]"},
		{"whole JSON column filter", `{"filters":[{"column":"payload","op":"=","value":"x"}]}`, "filters[0].column"},
		{"sum of a path", `{"aggregates":[{"fn":"sum","column":"payload.amount"}]}`, "aggregates[0].column"},
		{"boolean for a path", `{"filters":[{"column":"payload.ok","op":"=","value":true}]}`, "filters[0].value"},
		{"path under the deleted column", `{"columns":["_is_deleted.a"]}`, "columns[0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BuildSelect(SelectInput{Table: eventsTable(), Tenant: "acme", Req: decodeRequest(t, tt.req)})
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

// TestBuildExportJSONPath: an export's subject may be a JSON path, read
// by its expression and compared with a bound value.
func TestBuildExportJSONPath(t *testing.T) {
	st, err := BuildExport(ExportInput{Table: eventsTable(), Tenant: "acme", Subject: Subject{Column: "payload.customer.email", Value: "a@example.com"}, Limits: Limits{MaxExportTime: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	want := "AND CAST(getSubcolumn(`payload`, 'customer.email') AS Nullable(String)) = {subject:String}"
	if !strings.Contains(st.SQL, want) || st.Params["subject"] != "a@example.com" {
		t.Errorf("export SQL\n%s\nparams %v; want %q", st.SQL, st.Params, want)
	}
}
