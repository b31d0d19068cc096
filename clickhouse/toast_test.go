package clickhouse

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

// TestPieces cuts inserts by the stored values their records read back: a
// value counts once per piece however many records use it, and a record
// whose values alone pass the bound is a piece of its own.
func TestPieces(t *testing.T) {
	a, b, c := &lookup{size: 40}, &lookup{size: 70}, &lookup{size: 200}
	tests := []struct {
		name  string
		n     int
		uses  map[int][]use
		limit int64
		want  []piece
		moves map[int]bool
	}{
		{"nothing read back", 5, nil, 100, []piece{{0, 5}}, nil},
		{"under the bound", 4, map[int][]use{0: {{1, a}}, 2: {{1, b}}}, 110, []piece{{0, 4}}, nil},
		{"cut before the record that passes it", 4, map[int][]use{0: {{1, a}}, 2: {{1, b}}}, 100, []piece{{0, 2}, {2, 4}}, nil},
		{"a value used again costs nothing more", 4, map[int][]use{0: {{1, a}}, 1: {{1, a}}, 2: {{1, a}, {2, a}}, 3: {{1, b}}}, 110, []piece{{0, 4}}, nil},
		{"a value of an earlier piece counts again", 3, map[int][]use{0: {{1, a}}, 1: {{1, b}}, 2: {{1, a}}}, 100, []piece{{0, 1}, {1, 2}, {2, 3}}, nil},
		{"over the bound alone", 3, map[int][]use{0: {{1, a}}, 1: {{1, c}}, 2: {{1, a}}}, 100, []piece{{0, 1}, {1, 2}, {2, 3}}, nil},
		{"first record over the bound", 2, map[int][]use{0: {{1, c}}}, 100, []piece{{0, 1}, {1, 2}}, nil},
		{"never before a key change", 4, map[int][]use{0: {{1, a}}, 2: {{1, b}}, 3: {{1, c}}}, 100, []piece{{0, 3}, {3, 4}}, map[int]bool{2: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var u *unchanged
			if tt.uses != nil {
				u = &unchanged{uses: tt.uses, moves: tt.moves}
			}
			if got := u.pieces(tt.n, tt.limit); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("pieces = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestIntegrationReadBackInPieces updates rows whose large values stay as
// they are (unchanged TOAST) with a read-back bound of a few values: the
// insert is cut into pieces, every value is read back (also for a row
// updated twice, a key changed in the same insert and one ClickHouse does
// not have), and loading the batch again under its token adds no row.
func TestIntegrationReadBackInPieces(t *testing.T) {
	ctx := context.Background()
	w := testWriter(t, "readback")
	const bound = 10 << 10
	WithMaxReadBackBytes(bound)(w)
	cols := []record.Column{
		{Name: "id", Type: "int8", TypMod: -1, Key: true},
		{Name: "big", Type: "text", TypMod: -1},
		{Name: "n", Type: "int4", TypMod: -1},
	}
	src := record.Source{ID: "s", Schema: "public", Table: "readback"}
	big := func(i int) string { return fmt.Sprintf("%d:%s", i, strings.Repeat(string(rune('a'+i%26)), 3000)) }
	rec := func(v uint64, op record.Op, id int, value string, n int) *record.Record {
		r := &record.Record{
			EventID: fmt.Sprintf("ev%d", v), TenantID: "t", Version: v, Op: op,
			OccurredAt: time.Unix(1700000000, 0).UTC(), Columns: cols,
			Values: []record.Value{{Text: fmt.Sprint(id)}, {Text: value}, {Text: fmt.Sprint(n)}},
		}
		if value == "" {
			r.Values[1] = record.Value{Unchanged: true}
		}
		return r
	}
	var inserts []*record.Record
	for i := range 20 {
		inserts = append(inserts, rec(uint64(100+i), record.Insert, i, big(i), 0))
	}
	if err := w.Load(ctx, sink.Batch{Source: src, Records: sourced(inserts, src, ""), Token: "readback/1"}); err != nil {
		t.Fatal(err)
	}

	want := map[string]string{}
	for i := range 20 {
		want[fmt.Sprint(i)] = big(i) + " 1"
	}
	var updates []*record.Record
	for i := range 20 {
		updates = append(updates, rec(uint64(1000+i), record.Update, i, "", 1))
	}
	updates = append(updates, rec(1100, record.Update, 3, "", 1)) // again: from the record before
	moved := rec(1101, record.Update, 500, "", 1)                 // key 5 → 500
	moved.OldKey = []record.Value{{Text: "5"}, {Null: true}, {Null: true}}
	updates = append(updates, rec(1101, record.Delete, 5, "", 0), moved)
	updates[len(updates)-2].Values[1] = record.Value{Null: true}
	delete(want, "5")
	want["500"] = big(5) + " 1"
	updates = append(updates, rec(1102, record.Update, 999, "", 1)) // never loaded: NULL
	want["999"] = " 1"
	batch := sink.Batch{Source: src, Records: sourced(updates, src, ""), Token: "readback/2"}

	tg, err := w.table(ctx, batch.Records[0])
	if err != nil {
		t.Fatal(err)
	}
	u, err := w.planUnchanged(ctx, tg, sourced(updates, src, ""))
	if err != nil {
		t.Fatal(err)
	}
	if got := u.pieces(len(updates), bound); len(got) < 5 {
		t.Fatalf("the insert is cut into %v, want pieces of about three values each", got)
	}
	if err := w.Load(ctx, batch); err != nil {
		t.Fatal(err)
	}
	check := func(want map[string]string) {
		t.Helper()
		rows, err := w.conn.Query(ctx, "SELECT toString(id), concat(ifNull(big, ''), ' ', toString(n)) FROM "+tg.table.QualifiedName()+" FINAL WHERE _is_deleted = 0")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for rows.Next() {
			var id, v string
			if err := rows.Scan(&id, &v); err != nil {
				t.Fatal(err)
			}
			got[id] = v
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			for id, v := range want {
				if got[id] != v {
					t.Errorf("row %s: %.20q…, want %.20q…", id, got[id], v)
				}
			}
			t.Fatalf("%d rows stored, want %d", len(got), len(want))
		}
	}
	check(want)

	// Every row again, loaded twice: the second load cuts the same
	// pieces under the same tokens, and ClickHouse drops them (merges
	// stopped, which would collapse repeats too).
	if err := w.conn.Exec(ctx, "SYSTEM STOP MERGES "+tg.table.QualifiedName()); err != nil {
		t.Fatal(err)
	}
	var again []*record.Record
	for id := range want {
		var n int
		fmt.Sscan(id, &n)
		again = append(again, rec(uint64(2000+len(again)), record.Update, n, "", 2))
		want[id] = strings.TrimSuffix(want[id], " 1") + " 2"
	}
	for range 2 {
		if err := w.Load(ctx, sink.Batch{Source: src, Records: sourced(again, src, ""), Token: "readback/3"}); err != nil {
			t.Fatal(err)
		}
	}
	check(want)
	var stored uint64
	if err := w.conn.QueryRow(ctx, "SELECT count() FROM "+tg.table.QualifiedName()+" WHERE _version >= 2000").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if n := uint64(len(again)); stored != n {
		t.Errorf("%d rows stored without FINAL, want %d: the batch loaded again was not dropped as a repeat", stored, n)
	}
}

// TestIntegrationReadBackKeysOfEveryType reads back unchanged values of
// rows keyed by a column of every type schema maps, with a synthetic
// tenant: the lookups find each row by the key values as they were
// inserted, whatever the type's text.
func TestIntegrationReadBackKeysOfEveryType(t *testing.T) {
	ctx := context.Background()
	w := testWriter(t, "readbackkeys")
	cols := keysOfEveryType()
	src := record.Source{ID: "s", Schema: "public", Table: "keys"}
	note := len(cols) - 1
	var inserts, updates []*record.Record
	for i := range 12 {
		vals := make([]record.Value, len(cols))
		for j, c := range cols {
			// Each row its own sample of each type; a numeric key cannot
			// be NaN or ±Infinity (errKeyNotHeld), nor a date or
			// timestamp key beyond ClickHouse's range (errKeyOutOfRange),
			// and a float NaN key is not found (docs/limits.md).
			s := slices.DeleteFunc(slices.Clone(samples[c.Type]), func(v string) bool {
				return v == "NaN" || c.Type == "numeric" && strings.ContainsAny(v, "nN") || schema.Map(c, false).OutOfRange(v)
			})
			vals[j] = record.Value{Text: s[(i+j)%len(s)]}
			if c.Name == "k_int8" {
				vals[j].Text = fmt.Sprint(i)
			}
		}
		vals[note] = record.Value{Text: fmt.Sprintf("value %d: %s", i, strings.Repeat("x", 100))}
		in := &record.Record{EventID: fmt.Sprint("i", i), TenantID: fmt.Sprintf("t\\%d'", i%2), Version: uint64(10 + i), Op: record.Insert,
			OccurredAt: time.Unix(1700000000, 0).UTC(), Columns: cols, Values: vals}
		up := *in
		up.EventID, up.Version, up.Op = fmt.Sprint("u", i), uint64(100+i), record.Update
		up.Values = append([]record.Value(nil), vals...)
		up.Values[note] = record.Value{Unchanged: true}
		inserts, updates = append(inserts, in), append(updates, &up)
	}
	for n, batch := range [][]*record.Record{inserts, updates} {
		if err := w.Load(ctx, sink.Batch{Source: src, Records: sourced(batch, src, ""), Token: fmt.Sprint("keys/", n)}); err != nil {
			t.Fatal(err)
		}
	}
	tg, err := w.table(ctx, sourced(inserts, src, "")[0])
	if err != nil {
		t.Fatal(err)
	}
	rows, err := w.conn.Query(ctx, "SELECT toString(k_int8), ifNull(note, 'NULL') FROM "+tg.table.QualifiedName()+" FINAL WHERE _is_deleted = 0 ORDER BY k_int8")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for ; rows.Next(); n++ {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		if want := inserts[n].Values[note].Text; k != fmt.Sprint(n) || v != want {
			t.Errorf("row %s: note %.12q…, want row %d's %.12q…", k, v, n, want)
		}
	}
	if err := rows.Err(); err != nil || n != len(inserts) {
		t.Fatalf("%d rows (%v), want %d", n, err, len(inserts))
	}
}
