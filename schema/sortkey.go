package schema

import (
	"strconv"
	"strings"
)

// SplitSortingKey splits system.tables.sorting_key ("tenant_id, id" or
// "`odd, name`, id") into column names. ClickHouse writes a name that is
// not a plain identifier back-quoted, with the escapes of its string
// writer (\n, \t, \\, \` and the like): they are decoded here, so a key
// column whose name holds a newline or a tab is found by that name in
// system.columns. An expression that is not a plain column name is kept
// as is and then fails the column check of its caller.
func SplitSortingKey(key string) []string {
	var out []string
	s := strings.TrimSpace(key)
	for s != "" {
		var name string
		if s[0] == '`' {
			var b strings.Builder
			i := 1
			for ; i < len(s); i++ {
				if s[i] == '\\' && i+1 < len(s) {
					n := unescape(&b, s[i+1:])
					i += n
					continue
				}
				if s[i] == '`' {
					break
				}
				b.WriteByte(s[i])
			}
			name = b.String()
			s = s[min(i+1, len(s)):]
		} else {
			j := strings.IndexByte(s, ',')
			if j < 0 {
				j = len(s)
			}
			name = strings.TrimSpace(s[:j])
			s = s[j:]
		}
		out = append(out, name)
		s = strings.TrimSpace(s)
		s = strings.TrimPrefix(s, ",")
		s = strings.TrimSpace(s)
	}
	return out
}

// unescape writes the character of the escape sequence that follows a
// backslash (rest starts after it) and returns how many bytes of rest it
// took. It reads what ClickHouse's readEscapedString reads: the C escapes,
// \0, \xHH, and any other character as itself (\\, \`, \').
func unescape(b *strings.Builder, rest string) int {
	c := rest[0]
	if r, ok := cEscapes[c]; ok {
		b.WriteByte(r)
		return 1
	}
	if (c == 'x' || c == 'X') && len(rest) >= 3 {
		if v, err := strconv.ParseUint(rest[1:3], 16, 8); err == nil {
			b.WriteByte(byte(v))
			return 3
		}
	}
	b.WriteByte(c)
	return 1
}

// cEscapes are the one-letter escapes ClickHouse writes in quoted names
// and strings (WriteHelpers' writeAnyEscapedString) or reads back.
var cEscapes = map[byte]byte{
	'0': 0, 'a': '\a', 'b': '\b', 'e': 0x1b, 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t', 'v': '\v',
}
