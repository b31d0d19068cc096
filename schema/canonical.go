package schema

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/walhouse/walhouse/record"
)

// The canonical form is what `walhouse verify` compares: one text per
// value of a Type, the same for PostgreSQL's text output converted by
// Convert (what the sink appends) and for the value the ClickHouse client
// scans back from the column. Because the PostgreSQL side goes through
// Convert, a documented lossy mapping (a date clamped to ClickHouse's
// range, a nested array flattened, numeric NaN stored as NULL, a NULL
// array stored empty) compares equal, as it was loaded; Lossy tells
// which source values that is.

// LoadedType returns the Type the sink converts values of source column
// src for when the ClickHouse column is of type ddl (system.columns'
// type), as the evolution plan decides it (reconcile): the source's own
// mapping when it is the column's type (which tells bytea from text in a
// String), else the column's type read back, which is wider. ok is false
// for a type walhouse does not create.
func LoadedType(src record.Column, ddl string) (Type, bool) {
	want := Map(src, strings.HasPrefix(ddl, "Nullable("))
	if want.DDL == ddl {
		return want, true
	}
	return parseType(ddl)
}

// ColumnAttnum returns the source column's attnum that walhouse noted in a
// ClickHouse column's comment, 0 when the column carries no source column
// (walhouse's own columns, a synthetic tenant), and whether the source
// column was dropped.
func ColumnAttnum(comment string) (attnum int16, dropped bool) {
	attnum, _, dropped = parseColumnComment(comment)
	return attnum, dropped
}

// canonicalNull is the canonical form of SQL NULL: a byte no canonical
// value starts with, so NULL never equals any value (the empty string
// included).
const canonicalNull = "\x00"

// CanonicalText returns the canonical form of PostgreSQL's text output of
// a value of t (nil for NULL): the value Convert makes of it, in
// canonical form.
func (t Type) CanonicalText(text *string) (string, error) {
	if text == nil {
		return t.Canonical(t.Null())
	}
	v, err := t.Convert(*text)
	if err != nil {
		return "", err
	}
	return t.Canonical(v)
}

