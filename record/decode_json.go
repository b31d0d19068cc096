package record

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// The scanner in this file reads a record's JSON in one pass, front to
// back, straight into the decoder's buffers, with the rules of
// encoding/json, which Decode used before: the same syntax, the same
// unescaping, the same matching of names and the same types and ranges for
// each field. A record's shape is fixed, so the scanner never has to skip
// a value it does not know, nor recurse: where the shape has no object or
// array, one is a type error, and no input can make it loop or exhaust the
// stack.

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

// name reads a member's name and the ':' after it. The name is unescaped:
// a slice of data when it has no escapes, else of *buf.
func (s *scanner) name(buf *[]byte, where string) ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.syntaxError("a member name")
	}
	start := s.pos + 1
	end := plainEnd(s.data, start)
	var key []byte
	if end < len(s.data) && s.data[end] == '"' {
		key = s.data[start:end]
		s.pos = end + 1
	} else {
		var ok bool
		if *buf, end, ok = appendUnquoted((*buf)[:0], s.data[start:]); !ok {
			return nil, fmt.Errorf("%w: %s has a name that is not a valid JSON string: %q", ErrInvalid, where, excerpt(s.data[s.pos:]))
		}
		key = *buf
		s.pos = start + end + 1
	}
	return key, s.colon()
}

// appendName reads a member's name and the ':' after it, appending the
// name to dst unescaped.
func (s *scanner) appendName(dst []byte, field string) ([]byte, error) {
	if p := s.pos; p < len(s.data) && s.data[p] == '"' {
		if end := plainEnd(s.data, p+1); end+1 < len(s.data) && s.data[end] == '"' && s.data[end+1] == ':' {
			s.pos = end + 2 // the usual case: nothing to unescape, no white space
			return append(dst, s.data[p+1:end]...), nil
		}
	}
	if s.peek() != '"' {
		return dst, s.syntaxError("a member name")
	}
	dst, end, ok := appendUnquoted(dst, s.data[s.pos+1:])
	if !ok {
		return dst, fmt.Errorf("%w: %s has a name that is not a valid JSON string: %q", ErrInvalid, field, excerpt(s.data[s.pos:]))
	}
	s.pos += end + 2
	return dst, s.colon()
}

// appendString reads a string, appending it to dst unescaped, or null
// (then dst is unchanged and null true). It reports false, having read
// nothing, for any other value or a string that is not valid JSON (see
// valueError).
func (s *scanner) appendString(dst []byte) (out []byte, null, ok bool) {
	switch s.peek() {
	case '"':
		start := s.pos + 1
		plain := plainEnd(s.data, start)
		out = append(dst, s.data[start:plain]...)
		if plain < len(s.data) && s.data[plain] == '"' {
			s.pos = plain + 1 // the usual case: nothing to unescape
			return out, false, true
		}
		if out, ok = s.unescape(out, plain); !ok {
			return dst, false, false
		}
		return out, false, true
	case 'n':
		if s.literal("null") {
			return dst, true, true
		}
	}
	return dst, false, false
}

// unescape appends the rest of the string at s, from data[from] on (its
// plain prefix read already), to dst unescaped and reads it; it reports
// false, having read nothing, when the string is not valid JSON.
func (s *scanner) unescape(dst []byte, from int) ([]byte, bool) {
	out, end, ok := appendUnquoted(dst, s.data[from:])
	if ok {
		s.pos = from + end + 1
	}
	return out, ok
}

// readString appends the string at s to *dst and returns where it is; null
// is the empty string, as encoding/json left a string field untouched by
// null (and as an absent field is).
func (s *scanner) readString(dst *[]byte, field string) (span, error) {
	start := len(*dst)
	out, _, ok := s.appendString(*dst)
	if !ok {
		return span{}, s.valueError(field, "a string")
	}
	*dst = out
	return span{start, len(out)}, nil
}

// readChecked reads a string that is only checked, not kept: a slice of
// data when it has no escapes, else unescaped onto *buf (a slice of which
// stays valid as *buf grows: append never changes what it has written).
// null is the empty string.
func (s *scanner) readChecked(buf *[]byte, field string) ([]byte, error) {
	switch s.peek() {
	case '"':
		start := s.pos + 1
		plain := plainEnd(s.data, start)
		if plain < len(s.data) && s.data[plain] == '"' {
			s.pos = plain + 1
			return s.data[start:plain], nil
		}
		n := len(*buf)
		if out, ok := s.unescape(append(*buf, s.data[start:plain]...), plain); ok {
			*buf = out
			return out[n:], nil
		}
	case 'n':
		if s.literal("null") {
			return nil, nil
		}
	}
	return nil, s.valueError(field, "a string")
}

