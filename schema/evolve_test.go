package schema

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/record"
)

// TestEveryTypeRoundTrips goes through the type table: every PostgreSQL
// type it names, scalar and array, Nullable or not, must map to a
// ClickHouse type that reads back as itself and reconciles with itself
// without a change (so a table walhouse created never evolves by itself),
// and its example value must convert.
func TestEveryTypeRoundTrips(t *testing.T) {
	for k, s := range scalars {
		if s.ch == "" || len(s.pg) == 0 != s.overrideOnly || s.conv.one == nil || s.conv.many == nil || s.example == "" {
			t.Errorf("kind %d has no complete entry in the type table: %+v", k, s)
			continue
		}
		for _, name := range s.pg {
			if got, ok := kindOf(name); !ok || got != kind(k) {
				t.Errorf("%s is in the table twice (kinds %d and %d)", name, got, k)
			}
			for _, array := range []bool{false, true} {
				for _, nullable := range []bool{false, true} {
					want := Map(record.Column{Type: name, TypMod: -1, Array: array}, nullable)
					have, ok := parseType(want.DDL)
					if !ok || have.DDL != want.DDL || have.array != array || want.Fallback != "" {
						t.Errorf("parseType(%q) = %+v, %v (mapped from %s)", want.DDL, have, ok, name)
						continue
					}
					use, alter, err := reconcile(have, want)
					if err != nil || alter || use.DDL != want.DDL {
						t.Errorf("%s: reconcile(%s, itself) = %q, %v, %v; want it kept", name, want.DDL, use.DDL, alter, err)
					}
				}
			}
			scalar := Map(record.Column{Type: name, TypMod: -1}, true)
			if v, err := scalar.Convert(s.example); err != nil || v == nil {
				t.Errorf("%s: Convert(%q) = %#v, %v", name, s.example, v, err)
			}
			if _, ok := defaultClause(scalar, s.example); !ok {
				t.Errorf("%s: no DEFAULT clause for %q", name, s.example)
			}
			array := Map(record.Column{Type: name, TypMod: -1, Array: true}, true)
			quoted := `{"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s.example) + `",NULL}`
			if v, err := array.Convert(quoted); err != nil {
				t.Errorf("%s[]: Convert(%q): %v", name, quoted, err)
			} else if n := reflect.ValueOf(v).Len(); n != 2 {
				t.Errorf("%s[]: Convert(%q) has %d elements, want 2", name, quoted, n)
			}
			if v := array.Null(); v == nil {
				t.Errorf("%s[]: NULL is nil, want an empty array", name)
			}
		}
	}
	for _, bad := range []string{"Map(String, String)", "Decimal(x, 2)", "Decimal", "Nullable(Int8)", "LowCardinality(FixedString(8))", ""} {
		if _, ok := parseType(bad); ok {
			t.Errorf("parseType(%q) succeeded", bad)
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
		{"int8 to a numeric too narrow", m("int8", -1, false), m("numeric", numericMod(12, 2), false), "", false, true, nil},
		{"date to timestamp", m("date", -1, false), m("timestamptz", -1, false), "Nullable(DateTime64(6, 'UTC'))", true, false, nil},
		{"timestamp to timestamptz", m("timestamp", -1, false), m("timestamptz", -1, false), "Nullable(DateTime64(6, 'UTC'))", false, false, nil},
		{"uuid to int", m("uuid", -1, false), m("int8", -1, false), "", false, true, nil},
		{"scalar to array", m("int4", -1, false), m("int4", -1, true), "", false, true, nil},
		{"bytea keeps its reader", m("bytea", -1, false), m("bytea", -1, false), "Nullable(String)", false, false, nil},
		{"key becomes nullable", Map(record.Column{Type: "int4"}, false), m("int4", -1, false), "Nullable(Int32)", true, false, int32(7)},
		{"nullable becomes key", m("int4", -1, false), Map(record.Column{Type: "int4"}, false), "Nullable(Int32)", false, false, int32(7)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			have, ok := parseType(tc.have.DDL)
			if !ok {
				t.Fatalf("parseType(%q) failed", tc.have.DDL)
			}
			use, alter, err := reconcile(have, tc.want)
			if tc.incompat {
				if err == nil || !strings.Contains(err.Error(), tc.have.DDL) {
					t.Fatalf("reconcile = %v, %v, %v; want an error naming %s", use.DDL, alter, err, tc.have.DDL)
				}
				return
			}
			if err != nil || use.DDL != tc.use || alter != tc.alter {
				t.Fatalf("reconcile = %q, %v, %v; want %q, %v", use.DDL, alter, err, tc.use, tc.alter)
			}
			if tc.converted != nil {
				if v, err := use.Convert("7"); err != nil || v != tc.converted {
					t.Errorf("Convert(7) = %#v, %v; want %#v", v, err, tc.converted)
				}
			}
		})
	}
	bytea, _, _ := reconcile(m("bytea", -1, false), m("bytea", -1, false))
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
		{record.Column{Type: "numeric", TypMod: numericMod(8, 2)}, "NaN", ""},
		{record.Column{Type: "timestamptz"}, "2024-01-02 03:04:05+00", " DEFAULT CAST('2024-01-02 03:04:05.000000' AS Nullable(DateTime64(6, 'UTC')))"},
		{record.Column{Type: "text", Array: true}, "{a}", ""},
	} {
		got, _ := defaultClause(Map(tc.col, true), tc.text)
		if got != tc.want {
			t.Errorf("defaultClause(%s, %q) = %q, want %q", tc.col.Type, tc.text, got, tc.want)
		}
	}
}

