package schema

import "strings"

// QuoteIdent quotes a ClickHouse identifier (database, table or column name)
// with backticks, escaping backslashes and backticks, so any PostgreSQL
// identifier (spaces, quotes, upper case, unicode) is usable as is. Every
// identifier in generated SQL goes through this one function.
func QuoteIdent(name string) string {
	var b strings.Builder
	b.Grow(len(name) + 2)
	b.WriteByte('`')
	for i := 0; i < len(name); i++ {
		switch c := name[i]; c {
		case '`', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case 0:
			b.WriteString(`\0`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('`')
	return b.String()
}

// QuoteString quotes a ClickHouse string literal.
func QuoteString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case 0:
			b.WriteString(`\0`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}
