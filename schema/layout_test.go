package schema

import (
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
	if got, want := l.Columns(), []string{"tenant_id", "created_at", "id", "odd name"}; !slices.Equal(got, want) {
		t.Errorf("Columns() = %q, want %q", got, want)
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
