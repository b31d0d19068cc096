package capture

import (
	"errors"
	"slices"
	"testing"

	"github.com/walhouse/walhouse/schema"
)

// A column list is refused only when it leaves out a column walhouse
// needs, with the statement that adds them and keeps the rest of the
// entry: its other columns, in its order, and its row filter.
func TestPublicationEntryRefusal(t *testing.T) {
	cfg := &config{publication: "my pub"}
	for _, tc := range []struct {
		name  string
		entry publicationEntry
		want  string // "" for no refusal
	}{
		{"whole", publicationEntry{}, ""},
		{"a row filter", publicationEntry{filter: "(region = 'eu'::text)"}, ""},
		{"a list that keeps what is needed", publicationEntry{columns: []string{"tenant_id", "id"}}, ""},
		{"a list without the key", publicationEntry{columns: []string{"tenant_id", "note"}, missing: []string{"id"}},
			`publication my pub publishes "public"."t" with a column list that leaves out id, which walhouse needs to identify and place its rows in ClickHouse (the primary key or replica identity, the tenant column, the layout's sorting columns): publish them too with BEGIN; ALTER PUBLICATION "my pub" DROP TABLE "public"."t"; ALTER PUBLICATION "my pub" ADD TABLE "public"."t" ("tenant_id", "note", "id"); COMMIT`},
		{"and a filter, kept", publicationEntry{filter: "(id > 10)", columns: []string{"id", "Note"}, missing: []string{"tenant_id"}},
			`publication my pub publishes "public"."t" with a column list that leaves out tenant_id, which walhouse needs to identify and place its rows in ClickHouse (the primary key or replica identity, the tenant column, the layout's sorting columns): publish them too with BEGIN; ALTER PUBLICATION "my pub" DROP TABLE "public"."t"; ALTER PUBLICATION "my pub" ADD TABLE "public"."t" ("id", "Note", "tenant_id") WHERE ((id > 10)); COMMIT`},
	} {
		err := tc.entry.refusal(cfg, `"public"."t"`)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want == "":
		case err == nil || err.Error() != tc.want:
			t.Errorf("%s:\n got %v\nwant %s", tc.name, err, tc.want)
		case !errors.Is(err, errUncapturable) || !slices.Equal(refusalReasons(err), []string{reasonColumnList}):
			t.Errorf("%s: %v is not a column_list refusal", tc.name, err)
		}
	}
}

// The columns a list must keep besides the key: the tenant column and the
// layout's sorting and partition columns, each once.
func TestNeededColumns(t *testing.T) {
	cfg := &config{tenantColumn: "tenant_id", tenantColumns: map[string]string{"public.other": "org"}, layouts: map[string]schema.Layout{
		"public.t": {OrderBy: []string{"tenant_id", "status", "id"}, PartitionBy: "toYYYYMM(created_at)"},
	}}
	if got, want := cfg.neededColumns("public", "t"), []string{"tenant_id", "status", "id", "created_at"}; !slices.Equal(got, want) {
		t.Errorf("neededColumns(public.t) = %q, want %q", got, want)
	}
	if got, want := cfg.neededColumns("public", "other"), []string{"org"}; !slices.Equal(got, want) {
		t.Errorf("neededColumns(public.other) = %q, want %q", got, want)
	}
}
