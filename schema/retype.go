package schema

import (
	"fmt"
	"slices"
	"strings"
)

// A relayout (clickhouse/relayout.go) also gives a table's columns the
// types its layout's overrides (Column.Override) now name, when they
// changed after the table was created: the sink itself never changes a
// column whose type a layout overrides (PlanEvolution), and keeps a
// LowCardinality(String) whose override was removed (it holds every value
// of String). The relayout builds the new table with the new types and
// converts each value with an explicit expression, so it makes only the
// conversions that keep every value exactly (retypeRule); any other is
// refused before anything is built. The exception is a narrower Decimal
// (narrowDecimal): the relayout gives the values it holds what the sink
// would give the same values arriving now under the layout's on_overflow.
// It converts those that fit exactly, stores those beyond the range as the
// bound under clamp, and refuses, after counting them in ClickHouse
// before anything is built, when a value would go to the dead letters
// (beyond the range under dead_letter, or more decimals than the scale
// under either policy: nothing is ever rounded).

// Retype is a column a relayout gives another type.
type Retype struct {
	// Column is the ClickHouse column.
	Column string
	// From is its type in the table now, To the type its layout gives it.
	From, To string
	// Expr converts a value of the column, read by its name, to To: the
	// expression the relayout's copy and forwarding view select. It also
	// takes a value of type To without an error: between the swap and
	// its drop, the forwarding view fires on inserts into the new table
	// (EXCHANGE TABLES swaps the names it reads and writes). A value
	// Refused holds makes it fail (throwIf): a copy stops rather than
	// store another value than the sink would.
	Expr string
	// Refused is the SQL condition (over the quoted column) true of a
	// value the sink would refuse in To, under the layout's on_overflow,
	// and Clamped of one it would store as To's bound (on_overflow
	// clamp); both "" when every value of From converts exactly, and
	// both false for NULL and for every value of To.
	Refused, Clamped string
	// Forward is Expr without its check, for the forwarding view, which
	// leaves out the rows Refused holds (an insert of a sink must not
	// fail on them; the relayout's copy of the old table's new parts
	// finds them); "" when it is Expr.
	Forward string
}

// Narrows reports whether some values of From do not fit To exactly:
// the relayout counts them (Refused, Clamped) before anything is built.
func (r Retype) Narrows() bool { return r.Refused != "" || r.Clamped != "" }

// ForwardExpr is the expression the forwarding view selects the column
// by (Forward, or Expr).
func (r Retype) ForwardExpr() string {
	if r.Forward != "" {
		return r.Forward
	}
	return r.Expr
}

// String says the change as logs and the relayout command print it:
// "price Decimal(12, 2) to String".
func (r Retype) String() string { return r.Column + " " + r.From + " to " + r.To }

// PlanRetype compares the columns the ClickHouse table has (have) with the
// types t gives them, and returns the columns a relayout must give another
// type, in t's order. A column of a type the layout wants but that no
// exact conversion reaches is an *IncompatibleError that names the
// column, both types, why and the fix. Columns the sink changes itself
// (added columns, widened ones, Enum labels) and those whose type the
// table's layout does not choose are left to it, except a column t sorts
// or partitions by that the sink would widen: ClickHouse refuses to
// change a key column's type, so the relayout gives it the type the sink
// would.
func PlanRetype(t *Table, have []ExistingColumn) ([]Retype, error) {
	byName := map[string]ExistingColumn{}
	byAttnum := map[int16]ExistingColumn{}
	for _, h := range have {
		byName[h.Name] = h
		if n, dropped := ColumnAttnum(h.Comment); n > 0 && !dropped {
			byAttnum[n] = h
		}
	}
	keyCols := t.keyColumns()
	var out []Retype
	for _, c := range t.Columns {
		h, ok := byAttnum[c.Source.Attnum]
		if !ok || c.Source.Attnum == 0 {
			h, ok = byName[c.Name]
		}
		if !ok {
			continue // the sink adds it
		}
		from, ok := parseType(h.Type)
		if !ok {
			continue // a type walhouse did not create stops the table in PlanEvolution
		}
		want := c.Type
		if r, ok := narrowDecimal(h.Name, from, want); ok {
			out = append(out, r)
			continue
		}
		if !retypeWanted(from, want, c.Override != "") {
			// A sorting or partition column the sink would widen (its
			// override removed to put it in the key): ClickHouse
			// changes the type of no key column, so the relayout does.
			use, alter, err := reconcile(from, c.Type)
			if err != nil || !alter || from.kind == kEnum && c.Type.kind == kEnum || !slices.Contains(keyCols, c.Name) {
				continue
			}
			want = use
		}
		expr, why := retypeRule(from, want, c.Source.TypMod, c.Source.Type)
		if why != "" {
			return nil, t.retypeRefused(h.Name, from.DDL, want.DDL, why)
		}
		out = append(out, Retype{Column: h.Name, From: from.DDL, To: want.DDL, Expr: expr(QuoteIdent(h.Name))})
	}
	return out, nil
}

