package schema

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/record"
)

func TestLayoutCheck(t *testing.T) {
	tests := map[string]struct {
		l    Layout
		want []string // parts of the error; none: valid
	}{
		"zero":        {Layout{}, nil},
		"full":        {Layout{OrderBy: []string{"tenant_id", "created_at", "id"}, PartitionBy: "toYYYYMM(created_at)", Settings: map[string]string{"min_age_to_force_merge_seconds": "3600", "storage_policy": "hot_cold"}}, nil},
		"hash":        {Layout{PartitionBy: "cityHash64(`tenant id`) % 8"}, nil},
		"empty col":   {Layout{OrderBy: []string{"tenant_id", " "}}, []string{"empty"}},
		"twice":       {Layout{OrderBy: []string{"tenant_id", "id", "id"}}, []string{`"id" is given twice`}},
		"now":         {Layout{PartitionBy: "toYYYYMM(now())"}, []string{"function now is not allowed"}},
		"subquery":    {Layout{PartitionBy: "(SELECT 1)"}, []string{"in a row"}},
		"string":      {Layout{PartitionBy: "concat(a, 'x')"}, []string{"function concat"}},
		"semicolon":   {Layout{PartitionBy: "toYYYYMM(a); DROP TABLE x"}, []string{`";" is not allowed`}},
		"unbalanced":  {Layout{PartitionBy: "toYYYYMM(a"}, []string{"( without its )"}},
		"constant":    {Layout{PartitionBy: "1"}, []string{"names no column"}},
		"bad setting": {Layout{Settings: map[string]string{"Index Granularity": "1"}}, []string{"not a setting name"}},
		"reserved":    {Layout{Settings: map[string]string{"non_replicated_deduplication_window": "1"}}, []string{"Layer 3"}},
		"cleanup":     {Layout{Settings: map[string]string{"allow_experimental_replacing_merge_with_cleanup": "1"}}, []string{"walhouse cleanup's horizon"}},
		"bad value":   {Layout{Settings: map[string]string{"storage_policy": "a'b"}}, []string{"not a number or a word"}},
		"exclude":     {Layout{ExcludeColumns: []string{"card_number", "notes"}}, nil},
		"exclude key": {Layout{OrderBy: []string{"tenant_id", "email", "id"}, ExcludeColumns: []string{"email", "", "x", "x"}}, []string{`"email" is in order_by`, "empty", `"x" is given twice`}},
		"columns":     {Layout{Columns: map[string]ColumnLayout{"a": {Type: "LowCardinality(String)"}, "b": {Type: "Decimal(76, 0)", OnOverflow: "dead_letter"}, "c": {Type: "String"}, "d": {Type: "Float64"}}}, nil},
		"bad columns": {Layout{OrderBy: []string{"tenant_id", "status", "id"}, PartitionBy: "toYYYYMM(day)", ExcludeColumns: []string{"x"}, Columns: map[string]ColumnLayout{"status": {Type: "String"}, "day": {Type: "String"}, "x": {Type: "Float64"}, "y": {Type: "Decimal(4, 5)"}, "z": {Type: "Float32"}}}, []string{"status is in order_by", "day is in order_by or partition_by", "x is in exclude_columns", "want Decimal(P, S) with", `"Float32" is not an override`}},
		"clamp":       {Layout{Columns: map[string]ColumnLayout{"a": {Type: "Decimal(12, 2)", OnOverflow: "clamp"}, "p": {Type: "JSON"}}}, nil},
		"bad clamp":   {Layout{Columns: map[string]ColumnLayout{"a": {Type: "Float64", OnOverflow: "clamp"}, "b": {Type: "String", OnOverflow: "round"}, "p": {Type: "JSON", OnOverflow: "clamp"}}}, []string{"a: on_overflow clamp is for Decimal(P, S) overrides, not Float64", `b: on_overflow "round" is not allowed`, "p: on_overflow clamp is for Decimal(P, S) overrides, not JSON"}},
		"all at once": {Layout{OrderBy: []string{"x", "x"}, PartitionBy: "rand()", Settings: map[string]string{"allow_nullable_key": "1"}}, []string{"twice", "rand", "walhouse's"}},
	}
	for name, tc := range tests {
		err := tc.l.Check()
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error, want %q", name, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", name, err, w)
			}
		}
	}
}

