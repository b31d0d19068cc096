package schema

import "strings"

// QuoteIdent quotes a ClickHouse identifier (database, table or column name)
// with backticks, escaping backslashes and backticks, so any PostgreSQL
// identifier (spaces, quotes, upper case, unicode) is usable as is. Every
// identifier in generated SQL goes through this one function.
func QuoteIdent(name string) string { return quote(name, '`') }

// QuoteString quotes a ClickHouse string literal.
func QuoteString(s string) string { return quote(s, '\'') }

// quote encloses s in q, escaping q, backslashes and NUL bytes.
func quote(s string, q byte) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte(q)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case q, '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case 0:
			b.WriteString(`\0`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// EscapeParam escapes a query parameter's value the way ClickHouse reads
// it (TabSeparated escaping), so backslashes, tabs and newlines in a value
// (a table or column name) arrive as themselves over both the HTTP and the
// native protocol. Every {name:String} parameter goes through it.
func EscapeParam(s string) string {
	if !strings.ContainsAny(s, "\\\t\n\r\x00") {
		return s
	}
	return paramEscaper.Replace(s)
}

var paramEscaper = strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\r", `\r`, "\x00", `\0`)
