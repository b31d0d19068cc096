package record

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The scanner's strings: member names and string values, unescaped
// exactly as encoding/json unescapes them.

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
