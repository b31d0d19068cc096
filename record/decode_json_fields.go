package record

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// The members of an object matched to the fields of the struct
// encoding/json read it into: each name exactly as capture writes it where
// it usually comes, else as encoding/json matched a name (exactly, then by
// case folding), each field at most once.

// fieldSet holds the fields of an object given so far, by position.
type fieldSet uint32

func (f fieldSet) has(i int) bool { return f&(1<<i) != 0 }

// object describes the fields of one kind of object: a struct of the old
// wire form, which encoding/json read.
type object struct {
	where  string   // the object, for errors
	names  []string // at most 32
	quoted []string // each name as a member starts with it: "name":
}

// newObject describes the object where with the fields names.
func newObject(where string, names []string) *object {
	o := &object{where: where, names: names}
	for _, name := range names {
		o.quoted = append(o.quoted, `"`+name+`":`)
	}
	return o
}

// The objects of a record.
var (
	recordObject = newObject("record", recordFields[:])
	sourceObject = newObject("source", sourceFields[:])
	columnObject = newObject("column", columnFields[:])
)

// fields reads the members of one object, each one of its fields; the
// caller reads each value.
type fields struct {
	*object
	given fieldSet
	hint  int // where the next name usually is
	first bool
}

// newFields starts reading an object o whose '{' has been read.
func newFields(o *object) fields {
	return fields{object: o, first: true}
}

// next reads the next member's name and returns the field's position, -1
// at the end of the object. It rejects a name that is not a field and a
// field given twice. A name matches as encoding/json matched a struct
// field: exactly, else by Unicode case folding (see fieldIndex).
//
// encoding/json took the last of two equal names (and merged objects and
// arrays given twice); Decode rejects the record instead: capture never
// writes a name twice, and a record that does may be read differently by
// different readers.
func (f *fields) next(s *scanner, buf *[]byte) (int, error) {
	if i, ok := f.expected(s); ok {
		return i, nil
	}
	more, err := s.more(f.first, '}')
	if err != nil || !more {
		return -1, err
	}
	f.first = false
	key, err := s.name(buf, f.where)
	if err != nil {
		return -1, err
	}
	i := fieldIndex(f.names, key, f.hint)
	switch {
	case i < 0:
		return -1, fmt.Errorf("%w: %s has an unknown field %q", ErrInvalid, f.where, excerpt(key))
	case f.given.has(i):
		return -1, fmt.Errorf("%w: %s has field %q twice", ErrInvalid, f.where, f.names[i])
	}
	f.given |= 1 << i
	f.hint = i + 1
	return i, nil
}

// expected reads `,"name":` (without the comma for the first member) for
// the field that usually comes next, as capture writes it: no white space,
// the name spelt exactly, so that it needs no unescaping or search. It
// reads nothing and reports false when that does not come.
func (f *fields) expected(s *scanner) (int, bool) {
	i := f.hint
	if i >= len(f.names) || f.given.has(i) {
		return 0, false
	}
	quoted := f.quoted[i]
	p := s.pos // at the comma, or at the name's quote
	if !f.first {
		if p >= len(s.data) || s.data[p] != ',' {
			return 0, false
		}
		p++
	}
	end := p + len(quoted)
	if end > len(s.data) || string(s.data[p:end]) != quoted {
		return 0, false
	}
	s.pos = end
	f.first = false
	f.given |= 1 << i
	f.hint = i + 1
	return i, true
}

// fieldIndex returns the position of key among names, -1 when it is not
// there. Like encoding/json it takes an exact match, else one that ignores
// case by Unicode simple folding (so "EVENTID" and, with U+017F LATIN SMALL
// LETTER LONG S, "ſchemaId" name eventId and schemaId). names are ASCII
// letters and distinct under folding, so the two rules cannot disagree on
// which one a key names. The search starts at hint, where the next name
// usually is.
func fieldIndex(names []string, key []byte, hint int) int {
	for i := hint; i < len(names); i++ {
		if names[i] == string(key) {
			return i
		}
	}
	for i := 0; i < hint && i < len(names); i++ {
		if names[i] == string(key) {
			return i
		}
	}
	for i, name := range names {
		if foldsTo(key, name) {
			return i
		}
	}
	return -1
}

// foldsTo reports whether key equals the ASCII name under encoding/json's
// folding: ASCII letters regardless of case, and any other rune that folds
// to the name's letter.
func foldsTo(key []byte, name string) bool {
	j := 0
	for i := 0; i < len(key); j++ {
		if j >= len(name) {
			return false
		}
		want := upperASCII(name[j])
		if c := key[i]; c < utf8.RuneSelf {
			if upperASCII(c) != want {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(key[i:])
		if f := foldRune(r); f != rune(want) {
			return false
		}
		i += n
	}
	return j == len(name)
}

func upperASCII(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

// foldRune returns the smallest rune of r's case folding orbit, as
// encoding/json folds field names.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}
