package record

import (
	"fmt"

	"github.com/valyala/fastjson"
)

// This file holds what Decode reads of a record's data: the members of
// payload and key, exactly unescaped because their names are compared with
// column names, the unchanged list, and their alignment with the columns
// (values, columnLookup). decode.go reads the top-level fields and
// assembles the Record; decode_columns.go reads source and columns.

// readMembers reads the payload or key object into dst and reports whether
// it was given (as an object, even an empty one): null and absence are
// alike, as encoding/json left the map nil for both.
//
// The object's text as it was on the wire (which fastjson's MarshalTo gives
// for an object whose names it has not unescaped yet) is read by
// readObjectMembers, because the names must be unescaped exactly: they are
// compared with column names.
func (d *decoder) readMembers(v *fastjson.Value, dst []member, field string) ([]member, bool, error) {
	if v == nil {
		return dst, false, nil
	}
	switch v.Type() {
	case fastjson.TypeNull:
		return dst, false, nil
	case fastjson.TypeObject:
	default:
		return dst, false, typeError(field, v, "an object")
	}
	d.tok = v.MarshalTo(d.tok[:0])
	dst, err := d.readObjectMembers(d.tok, dst, field)
	return dst, true, err
}

// readObjectMembers reads `{"name":"text"|null,…}` as fastjson writes a
// flat object it parsed: no white space, each name and string as it was on
// the wire. Names are unescaped into names, texts into keep; any other
// value is a type error.
func (d *decoder) readObjectMembers(tok []byte, dst []member, field string) ([]member, error) {
	// fastjson wrote tok from what it parsed, so its shape holds; the
	// checks keep a surprise from becoming a panic.
	bad := func() error { return fmt.Errorf("%w: %s: unexpected object text %q", ErrInvalid, field, excerpt(tok)) }
	if len(tok) < 2 || tok[0] != '{' {
		return dst, bad()
	}
	if tok[1] == '}' {
		return dst, nil
	}
	for i := 1; ; {
		if tok[i] != '"' {
			return dst, bad()
		}
		var m member
		m.name.start = len(d.names)
		var end int
		var ok bool
		if d.names, end, ok = appendUnquoted(d.names, tok[i+1:]); !ok {
			return dst, fmt.Errorf("%w: %s has a name that is not a valid JSON string: %q", ErrInvalid, field, excerpt(tok[i:]))
		}
		m.name.end = len(d.names)
		i += end + 2
		if i+1 >= len(tok) || tok[i] != ':' {
			return dst, bad()
		}
		i++
		next, ok := d.readText(tok, i, &m)
		switch {
		case !ok && tok[i] == '"':
			return dst, fmt.Errorf("%w: %s %q is not a valid JSON string: %q", ErrInvalid, field, m.name.in(d.names), excerpt(tok[i:]))
		case !ok:
			return dst, fmt.Errorf("%w: %s %q is %s, want a string or null", ErrInvalid, field, m.name.in(d.names), kindOf(tok[i:]))
		}
		i = next
		dst = append(dst, m)
		if i >= len(tok) {
			return dst, bad()
		}
		switch tok[i] {
		case '}':
			return dst, nil
		case ',':
			if i++; i >= len(tok) {
				return dst, bad()
			}
		default:
			return dst, bad()
		}
	}
}

// readText reads the value at tok[i] as fastjson writes it back: a string,
// unescaped into keep and spanned by m.text, or null (m.null). It returns
// the position after the value, and false for any other value or a string
// that is not valid JSON.
func (d *decoder) readText(tok []byte, i int, m *member) (int, bool) {
	switch {
	case i < len(tok) && tok[i] == '"':
		m.text.start = len(d.keep)
		var end int
		var ok bool
		if d.keep, end, ok = appendUnquoted(d.keep, tok[i+1:]); !ok {
			return i, false
		}
		m.text.end = len(d.keep)
		return i + end + 2, true
	case len(tok)-i >= 4 && string(tok[i:i+4]) == "null":
		m.null = true
		return i + 4, true
	}
	return i, false
}

// readUnchanged reads the names of unchanged columns into d.unchanged. A
// null among them is the empty name, as encoding/json left a null element
// of a []string.
func (d *decoder) readUnchanged(v *fastjson.Value) error {
	if v == nil {
		return nil
	}
	switch v.Type() {
	case fastjson.TypeNull:
		return nil
	case fastjson.TypeArray:
	default:
		return typeError("unchanged", v, "an array")
	}
	items, _ := v.Array()
	for _, item := range items {
		start := len(d.names)
		var err error
		if d.names, _, err = d.appendString(d.names, item, "unchanged[]"); err != nil {
			return err
		}
		d.unchanged = append(d.unchanged, span{start, len(d.names)})
	}
	return nil
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