func TestLayoutColumns(t *testing.T) {
	l := Layout{OrderBy: []string{"tenant_id", "created_at", "id"}, PartitionBy: "toYYYYMM(created_at) + cityHash64(`odd name`) % 4"}
	if got, want := l.SortColumns(), []string{"tenant_id", "created_at", "id", "odd name"}; !slices.Equal(got, want) {
		t.Errorf("SortColumns() = %q, want %q", got, want)
	}
	if got, want := partitionDDL(l.PartitionBy), "toYYYYMM(`created_at`) + cityHash64(`odd name`) % 4"; got != want {
		t.Errorf("partitionDDL = %q, want %q", got, want)
	}
}

func TestNewTableLayout(t *testing.T) {
	cols := []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "status", Type: "text", TypMod: -1, Attnum: 3},
		{Name: "created_at", Type: "timestamptz", TypMod: -1, Attnum: 4},
		{Name: "tags", Type: "text", Array: true, TypMod: -1, Attnum: 5},
	}
	src := record.Source{ID: "x", Schema: "sales", Table: "orders"}
	layout := Layout{
		OrderBy:     []string{"tenant_id", "status", "created_at", "id"},
		PartitionBy: "toYYYYMM(created_at)",
		Settings:    map[string]string{"min_age_to_force_merge_seconds": "3600", "index_granularity": "4096", "storage_policy": "default"},
	}
	for name, opts := range map[string]Options{
		"orders_layout.sql":         {Database: "walhouse", PartitionBy: "id", TenantPartitions: 8},
		"orders_layout_cluster.sql": {Database: "walhouse", Cluster: "main"},
	} {
		opts.Layouts = map[string]Layout{"sales.orders": layout, "sales.other": {OrderBy: []string{"nope"}}}
		tbl, err := NewTable(src, "tenant_id", cols, opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		golden(t, name, tbl.CreateDDL(0x16B3748))
	}
	// A table without a layout keeps the default shape.
	plain, err := NewTable(record.Source{Schema: "sales", Table: "lines"}, "tenant_id", cols, Options{Database: "walhouse", Layouts: map[string]Layout{"sales.orders": layout}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := NewTable(record.Source{Schema: "sales", Table: "lines"}, "tenant_id", cols, Options{Database: "walhouse"})
	if err != nil {
		t.Fatal(err)
	}
	if plain.CreateDDL(1) != want.CreateDDL(1) {
		t.Errorf("a table without a layout changed:\n%s\nwant\n%s", plain.CreateDDL(1), want.CreateDDL(1))
	}

	for name, tc := range map[string]struct {
		l    Layout
		want []string
	}{
		"tenant not first":   {Layout{OrderBy: []string{"id", "tenant_id"}}, []string{"must start with the tenant column"}},
		"lacks key":          {Layout{OrderBy: []string{"tenant_id", "created_at"}}, []string{`lacks "id"`}},
		"unknown":            {Layout{OrderBy: []string{"tenant_id", "id", "nope"}, PartitionBy: "toYYYYMM(gone)"}, []string{`no column "nope"`, `no column "gone"`}},
		"array":              {Layout{OrderBy: []string{"tenant_id", "id", "tags"}}, []string{"array"}},
		"granularity":        {Layout{Settings: map[string]string{"index_granularity": "0"}}, []string{"index_granularity"}},
		"static":             {Layout{PartitionBy: "now()"}, []string{"not allowed"}},
		"partition by other": {Layout{PartitionBy: "toYYYYMM(created_at)"}, []string{`column "created_at" is not in the sorting key (tenant_id, id)`}},
	} {
		_, err := NewTable(src, "tenant_id", cols, Options{Layouts: map[string]Layout{"sales.orders": tc.l}})
		if err == nil {
			t.Errorf("%s: no error, want %q", name, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", name, err, w)
			}
		}
	}
}

func TestNewTableOverrides(t *testing.T) {
	cols := []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "status", Type: "varchar", TypMod: -1, Attnum: 3},
		{Name: "mood", Type: "mood", Enum: true, TypMod: -1, Attnum: 4},
		{Name: "amount", Type: "numeric", TypMod: -1, Attnum: 5},
		{Name: "price", Type: "numeric", TypMod: numericMod(12, 2), Attnum: 6},
		{Name: "ratio", Type: "numeric", TypMod: -1, Attnum: 7},
		{Name: "qty", Type: "int4", TypMod: -1, Attnum: 8},
	}
	src := record.Source{ID: "x", Schema: "sales", Table: "orders"}
	layout := Layout{Columns: map[string]ColumnLayout{
		"status": {Type: "LowCardinality(String)"},
		"mood":   {Type: "LowCardinality(String)"},
		"amount": {Type: "Decimal(38, 4)", OnOverflow: "dead_letter"},
		"price":  {Type: "String"},
		"ratio":  {Type: "Float64"},
	}}
	opts := Options{Database: "walhouse", Layouts: map[string]Layout{"sales.orders": layout}}
	tbl, err := NewTable(src, "tenant_id", cols, opts)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "orders_overrides.sql", tbl.CreateDDL(0x16B3748))

	// A value Decimal(38, 4) cannot hold exactly is an error (its record
	// goes to the dead letters), never rounded.
	amount, _ := tbl.column("amount")
	for text, ok := range map[string]bool{"12.5": true, "-1234567890123456789012345678901234.1234": true, "1.23456": false, "12345678901234567890123456789012345": false} {
		if _, err := amount.Type.Convert(text); (err == nil) != ok {
			t.Errorf("Decimal(38, 4) of %s: err %v, want ok %v", text, err, ok)
		}
	}

	// Evolution keeps the overrides when the source columns change type
	// (varchar to text, numeric(12,2) to unconstrained): the table's
	// columns are already what the layout asks for.
	var have []ExistingColumn
	for _, c := range tbl.Columns {
		have = append(have, ExistingColumn{Name: c.Name, Type: c.Type.DDL, Comment: strings.TrimSuffix(strings.TrimPrefix(columnComment(c.Source.Attnum, 0x16B3748), " COMMENT '"), "'")})
	}
	changed := slices.Clone(cols)
	changed[2].Type, changed[5].TypMod = "text", -1
	later, err := NewTable(src, "tenant_id", changed, opts)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := PlanEvolution(later, have, 0x16B3800)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Changes) != 0 {
		t.Errorf("evolution changes an overridden table: %+v", plan.Changes)
	}
	for i, c := range plan.Columns {
		if c.Type.DDL != tbl.Columns[i].Type.DDL {
			t.Errorf("column %s is loaded as %s, want %s", tbl.Columns[i].Name, c.Type.DDL, tbl.Columns[i].Type.DDL)
		}
	}

	// A PostgreSQL type change the override cannot follow (varchar to
	// int4 under LowCardinality(String)) stops the table, as other changes
	// evolution cannot take do, rather than dead-lettering its records.
	changed = slices.Clone(cols)
	changed[2].Type = "int4"
	_, err = NewTable(src, "tenant_id", changed, opts)
	var ie *IncompatibleError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "status is int4; LowCardinality(String) is for text and enum columns") {
		t.Errorf("varchar to int4 under LowCardinality(String): err = %v, want an *IncompatibleError naming the column", err)
	}

	// A column made before its override was given keeps its type: one that
	// holds the override's values takes them, another is never changed.
	for name, tc := range map[string]struct {
		col        int    // amount (Decimal(38, 4) in the layout) or ratio (Float64)
		have, want string // the ClickHouse column, and the Target or error
		ok         bool
	}{
		"wider decimal":    {4, "Nullable(Decimal(76, 38))", "Nullable(Decimal(76, 38))", true},
		"string":           {4, "Nullable(String)", "Nullable(String)", true},
		"narrow decimal":   {4, "Nullable(Decimal(10, 2))", "walhouse changes no column whose type a layout overrides", false},
		"decimal to float": {6, "Nullable(Decimal(12, 2))", "neither holds every value of the other", false},
	} {
		old := slices.Clone(have)
		old[tc.col].Type = tc.have
		plan, err := PlanEvolution(later, old, 0x16B3800)
		switch {
		case !tc.ok:
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err = %v, want an *IncompatibleError with %q", name, err, tc.want)
			}
		case err != nil:
			t.Errorf("%s: %v", name, err)
		case len(plan.Changes) != 0 || plan.Columns[tc.col].Type.DDL != tc.want:
			t.Errorf("%s: changes %+v, loaded as %s; want no change, %s", name, plan.Changes, plan.Columns[tc.col].Type.DDL, tc.want)
		}
	}

	for name, tc := range map[string]struct {
		cols map[string]ColumnLayout
		want string
	}{
		"key":          {map[string]ColumnLayout{"id": {Type: "String"}}, "a key or tenant column"},
		"not numeric":  {map[string]ColumnLayout{"qty": {Type: "Decimal(10, 2)"}}, "is for numeric columns"},
		"not text":     {map[string]ColumnLayout{"amount": {Type: "LowCardinality(String)"}}, "is for text and enum columns"},
		"unknown":      {map[string]ColumnLayout{"nope": {Type: "String"}}, `no column "nope"`},
		"bad type":     {map[string]ColumnLayout{"amount": {Type: "Int128"}}, "not an override walhouse knows"},
		"bad decimal":  {map[string]ColumnLayout{"amount": {Type: "Decimal(80, 2)"}}, "want Decimal(P, S)"},
		"clamp":        {map[string]ColumnLayout{"amount": {Type: "Float64", OnOverflow: "clamp"}}, "clamp is for Decimal(P, S) overrides"},
		"bad overflow": {map[string]ColumnLayout{"amount": {Type: "Decimal(10, 2)", OnOverflow: "wrap"}}, `on_overflow "wrap" is not allowed`},
	} {
		_, err := NewTable(src, "tenant_id", cols, Options{Layouts: map[string]Layout{"sales.orders": {Columns: tc.cols}}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}

func TestOverrideFits(t *testing.T) {
	for _, tc := range []struct {
		col  record.Column
		typ  string
		want string // the column's DDL, or part of the error
	}{
		{record.Column{Name: "a", Type: "text"}, "LowCardinality(String)", "LowCardinality(Nullable(String))"},
		{record.Column{Name: "a", Type: "bpchar", TypMod: 12}, "LowCardinality(String)", "LowCardinality(Nullable(String))"},
		{record.Column{Name: "a", Type: "citext"}, "LowCardinality(String)", "LowCardinality(Nullable(String))"},
		{record.Column{Name: "a", Type: "mood", Enum: true}, "LowCardinality(String)", "LowCardinality(Nullable(String))"},
		{record.Column{Name: "a", Type: "numeric", TypMod: numericMod(12, 2)}, "Decimal(38,4)", "Nullable(Decimal(38, 4))"},
		{record.Column{Name: "a", Type: "numeric"}, "String", "Nullable(String)"},
		{record.Column{Name: "a", Type: "numeric"}, "Float64", "Nullable(Float64)"},
		{record.Column{Name: "a", Type: "jsonb"}, "LowCardinality(String)", "a is jsonb; LowCardinality(String) is for text and enum columns"},
		{record.Column{Name: "a", Type: "inet"}, "LowCardinality(String)", "is for text and enum columns"},
		{record.Column{Name: "a", Type: "hstore"}, "LowCardinality(String)", "is for text and enum columns"},
		{record.Column{Name: "a", Type: "text", Array: true}, "LowCardinality(String)", "a is an array"},
		{record.Column{Name: "a", Type: "numeric", Array: true}, "String", "a is an array"},
		{record.Column{Name: "a", Type: "text"}, "String", "String is for numeric columns"},
		{record.Column{Name: "a", Type: "float8"}, "Decimal(20, 2)", "a is float8; Decimal(20, 2) is for numeric columns"},
		{record.Column{Name: "a", Type: "int8"}, "Float64", "is for numeric columns"},
		{record.Column{Name: "a", Type: "jsonb"}, "JSON", "Nullable(JSON)"},
		{record.Column{Name: "a", Type: "timestamptz"}, "DateTime64(3)", "Nullable(DateTime64(3, 'UTC'))"},
		{record.Column{Name: "a", Type: "timestamp"}, "DateTime64(0, 'UTC')", "Nullable(DateTime64(0, 'UTC'))"},
		{record.Column{Name: "a", Type: "timestamp"}, "DateTime64(6)", "Nullable(DateTime64(6, 'UTC'))"},
		{record.Column{Name: "a", Type: "date"}, "DateTime64(3)", "a is date; DateTime64(3) is for timestamp and timestamptz columns"},
		{record.Column{Name: "a", Type: "timestamptz"}, "DateTime64(9)", "PostgreSQL keeps microseconds"},
		{record.Column{Name: "a", Type: "timestamptz"}, "DateTime64(3, 'Europe/Paris')", "values are UTC"},
		{record.Column{Name: "a", Type: "timestamptz"}, "DateTime64(x)", "with 0 <= P <= 6"},
		{record.Column{Name: "a", Type: "json"}, "JSON", "Nullable(JSON)"},
		{record.Column{Name: "a", Type: "text"}, "JSON", "a is text; JSON is for json and jsonb columns"},
		{record.Column{Name: "a", Type: "jsonb", Array: true}, "JSON", "a is an array"},
		{record.Column{Name: "a", Type: "jsonb"}, "Json", "not an override walhouse knows"},
	} {
		got, err := override(tc.col, Map(tc.col, true), ColumnLayout{Type: tc.typ}, true)
		if err != nil {
			got.DDL = err.Error()
		}
		if !strings.Contains(got.DDL, tc.want) || (err == nil) != strings.HasSuffix(tc.want, ")") {
			t.Errorf("%s as %s: got %q, want %q", tc.col.Type, tc.typ, got.DDL, tc.want)
		}
	}
}
