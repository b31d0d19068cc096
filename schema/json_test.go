package schema

import (
	"strings"
	"testing"

	"github.com/walhouse/walhouse/record"
)

// TestJSONOverrideValues: what a JSON override takes as it is, and what
// fails its record (to the dead letters) rather than the server's insert.
func TestJSONOverrideValues(t *testing.T) {
	typ, err := override(record.Column{Name: "p", Type: "jsonb"}, Map(record.Column{Name: "p", Type: "jsonb"}, true), ColumnLayout{Type: "JSON"}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		text string
		want string // "" to load as is, else part of the error
	}{
		{`{}`, ""},
		{`{"customer": {"id": 42, "name": "Ann"}, "tags": ["a", 1, {"b": null}]}`, ""},
		{` {"a": null, "a.b": 1}`, ""}, // null is no path
		{`{"a": 18446744073709551615, "b": -9223372036854775808, "c": 1.5e300, "d": -0.0}`, ""},
		{`{"a": [{"b": 1}, {"b": 2}]}`, ""}, // each object of an array has its own paths
		{`[1, 2]`, "is an array, not an object"},
		{`42`, "is a number, not an object"},
		{`"x"`, "is a string, not an object"},
		{`null`, "is null, not an object"},
		{`true`, "is a boolean, not an object"},
		{`{"a": 1, "a": 2}`, "path a is given twice"},
		{`{"a.b": 1, "a": {"b": 2}}`, "path a.b is given twice"},
		{`{"x": [{"b": 1, "b": 2}]}`, "path b is given twice"},
		{`{"a": 100000000000000000000000000001}`, "beyond Int64 and UInt64"},
		{`{"a": -9223372036854775809}`, "beyond Int64 and UInt64"},
		{`{"a": {"b": 1e400}}`, "at a.b: number 1e400 is beyond the range of Float64"},
		{`{"a": 1`, "EOF"},
		{strings.Repeat(`{"a":`, maxJSONDepth) + `1` + strings.Repeat(`}`, maxJSONDepth), ""},
		{strings.Repeat(`{"a":`, maxJSONDepth+1) + `1` + strings.Repeat(`}`, maxJSONDepth+1), "nest more than 1000 deep"},
		{`{"x":` + strings.Repeat(`[`, maxJSONDepth-1) + strings.Repeat(`]`, maxJSONDepth-1) + `}`, ""},
		{`{"x":` + strings.Repeat(`[`, maxJSONDepth) + strings.Repeat(`]`, maxJSONDepth) + `}`, "nest more than 1000 deep"},
		{`{"x": "` + strings.Repeat(`[{`, maxJSONDepth) + `"}`, ""}, // brackets in a string nest nothing
		{`{"x": "\"{[", "y": "\\", "z": {}}`, ""},                   // an escaped quote does not end the string
		{`{"x": "\ud83d\ude00 \u00e9 \\ud800"}`, ""},                // a pair, a letter, an escaped backslash before "ud800"
		{`{"x": "\ud800"}`, `escape \ud800 is half a surrogate pair without its second half`},
		{`{"x": "\ud800\u0041"}`, "without its second half"},
		{`{"x": "\udc00"}`, "without its first half"},
		{`{"\udbff": 1}`, "without its second half"},
	} {
		v, err := typ.Convert(tc.text)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want it loaded", tc.text, err)
		case tc.want == "" && v != tc.text:
			t.Errorf("%s: converted to %#v, want the text as it is", tc.text, v)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one with %q", tc.text, err, tc.want)
		}
	}
}

// TestJSONOverrideEvolves: a table whose jsonb column is overridden as
// JSON keeps it when the column becomes json (and back), evolves nothing
// by itself, and stops when the column becomes a type JSON is not for.
func TestJSONOverrideEvolves(t *testing.T) {
	opts := Options{Database: "db", Layouts: map[string]Layout{"public.t": {Columns: map[string]ColumnLayout{"p": {Type: "JSON"}}}}}
	src := record.Source{Schema: "public", Table: "t"}
	cols := func(pgType string) []record.Column {
		return []record.Column{
			{Name: "tenant_id", Type: "text", Key: true, Attnum: 1},
			{Name: "id", Type: "int8", Key: true, Attnum: 2},
			{Name: "p", Type: pgType, Attnum: 3},
		}
	}
	first, err := NewTable(src, "tenant_id", cols("jsonb"), opts)
	if err != nil {
		t.Fatal(err)
	}
	have := created(first, 1)
	if got := have[2].Type; got != "Nullable(JSON)" {
		t.Fatalf("p is %s, want Nullable(JSON)", got)
	}
	for _, pgType := range []string{"jsonb", "json"} {
		next, err := NewTable(src, "tenant_id", cols(pgType), opts)
		if err != nil {
			t.Fatalf("%s: %v", pgType, err)
		}
		p, err := PlanEvolution(next, have, 2)
		if err != nil || len(p.Changes) != 0 || p.Columns[2].Type.DDL != "Nullable(JSON)" {
			t.Errorf("p becomes %s: plan %+v, %v; want no change, JSON kept", pgType, p, err)
		}
	}
	if _, err := NewTable(src, "tenant_id", cols("text"), opts); err == nil || !strings.Contains(err.Error(), "JSON is for json and jsonb columns") {
		t.Errorf("p becomes text: %v, want the override refused", err)
	}
}

// TestJSONCanonical: verify's canonical form of a JSON column is the same
// for PostgreSQL's text and for what ClickHouse's JSON type gives back,
// nulls, empty objects, dotted keys and number spellings aside, and
// differs for another value.
func TestJSONCanonical(t *testing.T) {
	typ, err := override(record.Column{Name: "p", Type: "jsonb"}, Map(record.Column{Name: "p", Type: "jsonb"}, true), ColumnLayout{Type: "JSON"}, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pg, ch string
		equal  bool
	}{
		{`{"b": 1, "a": {"x": "y", "n": null, "e": {}}}`, `{"a":{"x":"y"},"b":1}`, true},
		{`{"a.b": 1.50, "t": [1, null, {"c": null}]}`, `{"a":{"b":1.5},"t":[1,null,{}]}`, true},
		{`{"big": 18446744073709551615}`, `{"big":18446744073709551615}`, true},
		{`{"a": 1}`, `{"a":"1"}`, false},
		{`{"a": [1, 2]}`, `{"a":[2,1]}`, false},
	} {
		pg, err := typ.CanonicalText(&tc.pg)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := typ.Canonical(&tc.ch)
		if err != nil {
			t.Fatal(err)
		}
		if (pg == ch) != tc.equal {
			t.Errorf("%s → %s, %s → %s; want equal %v", tc.pg, pg, tc.ch, ch, tc.equal)
		}
	}
	if got, _ := typ.Canonical((*string)(nil)); got != canonicalNull {
		t.Errorf("NULL → %q", got)
	}
}
