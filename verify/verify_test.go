package verify

import (
	"slices"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

func mkRow(key, val string, version uint64) row {
	r := row{keys: []string{"t", key}, cells: []string{val}, version: version}
	r.hash = hashCells(r.keys, r.cells)
	return r
}

// TestCompareBucket checks how a bucket's rows are matched: equal digests
// end it, a key whose ClickHouse version is newer than the snapshot is
// changed since, and every other difference is a suspect.
func TestCompareBucket(t *testing.T) {
	const snap = record.LSN(100)
	cases := []struct {
		name     string
		pg, ch   []row
		suspects []string
		changed  int64
		split    bool
	}{
		{"equal", []row{mkRow("1", "a", 0), mkRow("2", "b", 0)}, []row{mkRow("2", "b", 50), mkRow("1", "a", 7)}, nil, 0, false},
		{"value differs", []row{mkRow("1", "a", 0)}, []row{mkRow("1", "x", 50)}, []string{"1"}, 0, true},
		{"value differs, newer in ClickHouse", []row{mkRow("1", "a", 0)}, []row{mkRow("1", "x", 101)}, nil, 1, true},
		{"missing in ClickHouse", []row{mkRow("1", "a", 0), mkRow("2", "b", 0)}, []row{mkRow("1", "a", 5)}, []string{"2"}, 0, true},
		{"only in ClickHouse", []row{mkRow("1", "a", 0)}, []row{mkRow("1", "a", 5), mkRow("3", "c", 99)}, []string{"3"}, 0, true},
		{"only in ClickHouse, newer", nil, []row{mkRow("3", "c", 101)}, nil, 1, true},
		{"NULL against empty", []row{mkRow("1", "\x00", 0)}, []row{mkRow("1", "", 5)}, []string{"1"}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			found, changed, split := compareBucket(c.pg, c.ch, snap)
			var keys []string
			for _, s := range found {
				keys = append(keys, s.keys[1])
			}
			slices.Sort(keys)
			if !slices.Equal(keys, c.suspects) || changed != c.changed || split != c.split {
				t.Errorf("suspects %v, changed %d, split %v; want %v, %d, %v", keys, changed, split, c.suspects, c.changed, c.split)
			}
		})
	}
}

// TestKeyOf checks that keys whose parts differ never share a map key.
func TestKeyOf(t *testing.T) {
	if keyOf([]string{"a:", "b"}) == keyOf([]string{"a", ":b"}) || hashCells([]string{"ab"}, []string{"c"}) == hashCells([]string{"a"}, []string{"bc"}) {
		t.Error("keys or rows with the same concatenation collide")
	}
}