// LSNs of successive source shapes in the plan tests.
const (
	lsn1 record.LSN = 0x1000
	lsn2 record.LSN = 0x2000
	lsn3 record.LSN = 0x3000
)

// planTable is the shape of public.orders the plan tests start from: a
// tenant column, a key and five columns with their attnums.
func planTable(t *testing.T, edit func([]record.Column) []record.Column) *Table {
	t.Helper()
	cols := []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "qty", Type: "int4", TypMod: -1, Attnum: 3},
		{Name: "price", Type: "numeric", TypMod: numericMod(10, 2), Attnum: 4},
		{Name: "note", Type: "varchar", TypMod: 20 + 4, Attnum: 5},
		{Name: "legacy", Type: "text", TypMod: -1, Attnum: 6},
	}
	if edit != nil {
		cols = edit(cols)
	}
	tbl, err := NewTable(record.Source{Schema: "public", Table: "orders"}, "tenant_id", cols, Options{Database: "walhouse"})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// created lists the columns of t's table as CreateDDL makes them at lsn.
func created(t *Table, lsn record.LSN) []ExistingColumn {
	var out []ExistingColumn
	for _, c := range t.Columns {
		out = append(out, ExistingColumn{Name: c.Name, Type: c.Type.DDL, Comment: notes(c.Source.Attnum, lsn, false)})
	}
	return append(out,
		ExistingColumn{Name: VersionColumn, Type: "UInt64"},
		ExistingColumn{Name: DeletedColumn, Type: "UInt8"},
		ExistingColumn{Name: CommitColumn, Type: "DateTime64(6, 'UTC')"},
		ExistingColumn{Name: SyncedColumn, Type: "DateTime64(6, 'UTC')"})
}

// notes is a column comment as system.columns shows it.
func notes(attnum int16, lsn record.LSN, dropped bool) string {
	if attnum == 0 {
		return ""
	}
	s := fmt.Sprintf("walhouse:attnum=%d,lsn=%s", attnum, lsn)
	if dropped {
		s += ",dropped"
	}
	return s
}

// column finds a column of have, for a test to change it.
func column(have []ExistingColumn, name string) *ExistingColumn {
	for i := range have {
		if have[i].Name == name {
			return &have[i]
		}
	}
	panic("no column " + name)
}

func drop(name string) func([]record.Column) []record.Column {
	return func(cols []record.Column) []record.Column {
		out := cols[:0:0]
		for _, c := range cols {
			if c.Name != name {
				out = append(out, c)
			}
		}
		return out
	}
}

func rename(from, to string) func([]record.Column) []record.Column {
	return func(cols []record.Column) []record.Column {
		for i := range cols {
			if cols[i].Name == from {
				cols[i].Name = to
			}
		}
		return cols
	}
}

func retype(name, typ string, typmod int32) func([]record.Column) []record.Column {
	return func(cols []record.Column) []record.Column {
		for i := range cols {
			if cols[i].Name == name {
				cols[i].Type, cols[i].TypMod = typ, typmod
			}
		}
		return cols
	}
}

func edits(fs ...func([]record.Column) []record.Column) func([]record.Column) []record.Column {
	return func(cols []record.Column) []record.Column {
		for _, f := range fs {
			cols = f(cols)
		}
		return cols
	}
}

