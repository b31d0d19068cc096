package schema

import (
	"fmt"
	"slices"
	"strings"

	"github.com/walhouse/walhouse/record"
)

// scalars is the one table of PostgreSQL types walhouse maps, grouped by
// the ClickHouse type that stores them. Everything about a type derives
// from its entry: Map (PostgreSQL type → ClickHouse column type),
// parseType (a ClickHouse column type read back), Convert (PostgreSQL
// text → the Go value clickhouse-go appends), reconcile (which column
// types widen to which), the monthly-partition check, PGTypes and the
// tests that go through every type (TestEveryTypeRoundTrips).
//
// To add a PostgreSQL type: add its name (pg_type.typname) to the pg list
// of the entry whose ClickHouse type holds PostgreSQL's text output of it
// exactly. If no entry does, add a kind constant (before kindCount) and an entry here: the
// ClickHouse type, the PostgreSQL names, a conversion (conv or convType
// over a parser in convert.go, new if no parser fits), an example value,
// and the kinds it holds without loss (what a column of it may widen
// from). Then run `go test ./schema/ ./query/` (the tests derive their
// lists from this table; query's classifier of ClickHouse types must
// filter the new type, see query/types.go) and add a column of the type to
// TestIntegrationTypes (harness/e2e/types_test.go), which compares it
// with PostgreSQL row by row.
//
// A type not in the table is stored as its text, with a warning (see
// Type.Fallback); so is an enum (record.Column.Enum).
var scalars = [kindCount]scalar{
	kString: {
		ch: "String",
		pg: []string{
			"text", "varchar", "bpchar", "char", "name", "citext", "xml", "json", "jsonb",
			// No ClickHouse type holds these exactly: their text is kept.
			"time", "timetz", "interval", "inet", "cidr", "macaddr", "macaddr8", "money",
			"bit", "varbit", "tsvector", "tsquery", "point", "line", "lseg", "box", "path",
			"polygon", "circle", "int4range", "int8range", "numrange", "tsrange", "tstzrange",
			"daterange", "pg_lsn", "txid_snapshot", "pg_snapshot",
		},
		conv:      conv(parseText),
		example:   "a \"quoted\" text",
		holdsText: true,
	},
	// bytea is stored as its bytes in a String, which is why a text column
	// cannot hold it. It comes after kString so that parseType reads a
	// String column as text.
	kBytes: {ch: "String", pg: []string{"bytea"}, conv: conv(parseBytea), example: `\x00ff41`, binary: true},
	kBool:  {ch: "Bool", pg: []string{"bool"}, conv: conv(parseBool), example: "t"},
	kInt16: {ch: "Int16", pg: []string{"int2"}, conv: conv(parseInt16), example: "-32768", digits: 5},
	kInt32: {ch: "Int32", pg: []string{"int4"}, conv: conv(parseInt32), example: "2147483647", digits: 10,
		holds: []kind{kInt16}},
	kInt64: {ch: "Int64", pg: []string{"int8"}, conv: conv(parseInt64), example: "-9223372036854775808", digits: 19,
		holds: []kind{kInt16, kInt32, kUInt32}},
	kUInt32:  {ch: "UInt32", pg: []string{"oid", "xid", "cid"}, conv: conv(parseUint32), example: "4294967295", digits: 10},
	kFloat32: {ch: "Float32", pg: []string{"float4"}, conv: conv(parseFloat32), example: "-1.5e-10"},
	kFloat64: {ch: "Float64", pg: []string{"float8"}, conv: conv(parseFloat64), example: "Infinity",
		holds: []kind{kFloat32, kInt16, kInt32}},
	// Decimal(P, S): precision and scale come from numeric's typmod (see
	// Map); a decimal holds an integer kind with enough integer digits.
	kDecimal: {ch: "Decimal", pg: []string{"numeric"}, conv: convType(decimalValue), example: "-12.50"},
	kDate:    {ch: "Date32", pg: []string{"date"}, conv: conv(parseDate), example: "2024-02-29", temporal: true},
	// timestamp is read as UTC; timestamptz arrives in UTC (the replication
	// session runs with TimeZone=UTC).
	// A layout may give it fewer fractional digits (ColumnLayout): its
	// precision is Type.precision, 6 by default.
	kDateTime: {ch: "DateTime64(6, 'UTC')", pg: []string{"timestamp", "timestamptz"}, conv: convType(timestampValue),
		example: "2024-01-15 10:00:00.123456+05:30", temporal: true, holds: []kind{kDate}},
	kUUID: {ch: "UUID", pg: []string{"uuid"}, conv: conv(parseText), example: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}, // the client parses UUID text itself
	// ClickHouse's JSON type: only a layout's override maps json and jsonb
	// to it (ColumnLayout), so it names no PostgreSQL type of its own.
	// Its values go as JSON text, which the server parses (parseJSONObject
	// checks first what the server would refuse, so that one value fails
	// its record rather than the whole insert).
	kJSON: {ch: "JSON", conv: conv(parseJSONObject), example: `{"customer": {"id": 42, "tags": ["a", "b"]}}`, overrideOnly: true},
	// ClickHouse's Enum8 and Enum16: only a layout's override maps an
	// enum column to them, built from its labels (enum.go). Values go as
	// their labels, which the client numbers by the column's type.
	kEnum: {ch: "Enum8", conv: convType(enumValue), example: "paid", overrideOnly: true},
}

