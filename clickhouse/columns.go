package clickhouse

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

// An insert is built column by column: every column's values are converted
// into one typed slice (schema.Values), which the client's column takes in
// one Append, without boxing each value into an any and without its type
// switches per row. Values that are not plain converted text (recovered
// unchanged TOAST values, NULL in a column that cannot hold it, arrays) go
// to the column one by one with AppendRow, as the client appended every
// value before, between the slices of the values around them.
//
// A value that cannot be loaded fails the record that holds it, and the
// batch reports the first such record in row order, as appending row by
// row found it: a value that does not convert fails its record before any
// value the client refuses does (a row was converted whole before it was
// appended), and among the client's refusals the record's first column
// counts.

// appender is where an insert column's values go: the batch's column
// (driver.BatchColumn), or a scratch column that only checks them.
type appender interface {
	// Append appends a slice of values.
	Append(v any) error
	// AppendRow appends one value.
	AppendRow(v any) error
}

// scratch is a column of the client outside any batch: values appended to
// it are checked as the batch's column checks them, and go nowhere.
type scratch struct{ col column.Interface }

func (s scratch) Append(v any) error {
	_, err := s.col.Append(v)
	return err
}

func (s scratch) AppendRow(v any) error { return s.col.AppendRow(v) }

// newScratch returns a scratch column of ClickHouse type typ.
func newScratch(name, typ string) (appender, error) {
	col, err := column.Type(typ).Column(name, &column.ServerContext{Timezone: time.UTC})
	if err != nil {
		return nil, fmt.Errorf("column %s of type %s: %w", name, typ, err)
	}
	return scratch{col}, nil
}

// slicer is an insert column's typed values: schema.Values, or the values
// walhouse adds (typed).
type slicer interface {
	Slice(from, to int) any
}

// typed is a column of values that need no conversion.
type typed[T any] []T

func (t typed[T]) Slice(from, to int) any { return []T(t[from:to]) } // the client switches on []T

// rowValue is a value appended on its own: record index and value.
type rowValue struct {
	index int
	value any
}

// builtColumn is one insert column, converted: vals holds the values of the
// records not in rows, in record order.
type builtColumn struct {
	name string
	vals slicer // nil when every value is in rows
	rows []rowValue
	// clamped counts the values set to their type's bound (a layout's
	// on_overflow clamp), for the writer's metric once the insert is in.
	clamped int
}

// fault is the first record of a batch that cannot be loaded.
type fault struct {
	index int
	err   error
}

// chunk is how many records buildColumns converts one column of before
// the next column: few enough that the records stay in the CPU's cache
// from one column to the next.
const chunk = 256

// buildColumns converts recs, fills being their recovered unchanged TOAST
// values, into tg's insert columns (as tg.insertColumns lists them). It
// returns the first record that cannot be loaded because a value does not
// convert, or nil; the columns then hold the values of the records before
// it (and maybe more).
func buildColumns(tg *target, recs []*record.Record, fills filled) ([]builtColumn, *fault) {
	t := tg.table
	n := len(recs)
	cols := make([]builtColumn, 0, len(tg.columns)+4)
	if t.TenantSynthetic {
		tenants := make(typed[string], n)
		for i, r := range recs {
			tenants[i] = r.TenantID
		}
		cols = append(cols, builtColumn{name: t.TenantColumn, vals: tenants})
	}
	source := make([]sourceColumn, len(tg.columns))
	for ci, c := range tg.columns {
		b := &source[ci]
		b.name, b.typ, b.clamps = c.Name, c.Type, c.Type.Clamps()
		b.key = t.Columns[ci].Source.Key || t.Columns[ci].Name == t.TenantColumn
		b.ranged = b.key && c.Type.Ranged()
		if vals, ok := c.Type.NewValues(n); ok {
			b.values, b.vals = vals, vals
		}
	}
	var first *fault
	limit := n // the records that may still matter: those before the first fault
	for lo := 0; lo < limit; lo += chunk {
		for ci := range source {
			if f := source[ci].convert(recs, lo, min(lo+chunk, limit), ci, fills); f != nil {
				c := t.Columns[ci]
				first = &fault{f.index, fmt.Errorf("%w: record %s, column %s (%s → %s): %v", sink.ErrPermanent, recs[f.index].EventID, c.Name, c.Source.Type, source[ci].typ.DDL, f.err)}
				limit = f.index
			}
		}
	}
	for _, b := range source {
		cols = append(cols, b.builtColumn)
	}
	versions := make(typed[uint64], n)
	deleted := make(typed[uint8], n)
	commits := make(typed[time.Time], n)
	for i, r := range recs {
		versions[i], commits[i] = r.Version, r.OccurredAt
		if r.Op == record.Delete {
			deleted[i] = 1
		}
	}
	cols = append(cols,
		builtColumn{name: schema.VersionColumn, vals: versions},
		builtColumn{name: schema.DeletedColumn, vals: deleted},
		builtColumn{name: schema.CommitColumn, vals: commits})
	return cols, first
}

// sourceColumn is an insert column that holds a source column, while it is
// converted.
type sourceColumn struct {
	builtColumn
	typ    schema.Type   // what values are converted for
	values schema.Values // nil for an array
	clamps bool          // typ.Clamps(), asked once rather than per value
	key    bool          // a key or tenant column: NULL is no value for it
	ranged bool          // a key date or timestamp, or array of them: asked typ.OutOfRange of each value
}

