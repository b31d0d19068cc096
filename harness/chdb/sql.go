package chdb

import (
	"regexp"
	"sort"
	"strings"
)

// leadingKeyword returns the first word of query in upper case, skipping
// whitespace and comments ("-- …", "# …", "/* … */"), or "" when there is
// none. It is enough to tell statement kinds apart without a parser.
func leadingKeyword(query string) string {
	s := skipSpaceAndComments(query)
	end := 0
	for end < len(s) && isWordByte(s[end]) {
		end++
	}
	return strings.ToUpper(s[:end])
}

// streamable reports whether the engine can run query through its streaming
// API, which it supports for SELECT queries only.
func streamable(query string) bool {
	switch leadingKeyword(query) {
	case "SELECT", "WITH":
		return true
	case "":
		// A parenthesised SELECT, e.g. "(SELECT 1) UNION ALL (SELECT 2)".
		return strings.HasPrefix(skipSpaceAndComments(query), "(")
	}
	return false
}

func skipSpaceAndComments(s string) string {
	for {
		s = strings.TrimLeft(s, " \t\r\n\f\v")
		switch {
		case strings.HasPrefix(s, "--"), strings.HasPrefix(s, "#"):
			i := strings.IndexByte(s, '\n')
			if i < 0 {
				return ""
			}
			s = s[i+1:]
		case strings.HasPrefix(s, "/*"):
			i := strings.Index(s[2:], "*/")
			if i < 0 {
				return ""
			}
			s = s[2+i+2:]
		default:
			return s
		}
	}
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// insertWithFormat matches an INSERT whose FORMAT clause is followed by its
// data: group 1 is the statement before FORMAT, group 2 the format name,
// and the match ends where the data starts. As in ClickHouse's parser, the
// data starts after the spaces that follow the format name and at most one
// line break. The statement part is matched lazily, so the first
// "FORMAT <name>" wins and data that contains the word cannot move it.
var insertWithFormat = regexp.MustCompile(`(?is)^(INSERT\s+INTO\s.*?)\s+FORMAT\s+([A-Za-z][A-Za-z0-9_]*)[ \t\f]*(?:\r?\n)?`)

// splitInsert reports whether head starts an INSERT … FORMAT <fmt> whose
// data follows. It returns the statement without the FORMAT clause, the
// format, and the offset in head at which the data starts.
func splitInsert(head string) (stmt, format string, dataAt int, ok bool) {
	body := skipSpaceAndComments(head)
	skipped := len(head) - len(body)
	m := insertWithFormat.FindStringSubmatchIndex(body)
	if m == nil {
		return "", "", 0, false
	}
	stmt = body[m[2]:m[3]]
	if valuesClause.MatchString(stmt) {
		// "FORMAT x" inside the literals of an INSERT … VALUES is data.
		return "", "", 0, false
	}
	return stmt, body[m[4]:m[5]], skipped + m[1], true
}

var valuesClause = regexp.MustCompile(`(?i)\sVALUES[\s(]`)

// validSettingName accepts the names ClickHouse settings have, so a name can
// go into a SET statement without quoting.
var validSettingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`).MatchString

// quoteIdent quotes a ClickHouse identifier with back quotes.
func quoteIdent(s string) string {
	return "`" + strings.NewReplacer(`\`, `\\`, "`", "\\`").Replace(s) + "`"
}

// quoteString quotes a ClickHouse string literal.
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

type settingChange struct{ name, value string }

// setStatement builds one SET for changes, sorted by name so the same
// change always reads the same. Values are string literals: the engine
// parses a setting from its text form, as the HTTP interface does.
func setStatement(changes []settingChange) string {
	sorted := append([]settingChange(nil), changes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	parts := make([]string, len(sorted))
	for i, c := range sorted {
		parts[i] = c.name + " = " + quoteString(c.value)
	}
	return "SET " + strings.Join(parts, ", ")
}
