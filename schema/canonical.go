package schema

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
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
	if s, ok := t.canonicalTextFast(*text); ok {
		return s, nil
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
	case kString, kBytes, kEnum:
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
		return decimalString(d), nil // no trailing zeros, no exponent: 1.50 and 1.5000 are 1.5
	case kDate:
		if x, ok := v.(time.Time); ok {
			return formatDate(x), nil // the date in the value's own zone: a date has none
		}
	case kDateTime:
		if x, ok := v.(time.Time); ok {
			return formatDateTime(x), nil
		}
	case kUUID:
		switch x := v.(type) {
		case string:
			return strings.ToLower(x), nil
		case fmt.Stringer:
			return strings.ToLower(x.String()), nil
		}
	case kJSON:
		if x, ok := v.(string); ok { // verify reads the column as its text
			return canonicalJSON(x)
		}
	}
	return "", fmt.Errorf("canonical form of %s: unexpected %T", scalars[k].ch, v)
}

// canonicalJSON is the canonical form of a JSON object's text as
// ClickHouse's JSON type holds it: its leaf paths, sorted, each with its
// value. A null and an empty object are no path, a dotted key is the
// path it names ({"a.b": 1} and {"a": {"b": 1}} are one form), and a
// number is the double it reads as; arrays keep their elements in order,
// an object in one with its own paths.
func canonicalJSON(s string) (string, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("canonical form of JSON: %w", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return "", fmt.Errorf("canonical form of JSON: %s is not an object", truncate(s))
	}
	return canonicalJSONObject(obj), nil
}

func canonicalJSONObject(obj map[string]any) string {
	leaves := map[string]string{}
	var walk func(prefix string, o map[string]any)
	walk = func(prefix string, o map[string]any) {
		for k, e := range o {
			switch x := e.(type) {
			case nil:
			case map[string]any:
				walk(prefix+k+".", x)
			default:
				leaves[prefix+k] = canonicalJSONValue(x)
			}
		}
	}
	walk("", obj)
	var b strings.Builder
	b.WriteByte('{')
	for i, path := range slices.Sorted(maps.Keys(leaves)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(path))
		b.WriteByte(':')
		b.WriteString(leaves[path])
	}
	b.WriteByte('}')
	return b.String()
}

func canonicalJSONValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case string:
		return strconv.Quote(x)
	case json.Number:
		if f, err := strconv.ParseFloat(string(x), 64); err == nil {
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
		return string(x)
	case map[string]any:
		return canonicalJSONObject(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = canonicalJSONValue(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return fmt.Sprint(v)
}

// canonicalTextFast is CanonicalText for the commonest texts, whose
// canonical form is the text itself or a part of it: it returns what
// Convert then Canonical would, without boxing the converted value nor
// allocating a new string (a verify converts every value of a table);
// ok is false for the rest, which take the general way.
func (t Type) canonicalTextFast(text string) (string, bool) {
	if t.array {
		return "", false
	}
	switch t.kind {
	case kString:
		return text, true // parseText keeps the text, Canonical the string
	case kInt16, kInt32, kInt64:
		// The text is canonical when formatting the parsed integer gives
		// it back (no sign, no leading zeros); the out-of-range or
		// malformed text fails to parse and takes the general way.
		v, err := strconv.ParseInt(text, 10, 8<<(t.kind-kInt16+1))
		var buf [24]byte
		if err != nil || string(strconv.AppendInt(buf[:0], v, 10)) != text {
			return "", false
		}
		return text, true
	case kDecimal:
		return t.decimalTextFast(text)
	case kDateTime:
		if t.precision < maxDateTimePrecision {
			return "", false // truncated by Convert, the general way
		}
		return dateTimeTextFast(text)
	}
	return "", false
}

// dateTimeTextFast is canonicalTextFast for PostgreSQL's text of a
// timestamp in UTC, "YYYY-MM-DD HH:MM:SS", up to six fractional digits
// and "+00" (timestamptz in a UTC session) or nothing (timestamp), of a
// year no clamping touches: the canonical form is the text with its
// fraction padded to six digits. Anything else (another offset, an
// invalid date, which the general way would normalise) takes the
// general way.
func dateTimeTextFast(text string) (string, bool) {
	body := strings.TrimSuffix(text, "+00")
	if len(body) < 19 || !withinDateRange(body) || body[4] != '-' || body[7] != '-' || body[10] != ' ' || body[13] != ':' || body[16] != ':' {
		return "", false
	}
	year, _ := digits(body[0:4])
	month, ok2 := digits(body[5:7])
	day, ok3 := digits(body[8:10])
	hour, ok4 := digits(body[11:13])
	minute, ok5 := digits(body[14:16])
	sec, ok6 := digits(body[17:19])
	if !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 59 ||
		day > time.Date(year, time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day() {
		return "", false
	}
	frac := body[19:]
	if frac == "" {
		return body + ".000000", true
	}
	if frac[0] != '.' || len(frac) < 2 || len(frac) > 7 || !allDigits(frac[1:]) {
		return "", false
	}
	if len(frac) == 7 {
		return body, true
	}
	var b [26]byte
	n := copy(b[:], body)
	for ; n < len(b); n++ {
		b[n] = '0'
	}
	return string(b[:]), true
}

// decimalTextFast is canonicalTextFast for PostgreSQL's usual numeric
// text, an optional minus, digits without leading zeros (or one 0), and
// optionally a point and digits, 18 digits at most (what decimalString
// formats itself): the canonical form is the text without the fraction's
// trailing zeros (nor the point, when none is left) and without the minus
// of a zero.
func (t Type) decimalTextFast(text string) (string, bool) {
	if !decimal.TrimTrailingZeros || decimal.UseScientificNotation {
		return "", false
	}
	body := strings.TrimPrefix(text, "-")
	whole, frac, point := strings.Cut(body, ".")
	if whole == "" || point && frac == "" || len(whole)+len(frac) > 18 ||
		!allDigits(whole) || !allDigits(frac) || len(whole) > 1 && whole[0] == '0' {
		return "", false
	}
	if decimalFits(text, t.precision, t.scale) != nil {
		return "", false // Convert's error, from the general way
	}
	frac = strings.TrimRight(frac, "0")
	if whole == "0" && frac == "" {
		return "0", true
	}
	n := len(text) - len(body) + len(whole)
	if frac != "" {
		n += 1 + len(frac)
	}
	return text[:n], true
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
			return formatDateTime(x), true
		}
	case *time.Time:
		if x == nil {
			return canonicalNull, true
		}
		if k == kDateTime {
			return formatDateTime(*x), true
		}
	case decimal.Decimal:
		if k == kDecimal {
			return decimalString(x), true
		}
	case *decimal.Decimal:
		if x == nil {
			return canonicalNull, true
		}
		if k == kDecimal {
			return decimalString(*x), true
		}
	}
	return "", false
}

// formatDateTime is t.UTC().Format("2006-01-02 15:04:05.000000") without
// the layout's parsing, for years 0 to 9999 (the rest are formatted so).
func formatDateTime(t time.Time) string {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.Format("2006-01-02 15:04:05.000000")
	}
	hour, minute, sec := t.Clock()
	var b [26]byte
	put4(b[0:], year)
	b[4] = '-'
	put2(b[5:], int(month))
	b[7] = '-'
	put2(b[8:], day)
	b[10] = ' '
	put2(b[11:], hour)
	b[13] = ':'
	put2(b[14:], minute)
	b[16] = ':'
	put2(b[17:], sec)
	b[19] = '.'
	us := t.Nanosecond() / 1000
	put2(b[20:], us/10000)
	put2(b[22:], us/100%100)
	put2(b[24:], us%100)
	return string(b[:])
}

// formatDate is t.Format("2006-01-02") (in t's own zone) without the
// layout's parsing, for years 0 to 9999.
func formatDate(t time.Time) string {
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.Format("2006-01-02")
	}
	var b [10]byte
	put4(b[0:], year)
	b[4] = '-'
	put2(b[5:], int(month))
	b[7] = '-'
	put2(b[8:], day)
	return string(b[:])
}

