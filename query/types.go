package query

import (
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/walhouse/walhouse/schema"
)

// This file classifies ClickHouse column types for the query layer. It is
// deliberately separate from package schema's type table: schema answers
// "how is a PostgreSQL type stored and converted", for the types walhouse
// creates; this answers "which JSON values, operators and aggregates does a
// ClickHouse column accept", for any type system.columns may report
// (LowCardinality, Int8…UInt256, FixedString, Enum, DateTime, DecimalN
// from tables altered by hand or by a newer walhouse). A ClickHouse type
// new to schema's table is selectable here at once; TestEveryMappedTypeIsFilterable
// fails until parseColType also knows how to filter it.

// valueKind is the family of a ClickHouse column type, which decides which
// JSON values a filter on the column accepts and which operators and
// aggregates apply.
type valueKind uint8

const (
	kindOther    valueKind = iota // arrays, maps, tuples, JSON, …: selectable, not filterable
	kindString                    // String, FixedString, Enum
	kindInt                       // Int8…Int256, UInt8…UInt256
	kindFloat                     // Float32, Float64
	kindDecimal                   // Decimal(P, S)
	kindBool                      // Bool
	kindUUID                      // UUID
	kindDate                      // Date, Date32
	kindDateTime                  // DateTime, DateTime64
)

func (k valueKind) String() string {
	switch k {
	case kindString:
		return "string"
	case kindInt:
		return "integer"
	case kindFloat:
		return "float"
	case kindDecimal:
		return "decimal"
	case kindBool:
		return "boolean"
	case kindUUID:
		return "uuid"
	case kindDate:
		return "date"
	case kindDateTime:
		return "datetime"
	default:
		return "other"
	}
}

// numeric reports whether sum and avg apply.
func (k valueKind) numeric() bool { return k == kindInt || k == kindFloat || k == kindDecimal }

// colType is a ClickHouse column type as system.columns spells it, with
// what the query layer needs to know about it.
type colType struct {
	Full     string // e.g. "Nullable(Decimal(12, 2))"
	Nullable bool
	Kind     valueKind
	// Param is the type of the {name:Type} placeholder that values compared
	// with the column are bound as; it is built from a fixed set, never
	// copied from the server's type text. Empty when Kind is kindOther.
	Param string

	intBits   int  // kindInt: width in bits
	unsigned  bool // kindInt
	precision int  // kindDecimal
	scale     int  // kindDecimal
}

var (
	intTypeRe     = regexp.MustCompile(`^(U?)Int(8|16|32|64|128|256)$`)
	decimalRe     = regexp.MustCompile(`^Decimal\((\d+),\s*(\d+)\)$`)
	decimalNRe    = regexp.MustCompile(`^Decimal(32|64|128|256)\((\d+)\)$`)
	fixedStringRe = regexp.MustCompile(`^(FixedString\(\d+\)|Enum(8|16)\(.*\))$`)
	dateTimeRe    = regexp.MustCompile(`^DateTime(64)?(\(.*\))?$`)
)

// dateTimeParam is the placeholder type of every datetime value: comparing
// it with DateTime or DateTime64 columns of any precision is exact to the
// microsecond, which is the precision walhouse stores.
const dateTimeParam = "DateTime64(6, 'UTC')"

// parseColType classifies a type name from system.columns.
func parseColType(full string) colType {
	t := colType{Full: full}
	base := full
	for {
		switch {
		case strings.HasPrefix(base, "LowCardinality(") && strings.HasSuffix(base, ")"):
			base = base[len("LowCardinality(") : len(base)-1]
			continue
		case strings.HasPrefix(base, "Nullable(") && strings.HasSuffix(base, ")"):
			base = base[len("Nullable(") : len(base)-1]
			t.Nullable = true
			continue
		}
		break
	}
	switch {
	case base == "String" || fixedStringRe.MatchString(base):
		t.Kind, t.Param = kindString, "String"
	case intTypeRe.MatchString(base):
		m := intTypeRe.FindStringSubmatch(base)
		t.Kind = kindInt
		t.unsigned = m[1] == "U"
		t.intBits, _ = strconv.Atoi(m[2])
		t.Param = m[1] + "Int" + m[2]
	case base == "Float32" || base == "Float64":
		t.Kind, t.Param = kindFloat, base
	case decimalRe.MatchString(base):
		m := decimalRe.FindStringSubmatch(base)
		t.precision, _ = strconv.Atoi(m[1])
		t.scale, _ = strconv.Atoi(m[2])
		t.Kind, t.Param = kindDecimal, fmt.Sprintf("Decimal(%d, %d)", t.precision, t.scale)
	case decimalNRe.MatchString(base):
		m := decimalNRe.FindStringSubmatch(base)
		bits, _ := strconv.Atoi(m[1])
		t.precision = map[int]int{32: 9, 64: 18, 128: 38, 256: 76}[bits]
		t.scale, _ = strconv.Atoi(m[2])
		t.Kind, t.Param = kindDecimal, fmt.Sprintf("Decimal(%d, %d)", t.precision, t.scale)
	case base == "Bool":
		t.Kind, t.Param = kindBool, "Bool"
	case base == "UUID":
		t.Kind, t.Param = kindUUID, "UUID"
	case base == "Date" || base == "Date32":
		t.Kind, t.Param = kindDate, "Date32"
	case dateTimeRe.MatchString(base):
		t.Kind, t.Param = kindDateTime, dateTimeParam
	}
	if t.Kind != kindOther && t.precision > 76 {
		t.Kind, t.Param = kindOther, ""
	}
	return t
}

