package clickhouse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	chproto "github.com/ClickHouse/ch-go/proto"
	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

// appendRowRef is how Writer.insert appended a record before it built
// columns (as of 16b7473): one row of values, converted one by one, for
// the client's Batch.Append. It is the reference the column building must
// match value for value.
func appendRowRef(row []any, tg *target, r *record.Record, fill map[int]any) ([]any, error) {
	if tg.table.TenantSynthetic {
		row = append(row, r.TenantID)
	}
	for i, c := range tg.table.Columns {
		typ := tg.columns[i].Type
		v := r.Values[i]
		switch {
		case v.Unchanged:
			x, ok := fill[i]
			if !ok || x == nil {
				x = typ.Null() // a row never loaded before
			}
			row = append(row, x)
		case v.Null:
			row = append(row, typ.Null())
		default:
			x, err := typ.Convert(v.Text)
			if key := c.Source.Key || c.Name == tg.table.TenantColumn; err == nil && key && x == nil {
				err = errKeyNotHeld
			} else if err == nil && key && typ.OutOfRange(v.Text) {
				err = keyOutOfRange(v.Text)
			}
			if err != nil {
				return nil, fmt.Errorf("%w: record %s, column %s (%s → %s): %v", sink.ErrPermanent, r.EventID, c.Name, c.Source.Type, typ.DDL, err)
			}
			row = append(row, x)
		}
	}
	deleted := uint8(0)
	if r.Op == record.Delete {
		deleted = 1
	}
	return append(row, r.Version, deleted, r.OccurredAt), nil
}

// insertRowsRef fills block as Writer.insert did through Batch.Append
// (which is Block.Append), and returns its error for the first record that
// could not be appended.
func insertRowsRef(block *proto.Block, tg *target, recs []*record.Record, fills filled) *sink.RecordError {
	row := make([]any, 0, len(block.Columns))
	for i, r := range recs {
		var err error
		row, err = appendRowRef(row[:0], tg, r, fills[i])
		if err == nil {
			if aerr := block.Append(row...); aerr != nil {
				err = fmt.Errorf("%w: record %s: %v", sink.ErrPermanent, r.EventID, aerr)
			}
		}
		if err != nil {
			return &sink.RecordError{Index: i, Err: err}
		}
	}
	return nil
}

// insertColumns fills block as Writer.insert does now.
func insertColumns(block *proto.Block, tg *target, recs []*record.Record, fills filled) *sink.RecordError {
	built, first := buildColumns(tg, recs, fills)
	dst := make([]appender, len(block.Columns))
	for p, c := range block.Columns {
		dst[p] = scratch{c}
	}
	if f := tg.appendColumns(dst, built, recs, first); f != nil {
		return &sink.RecordError{Index: f.index, Err: f.err}
	}
	return nil
}

