package schema

import "strings"

// SplitSortingKey splits system.tables.sorting_key ("tenant_id, id" or
// "`odd, name`, id") into column names. An expression that is not a plain
// column name is kept as is and then fails the column check in valid.
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
					i++
					b.WriteByte(s[i])
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
