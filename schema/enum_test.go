package schema

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/record"
)

func enumColumn(labels ...string) record.Column {
	return record.Column{Name: "status", Type: "order_status", Enum: true, TypMod: -1, Attnum: 3, Labels: labels}
}

func numbered(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("l%d", i)
	}
	return out
}

// TestEnumOverride: the ClickHouse type an Enum override builds from an
// enum's labels, numbered 1..n in PostgreSQL's order, and what it refuses.
func TestEnumOverride(t *testing.T) {
	for _, tc := range []struct {
		name     string
		col      record.Column
		override string
		want     string // the DDL, or part of the error
		fails    bool
	}{
		{"Enum8", enumColumn("new", "paid", "shipped"), "Enum8", "Nullable(Enum8('new' = 1, 'paid' = 2, 'shipped' = 3))", false},
		{"Enum16", enumColumn("new", "paid"), "Enum16", "Nullable(Enum16('new' = 1, 'paid' = 2))", false},
		{"Enum picks Enum8", enumColumn(numbered(127)...), "Enum", "Nullable(Enum8('l0' = 1, ", false},
		{"Enum picks Enum16", enumColumn(numbered(128)...), "Enum", "Nullable(Enum16('l0' = 1, ", false},
		{"Enum8 over 127", enumColumn(numbered(128)...), "Enum8", "more than the 127 an Enum8 holds: use Enum16", true},
		{"Enum16 over", enumColumn(numbered(enum16Max + 1)...), "Enum16", "use LowCardinality(String)", true},
		{"text", record.Column{Name: "status", Type: "text", TypMod: -1}, "Enum8", "status is text, not a PostgreSQL enum", true},
		{"enum array", record.Column{Name: "status", Type: "order_status", Enum: true, Array: true, TypMod: -1}, "Enum8", "is an array", true},
		{"no labels", enumColumn(), "Enum8", "give capture the same layout", true},
	} {
		got, err := override(tc.col, Map(tc.col, true), ColumnLayout{Type: tc.override}, true)
		switch {
		case tc.fails && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		case !tc.fails && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.fails && !strings.HasPrefix(got.DDL, tc.want):
			t.Errorf("%s: %s, want %s", tc.name, got.DDL, tc.want)
		case !tc.fails:
			back, ok := parseType(got.DDL)
			if !ok || back.DDL != got.DDL || len(back.enum) != len(tc.col.Labels) {
				t.Errorf("%s: parseType(%s) = %+v, %v", tc.name, got.DDL, back, ok)
				continue
			}
			for i, l := range back.enum {
				if l.name != tc.col.Labels[i] || l.value != i+1 {
					t.Errorf("%s: label %d read back as %q = %d", tc.name, i, l.name, l.value)
				}
			}
		}
	}
}

