package record

import (
	"fmt"
	"strconv"
	"time"
	"unsafe"
)

// The scanner's numbers, booleans and times, each read with the syntax,
// type and range encoding/json gave the field it fills.

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

// readSigned reads a signed integer (see readInt) that fits T, the type of
// the field it fills.
func readSigned[T int16 | int32 | int64](s *scanner, field string) (T, error) {
	n, err := s.readInt(int(unsafe.Sizeof(T(0)))*8, field)
	return T(n), err
}

// readUnsigned reads an unsigned integer (see readUint) that fits T, the
// type of the field it fills.
func readUnsigned[T uint32 | uint64](s *scanner, field string) (T, error) {
	n, err := s.readUint(int(unsafe.Sizeof(T(0)))*8, field)
	return T(n), err
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
