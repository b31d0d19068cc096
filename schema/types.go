package schema

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/walhouse/walhouse/record"
)

// kind is the ClickHouse scalar a PostgreSQL type maps to.
type kind uint8

const (
	kString kind = iota
	kBytes
	kBool
	kInt16
	kInt32
	kInt64
	kUInt32
	kFloat32
	kFloat64
	kDecimal
	kDate
	kTimestamp   // timestamp without time zone, read as UTC
	kTimestampTZ // timestamptz; the replication session runs with TimeZone=UTC
	kUUID
)

// Type is how one source column is stored in ClickHouse.
type Type struct {
	// DDL is the ClickHouse column type, e.g. "Nullable(Decimal(12, 2))".
	DDL string
	// Fallback is non-empty when the PostgreSQL type has no faithful
	// ClickHouse counterpart and is stored as its text; it says why, for a
	// warning at table creation.
	Fallback string

	kind    kind
	array   bool
	decimal string // Decimal(p, s) for kDecimal
}

// Null returns the value to append for SQL NULL: nil, or for arrays (which
// ClickHouse cannot make Nullable) an empty array of the element type.
func (t Type) Null() any {
	if t.array {
		v, _ := t.convertArray("{}")
		return v
	}
	return nil
}

// Convert turns a PostgreSQL text value (never NULL: the caller passes nil
// for NULL) into the Go value the ClickHouse client appends for t.
func (t Type) Convert(text string) (any, error) {
	if t.array {
		return t.convertArray(text)
	}
	return t.convertScalar(text)
}

// Decimal bounds: ClickHouse's widest decimal.
const maxDecimalPrecision = 76

// varhdrsz is the header PostgreSQL adds to a type modifier (atttypmod) of
// numeric types.
const varhdrsz = 4

// Map returns the ClickHouse type of c. Key and tenant columns are never
// Nullable (ClickHouse sort keys cannot be); every other column is, because a
// PostgreSQL column's NOT NULL can be dropped at any time and the ClickHouse
// table must keep accepting rows.
func Map(c record.Column, nullable bool) Type {
	k, base, fallback := mapScalar(c)
	t := Type{kind: k, array: c.Array, Fallback: fallback}
	if k == kDecimal {
		t.decimal = base
	}
	switch {
	case c.Array:
		// ClickHouse arrays cannot be Nullable; a NULL array is stored empty.
		t.DDL = "Array(Nullable(" + base + "))"
	case nullable:
		t.DDL = "Nullable(" + base + ")"
	default:
		t.DDL = base
	}
	return t
}

func mapScalar(c record.Column) (kind, string, string) {
	if c.Enum {
		return kString, "String", ""
	}
	switch c.Type {
	case "bool":
		return kBool, "Bool", ""
	case "int2":
		return kInt16, "Int16", ""
	case "int4":
		return kInt32, "Int32", ""
	case "int8":
		return kInt64, "Int64", ""
	case "oid", "xid", "cid":
		return kUInt32, "UInt32", ""
	case "float4":
		return kFloat32, "Float32", ""
	case "float8":
		return kFloat64, "Float64", ""
	case "numeric":
		p, s, ok := numericTypmod(c.TypMod)
		if !ok {
			// Unconstrained numeric: the widest decimal that still has room
			// on both sides of the point.
			return kDecimal, "Decimal(76, 38)", ""
		}
		return kDecimal, fmt.Sprintf("Decimal(%d, %d)", p, s), ""
	case "text", "varchar", "bpchar", "char", "name", "citext", "xml":
		return kString, "String", ""
	case "json", "jsonb":
		return kString, "String", ""
	case "bytea":
		return kBytes, "String", ""
	case "uuid":
		return kUUID, "UUID", ""
	case "date":
		return kDate, "Date32", ""
	case "timestamp":
		return kTimestamp, "DateTime64(6, 'UTC')", ""
	case "timestamptz":
		return kTimestampTZ, "DateTime64(6, 'UTC')", ""
	case "time", "timetz", "interval", "inet", "cidr", "macaddr", "macaddr8", "money",
		"bit", "varbit", "tsvector", "tsquery", "point", "line", "lseg", "box", "path",
		"polygon", "circle", "int4range", "int8range", "numrange", "tsrange", "tstzrange",
		"daterange", "pg_lsn", "txid_snapshot", "pg_snapshot":
		return kString, "String", ""
	default:
		return kString, "String", fmt.Sprintf("PostgreSQL type %q has no ClickHouse mapping; its text form is stored as String", c.Type)
	}
}

// numericTypmod decodes numeric(p, s) from atttypmod. ok is false for an
// unconstrained numeric or for a shape ClickHouse cannot hold (negative
// scale, scale above precision, precision above 76).
func numericTypmod(typmod int32) (p, s int, ok bool) {
	if typmod < varhdrsz {
		return 0, 0, false
	}
	v := typmod - varhdrsz
	p = int(v>>16) & 0xffff
	s = int((v&0x7ff)^1024) - 1024 // 11-bit signed scale since PostgreSQL 15
	if p < 1 || p > maxDecimalPrecision || s < 0 || s > p {
		return 0, 0, false
	}
	return p, s, true
}

