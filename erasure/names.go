package erasure

import "strings"

// parseOwner parses a source table as schema.CommentOwner returns it,
// "schema"."table" with PostgreSQL's quoting.
func parseOwner(owner string) (sourceKey, bool) {
	sch, rest, ok := cutQuoted(owner)
	if !ok || !strings.HasPrefix(rest, ".") {
		return sourceKey{}, false
	}
	tbl, rest, ok := cutQuoted(rest[1:])
	if !ok || rest != "" {
		return sourceKey{}, false
	}
	return sourceKey{sch, tbl}, true
}

// cutQuoted reads one "quoted" identifier ("" stands for ") from the start
// of s.
func cutQuoted(s string) (ident, rest string, ok bool) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != '"' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '"' {
			b.WriteByte('"')
			i++
			continue
		}
		return b.String(), s[i+1:], true
	}
	return "", "", false
}
