package record

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// narrowBatch returns a row batch of n rows of one relation with one text
// key column and no tenant column, each row a value of width empty texts
// (one key value, width-1 more): the densest a hostile batch can be.
func narrowBatch(t testing.TB, rows, width int) ([]byte, Schemas) {
	t.Helper()
	r := benchRow()
	r.TenantColumn, r.TenantID = "", "t"
	r.Columns = []Column{{Name: "id", Type: "text", TypMod: -1, Key: true, Attnum: 1}}
	r.Values = []Value{{Text: ""}}
	r.SchemaID = SchemaID("", r.Columns)
	var schemas SchemaSet
	schemas.Add(Schema{Columns: r.Columns})
	good := string(encodeBatch([]*Record{r}))
	i := strings.Index(good, `"rows":[`)
	row := "[" + strings.Repeat(`"",`, width-1) + `""]`
	var b strings.Builder
	b.Grow(i + rows*(len(row)+1) + 16)
	b.WriteString(good[:i])
	b.WriteString(`"rows":[`)
	for j := range rows {
		if j > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
	}
	b.WriteString("]}")
	return []byte(b.String()), &schemas
}

// TestDecodeBatchWithinBudget: a row batch of 8 MiB of one-column rows
// (1.6 million rows) once made the decoder allocate 893 MiB before it
// found anything wrong; now it is refused after allocating little more
// than its own size, and batches as large as capture writes still decode.
func TestDecodeBatchWithinBudget(t *testing.T) {
	data, schemas := narrowBatch(t, 8<<20/5, 1)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := DecodeBatch(data, schemas)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrOverBudget) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("DecodeBatch of %d bytes = %v, want ErrOverBudget and ErrInvalid", len(data), err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 2*uint64(len(data)) {
		t.Errorf("refusing a %d-byte batch allocated %d bytes, want at most twice its size", len(data), got)
	}

	for _, tc := range []struct {
		name        string
		rows, width int
		over        bool
	}{
		{"capture's densest batch (128 KiB of one-value rows)", 128 << 10 / 5, 1, false},
		{"the most rows", MaxBatchRows, 1, false},
		{"a row more", MaxBatchRows + 1, 1, true},
		{"the most values", MaxBatchCells / 4, 4, false},
		{"more values", MaxBatchCells/4 + 1, 4, true},
		{"a row of MaxColumns values", 1, MaxColumns, false},
		{"a row of more", 1, MaxColumns + 1, true},
	} {
		data, schemas := narrowBatch(t, tc.rows, tc.width)
		_, err := DecodeBatch(data, schemas)
		if got := errors.Is(err, ErrOverBudget); got != tc.over {
			t.Errorf("%s: DecodeBatch = %v, over budget %v, want %v", tc.name, err, got, tc.over)
		}
		if !tc.over && tc.width == 1 && err != nil {
			t.Errorf("%s: DecodeBatch = %v, want no error", tc.name, err)
		}
	}
}

// TestDecodeWithinBudget: a version 1 record with a column list, payload,
// key or unchanged list longer than any relation is refused while it is
// read, and its error stays short: a record of many bad columns once gave
// one error per column (21 MB of error text from an 8 MiB record).
func TestDecodeWithinBudget(t *testing.T) {
	good := string(AppendJSONVersion(nil, benchRow(), 1))
	many := func(item string, n int) string { return strings.Repeat(item+",", n-1) + item }
	for _, tc := range []struct{ name, old, new string }{
		{"columns", `"columns":[`, `"columns":[` + many(`{"name":"","type":""}`, 8<<20/22) + ","},
		{"payload", `"payload":{`, `"payload":{` + many(`"":null`, MaxColumns+1) + ","},
		{"unchanged", `"payload":`, `"unchanged":[` + many(`""`, MaxColumns+1) + `],"payload":`},
	} {
		if !strings.Contains(good, tc.old) {
			t.Fatalf("%s: %q is not in %s", tc.name, tc.old, good)
		}
		data := strings.Replace(good, tc.old, tc.new, 1)
		_, err := Decode([]byte(data), nil)
		if !errors.Is(err, ErrOverBudget) {
			t.Errorf("%s: Decode = %.300v, want ErrOverBudget", tc.name, err)
		}
		if err != nil && len(err.Error()) > 1024 {
			t.Errorf("%s: an error of %d bytes", tc.name, len(err.Error()))
		}
	}
}

// TestValidateClipsProblems: a relation with a fault in every column
// reports the first few and how many more, not one line per column.
func TestValidateClipsProblems(t *testing.T) {
	cols := make([]Column, MaxColumns)
	err := ValidateColumns("", cols)
	if err == nil || len(err.Error()) > 1024 || !strings.Contains(err.Error(), "more problems") {
		t.Errorf("ValidateColumns of %d nameless columns = %d bytes of error: %.300v", len(cols), len(err.Error()), err)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("ValidateColumns = %v, want ErrInvalid", err)
	}
}

// TestParseRows reads the HeaderRows value strictly.
func TestParseRows(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   int
		over   bool
	}{
		{"1", 1, false}, {"1000", 1000, false}, {"32768", MaxBatchRows, false},
		{"32769", 0, true}, {"99999999999999999999", 0, false}, {"0", 0, false}, {"-3", 0, false}, {"x", 0, false}, {"", 0, false},
	} {
		n, err := ParseRows(tc.header)
		if n != tc.want || (tc.want > 0) != (err == nil) || errors.Is(err, ErrOverBudget) != tc.over {
			t.Errorf("ParseRows(%q) = %d, %v; want %d (over budget %v)", tc.header, n, err, tc.want, tc.over)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseRows(%q) = %v, want ErrInvalid", tc.header, err)
		}
	}
}