// TestPlanEvolution checks the plan for each kind of source schema change
// against testdata/evolve_*.golden: where each source column goes and the
// statements, or the incompatible change's error.
func TestPlanEvolution(t *testing.T) {
	dflt, arr := "dflt", "{1,2}"
	base := created(planTable(t, nil), lsn1)
	tests := []struct {
		name string
		have []ExistingColumn // nil: base
		edit func([]record.Column) []record.Column
		lsn  record.LSN
	}{
		{name: "unchanged", lsn: lsn2},
		{name: "add", lsn: lsn2, edit: func(cols []record.Column) []record.Column {
			return append(cols,
				record.Column{Name: "extra", Type: "text", TypMod: -1, Attnum: 7, Missing: &dflt},
				record.Column{Name: "we`ird \\ name", Type: "int4", TypMod: -1, Attnum: 8},
				record.Column{Name: "tags", Type: "int4", TypMod: -1, Array: true, Attnum: 9, Missing: &arr})
		}},
		{name: "rename", lsn: lsn2, edit: rename("note", "remark")},
		{name: "rename_seen_by_older_shape", lsn: lsn1, edit: nil, have: func() []ExistingColumn {
			have := created(planTable(t, rename("note", "remark")), lsn2)
			return have
		}()},
		{name: "rename_onto_existing_column", lsn: lsn2, edit: edits(drop("legacy"), rename("note", "legacy"))},
		{name: "widen", lsn: lsn2, edit: edits(retype("qty", "int8", -1), retype("price", "numeric", numericMod(16, 4)), retype("note", "text", -1))},
		{name: "narrower_kept", lsn: lsn2, edit: edits(retype("qty", "int2", -1), retype("price", "numeric", numericMod(8, 2)))},
		{name: "incompatible_type", lsn: lsn2, edit: retype("qty", "uuid", -1)},
		{name: "drop", lsn: lsn2, edit: drop("legacy")},
		{name: "drop_seen_by_older_shape", lsn: lsn1, edit: drop("legacy"), have: func() []ExistingColumn {
			have := created(planTable(t, nil), lsn1)
			column(have, "legacy").Comment = notes(6, lsn2, false)
			return have
		}()},
		{name: "drop_already_marked", lsn: lsn3, edit: drop("legacy"), have: func() []ExistingColumn {
			have := created(planTable(t, nil), lsn1)
			column(have, "legacy").Comment = notes(6, lsn2, true)
			return have
		}()},
		{name: "attnum_unknown", lsn: lsn2, have: func() []ExistingColumn {
			have := created(planTable(t, nil), lsn1)
			column(have, "qty").Comment = ""
			column(have, "note").Comment = "a user's own comment"
			return have
		}()},
		{name: "foreign_type", lsn: lsn2, have: func() []ExistingColumn {
			have := created(planTable(t, nil), lsn1)
			column(have, "note").Type = "FixedString(8)"
			return have
		}()},
		// The changes of TestIntegrationSchemaChanges (harness/e2e), seen
		// in one shape.
		{name: "all_at_once", lsn: lsn3, edit: edits(drop("legacy"), rename("note", "remark"),
			retype("qty", "int8", -1), retype("price", "numeric", numericMod(16, 4)), retype("remark", "text", -1),
			func(cols []record.Column) []record.Column {
				return append(cols, record.Column{Name: "extra", Type: "text", TypMod: -1, Attnum: 7, Missing: &dflt})
			})},
	}
	// Each plan on one server (evolve_<name>) and on a cluster
	// (evolve_cluster_<name>: each change ON CLUSTER to the local tables,
	// then to the Distributed table).
	for _, tc := range tests {
		for _, cluster := range []string{"", "main"} {
			name := tc.name
			if cluster != "" {
				name = "cluster_" + name
			}
			t.Run(name, func(t *testing.T) {
				have := tc.have
				if have == nil {
					have = base
				}
				tbl := planTable(t, tc.edit)
				tbl.Cluster = cluster
				planGolden(t, name, tbl, have, tc.lsn)
			})
		}
	}
}

// planGolden compares the plan that brings have to tbl at lsn (or its
// *IncompatibleError) with testdata/evolve_<name>.golden.
func planGolden(t *testing.T, name string, tbl *Table, have []ExistingColumn, lsn record.LSN) {
	t.Helper()
	p, err := PlanEvolution(tbl, have, lsn)
	var got string
	var ie *IncompatibleError
	switch {
	case errors.As(err, &ie):
		got = fmt.Sprintf("-- incompatible: column %s\n%v\n", ie.Column, ie)
	case err != nil:
		t.Fatalf("PlanEvolution: %v, want a plan or an *IncompatibleError", err)
	default:
		got = p.String()
	}
	golden(t, "evolve_"+name, got)
}

// TestPlanFailed checks which failed statements stop the table: a rename
// or widening ClickHouse refuses leaves it unable to take the new shape;
// anything else is worth a retry.
func TestPlanFailed(t *testing.T) {
	tbl := planTable(t, edits(rename("note", "remark"), retype("qty", "int8", -1), func(cols []record.Column) []record.Column {
		return append(cols, record.Column{Name: "extra", Type: "text", TypMod: -1, Attnum: 7})
	}))
	p, err := PlanEvolution(tbl, created(planTable(t, nil), lsn1), lsn2)
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("server said no")
	stops := map[Op]bool{RenameColumn: true, WidenColumn: true, AddColumn: false, NoteColumn: false}
	for op, want := range stops {
		i := -1
		for j, c := range p.Changes {
			if c.Op == op {
				i = j
			}
		}
		if i < 0 {
			t.Fatalf("the plan has no %v:\n%s", op, p)
		}
		err := p.Failed(p.Changes[i], cause)
		var ie *IncompatibleError
		if errors.As(err, &ie) != want || !errors.Is(err, cause) {
			t.Errorf("%v failed: %v; want incompatible %v, wrapping the cause", op, err, want)
		}
		if want && (ie.Column == "" || !strings.Contains(ie.Fix, "--resnapshot public.orders")) {
			t.Errorf("%v failed: column %q, fix %q", op, ie.Column, ie.Fix)
		}
	}
}