// readInt reads a signed integer of the given bit size; null is 0. Like
// encoding/json into an int field, it takes only a JSON number without
// fraction or exponent, in range.
func (s *scanner) readInt(bits int, field string) (int64, error) {
	tok, null, err := s.number(field)
	if null || err != nil {
		return 0, err
	}
	if len(tok) > 1 && tok[0] == '-' {
		if n, ok := smallUint(tok[1:]); ok && n <= 1<<(bits-1) {
			return -int64(n), nil
		}
	} else if n, ok := smallUint(tok); ok && n <= 1<<(bits-1)-1 {
		return int64(n), nil
	}
	if isJSONInteger(tok, true) {
		if n, err := strconv.ParseInt(transient(tok), 10, bits); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: %s is the number %q, want an integer that fits %d bits", ErrInvalid, field, excerpt(tok), bits)
}

// readUint is readInt for an unsigned integer: a minus sign, even in -0,
// is rejected, as strconv.ParseUint rejected it for encoding/json.
func (s *scanner) readUint(bits int, field string) (uint64, error) {
	tok, null, err := s.number(field)
	if null || err != nil {
		return 0, err
	}
	if n, ok := smallUint(tok); ok && n <= 1<<bits-1 {
		return n, nil
	}
	if isJSONInteger(tok, false) {
		if n, err := strconv.ParseUint(transient(tok), 10, bits); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: %s is the number %q, want an unsigned integer that fits %d bits", ErrInvalid, field, excerpt(tok), bits)
}

// smallUint reads 0|[1-9][0-9]* of at most 19 digits, which always fits
// 64 bits: the numbers of a record, read without strconv's generality.
// It reports false for anything else, which readInt and readUint leave to
// strconv.
func smallUint(tok []byte) (uint64, bool) {
	if len(tok) == 0 || len(tok) > 19 || tok[0] == '0' && len(tok) > 1 {
		return 0, false
	}
	var n uint64
	for _, c := range tok {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// number reads the bytes of a number (any run of the bytes a JSON number
// is made of, checked by the caller) or null.
func (s *scanner) number(field string) (tok []byte, null bool, err error) {
	if s.literal("null") {
		return nil, true, nil
	}
	start := s.pos
	for s.pos < len(s.data) && isNumberByte(s.data[s.pos]) {
		s.pos++
	}
	if s.pos == start {
		return nil, false, s.typeError(field, "a number")
	}
	return s.data[start:s.pos], false, nil
}

func isNumberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// isJSONInteger reports whether tok is -?(0|[1-9][0-9]*) (with signed) or
// 0|[1-9][0-9]*: a valid JSON number that strconv parses as an integer.
// Anything else in a number's place (1.0, 1e0, 01, +1, -) encoding/json
// rejected for an integer field, as invalid JSON or as the wrong type.
func isJSONInteger(tok []byte, signed bool) bool {
	if signed && len(tok) > 1 && tok[0] == '-' {
		tok = tok[1:]
	}
	if len(tok) == 0 || (tok[0] == '0' && len(tok) > 1) {
		return false
	}
	for _, c := range tok {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// readBool reads a bool; null is false.
func (s *scanner) readBool(field string) (bool, error) {
	switch {
	case s.literal("true"):
		return true, nil
	case s.literal("false"), s.literal("null"):
		return false, nil
	}
	return false, s.typeError(field, "a boolean")
}

// readTime reads a time as time.Time.UnmarshalJSON does, which is what
// encoding/json called: on the string as it is on the wire (escapes are not
// decoded, so an escaped character makes the time invalid), RFC 3339. null
// is the zero time.
func (s *scanner) readTime(field string, buf *[]byte) (time.Time, error) {
	var t time.Time
	if s.literal("null") {
		return t, nil
	}
	if s.peek() != '"' {
		// UnmarshalJSON rejects every other value, as not a string.
		return t, s.typeError(field, "a string")
	}
	start := s.pos
	end := plainEnd(s.data, start+1)
	if end >= len(s.data) || s.data[end] != '"' {
		// Escapes or bytes beyond ASCII, which no valid time has; the
		// string is checked as JSON, then given to UnmarshalJSON for its
		// error.
		var ok bool
		if *buf, end, ok = appendUnquoted((*buf)[:0], s.data[start+1:]); !ok {
			return t, s.valueError(field, "a string")
		}
		end += start + 1
	}
	s.pos = end + 1
	if t, ok := parseTimeZ(s.data[start+1 : end]); ok {
		return t, nil
	}
	// encoding/json checked the string's syntax before it called
	// UnmarshalJSON, which parses the raw text; a text that parses as a
	// time holds only digits and the letters and signs of RFC 3339,
	// nothing JSON would reject.
	if err := t.UnmarshalJSON(s.data[start:s.pos]); err != nil {
		return t, fmt.Errorf("%w: %s: %v", ErrInvalid, field, err)
	}
	return t, nil
}

// parseTimeZ parses the form of RFC 3339 capture writes, in UTC with up to
// nine digits of fraction (2006-01-02T15:04:05.999999999Z), to the time
// time.Time.UnmarshalJSON makes of it; it reports false for any other
// text, which UnmarshalJSON is left to read. It is UnmarshalJSON's own
// reading of that form (parseRFC3339 in package time) without the
// generality, and without the copy and the closure calls.
func parseTimeZ(b []byte) (time.Time, bool) {
	const n = len("2006-01-02T15:04:05Z")
	if len(b) < n || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' || b[len(b)-1] != 'Z' {
		return time.Time{}, false
	}
	y1, ok1 := twoDigits(b[0], b[1])
	y2, ok2 := twoDigits(b[2], b[3])
	month, ok3 := twoDigits(b[5], b[6])
	day, ok4 := twoDigits(b[8], b[9])
	hour, ok5 := twoDigits(b[11], b[12])
	minute, ok6 := twoDigits(b[14], b[15])
	sec, ok7 := twoDigits(b[17], b[18])
	year := y1*100 + y2
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) || month < 1 || month > 12 || day < 1 || day > daysIn(time.Month(month), year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	nsec := 0
	if frac := b[n-1 : len(b)-1]; len(frac) > 0 {
		// A '.' and one to nine digits, scaled to nanoseconds.
		if frac[0] != '.' || len(frac) < 2 || len(frac) > 10 {
			return time.Time{}, false
		}
		for _, c := range frac[1:] {
			if c < '0' || c > '9' {
				return time.Time{}, false
			}
			nsec = nsec*10 + int(c-'0')
		}
		for range 10 - len(frac) {
			nsec *= 10
		}
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

// twoDigits reads the decimal number of the digits a and b.
func twoDigits(a, b byte) (int, bool) {
	a, b = a-'0', b-'0' // a byte below '0' wraps above 9
	return int(a)*10 + int(b), a <= 9 && b <= 9
}

// daysIn returns the number of days in month m of year.
func daysIn(m time.Month, year int) int {
	if m == time.February {
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	}
	return 30 + int((m+m/8)%2) // 31 in odd months to July, even ones from August
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

// plainEnd returns the position of the first byte of s from i on that a
// JSON string cannot hold as it is: '"', '\\', a control character or a
// byte beyond ASCII (which needs UTF-8 decoding); len(s) when there is none.
func plainEnd(s []byte, i int) int {
	// Most strings are plain ASCII: pass them 8 bytes at a time, and the
	// rest byte by byte. (Small enough to be inlined.)
	for ; i+8 <= len(s); i += 8 {
		if m := stopBytes(binary.LittleEndian.Uint64(s[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	return plainEndBytes(s, i)
}

// plainEndBytes is plainEnd byte by byte.
func plainEndBytes(s []byte, i int) int {
	for i < len(s) && s[i] >= ' ' && s[i] < utf8.RuneSelf && s[i] != '"' && s[i] != '\\' {
		i++
	}
	return i
}

// stopBytes sets the high bit of the first byte of w (little endian) that
// plainEnd stops at, 0 when there is none; bits above it may be set too.
// Each term sets the high bit of the bytes it looks for, and of bytes
// beyond ASCII, which the last term sets anyway: w-0x20 of a byte below
// 0x20, q-1 of a '"' (b-1 of a '\\'). The borrow a subtraction takes from
// the next byte up can set a bit there wrongly, but only above a byte
// rightly set.
func stopBytes(w uint64) uint64 {
	const (
		quotes     = lowBits * '"'
		backslashs = lowBits * '\\'
	)
	return ((w - lowBits*0x20) | (w ^ quotes - lowBits) | (w ^ backslashs - lowBits) | w) & highBits
}

// appendUnquoted unescapes the JSON string whose body starts at s[0]
// (just after its opening quote) onto dst and returns the position of its
// closing quote in s, exactly as encoding/json unescapes: it reports false
// for what encoding/json's scanner rejects (a control character, an
// unknown escape, \u without four hex digits, no closing quote), and
// replaces each byte of invalid UTF-8 and each \u escape of a surrogate
// that is not half of a valid pair with U+FFFD. Capture writes neither (its
// encoder escapes properly), but a record written by anything else decodes
// as it did.
func appendUnquoted(dst, s []byte) ([]byte, int, bool) {
	i := 0
	start := 0 // s[start:i] is plain and not yet copied
	for {
		i = plainEnd(s, i)
		if i >= len(s) {
			return append(dst, s[start:]...), i, false // no closing quote
		}
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(s[i:])
			if r != utf8.RuneError || size > 1 {
				i += size // valid UTF-8 stays as it is
				continue
			}
			// Invalid UTF-8 decodes as RuneError, one byte at a time.
			dst = utf8.AppendRune(append(dst, s[start:i]...), r)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		if c != '\\' {
			return dst, i, c == '"' // the end, or a control character
		}
		if i+1 >= len(s) {
			return dst, i, false
		}
		switch e := s[i+1]; e {
		case '"', '\\', '/':
			dst = append(dst, e)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := getu4(s[i:])
			if r < 0 {
				return dst, i, false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if dec := utf16.DecodeRune(r, getu4(s[i:])); dec != unicode.ReplacementChar {
					r = dec
					i += 6
				} else {
					r = unicode.ReplacementChar
				}
			}
			dst = utf8.AppendRune(dst, r)
			start = i
			continue
		default:
			return dst, i, false
		}
		i += 2
		start = i
	}
}

// getu4 decodes \uXXXX at the start of s, -1 when s does not start with
// one (encoding/json's function of the same name).
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		d, ok := hexDigit(c)
		if !ok {
			return -1
		}
		r = r*16 + rune(d)
	}
	return r
}
