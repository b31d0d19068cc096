package query

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// rowScanner reads rows of any shape into JSON-ready values, reusing its
// scan targets, so reading a result costs memory for one row at a time.
type rowScanner struct {
	names   []string
	dates   []bool // Date/Date32 columns are written as YYYY-MM-DD
	targets []any
}

func newRowScanner(rows driver.Rows) *rowScanner {
	types := rows.ColumnTypes()
	s := &rowScanner{names: rows.Columns(), dates: make([]bool, len(types)), targets: make([]any, len(types))}
	for i, ct := range types {
		s.targets[i] = reflect.New(ct.ScanType()).Interface()
		base := strings.TrimSuffix(strings.TrimPrefix(ct.DatabaseTypeName(), "Nullable("), ")")
		s.dates[i] = base == "Date" || base == "Date32"
	}
	return s
}

// scan reads the current row; values are valid until the next scan.
func (s *rowScanner) scan(rows driver.Rows) error {
	return rows.Scan(s.targets...)
}

// value returns column i of the scanned row as a value encoding/json
// writes faithfully: decimals and 128/256-bit integers as strings (exact),
// non-finite floats as the strings "NaN", "Inf", "-Inf", times in RFC 3339
// UTC, dates as YYYY-MM-DD.
func (s *rowScanner) value(i int) any {
	v := reflect.ValueOf(s.targets[i]).Elem()
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	return jsonValue(v, s.dates[i])
}

// jsonValue converts one scanned value; Stringer structs (decimals, UUIDs,
// big integers) become their exact text.
func jsonValue(rv reflect.Value, date bool) any {
	x := rv.Interface()
	switch v := x.(type) {
	case time.Time:
		if date {
			return v.UTC().Format(time.DateOnly)
		}
		return v.UTC().Format(time.RFC3339Nano)
	case float64:
		return finite(v)
	case float32:
		return finite(float64(v))
	}
	if rv.Kind() == reflect.Struct || rv.Kind() == reflect.Array {
		if st, ok := x.(fmt.Stringer); ok {
			return st.String()
		}
		if rv.CanAddr() {
			if st, ok := rv.Addr().Interface().(fmt.Stringer); ok {
				return st.String()
			}
		}
	}
	return x
}

func finite(f float64) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return f
}

// appendJSONObject appends the scanned row as a JSON object whose keys are
// the column names, in column order.
func (s *rowScanner) appendJSONObject(buf *bytes.Buffer) {
	buf.WriteByte('{')
	for i, name := range s.names {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(name)
		buf.Write(k)
		buf.WriteByte(':')
		appendJSONValue(buf, s.value(i))
	}
	buf.WriteByte('}')
}

func appendJSONValue(buf *bytes.Buffer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Nested values json cannot write (NaN inside an array): their text.
		b, _ = json.Marshal(fmt.Sprint(v))
	}
	buf.Write(b)
}

// csvText returns column i of the scanned row as CSV field text: "" for
// NULL, nested values as JSON.
func (s *rowScanner) csvText(i int) string { return fieldText(s.value(i)) }

// fieldText is the text of a value from jsonValue: "" for nil, scalars as
// themselves, nested values as JSON.
func fieldText(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, int, uint, float64:
		return fmt.Sprint(v)
	default:
		var buf bytes.Buffer
		appendJSONValue(&buf, v)
		return buf.String()
	}
}