// narrowDecimal returns the Retype of column col from Decimal type have to
// a Decimal want of the layout that holds fewer digits before the point
// or after it (ok false for any other change). A value of have converts
// as the sink converts PostgreSQL's text of it (decimalValue): exactly
// when it fits; to want's bound of its sign when it has more digits
// before the point than want holds and the layout says on_overflow
// clamp; otherwise (beyond the range under dead_letter, or within it with
// more decimals than want's scale: never rounded) it is refused. Its
// conditions compare with Decimal256 values, exact for every Decimal.
//
// NULL stays NULL, and a value that the old type's layout stored as NULL
// (PostgreSQL's NaN, and an infinity without clamp) stays NULL: the
// relayout converts what ClickHouse holds.
func narrowDecimal(col string, have, want Type) (Retype, bool) {
	if have.kind != kDecimal || want.kind != kDecimal || have.array || want.array ||
		have.nullable() && !want.nullable() || covers(want, have) {
		return Retype{}, false
	}
	q := QuoteIdent(col)
	inner := fmt.Sprintf("Decimal(%d, %d)", want.precision, want.scale)
	var beyond, inexact string
	if whole := want.precision - want.scale; whole < have.precision-have.scale {
		// 10^whole, the least value with more digits before the point.
		beyond = fmt.Sprintf("abs(%s) >= toDecimal256('1%s', 0)", q, strings.Repeat("0", whole))
	}
	if want.scale < have.scale {
		// toDecimal256 drops the digits beyond the scale.
		inexact = fmt.Sprintf("toDecimal256(%s, %d) != %s", q, want.scale, q)
	}
	r := Retype{Column: col, From: have.DDL, To: want.DDL}
	exact := fmt.Sprintf("accurateCastOrNull(%s, '%s')", q, inner)
	value := exact
	switch {
	case want.clamp && beyond != "":
		r.Clamped = "ifNull(" + beyond + ", 0)"
		if inexact != "" {
			r.Refused = fmt.Sprintf("ifNull(%s AND NOT (%s), 0)", inexact, beyond)
		}
		value = fmt.Sprintf("if(%s, if(%s > 0, CAST('%s' AS %s), CAST('%s' AS %s)), %s)",
			r.Clamped, q, decimalBound(want, false), inner, decimalBound(want, true), inner, exact)
	case beyond != "" && inexact != "":
		r.Refused = fmt.Sprintf("ifNull(%s OR %s, 0)", beyond, inexact)
	default:
		r.Refused = "ifNull(" + beyond + inexact + ", 0)"
	}
	r.Forward = fmt.Sprintf("CAST(%s AS %s)", value, want.DDL)
	r.Expr = r.Forward
	if r.Refused != "" {
		msg := fmt.Sprintf("column %s holds a value that %s cannot hold exactly (on_overflow %s): walhouse relayout stops rather than store another value; see its log for the rows and the fix", col, inner, onOverflowName(want))
		r.Expr = fmt.Sprintf("CAST(if(throwIf(%s, %s) = 0, %s, NULL) AS %s)", r.Refused, QuoteString(msg), value, want.DDL)
	}
	return r, true
}

// onOverflowName is the layout's on_overflow of a Decimal override t.
func onOverflowName(t Type) string {
	if t.clamp {
		return "clamp"
	}
	return "dead_letter"
}

// keyColumns returns the columns t's table sorts or partitions by.
func (t *Table) keyColumns() []string {
	out := slices.Clone(t.OrderBy)
	if t.PartitionBy != "" {
		out = append(out, t.PartitionBy)
	}
	if t.PartitionExpr != "" {
		refs, _ := partitionRefs(t.PartitionExpr) // checked with the layout
		out = append(out, refs...)
	}
	return out
}

// retypeWanted reports whether a relayout gives a column of type have the
// type want of its layout; overridden says the layout names want.
func retypeWanted(have, want Type, overridden bool) bool {
	switch {
	case have.DDL == want.DDL:
		return false
	case have.kind == kEnum && want.kind == kEnum:
		return false // the sink gives an Enum the labels its enum gained, in place
	case overridden:
		return true // the layout names the type: another type is a change of it
	}
	// Without an override, a column of another type is the sink's own
	// (widened, or kept wider when the source narrowed), or one the sink
	// widens itself; except a LowCardinality(String) whose override was
	// removed, which the sink keeps since it holds the same values.
	return isLowCardinality(have) && !isLowCardinality(want) && have.kind == kString && want.kind == kString
}

