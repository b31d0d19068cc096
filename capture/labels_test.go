package capture

import (
	"context"
	"slices"
	"testing"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// TestEnumLabelsFollowTheCatalog: the records of an enum column a layout
// stores as Enum8 carry its labels; a value the labels lack (a label added
// by ALTER TYPE ... ADD VALUE, which no Relation message reports) makes
// capture read them again and publish a new schema before the record that
// uses it; a value the catalog still lacks (renamed since) goes on as it
// is, read again only once.
func TestEnumLabelsFollowTheCatalog(t *testing.T) {
	moodRel := relationMsg(relOrders, "orders", 'd', "tenant_id:text*", "id:int8*", "body:mood")
	labels := []string{"sad", "ok"}
	reads := 0
	tr, col, _ := newTestTranslator(t, WithTableLayout("public.orders", schema.Layout{Columns: map[string]schema.ColumnLayout{"body": {Type: "Enum8"}}}))
	cat := tr.cat.(scriptedCatalog)
	cat.labels, cat.reads = &labels, &reads
	tr.cat = cat
	ctx := context.Background()
	run := func(steps ...step) {
		t.Helper()
		for _, s := range steps {
			if err := feed(ctx, tr, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	schemaOf := func() record.Schema {
		rel := tr.rels[relOrders]
		s, ok := col.schemas.Schema(rel.schemaID)
		if !ok {
			t.Fatalf("schema %s was not published", rel.schemaID)
		}
		return s
	}
	run(describe(moodRel), begin(0x100), insert(0x10, relOrders, txt("acme"), txt("1"), txt("ok")))
	if got := schemaOf().Columns[2].Labels; !slices.Equal(got, labels) {
		t.Fatalf("labels %q, want %q", got, labels)
	}
	if reads != 1 {
		t.Errorf("labels read %d times for a known value, want once (the relation)", reads)
	}
	labels = []string{"sad", "happy", "ok"} // ALTER TYPE mood ADD VALUE 'happy' BEFORE 'ok'
	run(insert(0x20, relOrders, txt("acme"), txt("2"), txt("happy")))
	if got := schemaOf().Columns[2].Labels; !slices.Equal(got, labels) {
		t.Fatalf("after ADD VALUE: labels %q, want %q", got, labels)
	}
	run(insert(0x30, relOrders, txt("acme"), txt("3"), txt("gone")), insert(0x40, relOrders, txt("acme"), txt("4"), txt("gone")), commit(0x100, 0x108))
	if reads != 3 {
		t.Errorf("labels read %d times, want 3: the relation, the added label, the missing one once", reads)
	}
	if n := len(slices.DeleteFunc(slices.Clone(col.log), func(l string) bool { return len(l) < 6 || l[:6] != "insert" })); n != 4 {
		t.Errorf("%d records, want 4 (none set aside by capture):\n%q", n, col.log)
	}
}

// TestEnumOverrideOfOtherColumns: capture leaves out a table whose layout
// stores a column other than an enum as Enum8.
func TestEnumOverrideOfOtherColumns(t *testing.T) {
	tr, col, _ := newTestTranslator(t, WithTableLayout("public.orders", schema.Layout{Columns: map[string]schema.ColumnLayout{"body": {Type: "Enum8"}}}))
	ctx := context.Background()
	for _, s := range []step{describe(ordersRel), begin(0x100), insert(0x10, relOrders, txt("acme"), txt("1"), txt("a")), commit(0x100, 0x108)} {
		if err := feed(ctx, tr, s); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Contains(col.log, "leave public.orders [layout]") {
		t.Errorf("not left out with the reason layout:\n%q", col.log)
	}
}
