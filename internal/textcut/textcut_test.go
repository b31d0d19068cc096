package textcut

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzShorten checks what defines Head and Shorten, for any text and
// bound: a text that fits is returned as it is; otherwise Head is the
// longest prefix within the bound that ends where a character starts (no
// later boundary fits), and Shorten is it with "…". Valid UTF-8 stays valid.
func FuzzShorten(f *testing.F) {
	f.Add("short", uint8(16))
	f.Add("exactly", uint8(7))
	f.Add("abcdef", uint8(3))
	f.Add("aé", uint8(2)) // é is 2 bytes: never cut in half
	f.Add(strings.Repeat("€", 10), uint8(7))
	f.Add("é", uint8(1))
	f.Add("", uint8(0))
	f.Fuzz(func(t *testing.T, s string, bound uint8) {
		n := int(bound)
		head, short := Head(s, n), Shorten(s, n)
		if len(s) <= n {
			if head != s || short != s {
				t.Fatalf("Head(%q, %d) = %q, Shorten = %q; want the text as it is", s, n, head, short)
			}
			return
		}
		// The start of the text is a boundary whatever its first byte.
		if !strings.HasPrefix(s, head) || len(head) > n || len(head) > 0 && !utf8.RuneStart(s[len(head)]) {
			t.Fatalf("Head(%q, %d) = %q: not a prefix of at most %d bytes that ends on a character boundary", s, n, head, n)
		}
		for i := len(head) + 1; i <= n; i++ {
			if utf8.RuneStart(s[i]) {
				t.Fatalf("Head(%q, %d) = %q, but the boundary at byte %d fits too", s, n, head, i)
			}
		}
		if short != head+"…" {
			t.Fatalf("Shorten(%q, %d) = %q, want %q", s, n, short, head+"…")
		}
		if utf8.ValidString(s) && !utf8.ValidString(short) {
			t.Fatalf("Shorten(%q, %d) = %q is not valid UTF-8", s, n, short)
		}
	})
}
