package record

import (
	"fmt"
	"unsafe"
)

// The scanner of decode_json*.go reads a record's JSON in one pass, front to
// back, straight into the decoder's buffers, with the rules of
// encoding/json, which Decode used before: the same syntax, the same
// unescaping, the same matching of names and the same types and ranges for
// each field. A record's shape is fixed, so the scanner never has to skip
// a value it does not know, nor recurse: where the shape has no object or
// array, one is a type error, and no input can make it loop or exhaust the
// stack.
//
// This file holds the scanner, the punctuation of objects and arrays, and
// its errors; decode_json_strings.go its strings (names and values),
// decode_json_scalars.go its numbers, booleans and times, and
// decode_json_fields.go the matching of member names to fields.

// scanner reads one JSON text.
type scanner struct {
	data []byte
	pos  int // the next byte to read
}

// peek skips white space and returns the next byte, 0 at the end of the
// data (a 0 byte is never valid outside a string, so the two need no
// telling apart except in errors).
func (s *scanner) peek() byte {
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		if c > ' ' || c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c
		}
		s.pos++
	}
	return 0
}

// literal reads word (true, false or null) if it comes next.
func (s *scanner) literal(word string) bool {
	s.peek()
	if len(s.data)-s.pos >= len(word) && string(s.data[s.pos:s.pos+len(word)]) == word {
		s.pos += len(word)
		return true
	}
	return false
}

// open reads the start of an object or array (c is '{' or '['), or null
// in its place: it reports whether the value was given, and a type error
// for any other value.
func (s *scanner) open(c byte, field, want string) (bool, error) {
	switch s.peek() {
	case c:
		s.pos++
		return true, nil
	case 'n':
		if s.literal("null") {
			return false, nil
		}
	}
	return false, s.typeError(field, want)
}

// more moves to the next member or element of the object or array whose
// start (first) or previous value has been read: it reads the ',' before
// it and reports true, or reads end and reports false. A ',' before end is
// caught by the caller, who then finds end where a name or value must be.
func (s *scanner) more(first bool, end byte) (bool, error) {
	if !first && s.pos < len(s.data) && s.data[s.pos] == ',' {
		s.pos++ // the usual case: no white space
		return true, nil
	}
	c := s.peek()
	if c == end {
		s.pos++
		return false, nil
	}
	if !first {
		if c != ',' {
			return false, s.syntaxError(fmt.Sprintf("',' or '%c'", end))
		}
		s.pos++
	}
	return true, nil
}

// colon reads the ':' after a member's name.
func (s *scanner) colon() error {
	if s.pos < len(s.data) && s.data[s.pos] == ':' {
		s.pos++ // the usual case: no white space
		return nil
	}
	if s.peek() != ':' {
		return s.syntaxError("':'")
	}
	s.pos++
	return nil
}

// syntaxError reports that the data is not JSON where s is: want is what
// could have come.
func (s *scanner) syntaxError(want string) error {
	return fmt.Errorf("%w: not valid JSON at byte %d: want %s, found %s", ErrInvalid, s.pos, want, s.found())
}

// typeError reports that field holds a value of the wrong JSON type.
func (s *scanner) typeError(field, want string) error {
	return fmt.Errorf("%w: %s is %s, want %s", ErrInvalid, field, s.kind(), want)
}

// valueError is typeError, except that a string that is not valid JSON is
// said to be that.
func (s *scanner) valueError(field, want string) error {
	if s.peek() == '"' {
		return fmt.Errorf("%w: %s is not a valid JSON string: %q", ErrInvalid, field, excerpt(s.data[s.pos:]))
	}
	return s.typeError(field, want)
}

// kind names the JSON type of the value at s, for errors.
func (s *scanner) kind() string {
	c := s.peek()
	rest := s.data[s.pos:]
	switch {
	case s.pos == len(s.data):
		return "missing (the data ends)"
	case c == '"':
		return "a string"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '-' || '0' <= c && c <= '9':
		n := 0
		for n < len(rest) && isNumberByte(rest[n]) {
			n++
		}
		return fmt.Sprintf("the number %q", excerpt(rest[:n]))
	}
	for _, word := range [...]string{"true", "false", "null"} {
		if len(rest) >= len(word) && string(rest[:len(word)]) == word {
			if word == "null" {
				return "null"
			}
			return "a boolean"
		}
	}
	return "not JSON: " + s.found()
}

// found quotes the data at s, for errors.
func (s *scanner) found() string {
	if s.pos >= len(s.data) {
		return "the end of the data"
	}
	return fmt.Sprintf("%q", excerpt(s.data[s.pos:]))
}

// excerpt cuts a wire value for an error message: enough to find it.
func excerpt(tok []byte) []byte {
	if len(tok) > 64 {
		return tok[:64]
	}
	return tok
}

// transient returns b as a string without copying, for a call that keeps
// nothing of it: the string changes when b's buffer is reused.
func transient(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
