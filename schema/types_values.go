package schema

// Values collects the values of one scalar column of an insert, converted
// from PostgreSQL's text exactly as Convert converts them, in the slice that
// clickhouse-go's column Append takes as it is: []T for a column that is
// not Nullable, []*T with nil for NULL for a Nullable one (T is the Go type
// Convert returns for the column). Converting a column into one typed slice
// spares boxing every value into an any and the client's type switches per
// row. Not safe for concurrent use.
type Values interface {
	// Append converts text (a value, never NULL) and appends it. Its error
	// is Convert's. It returns false, appending nothing, for a value that
	// converts to SQL NULL (numeric's NaN) when the column is not Nullable:
	// the caller appends Convert's nil for it, as the client does.
	Append(text string) (bool, error)
	// AppendNull appends SQL NULL; false, appending nothing, when the
	// column is not Nullable.
	AppendNull() bool
	// Slice returns the values appended from..to-1 (counting from 0), as
	// the []T or []*T described above; it shares their memory.
	Slice(from, to int) any
}

// NewValues returns the Values of a scalar column of type t with room for
// n values. An array column has none (ok false): the client reads a slice
// of arrays by reflection anyway, so its values go row by row, as Convert
// returns them.
func (t Type) NewValues(n int) (v Values, ok bool) {
	if t.array {
		return nil, false
	}
	return scalars[t.kind].conv.values(t, n), true
}

// values is the Values of a kind whose parser returns T.
type values[T any] struct {
	typ   Type
	parse func(t Type, s string) (v T, ok bool, err error)
	vals  []T
	// ptrs, for a Nullable column, points into vals, nil for NULL (a value
	// is never written again, so a pointer holds even where more than n
	// values made append move vals). A Nullable column
	// gets a []*T even without NULLs: clickhouse-go's Nullable takes the
	// NULL flags of a []T from its base column, and Bool's reports none
	// (v2.50.0), which would misalign the column.
	ptrs     []*T
	nullable bool
}

func newValues[T any](t Type, parse func(Type, string) (T, bool, error), n int) *values[T] {
	v := &values[T]{typ: t, parse: parse, vals: make([]T, 0, n), nullable: t.nullable()}
	if v.nullable {
		v.ptrs = make([]*T, 0, n)
	}
	return v
}

func (v *values[T]) Append(text string) (bool, error) {
	x, ok, err := v.parse(v.typ, text)
	if err != nil {
		return false, err
	}
	if !ok {
		return v.AppendNull(), nil
	}
	v.vals = append(v.vals, x)
	if v.nullable {
		v.ptrs = append(v.ptrs, &v.vals[len(v.vals)-1])
	}
	return true, nil
}

func (v *values[T]) AppendNull() bool {
	if !v.nullable {
		return false
	}
	v.ptrs = append(v.ptrs, nil)
	return true
}

func (v *values[T]) Slice(from, to int) any {
	if v.nullable {
		return v.ptrs[from:to]
	}
	return v.vals[from:to]
}
