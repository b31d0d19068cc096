package query

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
			// A JSON column's value (clickhouse-go's chcol.JSON) writes
			// itself as the object it holds.
			if m, ok := rv.Addr().Interface().(json.Marshaler); ok {
				return m
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

// writeJSONObject writes the scanned row as a JSON object whose keys are
// the column names, in column order. Strings are written as they are
// escaped, straight from the scanned value (no encoded copy of a large
// text), and without HTML escaping: '<', '>' and '&' stay one byte each
// (responses are JSON with nosniff, never HTML). It stops at w's first
// error (a page over its byte limit).
func (s *rowScanner) writeJSONObject(w jsonWriter) error {
	if _, err := w.WriteString("{"); err != nil {
		return err
	}
	for i, name := range s.names {
		if i > 0 {
			if _, err := w.WriteString(","); err != nil {
				return err
			}
		}
		if err := writeJSONString(w, name); err != nil {
			return err
		}
		if _, err := w.WriteString(":"); err != nil {
			return err
		}
		if err := writeJSONValue(w, s.value(i)); err != nil {
			return err
		}
	}
	_, err := w.WriteString("}")
	return err
}

// jsonWriter is where rows are written: a page, an export's row buffer.
type jsonWriter interface {
	io.Writer
	io.StringWriter
}

// writeJSONValue writes v (from jsonValue): strings by writeJSONString,
// anything else by encoding/json without HTML escaping.
func writeJSONValue(w jsonWriter, v any) error {
	var num [24]byte // the scalars most columns hold, without encoding/json's allocations
	switch x := v.(type) {
	case string:
		return writeJSONString(w, x)
	case nil:
		_, err := w.WriteString("null")
		return err
	case bool:
		_, err := w.Write(strconv.AppendBool(num[:0], x))
		return err
	case int64:
		_, err := w.Write(strconv.AppendInt(num[:0], x, 10))
		return err
	case int32:
		_, err := w.Write(strconv.AppendInt(num[:0], int64(x), 10))
		return err
	case int16:
		_, err := w.Write(strconv.AppendInt(num[:0], int64(x), 10))
		return err
	case int8:
		_, err := w.Write(strconv.AppendInt(num[:0], int64(x), 10))
		return err
	case uint64:
		_, err := w.Write(strconv.AppendUint(num[:0], x, 10))
		return err
	case uint32:
		_, err := w.Write(strconv.AppendUint(num[:0], uint64(x), 10))
		return err
	case uint16:
		_, err := w.Write(strconv.AppendUint(num[:0], uint64(x), 10))
		return err
	case uint8:
		_, err := w.Write(strconv.AppendUint(num[:0], uint64(x), 10))
		return err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Nested values json cannot write (NaN inside an array): their text.
		return writeJSONString(w, fmt.Sprint(v))
	}
	_, err := w.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	return err
}

// writeJSONString writes s as a JSON string exactly as encoding/json does
// with SetEscapeHTML(false): quotes, backslashes and control characters
// escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped (JavaScript
// line terminators). Runs of plain bytes are written as slices of s.
func writeJSONString(w io.StringWriter, s string) error {
	const hex = "0123456789abcdef"
	if _, err := w.WriteString(`"`); err != nil {
		return err
	}
	start := 0
	flushTo := func(i int, esc string) error {
		if start < i {
			if _, err := w.WriteString(s[start:i]); err != nil {
				return err
			}
		}
		_, err := w.WriteString(esc)
		return err
	}
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			var esc string
			switch c {
			case '"', '\\':
				esc = string([]byte{'\\', c})
			case '\b':
				esc = `\b`
			case '\f':
				esc = `\f`
			case '\n':
				esc = `\n`
			case '\r':
				esc = `\r`
			case '\t':
				esc = `\t`
			default:
				esc = string([]byte{'\\', 'u', '0', '0', hex[c>>4], hex[c&0xF]})
			}
			if err := flushTo(i, esc); err != nil {
				return err
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		var esc string
		switch {
		case r == utf8.RuneError && size == 1:
			esc = `\ufffd`
		case r == '\u2028':
			esc = `\u2028`
		case r == '\u2029':
			esc = `\u2029`
		default:
			i += size
			continue
		}
		if err := flushTo(i, esc); err != nil {
			return err
		}
		i += size
		start = i
	}
	return flushTo(len(s), `"`)
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
		_ = writeJSONValue(&buf, v) // a bytes.Buffer takes everything
		return buf.String()
	}
}