// convert converts the values of records lo..hi-1, the source column at
// index ci of each, into the column. It stops at the first value that does
// not convert.
func (b *sourceColumn) convert(recs []*record.Record, lo, hi, ci int, fills filled) *fault {
	for i := lo; i < hi; i++ {
		v := recs[i].Values[ci]
		switch {
		case v.Unchanged:
			if x, ok := fills[i][ci]; ok && x != nil {
				b.rows = append(b.rows, rowValue{i, x})
			} else {
				b.null(i) // a row never loaded before
			}
		case v.Null:
			b.null(i)
		case b.values == nil:
			x, err := b.typ.Convert(v.Text)
			if err != nil {
				return &fault{i, err}
			}
			if x == nil && b.key {
				return &fault{i, errKeyNotHeld}
			}
			if b.ranged && b.typ.OutOfRange(v.Text) {
				return &fault{i, keyOutOfRange(v.Text)} // an array holding such a date: one key with others
			}
			b.rows = append(b.rows, rowValue{i, x})
		default:
			held, err := b.values.Append(v.Text)
			if err != nil {
				return &fault{i, err}
			}
			if !held {
				if b.key {
					return &fault{i, errKeyNotHeld}
				}
				b.rows = append(b.rows, rowValue{i, nil}) // NULL in a column that cannot hold it
			}
			if b.ranged && b.typ.OutOfRange(v.Text) {
				return &fault{i, keyOutOfRange(v.Text)}
			}
			if b.clamps && b.typ.Clamped(v.Text) {
				b.clamped++
			}
		}
	}
	return nil
}

// errKeyNotHeld fails a record whose key holds a value its ClickHouse type
// has no place for (numeric NaN or ±Infinity in a Decimal): stored as the
// type's default, the row would take the place of the row whose key that
// default is. A key column keeps walhouse's mapping (no layout override),
// so the fix is in PostgreSQL.
var errKeyNotHeld = errors.New("a key value its ClickHouse type cannot hold (numeric NaN or ±Infinity): stored as the type's default it would overwrite another row; change the key in PostgreSQL to a number, or exclude the table (a key column keeps walhouse's mapping: no layout override holds it)")

// errKeyOutOfRange fails a record whose key holds a date or timestamp
// beyond the range ClickHouse holds (schema.Type.OutOfRange): stored as
// the range's bound, as a value outside a key is, the row would share its
// place with every other row whose key is beyond that bound, and FINAL
// would show one of them.
var errKeyOutOfRange = errors.New("a key date or timestamp beyond the range ClickHouse holds")

// keyOutOfRange is errKeyOutOfRange for the key value text, with the
// range and the fix.
func keyOutOfRange(text string) error {
	return fmt.Errorf("%w (%q; dates 1900-01-01 to 2299-12-31, timestamps 1900-01-01 00:00:00 to 2262-04-11 23:47:16.854775 UTC; infinity, -infinity and BC dates are beyond it): stored as the range's bound, it would share one row with every other key beyond that bound; change the value in PostgreSQL to one within the range, or exclude the table (a key column keeps walhouse's mapping: no layout override holds it)", errKeyOutOfRange, text)
}

// null appends SQL NULL for record i: nil, or for an array an empty one.
func (b *sourceColumn) null(i int) {
	if b.values == nil || !b.values.AppendNull() {
		b.rows = append(b.rows, rowValue{i, b.typ.Null()})
	}
}

// appendColumns appends cols, as buildColumns made them from recs with
// first, its fault, to dst (an appender per insert column, in order), up
// to the first record that cannot be loaded, which it returns (nil when
// every record was appended). Once dst refused a value the batch is spent,
// so the later columns are checked in scratch columns, for a record before
// it that another column refuses.
func (tg *target) appendColumns(dst []appender, cols []builtColumn, recs []*record.Record, first *fault) *fault {
	limit := len(recs)
	if first != nil {
		limit = first.index
	}
	spent := false
	for p, b := range cols {
		out := dst[p]
		if spent {
			s, err := newScratch(b.name, tg.insert[p].Type)
			if err != nil {
				return first // not to be: the batch made its column of this type
			}
			out = s
		}
		bad, err := b.appendTo(out, tg.insert[p].Type, limit)
		if err != nil {
			r := recs[bad]
			first = &fault{bad, fmt.Errorf("%w: record %s, column %s: %v", sink.ErrPermanent, r.EventID, b.name, err)}
			limit, spent = bad, true
		}
	}
	return first
}

// appendTo appends the column's values of the records before limit to out,
// typ being the column's ClickHouse type. It returns the first record whose
// value out refused, and the refusal.
func (b builtColumn) appendTo(out appender, typ string, limit int) (bad int, err error) {
	rec, pos := 0, 0 // the next record, and its position in vals
	flush := func(to int) error {
		if to == rec {
			return nil
		}
		k := to - rec
		if err := out.Append(b.vals.Slice(pos, pos+k)); err != nil {
			j, perr := b.probe(typ, pos, k)
			bad = rec + j
			return cmp.Or(perr, err)
		}
		rec, pos = to, pos+k
		return nil
	}
	for _, rv := range b.rows {
		if rv.index >= limit {
			break
		}
		if err := flush(rv.index); err != nil {
			return bad, err
		}
		if err := out.AppendRow(rv.value); err != nil {
			return rv.index, err
		}
		rec = rv.index + 1
	}
	if err := flush(limit); err != nil {
		return bad, err
	}
	return 0, nil
}

// probe finds which of the k values from position pos of vals the client
// refuses, appending them one by one to a scratch column of type typ: the
// first refused (j counts from pos) and the refusal. When none is refused
// alone, it blames the first.
func (b builtColumn) probe(typ string, pos, k int) (j int, err error) {
	s, serr := newScratch(b.name, typ)
	if serr != nil {
		return 0, nil
	}
	for j := range k {
		if err := s.Append(b.vals.Slice(pos+j, pos+j+1)); err != nil {
			return j, err
		}
	}
	return 0, nil
}
