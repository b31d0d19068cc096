package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

// counterValue sums the counter name of reg over its labels.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

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
	reg := prometheus.NewRegistry()
	WithMetrics(reg)(w)
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
	// The row never loaded, counted.
	if n := counterValue(t, reg, "walhouse_sink_unchanged_values_missing_total"); n != 1 {
		t.Errorf("walhouse_sink_unchanged_values_missing_total = %v, want 1 (row 999)", n)
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
// inserted, whatever the type's text, a real (float4) and a double
// precision (float8) NaN included, in one array parameter (keysArray);
// and so they do in keysParams's form, the form of tables with other key
// types, where a NaN key is placed by its own condition (nanKeys): NaN
// equals nothing.
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
			// timestamp key beyond ClickHouse's range (errKeyOutOfRange).
			s := slices.DeleteFunc(slices.Clone(samples[c.Type]), func(v string) bool {
				return c.Type == "numeric" && strings.ContainsAny(v, "nN") || schema.Map(c, false).OutOfRange(v)
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
	if !arrayKeys(tg) {
		t.Fatal("the keys are not read in one array parameter (keysArray)")
	}
	nan := 0
	for _, r := range inserts {
		if slices.ContainsFunc(r.Values, func(v record.Value) bool { return v.Text == "NaN" }) {
			nan++
		}
	}
	if nan == 0 || nan == len(inserts) {
		t.Fatalf("%d rows of %d with a float NaN key: want some", nan, len(inserts))
	}
	// keysParams's form, as for a table of other key types: the same
	// rows, in one query.
	params := *tg
	params.columns = slices.Clone(tg.columns)
	for i := range params.columns {
		if c := params.table.Columns[i]; c.Source.Key {
			params.columns[i].Type.DDL = "Nullable(" + params.columns[i].Type.DDL + ")" // a type textExact refuses, read as the column's
		}
	}
	var ls []*lookup
	for _, r := range updates {
		ls = append(ls, &lookup{rec: r, key: r.Values, cols: []int{note}})
	}
	if arrayKeys(&params) {
		t.Fatal("keysArray takes Nullable key types")
	}
	if err := w.readStored(ctx, &params, ls, false); err != nil {
		t.Fatal(err)
	}
	for i, l := range ls {
		if !l.found {
			t.Errorf("keysParams: row %d not found", i)
		}
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

// TestIsolateRefused: a read-back query ClickHouse refuses for what it
// says is read again in halves, down to the lookups it refuses alone,
// which are marked with the refusal while the others are read; past the
// budget, the lookups of a refused query are refused together. Any other
// error is returned, for the insert to be retried, and marks nothing.
func TestIsolateRefused(t *testing.T) {
	refusal := &ch.Exception{Code: 457, Name: "DB::Exception", Message: "Value cannot be parsed as Date32 for query parameter 'k1_0'"}
	tests := []struct {
		name    string
		n       int
		bad     []int // the lookups ClickHouse refuses
		budget  int
		err     error // what a query with a bad lookup fails with
		refused []int // nil: every one of bad
		// queries bounds the queries sent.
		queries  int
		returned bool // the error is returned
	}{
		{name: "none refused", n: 10, budget: isolateQueries, err: refusal, queries: 1},
		{name: "one in ten", n: 10, bad: []int{3}, budget: isolateQueries, err: refusal, queries: 9},
		{name: "one in a full query", n: lookupKeys, bad: []int{1234}, budget: isolateQueries, err: refusal, queries: 1 + 2*11},
		{name: "three", n: 100, bad: []int{0, 50, 99}, budget: isolateQueries, err: refusal, queries: 1 + isolateQueries},
		{name: "every one: a query that cannot work", n: 500, bad: seq(500), budget: isolateQueries, err: refusal, queries: 1 + isolateQueries},
		{name: "budget spent: the rest refused together", n: 100, bad: []int{1, 60}, budget: 2, err: refusal, refused: seq(100), queries: 3},
		{name: "budget spent on the first half", n: 100, bad: []int{1, 60}, budget: 4, err: refusal, refused: append(seq(25), seq(100)[50:]...), queries: 5},
		{name: "memory limit: retried", n: 10, bad: []int{3}, budget: isolateQueries, err: &ch.Exception{Code: 241, Message: "Memory limit exceeded"}, queries: 1, returned: true},
		{name: "unknown table: retried", n: 10, bad: []int{3}, budget: isolateQueries, err: &ch.Exception{Code: 60, Message: "Unknown table"}, queries: 1, returned: true},
		{name: "connection: retried", n: 10, bad: []int{3}, budget: isolateQueries, err: errors.New("connection refused"), queries: 1, returned: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ls := make([]*lookup, tc.n)
			bad := map[*lookup]bool{}
			for i := range ls {
				ls[i] = &lookup{size: 7, found: true}
			}
			for _, i := range tc.bad {
				bad[ls[i]] = true
			}
			queries := 0
			read := func(part []*lookup) error {
				queries++
				if slices.ContainsFunc(part, func(l *lookup) bool { return bad[l] }) {
					return fmt.Errorf("read unchanged TOAST values of t: %w", tc.err)
				}
				return nil
			}
			budget := tc.budget
			err := isolateRefused(ls, &budget, read)
			if (err != nil) != tc.returned {
				t.Fatalf("error %v, want returned %v", err, tc.returned)
			}
			want := tc.refused
			if want == nil && !tc.returned {
				want = tc.bad
			}
			var got []int
			for i, l := range ls {
				if l.refused != nil {
					got = append(got, i)
					if l.found || l.size != 0 || !errors.Is(l.refused, tc.err) {
						t.Errorf("lookup %d refused: found %v, size %d, %v", i, l.found, l.size, l.refused)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("refused %v, want %v", got, want)
			}
			if queries > tc.queries {
				t.Errorf("%d queries, want at most %d", queries, tc.queries)
			}
		})
	}
}

// seq is 0..n-1.
func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestRefusedRecords: every record that takes a value from a refused
// lookup is named, the first as the RecordError and the others in More,
// with the table, ClickHouse's refusal and the fix; a record reading only
// lookups that were read is not.
func TestRefusedRecords(t *testing.T) {
	tg := testTarget(t, "", []record.Column{{Name: "id", Type: "int8", TypMod: -1, Key: true}, {Name: "big", Type: "text", TypMod: -1}}, nil)
	refusal := &ch.Exception{Code: 457, Message: "cannot be parsed as Date32"}
	ok, bad := &lookup{}, &lookup{refused: fmt.Errorf("read: %w", refusal)}
	u := &unchanged{uses: map[int][]use{1: {{1, ok}}, 2: {{1, bad}}, 4: {{1, ok}, {1, bad}}, 5: {{1, bad}}}}
	recs := make([]*record.Record, 6)
	for i := range recs {
		recs[i] = &record.Record{EventID: fmt.Sprint("ev", i)}
	}
	if re := u.refusedRecords(tg, recs, 0, 2); re != nil {
		t.Errorf("records 0 and 1: %v, want none", re)
	}
	re := u.refusedRecords(tg, recs, 0, 5)
	if re == nil {
		t.Fatal("no record named")
	}
	got := []int{re.Index}
	for _, m := range re.More {
		got = append(got, m.Index)
		if len(m.More) > 0 {
			t.Errorf("record %d names more: %v", m.Index, m.More)
		}
	}
	if fmt.Sprint(got) != "[2 4]" {
		t.Errorf("records %v named, want [2 4] (5 is past hi)", got)
	}
	for _, part := range []string{"record ev2", tg.table.QualifiedName(), "cannot be parsed as Date32", "walhouse dlq replay", "update the row's large columns in PostgreSQL"} {
		if !strings.Contains(re.Err.Error(), part) {
			t.Errorf("%q does not name %s", re.Err, part)
		}
	}
	if !errors.Is(re, sink.ErrPermanent) || !strings.Contains(re.More[0].Err.Error(), "record ev4") {
		t.Errorf("%v: want sink.ErrPermanent, and record ev4's own cause in More", re)
	}
}

// TestIntegrationReadBackKeyOutOfRange: a row moved from a date key beyond
// ClickHouse's range, whose large value stayed as it was, is not looked up
// at the range's bound, where another row is (1900-01-01's, here): its
// value is NULL, as for a row ClickHouse does not have, never that row's.
// An update of a row keyed beyond the range fails its record
// (errKeyOutOfRange), and the rest of the batch loads.
func TestIntegrationReadBackKeyOutOfRange(t *testing.T) {
	ctx := context.Background()
	w := testWriter(t, "readbackrange")
	reg := prometheus.NewRegistry()
	WithMetrics(reg)(w)
	cols := []record.Column{
		{Name: "d", Type: "date", TypMod: -1, Key: true},
		{Name: "big", Type: "text", TypMod: -1},
	}
	src := record.Source{ID: "s", Schema: "public", Table: "readbackrange"}
	rec := func(v uint64, op record.Op, d, big string) *record.Record {
		r := &record.Record{EventID: fmt.Sprint("ev", v), TenantID: "t", Version: v, Op: op,
			OccurredAt: time.Unix(1700000000, 0).UTC(), Columns: cols, Values: []record.Value{{Text: d}, {Text: big}}}
		if big == "" {
			r.Values[1] = record.Value{Unchanged: true}
		}
		return r
	}
	if err := w.Load(ctx, sink.Batch{Source: src, Records: sourced([]*record.Record{rec(1, record.Insert, "1900-01-01", "the bound's own")}, src, ""), Token: "range/1"}); err != nil {
		t.Fatal(err)
	}
	moved := rec(3, record.Update, "1950-06-01", "")
	moved.OldKey = []record.Value{{Text: "1850-01-01"}, {Null: true}}
	batch := sink.Batch{Source: src, Records: sourced([]*record.Record{rec(2, record.Update, "1850-01-01", ""), moved}, src, ""), Token: "range/2"}
	err := w.Load(ctx, batch)
	var re *sink.RecordError
	if !errors.As(err, &re) || re.Index != 0 || !strings.Contains(re.Error(), errKeyOutOfRange.Error()) {
		t.Fatalf("Load = %v, want record 0 to fail with errKeyOutOfRange", err)
	}
	batch.From = 1
	if err := w.Load(ctx, batch); err != nil {
		t.Fatal(err)
	}
	tg, err := w.table(ctx, batch.Records[0])
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	rows, err := w.conn.Query(ctx, "SELECT toString(d) || ' ' || ifNull(big, 'NULL') FROM "+tg.table.QualifiedName()+" FINAL WHERE _is_deleted = 0 ORDER BY d")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if want := "[1900-01-01 the bound's own 1950-06-01 NULL]"; fmt.Sprint(got) != want {
		t.Errorf("rows %v, want %s", got, want)
	}
	// The moved row's value is missing (its old key is never looked up),
	// counted by each of the two loads of the batch; the value of the
	// record dead-lettered for its key is not: nothing of it is stored.
	if n := counterValue(t, reg, "walhouse_sink_unchanged_values_missing_total"); n != 2 {
		t.Errorf("walhouse_sink_unchanged_values_missing_total = %v, want 2 (the moved row, in both loads)", n)
	}
}

// TestIntegrationReadBackNaNKeyMerged reads back the unchanged values of
// rows keyed by a double precision and a real NaN once a merge built the
// part's column statistics, whose min and max leave NaN out (so a server
// that prunes parts by them drops the part for an IN of NaN), and of a
// row stored with Go's NaN bits (math.NaN, as builds before nanFloat64
// stored), which IN tells apart from the server's "nan": every value is
// found, also for a row moved from a NaN key, read without FINAL, where
// the server prunes parts by those statistics.
func TestIntegrationReadBackNaNKeyMerged(t *testing.T) {
	ctx := context.Background()
	w := testWriter(t, "readbacknan")
	cols := []record.Column{
		{Name: "k", Type: "float8", TypMod: -1, Key: true},
		{Name: "r", Type: "float4", TypMod: -1, Key: true},
		{Name: "big", Type: "text", TypMod: -1},
		{Name: "n", Type: "int4", TypMod: -1},
	}
	src := record.Source{ID: "s", Schema: "public", Table: "readbacknan"}
	keys := [][2]string{{"NaN", "NaN"}, {"NaN", "1.5"}, {"2.5", "NaN"}, {"3.5", "1.5"}, {"-Infinity", "NaN"}}
	rec := func(v uint64, op record.Op, k [2]string, big string, n int) *record.Record {
		r := &record.Record{EventID: fmt.Sprint("ev", v), TenantID: "t", Version: v, Op: op, OccurredAt: time.Unix(1700000000, 0).UTC(), Columns: cols,
			Values: []record.Value{{Text: k[0]}, {Text: k[1]}, {Text: big}, {Text: fmt.Sprint(n)}}}
		if big == "" {
			r.Values[2] = record.Value{Unchanged: true}
		}
		return r
	}
	var inserts, updates []*record.Record
	for i, k := range keys {
		inserts = append(inserts, rec(uint64(10+i), record.Insert, k, fmt.Sprintf("big %d %s", i, strings.Repeat("x", 200)), 0))
		updates = append(updates, rec(uint64(100+i), record.Update, k, "", 1))
	}
	if err := w.Load(ctx, sink.Batch{Source: src, Records: sourced(inserts, src, ""), Token: "nan/1"}); err != nil {
		t.Fatal(err)
	}
	tg, err := w.table(ctx, sourced(inserts, src, "")[0])
	if err != nil {
		t.Fatal(err)
	}
	q := tg.table.QualifiedName()
	// A row as builds before nanFloat64 stored it: Go's NaN bits.
	legacy := [2]string{"NaN", "7.5"}
	if err := w.conn.Exec(ctx, "INSERT INTO "+q+" SELECT * REPLACE (reinterpretAsFloat64(unhex('010000000000F87F')) AS k, toFloat32(7.5) AS r, 'legacy' AS big) FROM (SELECT * FROM "+q+" WHERE k = 3.5)"); err != nil {
		t.Fatal(err)
	}
	updates = append(updates, rec(200, record.Update, legacy, "", 1))
	if err := w.conn.Exec(ctx, "OPTIMIZE TABLE "+q+" FINAL"); err != nil {
		t.Fatal(err)
	}
	if err := w.Load(ctx, sink.Batch{Source: src, Records: sourced(updates, src, ""), Token: "nan/2"}); err != nil {
		t.Fatal(err)
	}
	// A row moved from a NaN key, read below the move's version without
	// FINAL, which ClickHouse prunes parts by statistics for, once merged.
	if err := w.conn.Exec(ctx, "OPTIMIZE TABLE "+q+" FINAL"); err != nil {
		t.Fatal(err)
	}
	gone := rec(250, record.Delete, keys[0], "", 0)
	gone.Values[2] = record.Value{Null: true}
	moved := rec(250, record.Update, [2]string{"12.5", "1.5"}, "", 2)
	moved.OldKey = []record.Value{{Text: keys[0][0]}, {Text: keys[0][1]}, {Null: true}, {Null: true}}
	if err := w.Load(ctx, sink.Batch{Source: src, Records: sourced([]*record.Record{gone, moved}, src, ""), Token: "nan/move"}); err != nil {
		t.Fatal(err)
	}
	// One at a time too: a query of one NaN key, and of the legacy one.
	for i, k := range [][2]string{keys[1], legacy} {
		one := []*record.Record{rec(uint64(300+i), record.Update, k, "", 2)}
		if err := w.Load(ctx, sink.Batch{Source: src, Records: sourced(one, src, ""), Token: fmt.Sprint("nan/3/", i)}); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := w.conn.Query(ctx, "SELECT toString(k) || '/' || toString(r) || ' ' || toString(n) || ' ' || substring(ifNull(big, 'NULL'), 1, 8) FROM "+q+" FINAL WHERE _is_deleted = 0 ORDER BY isNaN(k), k, isNaN(r), r")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	want := []string{"-inf/nan 1 big 4 xx", "2.5/nan 1 big 2 xx", "3.5/1.5 1 big 3 xx", "12.5/1.5 2 big 0 xx", "nan/1.5 2 big 1 xx", "nan/7.5 2 legacy"}
	if !slices.Equal(got, want) {
		t.Errorf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