func TestFirstSortColumn(t *testing.T) {
	for in, want := range map[string]string{"tenant_id, id": "tenant_id", "`a b`, id": "a b", "`x\\`y`, id": "x`y", "id": "id"} {
		if got := firstSortColumn(in); got != want {
			t.Errorf("firstSortColumn(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPredicates checks the SQL of a bucket and of a batch of keys on
// both sides: bound parameters, casts to the columns' types.
func TestPredicates(t *testing.T) {
	typ, _ := schema.LoadedType(record.Column{Type: "int8"}, "Int64")
	txt, _ := schema.LoadedType(record.Column{Type: "text"}, "String")
	tb := &table{
		source: record.Source{Schema: "public", Table: "orders"},
		tenant: column{pg: "tenant_id", ch: "tenant_id", typ: txt, chType: "String", src: record.Column{Type: "text"}},
		keys:   []column{{pg: "id", ch: "id", typ: typ, chType: "Int64", src: record.Column{Type: "int8"}}},
		cols:   []column{{pg: "Note", ch: "Note", typ: txt, chType: "String"}},
	}
	tb.finish()
	lo, hi, tenant := "10", "20", "acme"
	pw, pargs := tb.pgWhere(bounds{tenant: &tenant, lo: &lo, hi: &hi})
	cw, params := tb.chWhere(bounds{tenant: &tenant, lo: &lo, hi: &hi})
	if pw != `"tenant_id" = $1 AND "id" > $2 AND "id" <= $3` || !slices.Equal(pargs, []string{"acme", "10", "20"}) {
		t.Errorf("pgWhere: %s %v", pw, pargs)
	}
	if cw != "`tenant_id` = CAST({t:String} AS String) AND `id` > CAST({lo:String} AS Int64) AND `id` <= CAST({hi:String} AS Int64)" || len(params) != 3 {
		t.Errorf("chWhere: %s %v", cw, params)
	}
	pw, pargs, cw, params = tb.keysWhere([][]string{{"acme", "1"}, {"b'c", "2"}})
	if pw != `("tenant_id", "id") IN (VALUES ($1::"text", $2::"int8"), ($3::"text", $4::"int8"))` || !slices.Equal(pargs, []string{"acme", "1", "b'c", "2"}) {
		t.Errorf("keysWhere PostgreSQL: %s %v", pw, pargs)
	}
	if cw != "(`tenant_id`, `id`) IN (tuple(CAST({k0_0:String} AS String), CAST({k0_1:String} AS Int64)), tuple(CAST({k1_0:String} AS String), CAST({k1_1:String} AS Int64)))" || len(params) != 4 {
		t.Errorf("keysWhere ClickHouse: %s %v", cw, params)
	}
	if got := tb.pgSelect(); got != `"tenant_id", "id", "Note"` {
		t.Errorf("pgSelect: %s", got)
	}
}

// TestPredicatesFloatKeys: a float key's canonical form (its bits) is
// looked up as its decimal text on both sides, and a NaN key as isNaN in
// ClickHouse (IN would miss it where parts are pruned by statistics).
func TestPredicatesFloatKeys(t *testing.T) {
	txt, _ := schema.LoadedType(record.Column{Type: "text"}, "String")
	f8, _ := schema.LoadedType(record.Column{Type: "float8"}, "Float64")
	f4, _ := schema.LoadedType(record.Column{Type: "float4"}, "Float32")
	tb := &table{
		source: record.Source{Schema: "public", Table: "m"},
		tenant: column{pg: "tenant_id", ch: "tenant_id", typ: txt, chType: "String", src: record.Column{Type: "text"}},
		keys: []column{
			{pg: "k", ch: "k", typ: f8, chType: "Float64", src: record.Column{Type: "float8"}},
			{pg: "r", ch: "r", typ: f4, chType: "Float32", src: record.Column{Type: "float4"}},
		},
	}
	tb.finish()
	canon := func(typ schema.Type, s string) string {
		c, err := typ.CanonicalText(&s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	keys := [][]string{{"a", canon(f8, "4.5"), canon(f4, "1.5")}, {"a", canon(f8, "NaN"), canon(f4, "1.5")}}
	pw, pargs, cw, params := tb.keysWhere(keys)
	if want := []string{"a", "4.5", "1.5", "a", "NaN", "1.5"}; !slices.Equal(pargs, want) {
		t.Errorf("keysWhere PostgreSQL: %s %v, want the arguments %v", pw, pargs, want)
	}
	want := "(`tenant_id`, `k`, `r`) IN (tuple(CAST({k0_0:String} AS String), CAST({k0_1:String} AS Float64), CAST({k0_2:String} AS Float32)))" +
		" OR (`tenant_id` = CAST({k1_0:String} AS String) AND isNaN(`k`) AND `r` = CAST({k1_2:String} AS Float32))"
	if cw != want || params["k0_1"] != "4.5" || params["k1_2"] != "1.5" || len(params) != 5 {
		t.Errorf("keysWhere ClickHouse:\n%s %v\nwant\n%s", cw, params, want)
	}
	_, pargs, cw, _ = tb.keyWhere(keys[1])
	if !slices.Equal(pargs, []string{"a", "NaN", "1.5"}) || !strings.Contains(cw, "isNaN(`k`)") {
		t.Errorf("keyWhere: %v %s", pargs, cw)
	}
}

// TestArrayKeyOutOfRange: a key array holding a date beyond ClickHouse's
// range is treated as a scalar key beyond it: PostgreSQL's text kept as
// its canonical form matches no ClickHouse row, it is not looked up in
// ClickHouse (which may refuse its text), and repair leaves it out.
func TestArrayKeyOutOfRange(t *testing.T) {
	txt, _ := schema.LoadedType(record.Column{Type: "text"}, "String")
	days, _ := schema.LoadedType(record.Column{Type: "date", Array: true}, "Array(Nullable(Date32))")
	tb := &table{
		source: record.Source{Schema: "public", Table: "d"},
		tenant: column{pg: "tenant_id", ch: "tenant_id", typ: txt, chType: "String", src: record.Column{Type: "text"}},
		keys:   []column{{pg: "days", ch: "days", typ: days, chType: "Array(Nullable(Date32))", src: record.Column{Type: "_date"}}},
	}
	tb.finish()
	_, _, cw, params := tb.keysWhere([][]string{{"a", "{2024-01-01,1800-01-01}"}})
	if cw != "0" || len(params) != 0 {
		t.Errorf("keysWhere ClickHouse: %s %v; want no lookup", cw, params)
	}
	if col, ok := tb.keyOutOfRange([]string{"a", "{infinity}"}); !ok || col != "days" {
		t.Errorf("keyOutOfRange: %q %v, want days", col, ok)
	}
	if _, ok := tb.keyOutOfRange([]string{"a", "{2024-01-01}"}); ok {
		t.Error("keyOutOfRange: an array within the range reported")
	}
}