// ClickHouse's Date32 range, and the DateTime64 range the client can
// write: it converts times through int64 nanoseconds since 1970, which end
// at 2262-04-11 23:47:16.854775807 UTC (later times would wrap around to
// 1677), short of ClickHouse's own bound 2299-12-31. Values outside
// (including PostgreSQL's infinity) are clamped to the nearest bound rather
// than losing the row.
var (
	minDate = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	maxDate = time.Date(2299, 12, 31, 0, 0, 0, 0, time.UTC)
	maxTime = time.Unix(0, math.MaxInt64).UTC().Truncate(time.Microsecond)
)

func (t Type) convertScalar(s string) (any, error) {
	switch t.kind {
	case kString:
		return s, nil
	case kDecimal:
		return t.decimalText(s)
	}
	return convertScalar(t.kind, s)
}

// decimalText returns numeric text s for the column's Decimal(p, s), and
// ok false for numeric's special values, which no decimal can hold: those
// become NULL. A value with more digits than the decimal holds (possible
// for an unconstrained numeric, mapped to Decimal(76, 38)) is an error: the
// client would silently drop the extra fractional digits.
func (t Type) decimalText(s string) (any, error) {
	switch s {
	case "NaN", "Infinity", "-Infinity":
		return nil, nil
	}
	p, scale, _ := decimalShape(t.decimal)
	if err := decimalFits(s, p, scale); err != nil {
		return nil, err
	}
	return s, nil // the client parses decimal text exactly
}

// decimalFits checks that numeric text (PostgreSQL's output: an optional
// sign, digits, optionally a point and digits) fits Decimal(p, scale)
// exactly: at most p-scale digits before the point and, trailing zeros
// aside, at most scale after it.
func decimalFits(s string, p, scale int) error {
	digits := strings.TrimLeft(s, "+-")
	whole, frac, _ := strings.Cut(digits, ".")
	if whole == "" && frac == "" || strings.Trim(whole+frac, "0123456789") != "" {
		return fmt.Errorf("numeric %q is not a decimal number", truncate(s))
	}
	whole = strings.TrimLeft(whole, "0")
	frac = strings.TrimRight(frac, "0")
	if len(whole) > p-scale || len(frac) > scale {
		return fmt.Errorf("numeric %s has %d digits before the point and %d after it; Decimal(%d, %d) holds at most %d and %d",
			truncate(s), len(whole), len(frac), p, scale, p-scale, scale)
	}
	return nil
}

func convertScalar(k kind, s string) (any, error) {
	switch k {
	case kString, kUUID: // the client parses UUID text itself
		return s, nil
	case kBytes:
		b, err := parseBytea(s)
		return string(b), err
	case kBool:
		return parseBool(s)
	case kInt16:
		return parseInt16(s)
	case kInt32:
		return parseInt32(s)
	case kInt64:
		return strconv.ParseInt(s, 10, 64)
	case kUInt32:
		return parseUint32(s)
	case kFloat32:
		return parseFloat32(s)
	case kFloat64:
		return strconv.ParseFloat(s, 64)
	case kDate:
		return parseDate(s)
	case kTimestamp, kTimestampTZ:
		return parseTimestamp(s)
	}
	return nil, fmt.Errorf("unknown kind %d", k)
}

func parseBool(s string) (bool, error) {
	switch s {
	case "t", "true":
		return true, nil
	case "f", "false":
		return false, nil
	}
	return false, fmt.Errorf("bool %q: want t or f", s)
}

func parseInt16(s string) (int16, error) {
	v, err := strconv.ParseInt(s, 10, 16)
	return int16(v), err
}

func parseInt32(s string) (int32, error) {
	v, err := strconv.ParseInt(s, 10, 32)
	return int32(v), err
}

func parseUint32(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	return uint32(v), err
}

func parseFloat32(s string) (float32, error) {
	v, err := strconv.ParseFloat(s, 32)
	return float32(v), err
}

func parseBytea(s string) ([]byte, error) {
	if !strings.HasPrefix(s, `\x`) {
		return nil, fmt.Errorf("bytea value is not in hex format (set bytea_output = hex)")
	}
	return hex.DecodeString(s[2:])
}

// special maps PostgreSQL's infinities and BC dates to ClickHouse's bounds
// (hi is the upper bound of the column's type).
func special(s string, hi time.Time) (time.Time, bool) {
	switch {
	case s == "infinity":
		return hi, true
	case s == "-infinity", strings.HasSuffix(s, " BC"):
		return minDate, true
	}
	return time.Time{}, false
}

func parseDate(s string) (time.Time, error) {
	if t, ok := special(s, maxDate); ok {
		return t, nil
	}
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		return time.Time{}, fmt.Errorf("date %q: %w", s, err)
	}
	return clamp(t, minDate, maxDate), nil
}