// kind is an entry of scalars: the ClickHouse scalar a PostgreSQL type
// maps to.
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
	kDateTime
	kUUID
	kJSON
	kEnum
	kindCount // the table's length: a kind without an entry fails the tests
)

// scalar is one entry of the type table.
type scalar struct {
	// ch is the ClickHouse type ("Decimal" for kDecimal, whose precision
	// and scale come from the column).
	ch string
	// pg lists the PostgreSQL types (pg_type.typname) stored as ch.
	pg []string
	// conv converts PostgreSQL's text output of a value, and of an array's
	// elements, to what clickhouse-go appends to ch.
	conv conversion
	// example is a PostgreSQL text value of the type; the tests convert it.
	example string
	// holds lists the other kinds whose every value this one holds
	// exactly: a column of one of them may be widened to this one.
	holds []kind
	// holdsText: every kind but the binary ones fits (String holds any text
	// form).
	holdsText bool
	// binary: values are bytes, not text (no text column holds them).
	binary bool
	// digits is, for an integer kind, the integer digits a Decimal needs
	// to hold every value of it.
	digits int
	// temporal: a date or timestamp, usable for monthly partitions.
	temporal bool
	// overrideOnly: no PostgreSQL type maps here by default; a layout's
	// column override does (pg is empty).
	overrideOnly bool
}

// PGTypes lists the PostgreSQL types (pg_type.typname) that Map stores in
// a ClickHouse type of their own, in table order: every type but the ones
// stored as text with a warning, and enums.
func PGTypes() []string {
	var out []string
	for _, s := range scalars {
		out = append(out, s.pg...)
	}
	return out
}

// kindOf looks a PostgreSQL type name up in the table.
func kindOf(pgType string) (kind, bool) {
	for k, s := range scalars {
		if slices.Contains(s.pg, pgType) {
			return kind(k), true
		}
	}
	return 0, false
}

// Type is how one source column is stored in ClickHouse.
type Type struct {
	// DDL is the ClickHouse column type, e.g. "Nullable(Decimal(12, 2))".
	DDL string
	// Fallback is non-empty when the PostgreSQL type has no faithful
	// ClickHouse counterpart and is stored as its text; it says why, for a
	// warning at table creation.
	Fallback string

	kind             kind
	array            bool
	precision, scale int // of a kDecimal; precision is also a kDateTime's fractional digits
	// clamp: a kDecimal value beyond the type's range becomes its bound
	// (a layout's on_overflow clamp) rather than an error.
	clamp bool
	// A kEnum's width (8 or 16), labels with their numbers, and numbers
	// by label (enum.go).
	// enumUnread are the source's labels left out of the Enum (see
	// readable).
	enumBits   int
	enum       []enumLabel
	enumIndex  map[string]int
	enumUnread []string
	// enumAlias maps labels of an older shape, renamed since, to their
	// new names (reconcileEnum).
	enumAlias map[string]string
}

// Null returns the value to append for SQL NULL: nil, or for arrays (which
// ClickHouse cannot make Nullable) an empty array of the element type.
func (t Type) Null() any {
	if t.array {
		v, _ := scalars[t.kind].conv.many(t, nil)
		return v
	}
	return nil
}

// Convert turns a PostgreSQL text value (never NULL: the caller passes nil
// for NULL) into the Go value the ClickHouse client appends for t.
func (t Type) Convert(text string) (any, error) {
	c := scalars[t.kind].conv
	if !t.array {
		return c.one(t, text)
	}
	elems, err := parseArray(text)
	if err != nil {
		return nil, err
	}
	return c.many(t, elems)
}

// IsJSON reports whether t is ClickHouse's JSON type (a layout's JSON
// override). The client appends a JSON column's values in one
// serialization per insert, as text here: a value read back from the
// column (an unchanged TOAST value) must be read as its text too.
func (t Type) IsJSON() bool { return t.kind == kJSON }

// IsDate reports whether t is a date without a time (Date32), whose query
// parameter is its text, not a time the client sends as epoch seconds.
func (t Type) IsDate() bool { return t.kind == kDate && !t.array }