// Canonical returns the canonical form of v, a value of t as Convert
// returns it or as the ClickHouse client scans the column (pointers are
// followed, nil is NULL). Arrays are their elements' forms, each prefixed
// by its length, so no element's text can pass for a separator.
func (t Type) Canonical(v any) (string, error) {
	if !t.array {
		return canonicalScalar(t.kind, v)
	}
	rv := reflect.ValueOf(v)
	for rv.IsValid() && rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return "[]", nil // a NULL array is stored empty
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() {
		return "[]", nil
	}
	if rv.Kind() != reflect.Slice {
		return "", fmt.Errorf("canonical form of %s: %T is not an array", t.DDL, v)
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := range rv.Len() {
		e, err := canonicalScalar(t.kind, rv.Index(i).Interface())
		if err != nil {
			return "", fmt.Errorf("array element %d: %w", i+1, err)
		}
		b.WriteString(strconv.Itoa(len(e)))
		b.WriteByte(':')
		b.WriteString(e)
	}
	b.WriteByte(']')
	return b.String(), nil
}

// canonicalScalar is the canonical form of one value of kind k.
func canonicalScalar(k kind, v any) (string, error) {
	if s, ok := canonicalFast(k, v); ok {
		return s, nil
	}
	rv := reflect.ValueOf(v)
	for rv.IsValid() && rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return canonicalNull, nil
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() {
		return canonicalNull, nil
	}
	v = rv.Interface()
	switch k {
	case kString, kBytes:
		switch x := v.(type) {
		case string:
			return x, nil
		case []byte:
			return string(x), nil
		}
	case kBool:
		if x, ok := v.(bool); ok {
			return strconv.FormatBool(x), nil
		}
	case kInt16, kInt32, kInt64:
		if rv.CanInt() {
			return strconv.FormatInt(rv.Int(), 10), nil
		}
	case kUInt32:
		if rv.CanUint() {
			return strconv.FormatUint(rv.Uint(), 10), nil
		}
	case kFloat32:
		if x, ok := v.(float32); ok {
			if x != x {
				return "nan", nil // every NaN is one value, in PostgreSQL as here
			}
			return strconv.FormatUint(uint64(math.Float32bits(x)), 16), nil
		}
	case kFloat64:
		if x, ok := v.(float64); ok {
			if math.IsNaN(x) {
				return "nan", nil
			}
			return strconv.FormatUint(math.Float64bits(x), 16), nil
		}
	case kDecimal:
		var d decimal.Decimal
		switch x := v.(type) {
		case string:
			var err error
			if d, err = decimal.NewFromString(x); err != nil {
				return "", fmt.Errorf("decimal %q: %w", truncate(x), err)
			}
		case decimal.Decimal:
			d = x
		default:
			return "", fmt.Errorf("canonical form of a decimal: unexpected %T", v)
		}
		return d.String(), nil // no trailing zeros, no exponent: 1.50 and 1.5000 are 1.5
	case kDate:
		if x, ok := v.(time.Time); ok {
			return x.Format("2006-01-02"), nil // the date in the value's own zone: a date has none
		}
	case kDateTime:
		if x, ok := v.(time.Time); ok {
			return x.UTC().Format("2006-01-02 15:04:05.000000"), nil
		}
	case kUUID:
		switch x := v.(type) {
		case string:
			return strings.ToLower(x), nil
		case fmt.Stringer:
			return strings.ToLower(x.String()), nil
		}
	}
	return "", fmt.Errorf("canonical form of %s: unexpected %T", scalars[k].ch, v)
}

// canonicalFast is canonicalScalar for the values the client scans and
// Convert returns most often, without reflection (a verify of a large
// table converts every value of both sides); ok is false for the rest.
func canonicalFast(k kind, v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return canonicalNull, true
	case string:
		if k == kString || k == kBytes {
			return x, true
		}
	case *string:
		if x == nil {
			return canonicalNull, true
		}
		if k == kString || k == kBytes {
			return *x, true
		}
	case int64:
		if k == kInt64 {
			return strconv.FormatInt(x, 10), true
		}
	case *int64:
		if x == nil {
			return canonicalNull, true
		}
		if k == kInt64 {
			return strconv.FormatInt(*x, 10), true
		}
	case int32:
		if k == kInt32 {
			return strconv.FormatInt(int64(x), 10), true
		}
	case *int32:
		if x == nil {
			return canonicalNull, true
		}
		if k == kInt32 {
			return strconv.FormatInt(int64(*x), 10), true
		}
	case time.Time:
		if k == kDateTime {
			return x.UTC().Format("2006-01-02 15:04:05.000000"), true
		}
	case *time.Time:
		if x == nil {
			return canonicalNull, true
		}
		if k == kDateTime {
			return x.UTC().Format("2006-01-02 15:04:05.000000"), true
		}
	case *decimal.Decimal:
		if x == nil {
			return canonicalNull, true
		}
		if k == kDecimal {
			return x.String(), true
		}
	}
	return "", false
}

// Lossy reports whether PostgreSQL's text output of a value of t is stored
// only through one of the documented lossy mappings (see docs/limits.md):
// an out-of-range or infinite date or timestamp clamped, a
// numeric NaN or infinity stored as NULL, a nested or bounded array
// flattened. Such a value compares equal through the mapping; verify
// counts it apart instead of calling it a mismatch.
func (t Type) Lossy(text string) bool {
	if t.array {
		return strings.HasPrefix(text, "[") || strings.HasPrefix(text, "{{")
	}
	switch t.kind {
	case kDecimal:
		return text == "NaN" || text == "Infinity" || text == "-Infinity"
	case kDate, kDateTime:
		v, err := t.Convert(text)
		if err != nil {
			return false
		}
		tm, ok := v.(time.Time)
		return ok && (tm.Equal(minDate) || tm.Equal(maxDate) || tm.Equal(maxTime)) && !strings.HasPrefix(text, tm.Format("2006-01-02"))
	}
	return false
}

// Integer reports whether t is a scalar integer column: PostgreSQL and
// ClickHouse order its values alike, so verify can cut a table into key
// ranges on it.
func (t Type) Integer() bool {
	return !t.array && scalars[t.kind].digits > 0
}