// filterInput is the JSON value a filter on one kind of column takes: read
// gives its text, or false for any other JSON value; want names it in the
// error.
type filterInput struct {
	read func(v any) (string, bool)
	want string
}

// filterInputs are the filterable kinds of columns.
var filterInputs = map[valueKind]filterInput{
	kindString:   {jsonString, "a JSON string"},
	kindInt:      {numberText, "an integer (JSON number or string)"},
	kindFloat:    {numberText, "a number"},
	kindDecimal:  {numberText, "a decimal number (JSON number or string)"},
	kindBool:     {jsonBool, "true or false"},
	kindUUID:     {jsonString, "a UUID string"},
	kindDate:     {jsonString, "a date string YYYY-MM-DD"},
	kindDateTime: {jsonString, "an ISO 8601 timestamp string"},
}

// bindValue checks that v, a JSON value decoded with UseNumber, is a valid
// value of t and returns its text for a server-side parameter of type
// t.Param. The reason in the error is meant for the caller.
func (t colType) bindValue(v any) (string, error) {
	in, ok := filterInputs[t.Kind]
	if !ok {
		return "", fmt.Errorf("columns of type %s cannot be filtered", t.Full)
	}
	text, ok := in.read(v)
	if !ok {
		return "", fmt.Errorf("want %s, got %s", in.want, jsonKind(v))
	}
	switch t.Kind {
	case kindString:
		return schema.EscapeParam(text), nil
	case kindInt:
		n, ok := new(big.Int).SetString(text, 10)
		if !ok {
			return "", fmt.Errorf("%q is not an integer", text)
		}
		lo, hi := intRange(t.intBits, t.unsigned)
		if n.Cmp(lo) < 0 || n.Cmp(hi) > 0 {
			return "", fmt.Errorf("%s is out of range for %s (%s to %s)", text, t.Param, lo, hi)
		}
		return n.String(), nil
	case kindFloat:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return "", fmt.Errorf("%q is not a number", text)
		}
		return strconv.FormatFloat(f, 'g', -1, 64), nil
	case kindDecimal:
		return t.checkDecimal(text)
	case kindUUID:
		u, err := uuid.Parse(text)
		if err != nil {
			return "", fmt.Errorf("%q is not a UUID", text)
		}
		return u.String(), nil
	case kindDate:
		d, err := time.Parse(time.DateOnly, text)
		if err != nil {
			return "", fmt.Errorf("%q is not a date YYYY-MM-DD", text)
		}
		return d.Format(time.DateOnly), nil
	case kindDateTime:
		ts, err := parseTimestamp(text)
		if err != nil {
			return "", err
		}
		return ts.UTC().Format("2006-01-02 15:04:05.000000"), nil
	case kindBool:
		return text, nil
	default: // a kind in filterInputs that this switch does not know
		return "", fmt.Errorf("columns of type %s cannot be filtered yet", t.Full)
	}
}

var decimalTextRe = regexp.MustCompile(`^-?(\d+)(?:\.(\d+))?$`)

func (t colType) checkDecimal(text string) (string, error) {
	m := decimalTextRe.FindStringSubmatch(text)
	if m == nil {
		return "", fmt.Errorf("%q is not a plain decimal number (digits, optional sign and point, no exponent)", text)
	}
	intDigits := len(strings.TrimLeft(m[1], "0"))
	if intDigits > t.precision-t.scale {
		return "", fmt.Errorf("%s has more than %d digits before the point, the most %s holds", text, t.precision-t.scale, t.Param)
	}
	if len(m[2]) > t.scale {
		return "", fmt.Errorf("%s has more than %d digits after the point, the most %s holds", text, t.scale, t.Param)
	}
	return text, nil
}

// parseTimestamp accepts RFC 3339 (with or without fractional seconds), a
// date-time without offset (read as UTC) and a plain date (midnight UTC).
func parseTimestamp(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", time.DateOnly} {
		if ts, err := time.Parse(layout, s); err == nil {
			return ts, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an ISO 8601 timestamp (e.g. 2024-05-01T12:00:00Z)", s)
}

// jsonString returns v when it is a JSON string.
func jsonString(v any) (string, bool) {
	s, ok := v.(string)
	return s, ok
}

// jsonBool returns the text of v when it is true or false.
func jsonBool(v any) (string, bool) {
	b, ok := v.(bool)
	return strconv.FormatBool(b), ok
}

// numberText returns the text of v when it is a JSON number or a string,
// trimmed; the caller checks that the text is a number.
func numberText(v any) (string, bool) {
	switch x := v.(type) {
	case json.Number:
		return x.String(), true
	case string:
		return strings.TrimSpace(x), true
	}
	return "", false
}

func intRange(bits int, unsigned bool) (lo, hi *big.Int) {
	one := big.NewInt(1)
	if unsigned {
		return big.NewInt(0), new(big.Int).Sub(new(big.Int).Lsh(one, uint(bits)), one)
	}
	hi = new(big.Int).Sub(new(big.Int).Lsh(one, uint(bits-1)), one)
	lo = new(big.Int).Neg(new(big.Int).Lsh(one, uint(bits-1)))
	return lo, hi
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number, float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
