package config

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestParseLayout(t *testing.T) {
	c, err := Parse("t.yaml", []byte(`
source: {tenant_column: org}
layout:
  public.orders:
    order_by: [org, created_at, id]
    partition_by: toYYYYMM(created_at)
    settings: {min_age_to_force_merge_seconds: 3600, storage_policy: hot}
  public.lines: {order_by: "org, id", exclude_columns: [card_number], columns: {amount: {type: "Decimal(38, 4)", on_overflow: dead_letter}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range c.Values() {
		if v.Key == "layout" {
			if v.Flag != "layout" || !v.AppliesTo("capture") || !v.AppliesTo("sink") || v.AppliesTo("serve") {
				t.Errorf("layout setting = %+v, want --layout of capture and sink", v.Setting)
			}
			got = v.Args
		}
	}
	want := []string{
		`public.lines={"order_by":["org","id"],"exclude_columns":["card_number"],"columns":{"amount":{"type":"Decimal(38, 4)","on_overflow":"dead_letter"}}}`,
		`public.orders={"order_by":["org","created_at","id"],"partition_by":"toYYYYMM(created_at)","settings":{"min_age_to_force_merge_seconds":"3600","storage_policy":"hot"}}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("layout args =\n%q\nwant\n%q", got, want)
	}
}

func TestParseLayoutProblems(t *testing.T) {
	_, err := Parse("t.yaml", []byte(`
source:
  tenant_column: org
  tenant_columns: {public.b: owner}
layout:
  public.a: {order_by: [id, org]}
  public.b: {order_by: [org, id]}
  nodot: {partition_by: toYYYYMM(x)}
  public.c: {oder_by: [org]}
  public.d: {}
  public.e: [org]
  public.f: {settings: [a], partition_by: {x: 1}}
  public.g: {columns: {a: {tipe: String}}}
`))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want *Error", err)
	}
	msgs := map[string]bool{}
	for _, p := range e.Problems {
		msgs[p.String()] = true
	}
	for _, want := range []string{
		`layout.public.a (line 6): order_by starts with "id": it must start with the table's tenant column "org"`,
		`layout.public.b (line 7): order_by starts with "org": it must start with the table's tenant column "owner"`,
		`layout.nodot (line 8): "nodot" is not schema.table`,
		`layout.public.c.oder_by (line 9): unknown key; did you mean "order_by"?`,
		`layout.public.d (line 10): is empty; give order_by, partition_by, settings, exclude_columns or columns, or remove the entry`,
		`layout.public.e (line 11): want a mapping with order_by, partition_by, settings, exclude_columns or columns`,
		`layout.public.f.settings (line 12): want a mapping of MergeTree setting to value`,
		`layout.public.f.partition_by (line 12): want an expression such as toYYYYMM(created_at)`,
		`layout.public.g.columns.a.tipe (line 13): unknown key; known here: type, on_overflow`,
		`layout.public.g.columns.a (line 13): has no type; want e.g. {type: "Decimal(38, 4)"}`,
	} {
		if !msgs[want] {
			t.Errorf("no problem %q in\n%s", want, strings.Join(slices.Sorted(maps.Keys(msgs)), "\n"))
		}
	}
}
