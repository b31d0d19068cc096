package capture

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/record"
)

// TestEnumRenameWithoutNotice: without the event trigger's notices, a
// value of an enum column stored as text (or of an array of it) that
// capture did not know makes it read the labels again; a label added is
// no rename, a label gone or a value that is no label any more is one, and
// every captured table with a column of the enum is marked inexact, once.
// With notices, nothing is checked.
func TestEnumRenameWithoutNotice(t *testing.T) {
	moodRel := relationMsg(relOrders, "orders", 'd', "tenant_id:text*", "id:int8*", "body:mood")
	docsMood := relationMsg(relDocs, "docs", 'd', "id:int8*", "tenant_id:text*", "body:mood")
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		watch  bool
		labels [][]string // the catalog's labels at each read
		values []string   // the body of successive inserts into orders
		want   []string   // rewritten entries
		reads  int
		held   []string // tables holding the enum, as read at the start
	}{
		{name: "known values", watch: true, labels: [][]string{{"sad", "ok"}}, values: []string{"sad", "ok", "sad"}, reads: 1},
		{name: "a label added", watch: true, labels: [][]string{{"sad", "ok"}, {"sad", "ok", "glad"}}, values: []string{"sad", "glad", "glad"}, reads: 2},
		{
			name: "a label renamed, seen by its new name", watch: true,
			labels: [][]string{{"sad", "ok"}, {"blue", "ok"}}, values: []string{"sad", "blue", "blue"}, reads: 2,
			want: []string{"rewritten public.docs at 0/20 for enum mood inexact", "rewritten public.orders at 0/20 for enum mood inexact"},
		},
		{
			name: "a label renamed after the change was written", watch: true,
			labels: [][]string{{"blue", "ok"}}, values: []string{"sad", "sad"}, reads: 2,
			want: []string{"rewritten public.docs at 0/10 for enum mood inexact", "rewritten public.orders at 0/10 for enum mood inexact"},
		},
		{
			name: "tables read at the start are marked without a change", watch: true,
			held:   []string{"public.plain", "public.secret"},
			labels: [][]string{{"sad", "ok"}, {"blue", "ok"}}, values: []string{"sad", "blue"}, reads: 1,
			want: []string{"rewritten public.docs at 0/20 for enum mood inexact", "rewritten public.orders at 0/20 for enum mood inexact", "rewritten public.plain at 0/20 for enum mood inexact"},
		},
		{name: "notices report renames", labels: [][]string{{"sad", "ok"}, {"blue", "ok"}}, values: []string{"sad", "blue"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, col, _ := newTestTranslator(t)
			tr.watchEnumLabels = tc.watch
			labels, reads := tc.labels[0], 0
			cat := tr.cat.(scriptedCatalog)
			cat.labels, cat.reads = &labels, &reads
			tr.cat = cat
			if tc.held != nil {
				tr.enums[oidMood] = &enumWatch{labels: labelSet(tc.labels[0]), tables: tc.held}
				labels = tc.labels[1]
			}
			steps := []step{describe(moodRel), describe(docsMood), begin(0x100), insert(0x5, relDocs, txt("1"), txt("acme"), null)}
			for i, v := range tc.values {
				steps = append(steps, insert(record.LSN(0x10*(1+i)), relOrders, txt("acme"), txt("1"), txt(v)))
			}
			for i, s := range append(steps, commit(0x100, 0x108)) {
				if tc.held == nil && i > 3 && reads > 0 && reads < len(tc.labels) {
					labels = tc.labels[reads]
				}
				if err := feed(ctx, tr, s); err != nil {
					t.Fatal(err)
				}
			}
			got := slices.DeleteFunc(slices.Clone(col.log), func(l string) bool { return !strings.HasPrefix(l, "rewritten") })
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if reads != tc.reads {
				t.Errorf("labels read %d times, want %d", reads, tc.reads)
			}
		})
	}
}

func TestUnknownLabel(t *testing.T) {
	labels := labelSet([]string{"sad", "ok", "a b", `q"t`})
	for _, tc := range []struct {
		text  string
		array bool
		want  string
		ok    bool
	}{
		{text: "sad"},
		{text: "blue", want: "blue", ok: true},
		{text: `{sad,ok,NULL,"a b","q\"t"}`, array: true},
		{text: `[0:1]={ok,blue}`, array: true, want: "blue", ok: true},
		{text: `{{sad,ok},{ok,"NULL"}}`, array: true, want: "NULL", ok: true},
		{text: `{"unterminated`, array: true}, // unread: left alone
	} {
		got, ok := unknownLabel(labels, tc.text, tc.array)
		if got != tc.want || ok != tc.ok {
			t.Errorf("unknownLabel(%q) = %q, %v; want %q, %v", tc.text, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRenamedLabel(t *testing.T) {
	before := labelSet([]string{"sad", "ok"})
	for _, tc := range []struct {
		now   []string
		value string
		want  string // part of the reason, "" for no rename
	}{
		{now: []string{"sad", "ok", "glad"}, value: "glad"},
		{now: []string{"blue", "ok"}, value: "blue", want: `label "sad" is gone`},
		{now: []string{"blue", "ok"}, value: "sad", want: `value "sad" is no label`},
		{now: []string{"sad", "ok"}, value: "gone", want: `value "gone" is no label`},
	} {
		got := renamedLabel(before, tc.now, tc.value)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("renamedLabel(%q, %q) = %q, want %q", tc.now, tc.value, got, tc.want)
		}
	}
}