func (t Type) nullable() bool {
	return strings.HasPrefix(t.DDL, "Nullable(") || strings.HasPrefix(t.DDL, "LowCardinality(Nullable(")
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
	k, known := kindOf(c.Type)
	t := Type{kind: k, array: c.Array}
	switch {
	case c.Enum:
		t.kind = kString
	case !known:
		t.kind = kString
		t.Fallback = fmt.Sprintf("PostgreSQL type %q has no ClickHouse mapping; its text form is stored as String", c.Type)
	}
	base := scalars[t.kind].ch
	if t.kind == kDateTime {
		t.precision = maxDateTimePrecision
	}
	if t.kind == kDecimal {
		p, s, ok := numericTypmod(c.TypMod)
		if !ok {
			// Unconstrained numeric: the widest decimal that still has room
			// on both sides of the point.
			p, s = maxDecimalPrecision, maxDecimalPrecision/2
		}
		t.precision, t.scale = p, s
		base = fmt.Sprintf("Decimal(%d, %d)", p, s)
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

// parseType reads a ClickHouse column type written by Map (the types
// walhouse creates) back into a Type, so values can be converted for the
// column as it is in ClickHouse, which may be wider than the source's
// current type. A ClickHouse type shared by several entries reads as the
// first of them (String as text). ok is false for types walhouse does not
// create.
func parseType(ddl string) (t Type, ok bool) {
	t.DDL = ddl
	inner := ddl
	if s, found := unwrap(inner, "LowCardinality("); found {
		// A layout's override of a text column (ColumnLayout).
		inner = s
		if s, found := unwrap(inner, "Nullable("); found {
			inner = s
		}
		if inner != scalars[kString].ch {
			return Type{}, false
		}
		t.kind = kString
		return t, true
	}
	if s, found := unwrap(inner, "Array(Nullable("); found {
		inner, t.array = strings.TrimSuffix(s, ")"), true
	} else if s, found := unwrap(inner, "Nullable("); found {
		inner = s
	}
	if strings.HasPrefix(inner, "Enum") && !t.array {
		e, ok := parseEnum(inner)
		if !ok {
			return Type{}, false
		}
		e.DDL = ddl
		return e, true
	}
	if strings.HasPrefix(inner, "DateTime64(") {
		p, ok := dateTimeShape(inner)
		if !ok || !strings.HasSuffix(inner, ", 'UTC')") {
			return Type{}, false
		}
		t.kind, t.precision = kDateTime, p
		return t, true
	}
	if strings.HasPrefix(inner, "Decimal(") {
		p, s, ok := decimalShape(inner)
		if !ok {
			return Type{}, false
		}
		t.kind, t.precision, t.scale = kDecimal, p, s
		return t, true
	}
	for k, s := range scalars {
		if kind(k) != kDecimal && s.ch == inner {
			t.kind = kind(k)
			return t, true
		}
	}
	return Type{}, false
}

// unwrap strips prefix and the matching closing parenthesis.
func unwrap(s, prefix string) (string, bool) {
	if !strings.HasPrefix(s, prefix) || !strings.HasSuffix(s, ")") {
		return s, false
	}
	return s[len(prefix) : len(s)-1], true
}

// reconcile decides how a ClickHouse column of type have serves a source
// column that now maps to want:
//   - the same type: keep it;
//   - want is narrower (int8 → int4, numeric(12,2) → numeric(10,2)): keep
//     the wider column, every new value fits;
//   - want is wider (int4 → int8, varchar → text is the same String): widen
//     the column to want (alter is true), existing values convert exactly;
//   - anything else (text → int, int → uuid, scalar ↔ array) cannot be
//     converted without loss: an error that names both types.
//
// use is the type values are converted for.
func reconcile(have, want Type) (use Type, alter bool, err error) {
	if have.DDL == want.DDL {
		return want, false, nil // same column; the source mapping knows how to read values (bytea hex, say)
	}
	if have.kind == kEnum && want.kind == kEnum {
		// PlanEvolution knows whether want is newer than the column.
		use, alter, _, err := reconcileEnum(have, want, false)
		return use, alter, err
	}
	switch {
	case covers(have, want):
		return have, false, nil
	case covers(want, have):
		return want, true, nil
	}
	return Type{}, false, fmt.Errorf("ClickHouse column is %s and the source column now maps to %s; neither holds every value of the other", have.DDL, want.DDL)
}

// covers reports whether every value of b fits a without loss, with the
// nullability and array shape of a able to hold b's.
func covers(a, b Type) bool {
	if a.array != b.array {
		return false
	}
	if b.nullable() && !a.nullable() && !a.array {
		return false
	}
	if a.kind == b.kind {
		switch a.kind {
		case kDecimal:
			return a.scale >= b.scale && a.precision-a.scale >= b.precision-b.scale
		case kDateTime:
			return a.precision >= b.precision
		}
		return true
	}
	sa, sb := scalars[a.kind], scalars[b.kind]
	switch {
	case sa.holdsText:
		return !sb.binary
	case a.kind == kDecimal:
		return sb.digits > 0 && a.precision-a.scale >= sb.digits
	}
	return slices.Contains(sa.holds, b.kind)
}
