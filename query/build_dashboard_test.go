package query

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/golden"
)

var testZones = map[string]bool{"UTC": true, "Europe/Paris": true, "America/New_York": true}

func TestBuildSelectDashboardGolden(t *testing.T) {
	lim := Limits{MaxExecutionTime: 20 * time.Second}
	tests := []struct {
		name string
		req  string
	}{
		{"select_orders_per_day", `{"buckets":[{"column":"created_at","unit":"day","timeZone":"Europe/Paris","as":"day"}],
			"groupBy":["day","status"],"aggregates":[{"fn":"count","as":"orders"},{"fn":"uniqExact","column":"customer_id","as":"customers"},
			{"fn":"quantile","column":"amount","q":0.95,"as":"p95"}],
			"timeRange":{"column":"created_at","last":"7d"},
			"having":[{"column":"orders","op":">=","value":2},{"or":[{"column":"p95","op":">","value":"100.50"},{"not":{"column":"customers","op":"in","value":[1,2]}}]}],
			"orderBy":[{"column":"day"}]}`},
		{"select_buckets_columns", `{"buckets":[{"column":"created_at","unit":"minute","every":15,"as":"q"},{"column":"due","unit":"month","as":"m"}],
			"columns":["id","q","m"],"orderBy":[{"column":"q","desc":true}],
			"filters":[{"or":[{"column":"status","op":"=","value":"paid"},{"and":[{"column":"status","op":"is_null"},{"not":{"column":"amount","op":"<","value":"0"}}]}]}],
			"timeRange":{"column":"due","last":"24h"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := BuildSelect(SelectInput{Table: ordersTable(), Tenant: "acme", Req: decodeRequest(t, tt.req), Limits: lim, TimeZones: testZones})
			if err != nil {
				t.Fatal(err)
			}
			golden.Assert(t, render(st), tt.name+".golden")
		})
	}
}

// nested returns a filter of n levels of not around a comparison.
func nested(n int) string {
	f := `{"column":"id","op":"=","value":1}`
	for range n - 1 {
		f = `{"not":` + f + `}`
	}
	return f
}

// many returns an or group of n comparisons.
func many(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = `{"column":"id","op":"=","value":1}`
	}
	return `{"or":[` + strings.Join(parts, ",") + `]}`
}

func TestBuildSelectDashboardRejects(t *testing.T) {
	tests := []struct {
		name, req, field string
	}{
		{"bucket on string", `{"buckets":[{"column":"status","unit":"day","as":"d"}],"groupBy":["d"]}`, "buckets[0].column"},
		{"bucket unknown unit", `{"buckets":[{"column":"created_at","unit":"year","as":"d"}],"groupBy":["d"]}`, "buckets[0].unit"},
		{"bucket hour on date", `{"buckets":[{"column":"due","unit":"hour","as":"d"}],"groupBy":["d"]}`, "buckets[0].unit"},
		{"bucket zone on date", `{"buckets":[{"column":"due","unit":"day","timeZone":"UTC","as":"d"}],"groupBy":["d"]}`, "buckets[0].timeZone"},
		{"bucket unknown zone", `{"buckets":[{"column":"created_at","unit":"day","timeZone":"Mars/Olympus","as":"d"}],"groupBy":["d"]}`, "buckets[0].timeZone"},
		{"bucket zone injection", `{"buckets":[{"column":"created_at","unit":"day","timeZone":"UTC') OR 1=1 --","as":"d"}],"groupBy":["d"]}`, "buckets[0].timeZone"},
		{"bucket every zero or less", `{"buckets":[{"column":"created_at","unit":"day","every":-1,"as":"d"}],"groupBy":["d"]}`, "buckets[0].every"},
		{"bucket every too big", `{"buckets":[{"column":"created_at","unit":"day","every":1001,"as":"d"}],"groupBy":["d"]}`, "buckets[0].every"},
		{"bucket name injection", "{\"buckets\":[{\"column\":\"created_at\",\"unit\":\"day\",\"as\":\"d` FROM x\"}],\"groupBy\":[\"d` FROM x\"]}", "buckets[0].as"},
		{"bucket name shadows column", `{"buckets":[{"column":"created_at","unit":"day","as":"status"}],"groupBy":["status"]}`, "buckets[0].as"},
		{"bucket twice", `{"buckets":[{"column":"created_at","unit":"day","as":"d"},{"column":"due","unit":"day","as":"d"}],"groupBy":["d"]}`, "buckets[1].as"},
		{"bucket unused", `{"buckets":[{"column":"created_at","unit":"day","as":"d"}],"groupBy":["status"],"aggregates":[{"fn":"count"}]}`, "buckets[0].as"},
		{"bucket unknown column", `{"buckets":[{"column":"nope","unit":"day","as":"d"}],"groupBy":["d"]}`, "buckets[0].column"},
		{"too many buckets", `{"buckets":[` + strings.Repeat(`{"column":"created_at","unit":"day","as":"d"},`, 8) + `{"column":"created_at","unit":"day","as":"e"}]}`, "buckets"},
		{"aggregate named as bucket", `{"buckets":[{"column":"created_at","unit":"day","as":"d"}],"groupBy":["d"],"aggregates":[{"fn":"count","as":"d"}]}`, "aggregates[0].as"},
		{"last and from", `{"timeRange":{"column":"created_at","last":"7d","from":"2024-01-01"}}`, "timeRange.last"},
		{"last bad unit", `{"timeRange":{"column":"created_at","last":"7y"}}`, "timeRange.last"},
		{"last zero", `{"timeRange":{"column":"created_at","last":"0d"}}`, "timeRange.last"},
		{"last injection", `{"timeRange":{"column":"created_at","last":"7d'); DROP TABLE orders"}}`, "timeRange.last"},
		{"last too long", `{"timeRange":{"column":"created_at","last":"9999999w"}}`, "timeRange.last"},
		{"last on string", `{"timeRange":{"column":"status","last":"7d"}}`, "timeRange.column"},
		{"empty or", `{"filters":[{"or":[]}]}`, "filters[0].or"},
		{"comparison and group", `{"filters":[{"column":"id","op":"=","value":1,"or":[{"column":"id","op":"=","value":2}]}]}`, "filters[0]"},
		{"not and or", `{"filters":[{"not":{"column":"id","op":"=","value":1},"or":[{"column":"id","op":"=","value":2}]}]}`, "filters[0]"},
		{"empty filter", `{"filters":[{}]}`, "filters[0]"},
		{"nested bad value", `{"filters":[{"or":[{"column":"id","op":"=","value":1},{"not":{"column":"id","op":"=","value":"x"}}]}]}`, "filters[0].or[1].not.value"},
		{"nested unknown column", `{"filters":[{"and":[{"column":"nope","op":"=","value":1}]}]}`, "filters[0].and[0].column"},
		{"too deep", `{"filters":[` + nested(MaxFilterDepth+1) + `]}`, "filters[0]" + strings.Repeat(".not", MaxFilterDepth)},
		{"too many nodes", `{"filters":[` + many(MaxFilterNodes) + `]}`, "filters[0].or[255]"},
		{"having without aggregates", `{"having":[{"column":"id","op":">","value":1}]}`, "having"},
		{"having on column", `{"groupBy":["status"],"aggregates":[{"fn":"count","as":"n"}],"having":[{"column":"status","op":"=","value":"paid"}]}`, "having[0].column"},
		{"having bad value", `{"groupBy":["status"],"aggregates":[{"fn":"count","as":"n"}],"having":[{"column":"n","op":">","value":"many"}]}`, "having[0].value"},
		{"having negative count", `{"groupBy":["status"],"aggregates":[{"fn":"count","as":"n"}],"having":[{"column":"n","op":">","value":-1}]}`, "having[0].value"},
		{"quantile without q", `{"aggregates":[{"fn":"quantile","column":"amount"}]}`, "aggregates[0].q"},
		{"quantile q over 1", `{"aggregates":[{"fn":"quantile","column":"amount","q":1.5}]}`, "aggregates[0].q"},
		{"quantile of string", `{"aggregates":[{"fn":"quantile","column":"status","q":0.5}]}`, "aggregates[0].column"},
		{"quantile of date", `{"aggregates":[{"fn":"quantile","column":"due","q":0.5}]}`, "aggregates[0].column"},
		{"q on sum", `{"aggregates":[{"fn":"sum","column":"amount","q":0.5}]}`, "aggregates[0].q"},
		{"uniqExact without column", `{"aggregates":[{"fn":"uniqExact"}]}`, "aggregates[0].column"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BuildSelect(SelectInput{Table: ordersTable(), Tenant: "acme", Req: decodeRequest(t, tt.req), TimeZones: testZones})
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

// TestBuildSelectDashboardBound: values of groups, having and last are
// bound parameters, never in the SQL text, and the tenant condition stays
// first whatever the groups say.
func TestBuildSelectDashboardBound(t *testing.T) {
	hostile := `x' OR 1=1 --`
	req := decodeRequest(t, `{"groupBy":["status"],"aggregates":[{"fn":"min","column":"status","as":"s"}],
		"filters":[{"or":[{"column":"status","op":"=","value":"`+hostile+`"},{"not":{"column":"customer_id","op":"like","value":"`+hostile+`"}}]}],
		"having":[{"column":"s","op":"!=","value":"`+hostile+`"}],"timeRange":{"column":"created_at","last":"1h"}}`)
	st, err := BuildSelect(SelectInput{Table: ordersTable(), Tenant: hostile, Req: req})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(st.SQL, "OR 1=1") {
		t.Fatalf("a value reached the SQL text:\n%s", st.SQL)
	}
	where := st.SQL[strings.Index(st.SQL, "WHERE"):]
	if !strings.HasPrefix(where, "WHERE `tenant_id` = {tenant:String}\n  AND `_is_deleted` = 0\n  AND (") {
		t.Fatalf("the tenant condition is not first and alone:\n%s", st.SQL)
	}
	n := 0
	for _, v := range st.Params {
		if strings.Contains(v, "OR 1=1") {
			n++
		}
	}
	if n != 4 { // tenant, two filters, having
		t.Errorf("%d parameters hold the hostile value, want 4: %v", n, st.Params)
	}
}