// isLowCardinality reports whether t is a LowCardinality(String) column.
func isLowCardinality(t Type) bool { return strings.HasPrefix(t.DDL, "LowCardinality(") }

// retypeRule returns how a value of a column of type have becomes one of
// type want keeping every value exactly (expr, given the quoted column),
// or why it cannot (why). typmod and pgType are the source column's
// (record.Column), for the text of a numeric. The conversions:
//   - String ↔ LowCardinality(String), an Enum → either: the same text;
//   - Decimal(P, S) → a Decimal with as many digits before and after the
//     point (a narrower one is narrowDecimal's), DateTime64(P) →
//     DateTime64 with as many fractional digits;
//   - Decimal → String: PostgreSQL's text of the number, which for a
//     numeric(p, s) has exactly s decimals, so toDecimalString(value, s).
//
// A NULL stays NULL; a column cannot lose Nullable, and arrays are never
// overridden.
func retypeRule(have, want Type, typmod int32, pgType string) (expr func(col string) string, why string) {
	cast := func(col string) string { return fmt.Sprintf("CAST(%s AS %s)", col, want.DDL) }
	switch {
	case have.array || want.array:
		return nil, "a relayout converts no array column"
	case have.nullable() && !want.nullable():
		return nil, "the new type cannot hold NULL"
	}
	switch want.kind {
	case kString:
		switch have.kind {
		case kString, kEnum:
			return cast, ""
		case kDecimal:
			_, s, ok := numericTypmod(typmod)
			if pgType != "numeric" || !ok {
				return nil, "PostgreSQL's text of an unconstrained numeric keeps the digits each value was written with (1.50 is not 1.5), which the Decimal column does not keep"
			}
			return func(col string) string {
				// accurateCastOrNull: the identity on the Decimal column,
				// and no error on the String one ('NaN').
				return fmt.Sprintf("CAST(toDecimalString(accurateCastOrNull(%s, 'Decimal(%d, %d)'), %d) AS %s)", col, have.precision, have.scale, s, want.DDL)
			}, ""
		case kFloat64:
			return nil, "a Float64 holds the nearest double of each number, not PostgreSQL's number"
		case kJSON:
			return nil, "ClickHouse's JSON type does not keep PostgreSQL's text of a value (null keys, dotted keys, numbers)"
		}
	case kDecimal:
		if have.kind == kDecimal && covers(want, have) {
			return cast, "" // a narrower one is narrowDecimal's
		}
	case kDateTime:
		if have.kind == kDateTime && want.precision >= have.precision {
			return cast, ""
		}
		if have.kind == kDateTime {
			return nil, fmt.Sprintf("the column keeps %d fractional digits; the new type %d", have.precision, want.precision)
		}
	case kFloat64:
		// The sink's Float64 is the nearest double of PostgreSQL's text,
		// NaN and infinities included; the Decimal column holds those as
		// NULL, and ClickHouse's conversion of a wide Decimal is not always
		// the nearest double: a relayout would store other values.
		return nil, "a Float64 holds the nearest double of each value, not the value, and the sink's Float64 of PostgreSQL's NaN and infinities, which the Decimal column holds as NULL, cannot be made from the column"
	case kEnum:
		return nil, "the column may hold values that are no label of the Enum"
	case kJSON:
		return nil, "ClickHouse's JSON type changes some values as it parses them (null keys, dotted keys, numbers)"
	}
	return nil, "no conversion keeps every value of the one type in the other"
}

// retypeRefused is the error of a relayout that would give column, of type
// from, the type to of its layout, which no exact conversion reaches (why).
func (t *Table) retypeRefused(column, from, to, why string) *IncompatibleError {
	return &IncompatibleError{
		Table:  t.QualifiedName(),
		Column: column,
		Err:    fmt.Errorf("a relayout would change column %s from %s to %s, its layout's, and cannot keep every value: %s", column, from, to, why),
		Fix: fmt.Sprintf("set the column's override in the layout back to a type that holds every value of %s (or remove the change), and run the relayout again; "+
			"or drop the table (%s) and copy it again from PostgreSQL with `walhouse capture --resnapshot %s.%s`, which creates it with the new type",
			from, strings.Join(t.Placement().Drop(t.Name), ", then "), t.Source.Schema, t.Source.Table),
	}
}
