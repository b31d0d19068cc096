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

// firstKeyColumn returns the first column of a sorting key as
// system.tables writes it ("tenant_id, id" or "`odd name`, id"): the
// tenant column of a walhouse table.
func firstKeyColumn(key string) string {
	key = strings.TrimSpace(key)
	if strings.HasPrefix(key, "`") {
		var b strings.Builder
		for i := 1; i < len(key); i++ {
			switch key[i] {
			case '\\':
				if i+1 < len(key) {
					i++
					b.WriteByte(key[i])
				}
			case '`':
				return b.String()
			default:
				b.WriteByte(key[i])
			}
		}
		return ""
	}
	first, _, _ := strings.Cut(key, ",")
	return strings.TrimSpace(first)
}