// TestEnumLabelsLeftOut: labels with a quote, a backslash or a control
// character are left out of the Enum (clickhouse-go misreads the labels
// after one), keeping the others' numbers; their values fail their
// records naming LowCardinality(String).
func TestEnumLabelsLeftOut(t *testing.T) {
	c := enumColumn(`it's`, "ok", `a\b`, "", "tab\there", "glad")
	typ, err := override(c, Map(c, true), ColumnLayout{Type: "Enum8"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Nullable(Enum8('ok' = 2, '' = 4, 'glad' = 6))"; typ.DDL != want {
		t.Errorf("%s, want %s", typ.DDL, want)
	}
	if _, err := typ.Convert("it's"); err == nil || !strings.Contains(err.Error(), "LowCardinality(String)") {
		t.Errorf("it's: %v, want an error naming LowCardinality(String)", err)
	}
	if _, err := override(enumColumn(`it's`), Map(c, true), ColumnLayout{Type: "Enum8"}, true); err == nil {
		t.Error("an enum of no readable label: accepted")
	}
	renamed, _ := enumOverride(enumColumn("ok", `gl'ad`), 8, true)
	have, _ := parseType("Nullable(Enum8('ok' = 1, 'glad' = 2))")
	for _, newer := range []bool{false, true} {
		// Renamed to gl'ad, or an older shape (a copy's records may carry
		// more labels than the stream's first ones): the column is kept.
		if use, alter, _, err := reconcileEnum(have, renamed, newer); err != nil || alter || use.DDL != have.DDL {
			t.Errorf("a shape without glad (newer %v): %s, %v, %v; want the column kept", newer, use.DDL, alter, err)
		}
	}
}

// TestParseEnumAsClickHouseWritesIt: system.columns writes labels with
// ClickHouse's escapes, in any order of numbers; what is no Enum fails.
func TestParseEnumAsClickHouseWritesIt(t *testing.T) {
	typ, ok := parseType(`Nullable(Enum8('a\'b' = 1, 'x\\y' = 2, 'tab\there' = 3, 'late' = 7, 'new\nline' = -1))`)
	if !ok {
		t.Fatal("not read")
	}
	want := []enumLabel{{"a'b", 1}, {`x\y`, 2}, {"tab\there", 3}, {"late", 7}, {"new\nline", -1}}
	if fmt.Sprint(typ.enum) != fmt.Sprint(want) || typ.enumBits != 8 || !typ.nullable() {
		t.Errorf("read %v (Enum%d, nullable %v), want %v", typ.enum, typ.enumBits, typ.nullable(), want)
	}
	for _, bad := range []string{"Enum8()", "Enum8('a')", "Enum8('a' = x)", "Enum8('a' = 1", "Enum8('a' = 1, 'a' = 2)", "Enum8('a' = 1) x", "Array(Nullable(Enum8('a' = 1)))", "Enum32('a' = 1)"} {
		if _, ok := parseType(bad); ok {
			t.Errorf("parseType(%q) succeeded", bad)
		}
	}
}

// TestEnumValues: a label of the column's Enum loads as it is; a value it
// lacks fails its record (to the dead letters), naming the fix.
func TestEnumValues(t *testing.T) {
	typ, err := override(enumColumn("new", "paid"), Map(enumColumn("new", "paid"), true), ColumnLayout{Type: "Enum8"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := typ.Convert("paid"); err != nil || v != "paid" {
		t.Errorf("paid: %#v, %v", v, err)
	}
	if _, err := typ.Convert("refunded"); err == nil || !strings.Contains(err.Error(), "LowCardinality(String)") {
		t.Errorf("refunded: %v, want an error naming LowCardinality(String)", err)
	}
	vals, _ := typ.NewValues(2)
	if held, err := vals.Append("new"); !held || err != nil {
		t.Errorf("Values.Append(new) = %v, %v", held, err)
	}
	if _, err := vals.Append("nope"); err == nil {
		t.Error("Values.Append(nope) succeeded")
	}
	if got, _ := typ.CanonicalText(ptr("paid")); got != "paid" {
		t.Errorf("canonical form of paid = %q", got)
	}
}

func ptr(s string) *string { return &s }

// TestReconcileEnum: an Enum column gains the labels its enum gained,
// keeping every existing label's number; an older shape changes nothing;
// a renamed label and an Enum8 beyond 127 are incompatible.
func TestReconcileEnum(t *testing.T) {
	col := func(ddl string) Type {
		typ, ok := parseType(ddl)
		if !ok {
			t.Fatalf("parseType(%s)", ddl)
		}
		return typ
	}
	want := func(bits int, labels ...string) Type {
		typ, err := enumOverride(enumColumn(labels...), bits, true)
		if err != nil {
			t.Fatal(err)
		}
		return typ
	}
	for _, tc := range []struct {
		name  string
		have  Type
		want  Type
		use   string // "" for an error
		alter bool
	}{
		{"the same", col("Nullable(Enum8('a' = 1, 'b' = 2))"), want(8, "a", "b"), "Nullable(Enum8('a' = 1, 'b' = 2))", false},
		{"added at the end", col("Nullable(Enum8('a' = 1, 'b' = 2))"), want(8, "a", "b", "c"), "Nullable(Enum8('a' = 1, 'b' = 2, 'c' = 3))", true},
		{"added before b", col("Nullable(Enum8('a' = 1, 'b' = 2))"), want(8, "a", "c", "b", "d"), "Nullable(Enum8('a' = 1, 'b' = 2, 'c' = 3, 'd' = 4))", true},
		{"an older shape", col("Nullable(Enum8('a' = 1, 'b' = 2, 'c' = 3))"), want(8, "a", "b"), "Nullable(Enum8('a' = 1, 'b' = 2, 'c' = 3))", false},
		{"numbers of ClickHouse kept", col("Nullable(Enum8('b' = 5, 'a' = 9))"), want(8, "a", "b", "c"), "Nullable(Enum8('b' = 5, 'a' = 9, 'c' = 10))", true},
		{"to Enum16", col("Nullable(Enum8('a' = 1, 'b' = 2))"), want(16, "a", "b"), "Nullable(Enum16('a' = 1, 'b' = 2))", true},
		{"Enum16 kept under Enum8", col("Nullable(Enum16('a' = 1, 'b' = 2))"), want(8, "a", "b"), "Nullable(Enum16('a' = 1, 'b' = 2))", false},
		{"renamed", col("Nullable(Enum8('a' = 1, 'b' = 2))"), want(8, "z", "b"), "Nullable(Enum8('z' = 1, 'b' = 2))", true},
		{"two renamed", col("Nullable(Enum8('a' = 1, 'b' = 2))"), want(8, "y", "z"), "", false},
		{"renamed and added", col("Nullable(Enum8('a' = 1, 'b' = 2))"), want(8, "a", "y", "z"), "", false},
		{"Enum8 full", col("Nullable(Enum8('a' = 127))"), want(8, "a", "b"), "", false},
		{"Enum8 to Enum16 past 127", col(enum8DDL(127)), want(0, append(numbered(127), "new")...), "Nullable(Enum16(", true},
	} {
		use, alter, _, err := reconcileEnum(tc.have, tc.want, tc.name != "an older shape")
		switch {
		case tc.use == "" && err == nil:
			t.Errorf("%s: %s, want an error", tc.name, use.DDL)
		case tc.use != "" && (err != nil || !strings.HasPrefix(use.DDL, tc.use) || alter != tc.alter):
			t.Errorf("%s: %s, alter %v, %v; want %s, alter %v", tc.name, use.DDL, alter, err, tc.use, tc.alter)
		}
	}
	if _, _, _, err := reconcileEnum(col("Nullable(Enum8('a' = 127))"), want(8, "a", "b"), true); err == nil || !strings.Contains(err.Error(), "beyond the 127 an Enum8 holds") {
		t.Errorf("Enum8 full: %v", err)
	}
	if _, _, _, err := reconcileEnum(col("Nullable(Enum8('a' = 1, 'b' = 2))"), want(8, "y", "z"), true); !errors.Is(err, errEnumRenamed) {
		t.Errorf("two renamed: %v, want errEnumRenamed", err)
	}
	// A String column made before the override holds every label: kept.
	if use, alter, err := reconcile(col("Nullable(String)"), want(8, "a")); err != nil || alter || use.DDL != "Nullable(String)" {
		t.Errorf("String under Enum8: %s, %v, %v; want it kept", use.DDL, alter, err)
	}
}

func enum8DDL(n int) string {
	typ, _ := enumOverride(enumColumn(numbered(n)...), 8, true)
	return typ.DDL
}

// TestEnumOverrideEvolves: a table whose enum column is an Enum widens it
// with ALTER TABLE ... MODIFY COLUMN when the enum gains a label, and
// renames a label in place when one is renamed, stops (incompatible)
// when more are renamed at once or the column becomes text.
func TestEnumOverrideEvolves(t *testing.T) {
	opts := Options{Database: "db", Layouts: map[string]Layout{"public.t": {Columns: map[string]ColumnLayout{"status": {Type: "Enum8"}}}}}
	src := record.Source{Schema: "public", Table: "t"}
	cols := func(status record.Column) []record.Column {
		return []record.Column{
			{Name: "tenant_id", Type: "text", Key: true, Attnum: 1},
			{Name: "id", Type: "int8", Key: true, Attnum: 2},
			status,
		}
	}
	first, err := NewTable(src, "tenant_id", cols(enumColumn("new", "paid")), opts)
	if err != nil {
		t.Fatal(err)
	}
	have := created(first, 1)
	if got := have[2].Type; got != "Nullable(Enum8('new' = 1, 'paid' = 2))" {
		t.Fatalf("status is %s", got)
	}
	next, err := NewTable(src, "tenant_id", cols(enumColumn("new", "refunded", "paid")), opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := PlanEvolution(next, have, 2)
	if err != nil || len(p.Changes) != 2 || p.Changes[0].Op != WidenColumn || p.Changes[1].Op != NoteColumn {
		t.Fatalf("refunded added: plan %+v, %v; want the column widened", p, err)
	}
	if want := "ALTER TABLE `db`.`t` MODIFY COLUMN `status` Nullable(Enum8('new' = 1, 'paid' = 2, 'refunded' = 3))"; p.Changes[0].SQL != want {
		t.Errorf("widen: %s\nwant %s", p.Changes[0].SQL, want)
	}
	if v, err := p.Columns[2].Type.Convert("refunded"); err != nil || v != "refunded" {
		t.Errorf("refunded converts to %v, %v", v, err)
	}
	// RENAME VALUE 'paid' TO 'settled': renamed in place, keeping its
	// number, and noted, so that an older shape loads paid as settled.
	have = created(first, 1)
	renamed, err := NewTable(src, "tenant_id", cols(enumColumn("new", "settled")), opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err = PlanEvolution(renamed, have, 3)
	if err != nil || len(p.Changes) != 2 || p.Changes[0].Op != WidenColumn || p.Changes[1].Op != NoteColumn {
		t.Fatalf("paid renamed: plan %+v, %v; want the label renamed and the column noted", p, err)
	}
	if want := "ALTER TABLE `db`.`t` MODIFY COLUMN `status` Nullable(Enum8('new' = 1, 'settled' = 2))"; p.Changes[0].SQL != want {
		t.Errorf("rename: %s\nwant %s", p.Changes[0].SQL, want)
	}
	have[2].Type = p.Columns[2].Type.DDL
	have[2].Comment = "walhouse:attnum=3,lsn=0/3"
	older, err := PlanEvolution(first, have, 2)
	if err != nil || len(older.Changes) != 0 {
		t.Fatalf("the older shape: plan %+v, %v; want no change", older, err)
	}
	if v, err := older.Columns[2].Type.Convert("paid"); err != nil || v != "settled" {
		t.Errorf("the older shape's paid converts to %v, %v; want settled", v, err)
	}
	var ie *IncompatibleError
	twice, err := NewTable(src, "tenant_id", cols(enumColumn("fresh", "done")), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PlanEvolution(twice, created(first, 1), 3); !errors.As(err, &ie) || !errors.Is(err, errEnumRenamed) {
		t.Errorf("both renamed: %v, want an IncompatibleError", err)
	}
	if _, err := NewTable(src, "tenant_id", cols(record.Column{Name: "status", Type: "text", TypMod: -1, Attnum: 3}), opts); !errors.As(err, &ie) {
		t.Errorf("status becomes text: %v, want the override refused", err)
	}
}

// TestLayoutCheckEnum: config check takes Enum8, Enum16 and Enum, and
// refuses a hand-written Enum type and clamp.
func TestLayoutCheckEnum(t *testing.T) {
	for _, tc := range []struct {
		o  ColumnLayout
		ok bool
	}{
		{ColumnLayout{Type: "Enum8"}, true},
		{ColumnLayout{Type: "Enum16"}, true},
		{ColumnLayout{Type: "Enum", OnOverflow: "dead_letter"}, true},
		{ColumnLayout{Type: "Enum8('a' = 1)"}, false},
		{ColumnLayout{Type: "Enum32"}, false},
		{ColumnLayout{Type: "Enum8", OnOverflow: "clamp"}, false},
	} {
		err := Layout{Columns: map[string]ColumnLayout{"status": tc.o}}.Check()
		if (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok %v", tc.o, err, tc.ok)
		}
	}
}

// TestEnumLoadedType: verify reads an Enum column back as its type, whose
// values compare as their labels.
func TestEnumLoadedType(t *testing.T) {
	typ, ok := LoadedType(enumColumn("a", "b"), "Nullable(Enum8('a' = 1, 'b' = 2))")
	if !ok || typ.kind != kEnum {
		t.Fatalf("LoadedType = %+v, %v", typ, ok)
	}
	for _, v := range []any{"b", ptr("b")} {
		if got, err := typ.Canonical(v); err != nil || got != "b" {
			t.Errorf("Canonical(%#v) = %q, %v", v, got, err)
		}
	}
}
