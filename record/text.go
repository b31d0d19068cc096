package record

import (
	"encoding/binary"
	"time"
	"unicode/utf8"
	"unsafe"
)

// The helpers in this file write the scalar parts of the wire form. They run
// several times per captured row, so they work a machine word at a time
// where they can and never allocate beyond growing dst.

const hexDigits = "0123456789abcdef"

func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendJSONStringBody(dst, s)
	return append(dst, '"')
}

// Masks for the word-at-a-time scan of appendJSONStringBody.
const (
	lowBits  = 0x0101010101010101
	highBits = 0x8080808080808080
)

// wordIsPlain reports that none of the 8 bytes in w needs escaping or UTF-8
// decoding: no control character, no '"', no '\\' and no byte >= 0x80. It
// may say false for a plain word, never true for another one.
func wordIsPlain(w uint64) bool {
	const (
		quotes     = lowBits * '"'
		backslashs = lowBits * '\\'
	)
	q, b := w^quotes, w^backslashs
	// x-lowBits*n & ^x & highBits is nonzero when some byte of x is below n
	// (n <= 0x80); a zero byte of q or b is a '"' or '\\' in w.
	return ((w-lowBits*0x20)&^w|(q-lowBits)&^q|(b-lowBits)&^b|w)&highBits == 0
}

// load64 reads the 8 bytes of s from i, little endian, in one unaligned
// load (binary.LittleEndian on a byte slice is a pattern the compiler knows;
// the slice only reads s).
func load64(s string, i int) uint64 {
	return binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s), len(s))[i : i+8])
}

// appendJSONStringBody escapes s for a JSON string. Invalid UTF-8 (possible
// in SQL_ASCII databases) is replaced by U+FFFD, as encoding/json does.
func appendJSONStringBody(dst []byte, s string) []byte {
	if i := plainPrefix(s); i < len(s) {
		return appendJSONStringBodyFrom(dst, s, i)
	}
	return append(dst, s...)
}

// plainPrefix returns len(s) when no byte of s needs escaping or UTF-8
// decoding (the case of most values and names), else a position at or
// before the first byte that may. It looks at 8 bytes at a time.
func plainPrefix(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if !wordIsPlain(load64(s, i)) {
			return i
		}
	}
	if i == len(s) {
		return i
	}
	if len(s) >= 8 {
		// The tail, as the last 8 bytes (overlapping the words seen).
		if !wordIsPlain(load64(s, len(s)-8)) {
			return i
		}
		return len(s)
	}
	for j := 0; j < len(s); j++ {
		if c := s[j]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return j
		}
	}
	return len(s)
}

// appendJSONStringBodyFrom escapes s, whose first i bytes need no escaping,
// byte by byte (and rune by rune beyond ASCII) from i on.
func appendJSONStringBodyFrom(dst []byte, s string, i int) []byte {
	start := 0
	for i < len(s) {
		if i+8 <= len(s) && wordIsPlain(load64(s, i)) {
			i += 8
			continue
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but break JavaScript consumers.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// appendLSN writes l as LSN.String does, without allocating.
func appendLSN(dst []byte, l LSN) []byte {
	dst = appendUpperHex(dst, uint32(l>>32))
	dst = append(dst, '/')
	return appendUpperHex(dst, uint32(l))
}

func appendUpperHex(dst []byte, v uint32) []byte {
	const digits = "0123456789ABCDEF"
	var b [8]byte
	i := len(b)
	for {
		i--
		b[i] = digits[v&0xf]
		v >>= 4
		if v == 0 {
			break
		}
	}
	return append(dst, b[i:]...)
}

// maxFastUnix is the first second of the year 10000: appendRFC3339Nano
// formats times from 1970 up to it itself.
const maxFastUnix = 253402300800

// appendRFC3339Nano appends t in UTC exactly as
// t.UTC().AppendFormat(dst, time.RFC3339Nano) does, about five times faster
// for the times capture sees (1970 to 9999); other times take that path.
func appendRFC3339Nano(dst []byte, t time.Time) []byte {
	sec := t.Unix()
	if sec < 0 || sec >= maxFastUnix {
		return t.UTC().AppendFormat(dst, time.RFC3339Nano)
	}
	u := uint64(sec) // unsigned arithmetic: no sign fix-ups in the divisions
	days, rem := u/86400, u%86400
	// Civil date from days since 1970-01-01 (H. Hinnant's algorithm, with
	// eras of 400 years starting on March 1st).
	z := days + 719468
	era := z / 146097
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	day := doy - (153*mp+2)/5 + 1
	month, year := mp+3, yoe+era*400
	if mp >= 10 {
		month, year = mp-9, year+1
	}
	hour, minute, second := rem/3600, rem/60%60, rem%60
	var b [30]byte
	b[0], b[1], b[2], b[3] = byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10)
	b[4], b[5], b[6] = '-', byte('0'+month/10), byte('0'+month%10)
	b[7], b[8], b[9] = '-', byte('0'+day/10), byte('0'+day%10)
	b[10], b[11], b[12] = 'T', byte('0'+hour/10), byte('0'+hour%10)
	b[13], b[14], b[15] = ':', byte('0'+minute/10), byte('0'+minute%10)
	b[16], b[17], b[18] = ':', byte('0'+second/10), byte('0'+second%10)
	n := 19
	if ns := uint32(t.Nanosecond()); ns != 0 {
		// Nine digits, then trailing zeros dropped (the layout's ".999999999").
		b[n] = '.'
		for i := n + 9; i > n; i-- {
			b[i] = byte('0' + ns%10)
			ns /= 10
		}
		n += 10
		for b[n-1] == '0' {
			n--
		}
	}
	b[n] = 'Z'
	return append(dst, b[:n+1]...)
}
