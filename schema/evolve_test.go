package schema

import (
	"strings"
	"testing"

	"github.com/walhouse/walhouse/record"
)

func TestParseTypeRoundTrips(t *testing.T) {
	for _, c := range []record.Column{
		{Type: "int2"}, {Type: "int4"}, {Type: "int8"}, {Type: "float4"}, {Type: "float8"}, {Type: "bool"},
		{Type: "numeric", TypMod: numericMod(12, 2)}, {Type: "text"}, {Type: "uuid"}, {Type: "date"},
		{Type: "timestamptz"}, {Type: "int4", Array: true}, {Type: "text", Array: true},
	} {
		for _, nullable := range []bool{false, true} {
			want := Map(c, nullable)
			got, ok := ParseType(want.DDL)
			if !ok || got.DDL != want.DDL || got.array != want.array {
				t.Errorf("ParseType(%q) = %+v, %v", want.DDL, got, ok)
			}
		}
	}
	for _, bad := range []string{"Map(String, String)", "Decimal(x, 2)", "Nullable(Int8)", "LowCardinality(String)"} {
		if _, ok := ParseType(bad); ok {
			t.Errorf("ParseType(%q) succeeded", bad)
		}
	}
}

func TestReconcile(t *testing.T) {
	m := func(typ string, typmod int32, array bool) Type {
		return Map(record.Column{Type: typ, TypMod: typmod, Array: array}, true)
	}
	tests := []struct {
		name      string
		have      Type
		want      Type
		use       string
		alter     bool
		incompat  bool
		converted any // want's text "7" (or "2024-01-02") converted with use
	}{
		{"same", m("int4", -1, false), m("int4", -1, false), "Nullable(Int32)", false, false, int32(7)},
		{"int4 to int8 widens", m("int4", -1, false), m("int8", -1, false), "Nullable(Int64)", true, false, int64(7)},
		{"int8 to int4 keeps the wider", m("int8", -1, false), m("int4", -1, false), "Nullable(Int64)", false, false, int64(7)},
		{"numeric widens", m("numeric", numericMod(10, 2), false), m("numeric", numericMod(12, 2), false), "Nullable(Decimal(12, 2))", true, false, "7"},
		{"numeric scale grows", m("numeric", numericMod(10, 2), false), m("numeric", numericMod(12, 4), false), "Nullable(Decimal(12, 4))", true, false, "7"},
		{"numeric loses integer digits", m("numeric", numericMod(12, 2), false), m("numeric", numericMod(12, 6), false), "", false, true, nil},
		{"int to text", m("int4", -1, false), m("text", -1, false), "Nullable(String)", true, false, "7"},
		{"text to int", m("text", -1, false), m("int4", -1, false), "Nullable(String)", false, false, "7"},
		{"int4 to numeric", m("int4", -1, false), m("numeric", numericMod(12, 2), false), "Nullable(Decimal(12, 2))", true, false, "7"},
		{"date to timestamp", m("date", -1, false), m("timestamptz", -1, false), "Nullable(DateTime64(6, 'UTC'))", true, false, nil},
		{"uuid to int", m("uuid", -1, false), m("int8", -1, false), "", false, true, nil},
		{"scalar to array", m("int4", -1, false), m("int4", -1, true), "", false, true, nil},
		{"bytea keeps its reader", m("bytea", -1, false), m("bytea", -1, false), "Nullable(String)", false, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			have, ok := ParseType(tc.have.DDL)
			if !ok {
				t.Fatalf("ParseType(%q) failed", tc.have.DDL)
			}
			use, alter, err := Reconcile(have, tc.want)
			if tc.incompat {
				if err == nil || !strings.Contains(err.Error(), tc.have.DDL) {
					t.Fatalf("Reconcile = %v, %v, %v; want an error naming %s", use.DDL, alter, err, tc.have.DDL)
				}
				return
			}
			if err != nil || use.DDL != tc.use || alter != tc.alter {
				t.Fatalf("Reconcile = %q, %v, %v; want %q, %v", use.DDL, alter, err, tc.use, tc.alter)
			}
			if tc.converted != nil {
				if v, err := use.Convert("7"); err != nil || v != tc.converted {
					t.Errorf("Convert(7) = %#v, %v; want %#v", v, err, tc.converted)
				}
			}
		})
	}
	bytea, _, _ := Reconcile(m("bytea", -1, false), m("bytea", -1, false))
	if v, _ := bytea.Convert(`\x41`); v != "A" {
		t.Errorf("bytea read as %q, want the decoded bytes", v)
	}
}

func TestDefaultClause(t *testing.T) {
	for _, tc := range []struct {
		col  record.Column
		text string
		want string
	}{
		{record.Column{Type: "text"}, "it's", " DEFAULT CAST('it\\'s' AS Nullable(String))"},
		{record.Column{Type: "bool"}, "f", " DEFAULT CAST('false' AS Nullable(Bool))"},
		{record.Column{Type: "int4"}, "42", " DEFAULT CAST('42' AS Nullable(Int32))"},
		{record.Column{Type: "numeric", TypMod: numericMod(8, 2)}, "1.50", " DEFAULT CAST('1.50' AS Nullable(Decimal(8, 2)))"},
		{record.Column{Type: "timestamptz"}, "2024-01-02 03:04:05+00", " DEFAULT CAST('2024-01-02 03:04:05.000000' AS Nullable(DateTime64(6, 'UTC')))"},
		{record.Column{Type: "text", Array: true}, "{a}", ""},
	} {
		got, _ := DefaultClause(Map(tc.col, true), tc.text)
		if got != tc.want {
			t.Errorf("DefaultClause(%s, %q) = %q, want %q", tc.col.Type, tc.text, got, tc.want)
		}
	}
}
