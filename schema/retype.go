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
// refused before anything is built.

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
	// (EXCHANGE TABLES swaps the names it reads and writes).
	Expr string
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
//     point, DateTime64(P) → DateTime64 with as many fractional digits;
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
			return cast, ""
		}
		if have.kind == kDecimal {
			return nil, fmt.Sprintf("Decimal(%d, %d) holds at most %d digits before the point and %d after it, fewer than the column's", want.precision, want.scale, want.precision-want.scale, want.scale)
		}
	case kDateTime:
		if have.kind == kDateTime && want.precision >= have.precision {
			return cast, ""
		}
		if have.kind == kDateTime {
			return nil, fmt.Sprintf("the column keeps %d fractional digits; the new type %d", have.precision, want.precision)
		}
	case kFloat64:
		return nil, "a Float64 holds the nearest double of each value, not the value"
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