// newBlock returns an empty block of tg's insert columns, as the client
// makes one for a batch.
func newBlock(t testing.TB, tg *target) *proto.Block {
	t.Helper()
	b := &proto.Block{ServerContext: &column.ServerContext{Timezone: time.UTC}}
	for _, c := range tg.insert {
		if err := b.AddColumn(c.Name, column.Type(c.Type)); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// encode returns the block as the client sends it (Native format).
func encode(t *testing.T, b *proto.Block) []byte {
	t.Helper()
	var buf chproto.Buffer
	if err := b.Encode(&buf, proto.DBMS_TCP_PROTOCOL_VERSION); err != nil {
		t.Fatal(err)
	}
	return buf.Buf
}

// encodeColumn returns column p of the block as the client sends it.
func encodeColumn(t *testing.T, b *proto.Block, p int) []byte {
	t.Helper()
	var buf chproto.Buffer
	if err := b.EncodeColumn(&buf, proto.DBMS_TCP_PROTOCOL_VERSION, p); err != nil {
		t.Fatal(err)
	}
	return buf.Buf
}

// deref shows what a pointer or slice of pointers holds.
func deref(v any) any {
	rv := reflect.ValueOf(v)
	switch {
	case !rv.IsValid():
		return nil
	case rv.Kind() == reflect.Pointer && !rv.IsNil():
		return rv.Elem().Interface()
	case rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Pointer:
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = deref(rv.Index(i).Interface())
		}
		return out
	}
	return v
}

// testTarget builds the target for cols as Writer.table does, the table
// holding have already (nil: a new table), with the insert's column types
// as ClickHouse would report them.
func testTarget(t testing.TB, tenant string, cols []record.Column, have []schema.ExistingColumn) *target {
	t.Helper()
	tbl, err := schema.NewTable(record.Source{ID: "src", Schema: "public", Table: "t"}, tenant, cols, schema.Options{Database: "db"})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := schema.PlanEvolution(tbl, have, 1)
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{table: tbl, columns: plan.Columns}
	var types []string
	if tbl.TenantSynthetic {
		types = append(types, tbl.TenantType.DDL)
	}
	for _, c := range tg.columns {
		types = append(types, c.Type.DDL)
	}
	types = append(types, "UInt64", "UInt8", "DateTime64(6, 'UTC')")
	for i, n := range tg.insertColumns() {
		tg.insert = append(tg.insert, ch.ColumnNameAndType{Name: n, Type: types[i]})
	}
	return tg
}

// samples are PostgreSQL text outputs of every type schema maps, bounds
// and special values included.
var samples = func() map[string][]string {
	text := []string{`a "quoted" text`, "", "ünïcödé ✓", "line\nbreak, {braces} and \\"}
	m := map[string][]string{
		"bytea":       {`\x00ff41`, `\x`},
		"bool":        {"t", "f"},
		"int2":        {"-32768", "0", "32767"},
		"int4":        {"2147483647", "-5"},
		"int8":        {"-9223372036854775808", "42"},
		"oid":         {"4294967295", "0"},
		"xid":         {"7"},
		"cid":         {"0"},
		"float4":      {"-1.5e-10", "NaN", "Infinity", "3.4028235e+38"},
		"float8":      {"-Infinity", "NaN", "1.7976931348623157e+308", "0.1"},
		"numeric":     {"-12.50", "NaN", "Infinity", "0", "123456789.12345678901234567890123456789"},
		"date":        {"2024-02-29", "infinity", "-infinity", "0044-03-15 BC", "1899-01-01", "2300-01-01"},
		"timestamp":   {"2024-01-15 10:00:00.123456", "infinity", "2262-04-12 00:00:00", "1900-01-01 00:00:00"},
		"timestamptz": {"2024-01-15 10:00:00.123456+05:30", "2024-01-15 10:00:00+00", "-infinity", "12000-01-01 00:00:00+00"},
		"uuid":        {"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "00000000-0000-0000-0000-000000000000"},
	}
	for _, name := range []string{"text", "varchar", "bpchar", "char", "name", "citext", "xml", "json", "jsonb",
		"time", "timetz", "interval", "inet", "cidr", "macaddr", "macaddr8", "money", "bit", "varbit", "tsvector",
		"tsquery", "point", "line", "lseg", "box", "path", "polygon", "circle", "int4range", "int8range", "numrange",
		"tsrange", "tstzrange", "daterange", "pg_lsn", "txid_snapshot", "pg_snapshot"} {
		m[name] = text
	}
	m["hstore"] = text                                                             // no mapping: stored as text
	m["price"] = []string{"-12.50", "NaN", "0", "99999999.99", "-Infinity", "0.1"} // numeric(10, 2), by column name
	return m
}()

// arrayText writes elems as a PostgreSQL array literal, with a NULL.
func arrayText(elems []string) string {
	q := make([]string, len(elems))
	for i, e := range elems {
		q[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(e) + `"`
	}
	return "{" + strings.Join(append(q, "NULL"), ",") + "}"
}

// stored returns what Writer.storedValues reads back for a column of
// ClickHouse type typ holding text: the value in the client's scan type.
func stored(t testing.TB, typ schema.Type, chType, text string) any {
	t.Helper()
	col, err := column.Type(chType).Column("c", &column.ServerContext{Timezone: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	x := typ.Null()
	if text != "" {
		if x, err = typ.Convert(text); err != nil {
			t.Fatal(err)
		}
	}
	if err := col.AppendRow(x); err != nil {
		t.Fatal(err)
	}
	dest := reflect.New(col.ScanType())
	if err := col.ScanRow(dest.Interface(), 0); err != nil {
		t.Fatal(err)
	}
	return dest.Elem().Interface()
}

// records makes n records of tg's columns: values from samples, NULLs,
// unchanged TOAST values with and without a recovered value (fills), and
// deletes.
func records(t testing.TB, tg *target, n int) ([]*record.Record, filled) {
	t.Helper()
	fills := filled{}
	recs := make([]*record.Record, n)
	cols := make([]record.Column, len(tg.table.Columns))
	for i, c := range tg.table.Columns {
		cols[i] = c.Source
	}
	offset := len(tg.insert) - len(tg.columns) - 3 // the synthetic tenant column
	for i := range recs {
		r := &record.Record{
			EventID:    fmt.Sprintf("ev%d", i),
			TenantID:   fmt.Sprintf("tenant %d", i%3),
			Version:    uint64(1000 + i),
			Op:         []record.Op{record.Insert, record.Update, record.Delete, record.Read}[i%4],
			OccurredAt: time.Date(2024, 1, 15, 10, 0, i, 123456000, time.UTC),
			Columns:    cols,
			Values:     make([]record.Value, len(cols)),
		}
		for j, c := range tg.table.Columns {
			s := samples[c.Name]
			if s == nil {
				s = samples[c.Source.Type]
			}
			if s == nil {
				t.Fatalf("no samples of PostgreSQL type %s", c.Source.Type)
			}
			text := s[(i*7+j)%len(s)]
			if c.Source.Key && c.Source.Type == "numeric" && strings.ContainsAny(text, "nN") {
				text = "0" // NaN and ±Infinity fail a record as a key (TestBuildColumnsRandomFaults)
			}
			if c.Source.Key && tg.columns[j].Type.OutOfRange(text) {
				text = s[0] // a date beyond ClickHouse's range fails a record as a key (TestBuildColumnsKeyOutOfRange)
			}
			if c.Source.Array {
				text = arrayText(s[:1+(i+j)%len(s)])
				if (i+j)%5 == 1 {
					text = "{}"
				}
			}
			v := record.Value{Text: text}
			switch {
			case c.Source.Key || c.Name == tg.table.TenantColumn:
				if c.Name == tg.table.TenantColumn {
					r.TenantID = text
				}
			case (i+j)%6 == 5:
				v = record.Value{Null: true}
			case (i+j)%7 == 4:
				v.Unchanged = true // Text: what the row holds, for TestIntegrationLoadMatchesRows
				typ, chType := tg.columns[j].Type, tg.insert[offset+j].Type
				switch i % 4 {
				case 0: // no recovered value: the record's first version
				case 1:
					fills.set(i, j, stored(t, typ, chType, text))
				case 2:
					fills.set(i, j, nil) // a row ClickHouse does not have
				case 3:
					fills.set(i, j, stored(t, typ, chType, "")) // a stored NULL
				}
			}
			r.Values[j] = v
		}
		recs[i] = r
	}
	return recs, fills
}

// everyType has a column of each PostgreSQL type schema maps, scalar and
// array, and the enum and unmapped types stored as text.
func everyType() []record.Column {
	cols := []record.Column{{Name: "id", Type: "int8", TypMod: -1, Key: true}}
	for _, name := range schema.PGTypes() {
		cols = append(cols,
			record.Column{Name: "n_" + name, Type: name, TypMod: -1},
			record.Column{Name: "a_" + name, Type: name, TypMod: -1, Array: true})
	}
	return append(cols,
		record.Column{Name: "mood", Type: "text", Enum: true, TypMod: -1},
		record.Column{Name: "kv", Type: "hstore", TypMod: -1},
		record.Column{Name: "price", Type: "numeric", TypMod: 12<<16 | 2 + 4})
}

// keysOfEveryType has a key column of each scalar type, so not Nullable:
// NaN in a numeric key is a NULL the column cannot hold.
func keysOfEveryType() []record.Column {
	var cols []record.Column
	for _, name := range schema.PGTypes() {
		cols = append(cols, record.Column{Name: "k_" + name, Type: name, TypMod: -1, Key: true})
	}
	return append(cols, record.Column{Name: "note", Type: "text", TypMod: -1})
}

// TestBuildColumnsMatchesRows builds the columns of an insert for records
// of every type, NULLs, unchanged TOAST values and deletes, and checks that
// the block the client sends holds what appending the records row by row
// put there, byte for byte.
func TestBuildColumnsMatchesRows(t *testing.T) {
	for _, name := range schema.PGTypes() {
		if samples[name] == nil {
			t.Errorf("no samples of PostgreSQL type %s: add some", name)
		}
	}
	tenant := []record.Column{{Name: "org", Type: "text", TypMod: -1, Key: true}, {Name: "id", Type: "int4", TypMod: -1, Key: true}}
	widened := []record.Column{
		{Name: "id", Type: "int8", TypMod: -1, Key: true},
		{Name: "qty", Type: "int4", TypMod: -1},
		{Name: "small", Type: "int2", TypMod: -1},
		{Name: "price", Type: "numeric", TypMod: 10<<16 | 2 + 4},
		{Name: "day", Type: "date", TypMod: -1},
		{Name: "ratio", Type: "float4", TypMod: -1},
		{Name: "label", Type: "varchar", TypMod: 20 + 4},
	}
	tests := []struct {
		name   string
		tenant string
		cols   []record.Column
		have   []schema.ExistingColumn
		// noNulls: every value is given (Nullable columns without NULLs).
		noNulls bool
	}{
		{"every type, synthetic tenant", "", everyType(), nil, false},
		{"every type without NULLs", "", everyType(), nil, true},
		{"keys of every type", "", keysOfEveryType(), nil, false},
		{"tenant column of the source", "org", tenant, nil, false},
		{"columns wider than the source's", "", widened, []schema.ExistingColumn{
			{Name: "qty", Type: "Nullable(Int64)"},
			{Name: "small", Type: "Nullable(Decimal(20, 4))"},
			{Name: "price", Type: "Nullable(Decimal(12, 4))"},
			{Name: "day", Type: "Nullable(DateTime64(6, 'UTC'))"},
			{Name: "ratio", Type: "Nullable(Float64)"},
			{Name: "label", Type: "Nullable(String)"},
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tg := testTarget(t, tc.tenant, tc.cols, tc.have)
			recs, fills := records(t, tg, 60)
			if tc.noNulls {
				for j := range tg.columns {
					given := slices.IndexFunc(recs, func(r *record.Record) bool { return !r.Values[j].Null && !r.Values[j].Unchanged })
					for _, r := range recs {
						if v := r.Values[j]; v.Null || v.Unchanged {
							r.Values[j] = recs[given].Values[j]
						}
					}
				}
				fills = nil
			}
			want, got := newBlock(t, tg), newBlock(t, tg)
			if err := insertRowsRef(want, tg, recs, fills); err != nil {
				t.Fatalf("row by row: %v", err)
			}
			if err := insertColumns(got, tg, recs, fills); err != nil {
				t.Fatalf("column by column: %v", err)
			}
			if got.Rows() != len(recs) {
				t.Fatalf("%d rows, want %d", got.Rows(), len(recs))
			}
			for p := range want.Columns {
				if w, g := encodeColumn(t, want, p), encodeColumn(t, got, p); !bytes.Equal(w, g) {
					t.Errorf("column %s differs: %d bytes column by column, %d row by row", tg.insert[p].Name, len(g), len(w))
					for i := range recs {
						if w, g := fmt.Sprint(deref(want.Columns[p].Row(i, false))), fmt.Sprint(deref(got.Columns[p].Row(i, false))); w != g {
							t.Errorf("column %s, record %d: %s, want %s", tg.insert[p].Name, i, g, w)
						}
					}
				}
			}
			if w, g := encode(t, want), encode(t, got); !bytes.Equal(w, g) {
				t.Errorf("the blocks differ: %d bytes column by column, %d row by row", len(g), len(w))
			}
		})
	}
}

// faultColumns are the columns of the fault tests, one of each kind of
// failure (a conversion, a value the client refuses, an array), and a
// good value for each.
func faultColumns() ([]record.Column, []string) {
	return []record.Column{
			{Name: "id", Type: "int8", TypMod: -1, Key: true},
			{Name: "qty", Type: "int4", TypMod: -1},
			{Name: "ref", Type: "uuid", TypMod: -1},
			{Name: "price", Type: "numeric", TypMod: 12<<16 | 2 + 4},
			{Name: "at", Type: "timestamptz", TypMod: -1},
			{Name: "tags", Type: "int4", TypMod: -1, Array: true},
		},
		[]string{"1", "5", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "1.50", "2024-01-15 10:00:00+00", "{1,NULL}"}
}

// TestBuildColumnsFailsTheFirstRecord checks that a value that cannot be
// loaded fails the record that holds it, the first in row order as
// appending row by row found it, with sink.ErrPermanent, the record and
// the column: what the sink needs to set that record alone aside.
func TestBuildColumnsFailsTheFirstRecord(t *testing.T) {
	cols, good := faultColumns()
	type bad struct {
		rec  int
		col  string
		text string
	}
	tests := []struct {
		name    string
		bad     []bad
		wantRec int
		wantCol string
		// driver: the client refuses the value (Convert does not check
		// it); the reference's error then names no column.
		driver bool
	}{
		{"a value that does not convert", []bad{{3, "qty", "x"}}, 3, "qty", false},
		{"the first record of two", []bad{{5, "qty", "x"}, {2, "at", "2024-01-15 25:00:00"}}, 2, "at", false},
		{"the first column of a record", []bad{{2, "at", "2024-01-15 25:00:00"}, {2, "qty", "1.5"}}, 2, "qty", false},
		{"a decimal too wide", []bad{{4, "price", "12345678901.5"}}, 4, "price", false},
		{"an array element", []bad{{1, "tags", "{1,x}"}}, 1, "tags", false},
		{"a value the client refuses", []bad{{3, "ref", "not a uuid"}}, 3, "ref", true},
		{"a refusal before a value that does not convert", []bad{{4, "qty", "x"}, {1, "ref", "nope"}}, 1, "ref", true},
		{"a value that does not convert before a refusal", []bad{{1, "qty", "x"}, {4, "ref", "nope"}}, 1, "qty", false},
		{"a refusal in a later column, earlier record", []bad{{3, "ref", "nope"}, {2, "price", "--1"}}, 2, "price", true},
		{"a refusal in an earlier column, same record", []bad{{2, "price", "--1"}, {2, "ref", "nope"}}, 2, "ref", true},
		{"conversion before refusal in one record", []bad{{2, "ref", "nope"}, {2, "at", "2024-02-30 00:00:00"}}, 2, "at", false},
		{"the last record", []bad{{9, "qty", "x"}}, 9, "qty", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tg := testTarget(t, "", cols, nil)
			recs := make([]*record.Record, 10)
			for i := range recs {
				r := &record.Record{EventID: fmt.Sprintf("ev%d", i), TenantID: "t", Version: uint64(i), OccurredAt: time.Unix(int64(i), 0)}
				for j := range cols {
					r.Values = append(r.Values, record.Value{Text: good[j]})
				}
				recs[i] = r
			}
			for _, b := range tc.bad {
				for j, c := range cols {
					if c.Name == b.col {
						recs[b.rec].Values[j].Text = b.text
					}
				}
			}
			want := insertRowsRef(newBlock(t, tg), tg, recs, nil)
			got := insertColumns(newBlock(t, tg), tg, recs, nil)
			if want == nil || got == nil {
				t.Fatalf("row by row: %v; column by column: %v; want both to fail", want, got)
			}
			if got.Index != want.Index || got.Index != tc.wantRec {
				t.Errorf("column by column failed record %d, row by row %d; want %d", got.Index, want.Index, tc.wantRec)
			}
			if !errors.Is(got.Err, sink.ErrPermanent) {
				t.Errorf("%v is not sink.ErrPermanent", got.Err)
			}
			ev := fmt.Sprintf("record ev%d, column %s", tc.wantRec, tc.wantCol)
			if !strings.Contains(got.Err.Error(), ev) {
				t.Errorf("%q does not name %s", got.Err, ev)
			}
			if !tc.driver && got.Err.Error() != want.Err.Error() {
				t.Errorf("error %q, row by row %q", got.Err, want.Err)
			}
			// The client's refusal, which row by row came through
			// Block.Append with the column's name.
			if _, cause, _ := strings.Cut(got.Err.Error(), ev+": "); tc.driver && !strings.HasSuffix(want.Err.Error(), " "+cause) {
				t.Errorf("error %q does not end in the client's refusal %q", got.Err, want.Err)
			}
		})
	}
}

// TestBuildColumnsKeyOutOfRange: a date or timestamp that ClickHouse
// stores as its range's bound fails its record (errKeyOutOfRange, naming
// the value) in a key column, where it would share one row with every
// other key beyond that bound, and is stored clamped elsewhere. The
// bounds themselves load. An array is never a key (schema.NewTable
// refuses one, and capture leaves such a table out): arrays are clamped.
func TestBuildColumnsKeyOutOfRange(t *testing.T) {
	cols := []record.Column{
		{Name: "org", Type: "text", TypMod: -1, Key: true},
		{Name: "day", Type: "date", TypMod: -1, Key: true},
		{Name: "at", Type: "timestamptz", TypMod: -1, Key: true},
		{Name: "days", Type: "date", Array: true, TypMod: -1},
		{Name: "ats", Type: "timestamptz", Array: true, TypMod: -1},
		{Name: "seen", Type: "date", TypMod: -1},
		{Name: "ts", Type: "timestamp", TypMod: -1},
		{Name: "seens", Type: "date", Array: true, TypMod: -1},
	}
	good := []string{"acme", "2024-01-15", "2024-01-15 10:00:00+00", "{2024-01-15,2024-01-16}", `{"2024-01-15 10:00:00+00"}`, "2024-01-15", "2024-01-15 10:00:00", "{2024-01-15}"}
	tests := []struct {
		col, text string
		fails     bool
	}{
		{"day", "1800-01-01", true},
		{"day", "1899-12-31", true},
		{"day", "2300-01-01", true},
		{"day", "infinity", true},
		{"day", "-infinity", true},
		{"day", "0044-03-15 BC", true},
		{"day", "1900-01-01", false},
		{"day", "2299-12-31", false},
		{"at", "1850-06-01 00:00:00+00", true},
		{"at", "1900-01-01 00:00:00+01", true},
		{"at", "2262-04-12 00:00:00+00", true},
		{"at", "infinity", true},
		{"at", "1900-01-01 00:00:00+00", false},
		{"at", "2262-04-11 23:47:16.854775+00", false},
		// Arrays: clamped, nested ones too.
		{"days", "{2024-01-15,1800-01-01}", false},
		{"days", "{{2024-01-15},{2300-01-01}}", false},
		{"days", "{1900-01-01,NULL,2299-12-31}", false},
		{"ats", "{-infinity}", false},
		{"seens", "{1800-01-01,infinity}", false}, // not a key: clamped
		{"seen", "1800-01-01", false},             // not a key: clamped, as documented
		{"seen", "infinity", false},
		{"ts", "1800-01-01 00:00:00", false},
		{"org", "1800-01-01", false}, // text: stored as itself
	}
	tg := testTarget(t, "org", cols, nil)
	for _, tc := range tests {
		t.Run(tc.col+" "+tc.text, func(t *testing.T) {
			recs := make([]*record.Record, 3)
			for i := range recs {
				r := &record.Record{EventID: fmt.Sprintf("ev%d", i), TenantID: "acme", Version: uint64(i + 1), OccurredAt: time.Unix(int64(i), 0).UTC(), Columns: cols}
				for j, c := range cols {
					v := record.Value{Text: good[j]}
					if i == 1 && c.Name == tc.col {
						v.Text = tc.text
					}
					r.Values = append(r.Values, v)
				}
				recs[i] = r
			}
			got := insertColumns(newBlock(t, tg), tg, recs, nil)
			want := insertRowsRef(newBlock(t, tg), tg, recs, nil)
			if !tc.fails {
				if got != nil || want != nil {
					t.Fatalf("column by column: %v; row by row: %v; want both to load", got, want)
				}
				return
			}
			if got == nil {
				t.Fatalf("loaded; want record 1 to fail")
			}
			if got.Index != 1 || !strings.Contains(got.Err.Error(), errKeyOutOfRange.Error()) || !errors.Is(got.Err, sink.ErrPermanent) {
				t.Errorf("record %d failed: %v; want record 1, errKeyOutOfRange and sink.ErrPermanent", got.Index, got.Err)
			}
			for _, part := range []string{"record ev1, column " + tc.col, fmt.Sprintf("%q", tc.text), "1900-01-01", "change the value in PostgreSQL"} {
				if !strings.Contains(got.Err.Error(), part) {
					t.Errorf("%q does not name %s", got.Err, part)
				}
			}
			if want == nil || want.Err.Error() != got.Err.Error() {
				t.Errorf("row by row: %v; column by column: %v", want, got.Err)
			}
		})
	}
}

// TestBuildColumnsRandomFaults puts values that do not convert, values
// the client refuses, NULLs and unchanged TOAST values at random places of
// random batches (chunk and more records, so faults fall in later chunks
// too) and checks that the columns fail the same record as appending row
// by row did, or hold the same block.
func TestBuildColumnsRandomFaults(t *testing.T) {
	cols, good := faultColumns()
	// and a numeric key column, where NaN and ±Infinity, which its
	// Decimal cannot hold, fail the record.
	// And a date key column, where a date beyond ClickHouse's range
	// fails the record.
	cols = append(cols, record.Column{Name: "k", Type: "numeric", TypMod: -1, Key: true}, record.Column{Name: "d", Type: "date", TypMod: -1, Key: true})
	good = append(good, "12.5", "2024-01-15")
	wrong := [][]string{{"x"}, {"1.5", "y"}, {"nope"}, {"--1", "1e3", "12345678901"}, {"2024-01-15 25:00:00"}, {"{1,x}", "1"}, {"a", "1-", "NaN", "Infinity"}, {"1800-01-01", "infinity", "2024-13-01"}}
	tg := testTarget(t, "", cols, nil)
	rng := rand.New(rand.NewPCG(14, 1))
	failed := 0
	for range 300 {
		recs := make([]*record.Record, 1+rng.IntN(2*chunk))
		fills := filled{}
		for i := range recs {
			r := &record.Record{EventID: fmt.Sprintf("ev%d", i), TenantID: "t", Version: uint64(i), OccurredAt: time.Unix(int64(i), 0).UTC()}
			for j, c := range cols {
				v := record.Value{Text: good[j]}
				switch x := rng.IntN(4000); {
				case x < 2:
					v.Text = wrong[j][rng.IntN(len(wrong[j]))]
				case x < 400 && !c.Key:
					v = record.Value{Null: true}
				case x < 600 && !c.Key:
					v = record.Value{Unchanged: true}
					if x%2 == 0 {
						fills.set(i, j, stored(t, tg.columns[j].Type, tg.insert[1+j].Type, good[j]))
					}
				}
				r.Values = append(r.Values, v)
			}
			recs[i] = r
		}
		want, got := newBlock(t, tg), newBlock(t, tg)
		werr, gerr := insertRowsRef(want, tg, recs, fills), insertColumns(got, tg, recs, fills)
		switch {
		case (werr == nil) != (gerr == nil):
			t.Fatalf("row by row: %v; column by column: %v", werr, gerr)
		case werr != nil:
			failed++
			if gerr.Index != werr.Index || !errors.Is(gerr.Err, sink.ErrPermanent) {
				t.Fatalf("column by column failed record %d: %v; row by row record %d: %v", gerr.Index, gerr.Err, werr.Index, werr.Err)
			}
		case !bytes.Equal(encode(t, want), encode(t, got)):
			t.Fatalf("the blocks of %d records differ", len(recs))
		}
	}
	if failed < 100 || failed > 250 {
		t.Errorf("%d of 300 batches failed: the faults are too rare or too common to compare both", failed)
	}
}

// testWriter returns a Writer into a fresh database, dropped at the end.
func testWriter(t *testing.T, prefix string) *Writer {
	t.Helper()
	ctx := context.Background()
	conn := testConn(t)
	db := testenv.Name(prefix)
	w, err := NewWriter(ctx, conn, db, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(db)) })
	return w
}

// sourced makes recs records of src as capture sends them, each with a
// copy of its values.
func sourced(recs []*record.Record, src record.Source, tenant string) []*record.Record {
	out := make([]*record.Record, len(recs))
	for i, r := range recs {
		c := *r
		c.Source, c.TenantColumn, c.SchemaID = src, tenant, record.SchemaID(tenant, r.Columns)
		c.LSN = record.LSN(c.Version)
		c.Values = append([]record.Value(nil), r.Values...)
		out[i] = &c
	}
	return out
}

// tableRows returns the rows of tg's table in database db, each as TSV of
// the insert's columns, sorted.
func tableRows(t *testing.T, w *Writer, db string, tg *target) []string {
	t.Helper()
	cols := tg.insertColumns()
	for i, c := range cols {
		cols[i] = schema.QuoteIdent(c)
	}
	q := fmt.Sprintf("SELECT formatRow('TSV', %s) AS r FROM %s.%s ORDER BY r", strings.Join(cols, ", "), schema.QuoteIdent(db), schema.QuoteIdent(tg.table.Name))
	rows, err := w.conn.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestIntegrationLoadMatchesRows loads records of every type through
// Writer.Load, column by column over the connection the tests have (HTTP
// to the local engine), and the same records row by row into another
// database through the same INSERT, then compares the stored rows. The
// second load updates every row with unchanged TOAST values, which the
// Writer reads back from ClickHouse.
func TestIntegrationLoadMatchesRows(t *testing.T) {
	ctx := context.Background()
	cols, rows := testWriter(t, "cols"), testWriter(t, "rows")
	src := record.Source{ID: "s", Schema: "public", Table: "every type"}
	recs, _ := records(t, testTarget(t, "", everyType(), nil), 60)
	var inserts, updates []*record.Record
	for i, r := range sourced(recs, src, "") {
		r.Values[0].Text = fmt.Sprint(i) // id: one row per record
		u := *r
		u.Values = append([]record.Value(nil), r.Values...)
		u.Op, u.Version, u.LSN = record.Update, r.Version+1000, r.LSN+1000
		for j := range r.Values {
			r.Values[j].Unchanged = false
		}
		inserts, updates = append(inserts, r), append(updates, &u)
	}
	var tg *target
	for n, batch := range [][]*record.Record{inserts, updates} {
		token := fmt.Sprintf("types/%d", n)
		if err := cols.Load(ctx, sink.Batch{Source: src, Records: sourced(batch, src, ""), Token: token}); err != nil {
			t.Fatalf("load %s column by column: %v", token, err)
		}
		ref := sourced(batch, src, "")
		var err error
		if tg, err = rows.table(ctx, ref[0]); err != nil {
			t.Fatal(err)
		}
		u, err := rows.planUnchanged(ctx, tg, ref)
		if err != nil {
			t.Fatal(err)
		}
		fills, err := rows.fill(ctx, tg, u, ref, piece{0, len(ref)})
		if err != nil {
			t.Fatal(err)
		}
		b, err := rows.prepare(ctx, tg, token)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range ref {
			row, err := appendRowRef(nil, tg, r, fills[i])
			if err == nil {
				err = b.Append(row...)
			}
			if err != nil {
				t.Fatalf("load %s row by row: record %d: %v", token, i, err)
			}
		}
		if err := b.Send(); err != nil {
			t.Fatalf("load %s row by row: %v", token, err)
		}
	}
	want, got := tableRows(t, rows, rows.database, tg), tableRows(t, cols, cols.database, tg)
	if len(want) != 2*len(recs) {
		t.Fatalf("%d rows stored row by row, want %d", len(want), 2*len(recs))
	}
	if !slices.Equal(got, want) {
		for i := range max(len(got), len(want)) {
			if i >= len(got) || i >= len(want) || got[i] != want[i] {
				t.Fatalf("stored rows differ at %d of %d (row by row %d):\n%q\nwant\n%q", i, len(got), len(want), got[min(i, len(got)-1)], want[min(i, len(want)-1)])
			}
		}
	}
}

// TestIntegrationLoadFailsTheRecord has Writer.Load fail a batch with
// values that cannot be loaded, one the client refuses among them, over a
// real connection: it names the first such record (sink.RecordError,
// sink.ErrPermanent), and the batch without it goes on to the next, as
// the sink sets records aside, until the rest loads whole.
func TestIntegrationLoadFailsTheRecord(t *testing.T) {
	ctx := context.Background()
	w := testWriter(t, "fails")
	cols := []record.Column{
		{Name: "id", Type: "int8", TypMod: -1, Key: true},
		{Name: "qty", Type: "int4", TypMod: -1},
		{Name: "ref", Type: "uuid", TypMod: -1},
		{Name: "price", Type: "numeric", TypMod: 12<<16 | 2 + 4},
	}
	src := record.Source{ID: "s", Schema: "public", Table: "fails"}
	var recs []*record.Record
	for i := range 10 {
		recs = append(recs, &record.Record{
			EventID: fmt.Sprintf("ev%d", i), TenantID: "t", Version: uint64(10 + i), Op: record.Insert,
			OccurredAt: time.Unix(1700000000, 0).UTC(), Columns: cols,
			Values: []record.Value{{Text: fmt.Sprint(i)}, {Text: "5"}, {Text: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}, {Text: "1.50"}},
		})
	}
	recs[6].Values[1].Text = "x"       // does not convert
	recs[2].Values[2].Text = "no uuid" // the client refuses it
	recs[4].Values[3].Text = "--1"     // the client refuses it
	recs = sourced(recs, src, "")
	for _, want := range []string{"ev2", "ev4", "ev6"} {
		err := w.Load(ctx, sink.Batch{Source: src, Records: recs, Token: "fails/" + want})
		var re *sink.RecordError
		if !errors.As(err, &re) || !errors.Is(err, sink.ErrPermanent) || re.Index >= len(recs) || recs[re.Index].EventID != want {
			t.Fatalf("Load = %v; want a sink.RecordError for record %s with sink.ErrPermanent", err, want)
		}
		t.Logf("%s: %v", want, err)
		recs = slices.Delete(recs, re.Index, re.Index+1)
	}
	if err := w.Load(ctx, sink.Batch{Source: src, Records: recs, Token: "fails/rest"}); err != nil {
		t.Fatalf("Load of the rest: %v", err)
	}
	tg, err := w.table(ctx, recs[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := tableRows(t, w, w.database, tg); len(got) != len(recs) {
		t.Errorf("%d rows stored, want %d:\n%s", len(got), len(recs), strings.Join(got, ""))
	}
}

// BenchmarkInsertBlock fills the block of a 10,000-record insert row by
// row (as before) and column by column, for the narrow table of
// bench/e2e (6 columns: orders over 100 tenants), and for the same table
// with created_at in its key (whose values are checked against
// ClickHouse's range).
func BenchmarkInsertBlock(b *testing.B) {
	b.Run("narrow", func(b *testing.B) { benchmarkInsertBlock(b, false) })
	b.Run("timestamp key", func(b *testing.B) { benchmarkInsertBlock(b, true) })
}

func benchmarkInsertBlock(b *testing.B, timestampKey bool) {
	cols := []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true},
		{Name: "id", Type: "int8", TypMod: -1, Key: true},
		{Name: "amount", Type: "numeric", TypMod: 12<<16 | 2 + 4},
		{Name: "note", Type: "text", TypMod: -1},
		{Name: "created_at", Type: "timestamptz", TypMod: -1, Key: timestampKey},
		{Name: "attrs", Type: "jsonb", TypMod: -1},
	}
	tg := testTarget(b, "tenant_id", cols, nil)
	const n = 10_000
	recs := make([]*record.Record, n)
	for i := range recs {
		tenant := fmt.Sprintf("tenant_%d", i%100)
		recs[i] = &record.Record{
			EventID: fmt.Sprintf("ev%d", i), TenantID: tenant, Version: uint64(i), Op: record.Insert,
			OccurredAt: time.Unix(1700000000+int64(i), 0).UTC(),
			Values: []record.Value{
				{Text: tenant}, {Text: fmt.Sprint(i)}, {Text: fmt.Sprintf("%d.%02d", i%10000, i%100)},
				{Text: fmt.Sprintf("note %032x", i)}, {Text: "2024-01-01 00:00:00+00"},
				{Text: fmt.Sprintf(`{"g": %d, "ok": true, "tag": "k%d"}`, i, i%7)},
			},
		}
	}
	for _, m := range []struct {
		name   string
		insert func(*proto.Block, *target, []*record.Record, filled) *sink.RecordError
	}{{"rows", insertRowsRef}, {"columns", insertColumns}} {
		b.Run(m.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				block := newBlock(b, tg)
				if err := m.insert(block, tg, recs, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
		})
	}
}
