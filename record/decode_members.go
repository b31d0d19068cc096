package record

import "fmt"

// This file holds what Decode reads of a record's data: the members of
// payload and key, exactly unescaped because their names are compared with
// column names, the unchanged list, and their alignment with the columns
// (values, columnLookup). decode.go reads the top-level fields and
// assembles the Record; decode_columns.go reads source and columns.

// readMembers reads the payload or key object into dst and reports whether
// it was given (as an object, even an empty one): null and absence are
// alike, as encoding/json left the map nil for both. Names are unescaped
// into names, exactly: they are compared with column names. Values are
// strings, unescaped into keep, or null.
func (d *decoder) readMembers(s *scanner, dst []member, field string) ([]member, bool, error) {
	if given, err := s.open('{', field, "an object"); !given {
		return dst, false, err
	}
	for first := true; ; first = false {
		more, err := s.more(first, '}')
		if err != nil || !more {
			return dst, true, err
		}
		if len(dst) == MaxColumns {
			return dst, true, fmt.Errorf("%w: %s has more than %d members", ErrOverBudget, field, MaxColumns)
		}
		var m member
		m.name.start = len(d.names)
		if d.names, err = s.appendName(d.names, field); err != nil {
			return dst, true, err
		}
		m.name.end = len(d.names)
		m.text.start = len(d.keep)
		var ok bool
		if d.keep, m.null, ok = s.appendString(d.keep); !ok {
			return dst, true, s.valueError(fmt.Sprintf("%s %q", field, m.name.in(d.names)), "a string or null")
		}
		m.text.end = len(d.keep)
		dst = append(dst, m)
	}
}

// readUnchanged reads the names of unchanged columns into d.unchanged. A
// null among them is the empty name, as encoding/json left a null element
// of a []string.
func (d *decoder) readUnchanged(s *scanner) error {
	if given, err := s.open('[', "unchanged", "an array"); !given {
		return err
	}
	for first := true; ; first = false {
		more, err := s.more(first, ']')
		if err != nil || !more {
			return err
		}
		if len(d.unchanged) == MaxColumns {
			return fmt.Errorf("%w: unchanged has more than %d names", ErrOverBudget, MaxColumns)
		}
		start := len(d.names)
		var ok bool
		if d.names, _, ok = s.appendString(d.names); !ok {
			return s.valueError("unchanged[]", "a string")
		}
		d.unchanged = append(d.unchanged, span{start, len(d.names)})
	}
}

// values aligns the members of a payload (or, with keysOnly, of a key)
// with the columns. Every column must be given or listed as unchanged; with
// keysOnly, absent non-key columns are null.
//
// Names are found without a map where capture's column order allows (see
// columnLookup). They are unique: every registry entry passed
// ValidateColumns, and a version 1 record that repeats a name fails
// Validate. The old decoder's map gave a repeated name's value to the last
// of its columns, and this lookup to one of them; only a Schemas that
// returns a schema no registry entry can be would see the difference.
func (d *decoder) values(cols []Column, members []member, unchanged []span, text string, keysOnly bool) ([]Value, error) {
	out := make([]Value, len(cols))
	if cap(d.assigned) < len(cols) {
		d.assigned = make([]bool, len(cols))
	}
	assigned := d.assigned[:len(cols)]
	clear(assigned)
	lookup := columnLookup{cols: cols}
	for _, m := range members {
		name := m.name.in(d.names)
		i := lookup.find(name)
		if i < 0 {
			return nil, fmt.Errorf("%w: payload column %q is not among the columns", ErrInvalid, name)
		}
		if assigned[i] {
			return nil, fmt.Errorf("%w: payload names column %q twice", ErrInvalid, name)
		}
		assigned[i] = true
		if m.null {
			out[i].Null = true
		} else {
			out[i].Text = m.text.of(text)
		}
	}
	lookup.next = 0
	for _, u := range unchanged {
		name := u.in(d.names)
		i := lookup.find(name)
		if i < 0 {
			return nil, fmt.Errorf("%w: unchanged column %q is not among the columns", ErrInvalid, name)
		}
		if assigned[i] {
			return nil, fmt.Errorf("%w: column %q is both in payload and unchanged", ErrInvalid, name)
		}
		out[i].Unchanged = true
	}
	for i, c := range cols {
		if assigned[i] || out[i].Unchanged {
			continue
		}
		if keysOnly && !c.Key {
			out[i].Null = true
			continue
		}
		return nil, fmt.Errorf("%w: column %q is missing from the payload", ErrInvalid, c.Name)
	}
	return out, nil
}

// columnLookup finds columns by name: first among the few columns after
// the last one found (capture writes members in column order, leaving out
// unchanged and, in a key, non-key columns), then by a scan, and once a few
// scans were needed (or at once for a wide relation) by a map from name to
// position, so that no order of names costs quadratic time.
type columnLookup struct {
	cols  []Column
	next  int            // the position after the last column found
	scans int            // scans so far
	index map[string]int // built on first need
}

const (
	// columnWindow is how many columns find tries after the last one found.
	columnWindow = 8
	// maxColumnScans is how many scans find makes before it builds the
	// index, and maxScannedColumns the widest relation it scans at all.
	maxColumnScans    = 4
	maxScannedColumns = 64
)

func (l *columnLookup) find(name []byte) int {
	for i := l.next; i < len(l.cols) && i < l.next+columnWindow; i++ {
		if l.cols[i].Name == string(name) {
			l.next = i + 1
			return i
		}
	}
	if l.scans < maxColumnScans && len(l.cols) <= maxScannedColumns {
		l.scans++
		for i := range l.cols {
			if l.cols[i].Name == string(name) {
				l.next = i + 1
				return i
			}
		}
		return -1
	}
	if l.index == nil {
		l.index = make(map[string]int, len(l.cols))
		for i := len(l.cols) - 1; i >= 0; i-- {
			l.index[l.cols[i].Name] = i // the first of equal names, as a scan finds
		}
	}
	i, ok := l.index[string(name)]
	if !ok {
		return -1
	}
	l.next = i + 1
	return i
}
