package textcut

import "unicode/utf8"

// Head returns s when it is at most n bytes long, else its longest prefix
// of at most n bytes that ends on a character boundary.
func Head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Shorten returns s when it is at most n bytes long, else Head(s, n)
// followed by "…".
func Shorten(s string, n int) string {
	if h := Head(s, n); len(h) < len(s) {
		return h + "…"
	}
	return s
}
