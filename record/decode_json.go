package record

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/valyala/fastjson"
)

// The helpers in this file read single JSON values for Decode with the
// rules of encoding/json, which Decode used before: fastjson checks the
// structure of a record but not what is inside its strings and numbers (it
// accepts an invalid escape, a raw control character, 1.2.3 or NaN), and
// its unescaping keeps what it cannot decode instead of replacing it. So
// each value is taken as it was on the wire, which fastjson's MarshalTo
// writes for a value that has not been read through its accessors, and is
// checked and unescaped here. TestDecodeStrings and the comparisons with
// the old decoder fail if a fastjson upgrade changes that.

// readString appends the string v to *dst and returns where it is; null
// and an absent field are the empty string, as encoding/json left a string
// field untouched by null.
func (d *decoder) readString(v *fastjson.Value, dst *[]byte, field string) (span, error) {
	start := len(*dst)
	if v == nil {
		return span{start, start}, nil
	}
	var err error
	*dst, _, err = d.appendString(*dst, v, field)
	return span{start, len(*dst)}, err
}

// appendString appends the string v to dst, unescaped, and reports whether
// v was null instead (then dst is unchanged).
func (d *decoder) appendString(dst []byte, v *fastjson.Value, field string) ([]byte, bool, error) {
	d.tok = v.MarshalTo(d.tok[:0])
	tok := d.tok
	if isNull(tok) {
		return dst, true, nil
	}
	if tok[0] != '"' {
		return dst, false, fmt.Errorf("%w: %s is %s, want a string", ErrInvalid, field, kindOf(tok))
	}
	dst, end, ok := appendUnquoted(dst, tok[1:])
	if !ok || end != len(tok)-2 {
		return dst, false, fmt.Errorf("%w: %s is not a valid JSON string: %q", ErrInvalid, field, excerpt(tok))
	}
	return dst, false, nil
}

// readInt reads a signed integer of the given bit size; null and an absent
// field are 0. Like encoding/json into an int field, it takes only a JSON
// number without fraction or exponent, in range.
func (d *decoder) readInt(v *fastjson.Value, bits int, field string) (int64, error) {
	tok, ok := d.number(v)
	if !ok {
		return 0, nil
	}
	if isJSONInteger(tok, true) {
		if n, err := strconv.ParseInt(transient(tok), 10, bits); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: %s is %s, want an integer that fits %d bits", ErrInvalid, field, kindOf(tok), bits)
}

// readUint is readInt for an unsigned integer: a minus sign, even in -0,
// is rejected, as strconv.ParseUint rejected it for encoding/json.
func (d *decoder) readUint(v *fastjson.Value, bits int, field string) (uint64, error) {
	tok, ok := d.number(v)
	if !ok {
		return 0, nil
	}
	if isJSONInteger(tok, false) {
		if n, err := strconv.ParseUint(transient(tok), 10, bits); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: %s is %s, want an unsigned integer that fits %d bits", ErrInvalid, field, kindOf(tok), bits)
}

// number returns the wire text of v, false when v is absent or null.
func (d *decoder) number(v *fastjson.Value) ([]byte, bool) {
	if v == nil {
		return nil, false
	}
	d.tok = v.MarshalTo(d.tok[:0])
	return d.tok, !isNull(d.tok)
}

// isJSONInteger reports whether tok is -?(0|[1-9][0-9]*) (with signed) or
// 0|[1-9][0-9]*: a valid JSON number that strconv parses as an integer.
// fastjson's tokens are looser (1.2.3, 01, +1, NaN, Inf), so every number
// is checked against the JSON grammar here.
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

// readBool reads a bool; null and an absent field are false.
func readBool(v *fastjson.Value, field string) (bool, error) {
	if v == nil {
		return false, nil
	}
	switch t := v.Type(); t {
	case fastjson.TypeTrue:
		return true, nil
	case fastjson.TypeFalse, fastjson.TypeNull:
		return false, nil
	default:
		return false, fmt.Errorf("%w: %s is %s, want a boolean", ErrInvalid, field, t)
	}
}

// readTime reads a time as time.Time.UnmarshalJSON does, which is what
// encoding/json called: on the string as it is on the wire (escapes are not
// decoded, so an escaped character makes the time invalid), RFC 3339. null
// and an absent field are the zero time.
func (d *decoder) readTime(v *fastjson.Value, field string) (time.Time, error) {
	var t time.Time
	if v == nil {
		return t, nil
	}
	d.tok = v.MarshalTo(d.tok[:0])
	// encoding/json checked the string's syntax before it called
	// UnmarshalJSON, which parses the raw text; that needs no second check
	// here, since a text that parses as a time holds only digits and the
	// letters and signs of RFC 3339, nothing JSON would reject.
	if err := t.UnmarshalJSON(d.tok); err != nil {
		return t, fmt.Errorf("%w: %s: %v", ErrInvalid, field, err)
	}
	return t, nil
}

// isNull reports whether a wire value is null. fastjson also takes NaN as
// a number starting with n, so the whole word is compared.
func isNull(tok []byte) bool { return string(tok) == "null" }

// kindOf names the JSON type of a wire value, for errors.
func kindOf(tok []byte) string {
	if len(tok) == 0 {
		return "empty"
	}
	switch tok[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	}
	if isNull(tok) {
		return "null"
	}
	return fmt.Sprintf("the number %q", excerpt(tok))
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

// fieldIndex returns the position of key among names, -1 when it is not
// there. Like encoding/json it takes an exact match, else one that ignores
// case by Unicode simple folding (so "EVENTID" and, with U+017F LATIN SMALL
// LETTER LONG S, "ſchemaId" name eventId and schemaId). names are ASCII
// letters and distinct under folding, so the two rules cannot disagree on
// which one a key names. The search starts at hint, where the next name
// usually is.
//
// key is as fastjson unescaped it, which is best effort; that is enough
// here, though not for payload names (see readMembers). Where it differs
// from encoding/json's unescaping (an invalid escape or a lone surrogate,
// which it keeps as written, where encoding/json failed or made U+FFFD),
// and where the key is not valid JSON at all (a raw control character),
// the key holds a backslash, a control character or U+FFFD, so no name
// matches it either way, and the record is rejected as before.
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
		// Most strings are plain ASCII: pass them 8 bytes at a time, then
		// byte by byte up to the next byte that needs a look.
		for i+8 <= len(s) && wordIsPlain(binary.LittleEndian.Uint64(s[i:])) {
			i += 8
		}
		for i < len(s) && s[i] >= ' ' && s[i] < utf8.RuneSelf && s[i] != '"' && s[i] != '\\' {
			i++
		}
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
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// typeError reports that field holds a value of the wrong JSON type.
func typeError(field string, v *fastjson.Value, want string) error {
	return fmt.Errorf("%w: %s is %s, want %s", ErrInvalid, field, v.Type(), want)
}
