package clickhouse

import (
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// TestKeyText writes key values of every type schema maps as ClickHouse's
// quoted text form, the elements of keysArray's parameter, and refuses
// types it cannot write exactly (whose tables keep keysParams).
func TestKeyText(t *testing.T) {
	col := func(pg string, typmod int32) schema.Type {
		return schema.Map(record.Column{Name: "k", Type: pg, TypMod: typmod, Key: true}, false)
	}
	for _, pg := range schema.PGTypes() {
		if !textExact(col(pg, -1)) {
			t.Errorf("key type %s (%s) is not written as text: add it to textExact or say why not", pg, col(pg, -1).DDL)
		}
	}
	tests := []struct {
		name string
		typ  schema.Type
		text string // PostgreSQL's text of the value
		want string
		ok   bool
	}{
		{"text", col("text", -1), "plain", `'plain'`, true},
		{"text with quotes and backslashes", col("text", -1), `it's a \ key, 'quoted' \\`, `'it\'s a \\ key, \'quoted\' \\\\'`, true},
		{"text with control characters", col("text", -1), "a\nb\tc\rd\x00e\x01", `'a\nb\tc\rd\0e` + "\x01'", true},
		{"text in unicode", col("varchar", -1), "ü日本😀", `'ü日本😀'`, true},
		{"empty text", col("text", -1), "", `''`, true},
		{"text like SQL", col("text", -1), `'), ('x', 1)] --`, `'\'), (\'x\', 1)] --'`, true},
		{"bytea", col("bytea", -1), `\x00ff5c27`, "'\\0\xff\\\\\\''", true},
		{"bool true", col("bool", -1), "t", "true", true},
		{"bool false", col("bool", -1), "f", "false", true},
		{"int2", col("int2", -1), "-32768", "-32768", true},
		{"int4", col("int4", -1), "2147483647", "2147483647", true},
		{"int8", col("int8", -1), "-9223372036854775808", "-9223372036854775808", true},
		{"oid", col("oid", -1), "4294967295", "4294967295", true},
		{"float4", col("float4", -1), "-1.5e-10", "-1.5e-10", true},
		{"float4 NaN", col("float4", -1), "NaN", "nan", true},
		{"float8", col("float8", -1), "0.1", "0.1", true},
		{"float8 large", col("float8", -1), "1e+300", "1e+300", true},
		{"float8 negative zero", col("float8", -1), "-0", "-0", true},
		{"float8 Infinity", col("float8", -1), "Infinity", "inf", true},
		{"float8 -Infinity", col("float8", -1), "-Infinity", "-inf", true},
		{"float8 NaN", col("float8", -1), "NaN", "nan", true},
		{"numeric", col("numeric", -1), "-12.50", "-12.50", true},
		{"numeric long", col("numeric", -1), "123456789.12345678901234567890123456789", "123456789.12345678901234567890123456789", true},
		{"numeric(12, 2)", col("numeric", 12<<16|2+4), "99.5", "99.5", true},
		{"numeric NaN, stored as the default", col("numeric", -1), "NaN", "0", true},
		{"date", col("date", -1), "2024-02-29", `'2024-02-29'`, true},
		{"date at the bound", col("date", -1), "1900-01-01", `'1900-01-01'`, true},
		{"timestamptz in UTC", col("timestamptz", -1), "2024-01-15 10:00:00.123456+05:30", `'2024-01-15 04:30:00.123456'`, true},
		{"timestamp whole seconds", col("timestamp", -1), "2024-01-15 10:00:00", `'2024-01-15 10:00:00'`, true},
		{"timestamp before 1970", col("timestamp", -1), "1969-12-31 23:59:59.5", `'1969-12-31 23:59:59.5'`, true},
		{"uuid", col("uuid", -1), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", `'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'`, true},
		{"LowCardinality(String)", schema.Type{DDL: "LowCardinality(String)"}, "it's", `'it\'s'`, true},
		{"an array", schema.Map(record.Column{Name: "k", Type: "int8", Array: true, TypMod: -1}, false), "{1,2}", "", false},
		{"Nullable", schema.Map(record.Column{Name: "k", Type: "int8", TypMod: -1}, true), "1", "", false},
		{"an enum", schema.Type{DDL: "Enum8('a' = 1)"}, "a", "", false},
		{"a time zone not UTC", schema.Type{DDL: "DateTime64(6, 'Europe/Paris')"}, "2024-01-15 10:00:00", "", false},
		{"a type walhouse does not map", schema.Type{DDL: "IPv6"}, "::1", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, err := tc.typ.Convert(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := keyText(tc.typ, x)
			if got != tc.want || ok != tc.ok {
				t.Errorf("keyText(%s, %q) = %q, %v; want %q, %v", tc.typ.DDL, tc.text, got, ok, tc.want, tc.ok)
			}
		})
	}
	// A value of another Go type than Convert gives for the column.
	if s, ok := keyText(col("int8", -1), "1"); ok {
		t.Errorf("keyText(Int64, a string) = %q, want refused", s)
	}
	if s, ok := keyText(col("text", -1), int64(1)); ok {
		t.Errorf("keyText(String, an int64) = %q, want refused", s)
	}
}

// TestKeysArray writes the keys of lookups as one Array(Tuple(…)) query
// parameter sent as it is, tenant first.
func TestKeysArray(t *testing.T) {
	tg := testTarget(t, "", []record.Column{
		{Name: "id", Type: "int8", TypMod: -1, Key: true},
		{Name: "day", Type: "date", TypMod: -1, Key: true},
		{Name: "big", Type: "text", TypMod: -1},
	}, nil)
	var ls []*lookup
	for _, k := range [][3]string{{`t\1'`, "5", "2024-02-29"}, {"ü", "-7", "1900-01-01"}} {
		ls = append(ls, &lookup{rec: &record.Record{TenantID: k[0]}, key: []record.Value{{Text: k[1]}, {Text: k[2]}, {Unchanged: true}}, cols: []int{2}})
	}
	keys, args, err := keysArray(tg, ls)
	if err != nil {
		t.Fatal(err)
	}
	if want := "{keys:Array(Tuple(String, Int64, Date32))}"; keys != want {
		t.Errorf("keys %s, want %s", keys, want)
	}
	want := `[('t\\1\'',5,'2024-02-29'),('ü',-7,'1900-01-01')]`
	if len(args) != 1 {
		t.Fatalf("%d arguments, want 1", len(args))
	}
	if a := args[0].(driver.NamedValue); a.Name != "keys" || a.Value != paramText(want) {
		t.Errorf("argument %s = %#v, want %s", a.Name, a.Value, want)
	}

}
