package schema

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseType reads a ClickHouse column type written by Map (the types
// walhouse creates) back into a Type, so values can be converted for the
// column as it is in ClickHouse, which may be wider than the source's
// current type. ok is false for types walhouse does not create.
func ParseType(ddl string) (t Type, ok bool) {
	t.DDL = ddl
	inner := ddl
	if s, found := unwrap(inner, "Array(Nullable("); found {
		inner, t.array = strings.TrimSuffix(s, ")"), true
	} else if s, found := unwrap(inner, "Nullable("); found {
		inner = s
	}
	switch {
	case inner == "String":
		t.kind = kString
	case inner == "Bool":
		t.kind = kBool
	case inner == "Int16":
		t.kind = kInt16
	case inner == "Int32":
		t.kind = kInt32
	case inner == "Int64":
		t.kind = kInt64
	case inner == "UInt32":
		t.kind = kUInt32
	case inner == "Float32":
		t.kind = kFloat32
	case inner == "Float64":
		t.kind = kFloat64
	case inner == "UUID":
		t.kind = kUUID
	case inner == "Date32":
		t.kind = kDate
	case inner == "DateTime64(6, 'UTC')":
		t.kind = kTimestampTZ
	case strings.HasPrefix(inner, "Decimal("):
		if _, _, ok := decimalShape(inner); !ok {
			return Type{}, false
		}
		t.kind, t.decimal = kDecimal, inner
	default:
		return Type{}, false
	}
	return t, true
}

// unwrap strips prefix and the matching closing parenthesis.
func unwrap(s, prefix string) (string, bool) {
	if !strings.HasPrefix(s, prefix) || !strings.HasSuffix(s, ")") {
		return s, false
	}
	return s[len(prefix) : len(s)-1], true
}

func decimalShape(d string) (p, s int, ok bool) {
	body, found := unwrap(d, "Decimal(")
	if !found {
		return 0, 0, false
	}
	ps, ss, found := strings.Cut(body, ",")
	if !found {
		return 0, 0, false
	}
	p, err1 := strconv.Atoi(strings.TrimSpace(ps))
	s, err2 := strconv.Atoi(strings.TrimSpace(ss))
	return p, s, err1 == nil && err2 == nil
}

// integer digits each integer kind needs in a decimal.
var intDigits = map[kind]int{kInt16: 5, kInt32: 10, kInt64: 19, kUInt32: 10}

// Reconcile decides how a ClickHouse column of type have serves a source
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
func Reconcile(have, want Type) (use Type, alter bool, err error) {
	if have.DDL == want.DDL {
		return want, false, nil // same column; the source mapping knows how to read values (bytea hex, say)
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
	if isNullable(b) && !isNullable(a) && !a.array {
		return false
	}
	if a.kind == b.kind {
		if a.kind != kDecimal {
			return true
		}
		ap, as, _ := decimalShape(a.decimal)
		bp, bs, _ := decimalShape(b.decimal)
		return as >= bs && ap-as >= bp-bs
	}
	switch a.kind {
	case kString:
		return b.kind != kBytes // any text form fits a String
	case kInt32:
		return b.kind == kInt16
	case kInt64:
		return b.kind == kInt16 || b.kind == kInt32 || b.kind == kUInt32
	case kFloat64:
		return b.kind == kFloat32 || b.kind == kInt16 || b.kind == kInt32
	case kDecimal:
		p, s, _ := decimalShape(a.decimal)
		d, ok := intDigits[b.kind]
		return ok && p-s >= d
	case kTimestamp, kTimestampTZ:
		return b.kind == kDate || b.kind == kTimestamp || b.kind == kTimestampTZ
	}
	return false
}

func isNullable(t Type) bool { return strings.HasPrefix(t.DDL, "Nullable(") }

// DefaultClause returns the DEFAULT clause that gives rows older than an
// added column the value PostgreSQL gives them (its "missing" value).
// ClickHouse computes a new column's default for parts written before it,
// so old rows read the same on both sides. ok is false for types whose text
// cannot be written as a ClickHouse literal (arrays); those old rows read
// NULL.
func DefaultClause(t Type, text string) (string, bool) {
	if t.array {
		return "", false
	}
	v, err := t.Convert(text)
	if err != nil {
		return "", false
	}
	var lit string
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		lit = x
	case bool:
		lit = strconv.FormatBool(x)
	case time.Time:
		lit = x.UTC().Format("2006-01-02 15:04:05.000000")
	default:
		lit = fmt.Sprint(x)
	}
	return fmt.Sprintf(" DEFAULT CAST(%s AS %s)", QuoteString(lit), t.DDL), true
}