// put4 and put2 write n's last four and two decimal digits.
func put4(b []byte, n int) { put2(b, n/100%100); put2(b[2:], n%100) }
func put2(b []byte, n int) { b[0], b[1] = byte('0'+n/10), byte('0'+n%10) }

// decimalString is d.String() (no trailing zeros, no exponent) without
// big.Int's formatting, for what PostgreSQL's numeric text and the
// ClickHouse client's Decimal columns give most: a coefficient of at most
// 18 digits, an exponent of at most 0 and a scale up to 38. The rest, and
// any change of the package's formatting settings, go to d.String().
func decimalString(d decimal.Decimal) string {
	exp := d.Exponent()
	if exp > 0 || exp < -38 || !decimal.TrimTrailingZeros || decimal.UseScientificNotation || d.NumDigits() > 18 {
		return d.String()
	}
	c := d.CoefficientInt64()
	if exp == 0 {
		return strconv.FormatInt(c, 10)
	}
	var digitsBuf [20]byte
	u := uint64(c)
	if c < 0 {
		u = -u
	}
	digits := strconv.AppendUint(digitsBuf[:0], u, 10)
	scale := int(-exp)
	var intPart, frac []byte
	lead := 0
	if len(digits) > scale {
		intPart, frac = digits[:len(digits)-scale], digits[len(digits)-scale:]
	} else {
		intPart, frac, lead = []byte{'0'}, digits, scale-len(digits)
	}
	for len(frac) > 0 && frac[len(frac)-1] == '0' {
		frac = frac[:len(frac)-1]
	}
	if len(frac) == 0 {
		lead = 0
	}
	var out [80]byte
	b := out[:0]
	if c < 0 {
		b = append(b, '-')
	}
	b = append(b, intPart...)
	if lead+len(frac) > 0 {
		b = append(b, '.')
		for range lead {
			b = append(b, '0')
		}
		b = append(b, frac...)
	}
	return string(b)
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
		return t.OutOfRange(text)
	}
	return false
}

// withinDateRange reports whether PostgreSQL's text of a date or
// timestamp has a year that no time zone offset takes out of the range
// ClickHouse stores (1900 to 2262): such a value is never clamped, and
// OutOfRange need not parse it.
func withinDateRange(text string) bool {
	if len(text) < 5 || text[4] != '-' || strings.HasSuffix(text, " BC") {
		return false
	}
	year := 0
	for _, c := range []byte(text[:4]) {
		if c < '0' || c > '9' {
			return false
		}
		year = year*10 + int(c-'0')
	}
	return year >= 1901 && year <= 2261
}

// Integer reports whether t is a scalar integer column: PostgreSQL and
// ClickHouse order its values alike, so verify can cut a table into key
// ranges on it.
func (t Type) Integer() bool {
	return !t.array && scalars[t.kind].digits > 0
}

// LookupText returns a text that PostgreSQL (cast to the column's type)
// and ClickHouse (cast to t) both read back as the value whose canonical
// form is canon, for finding a row by its key: a float's canonical form
// is its bits in hex, which both would read as another number (or
// refuse), so it is written as its shortest decimal text, NaN and the
// infinities as PostgreSQL spells them; every other key type's canonical
// form is such a text already. NaN reports a float NaN, which equals no
// value in ClickHouse: find it with isNaN.
func (t Type) LookupText(canon string) (text string, nan bool) {
	if t.array || t.kind != kFloat32 && t.kind != kFloat64 {
		return canon, false
	}
	if canon == "nan" {
		return "NaN", true
	}
	bits, err := strconv.ParseUint(canon, 16, 64)
	if err != nil {
		return canon, false // not a canonical float: left as it is, to match nothing
	}
	f, size := math.Float64frombits(bits), 64
	if t.kind == kFloat32 {
		f, size = float64(math.Float32frombits(uint32(bits))), 32
	}
	switch {
	case math.IsInf(f, 1):
		return "Infinity", false
	case math.IsInf(f, -1):
		return "-Infinity", false
	}
	return strconv.FormatFloat(f, 'g', -1, size), false
}