// parseTimestamp reads PostgreSQL's ISO output for timestamp and timestamptz
// ("2024-01-15 10:00:00.123456", "2024-01-15 10:00:00+00",
// "2024-01-15 10:00:00+05:30").
func parseTimestamp(s string) (time.Time, error) {
	if t, ok := special(s, maxTime); ok {
		return t, nil
	}
	if len(s) == len("2006-01-02") { // a date, in a column widened to a timestamp
		d, err := parseDate(s)
		return clamp(d, minDate, maxTime), err
	}
	layout := "2006-01-02 15:04:05.999999"
	if i := strings.LastIndexAny(s, "+-"); i > 10 {
		switch len(s) - i {
		case 3:
			layout += "-07"
		case 6:
			layout += "-07:00"
		case 9:
			layout += "-07:00:00"
		}
	}
	t, err := time.Parse(layout, s)
	if err != nil {
		// Years beyond 9999 have more digits than the layout allows.
		if len(s) > 4 && s[4] != '-' {
			return maxTime, nil
		}
		return time.Time{}, fmt.Errorf("timestamp %q: %w", s, err)
	}
	return clamp(t.UTC(), minDate, maxTime), nil
}

func clamp(t, lo, hi time.Time) time.Time {
	if t.Before(lo) {
		return lo
	}
	if t.After(hi) {
		return hi
	}
	return t
}

func (t Type) convertArray(s string) (any, error) {
	elems, err := parseArray(s)
	if err != nil {
		return nil, err
	}
	// Each case yields a []*T of the element's Go type, which the client
	// appends to Array(Nullable(T)).
	switch t.kind {
	case kString:
		return convertElems(elems, lift(func(s string) (string, error) { return s, nil }))
	case kUUID:
		return convertElems(elems, lift(func(s string) (string, error) { return s, nil }))
	case kDecimal:
		return convertElems(elems, func(s string) (string, bool, error) {
			v, err := t.decimalText(s)
			if v == nil || err != nil {
				return "", false, err
			}
			return v.(string), true, nil
		})
	case kBytes:
		return convertElems(elems, lift(func(s string) (string, error) { b, err := parseBytea(s); return string(b), err }))
	case kBool:
		return convertElems(elems, lift(parseBool))
	case kInt16:
		return convertElems(elems, lift(parseInt16))
	case kInt32:
		return convertElems(elems, lift(parseInt32))
	case kInt64:
		return convertElems(elems, lift(func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }))
	case kUInt32:
		return convertElems(elems, lift(parseUint32))
	case kFloat32:
		return convertElems(elems, lift(parseFloat32))
	case kFloat64:
		return convertElems(elems, lift(func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }))
	case kDate:
		return convertElems(elems, lift(parseDate))
	case kTimestamp, kTimestampTZ:
		return convertElems(elems, lift(parseTimestamp))
	}
	return nil, fmt.Errorf("unknown kind %d", t.kind)
}

// lift adapts a parser that always yields a value to convertElems.
func lift[T any](f func(string) (T, error)) func(string) (T, bool, error) {
	return func(s string) (T, bool, error) {
		v, err := f(s)
		return v, true, err
	}
}

// convertElems converts parsed array elements; nil stands for SQL NULL, and
// so does an element conv reports as not ok.
func convertElems[T any](elems []*string, conv func(string) (T, bool, error)) ([]*T, error) {
	out := make([]*T, len(elems))
	for i, e := range elems {
		if e == nil {
			continue
		}
		v, ok, err := conv(*e)
		if err != nil {
			return nil, fmt.Errorf("array element %d: %w", i+1, err)
		}
		if ok {
			out[i] = &v
		}
	}
	return out, nil
}

// parseArray parses a one-dimensional PostgreSQL array literal such as
// {1,"a b",NULL}. Nested arrays are flattened in row-major order (ClickHouse
// columns have a fixed nesting depth; PostgreSQL arrays do not).
func parseArray(s string) ([]*string, error) {
	if strings.HasPrefix(s, "[") { // explicit bounds: [0:2]={1,2,3}
		i := strings.Index(s, "=")
		if i < 0 {
			return nil, errors.New("array with bounds but no '='")
		}
		s = s[i+1:]
	}
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, fmt.Errorf("array literal %q must be enclosed in braces", truncate(s))
	}
	var out []*string
	var cur strings.Builder
	quoted, inQuotes, have := false, false, false
	flush := func() {
		if !have {
			return
		}
		v := cur.String()
		if !quoted && v == "NULL" {
			out = append(out, nil)
		} else {
			out = append(out, &v)
		}
		cur.Reset()
		quoted, have = false, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inQuotes && c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case inQuotes && c == '"':
			inQuotes = false
		case inQuotes:
			cur.WriteByte(c)
		case c == '"':
			inQuotes, quoted, have = true, true, true
		case c == '{':
		case c == '}' || c == ',':
			flush()
		case c == ' ' && !have:
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if inQuotes {
		return nil, fmt.Errorf("array literal %q has an unterminated quote", truncate(s))
	}
	return out, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
