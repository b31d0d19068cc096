package redact

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
)

// Mask replaces each password.
const Mask = "xxxxx"

var (
	// userinfo: scheme://user:password@. The password runs to the last "@"
	// of the word, since an unescaped "@" in a password is common and the
	// rest of a URL seldom holds one; a "@" later in the URL only makes the
	// mask cover more.
	userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://[^\s/?#@:]*):[^\s]*@`)
	// queryParam: ?password=… or &password=…; its value is masked by
	// maskQueryValue.
	queryParam = regexp.MustCompile(`(?i)[?&](?:password|sslpassword|pass|pwd|http_proxy)=`)
	// keywordValue: libpq's password = value, the value single-quoted (with
	// backslash escapes) or up to the next space.
	keywordValue = regexp.MustCompile(`(?i)((?:^|[\s,;(])(?:password|sslpassword)\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s'][^\s]*)`)
)

// String returns s with every password it recognises masked. It accepts
// any text: a bare DSN, or an error message that quotes one.
func String(s string) string {
	if !strings.ContainsAny(s, "@=") {
		return s // the common case: nothing that could hold a password
	}
	s = userinfo.ReplaceAllString(s, "${1}:"+Mask+"@")
	s = maskQueryValues(s)
	return keywordValue.ReplaceAllString(s, "${1}"+Mask)
}

// maskQueryValues masks the value of each password query parameter: up to
// the next "&", or further when the segments after that "&" hold no "=",
// which makes them the rest of a password with an unescaped "&".
func maskQueryValues(s string) string {
	var b strings.Builder
	for {
		loc := queryParam.FindStringIndex(s)
		if loc == nil {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:loc[1]])
		b.WriteString(Mask)
		rest := s[loc[1]:]
		end := valueEnd(rest)
		for end < len(rest) && rest[end] == '&' {
			next := valueEnd(rest[end+1:])
			if strings.Contains(rest[end+1:end+1+next], "=") {
				break
			}
			end += 1 + next
		}
		s = rest[end:]
	}
}

// valueEnd returns the length of the query value at the start of s.
func valueEnd(s string) int {
	if i := strings.IndexAny(s, "&# \t\r\n\"'`"); i >= 0 {
		return i
	}
	return len(s)
}

// Error returns err with a message that String redacted; errors.Is and
// errors.As still see the original through Unwrap. It returns nil for nil
// and err itself when its message holds no password.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := String(msg); red != msg {
		return &redacted{msg: red, err: err}
	}
	return err
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

// SlogAttr is a slog.HandlerOptions.ReplaceAttr that redacts the message
// and every string, error or Stringer attribute.
func SlogAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		if s := a.Value.String(); strings.ContainsAny(s, "@=") {
			a.Value = slog.StringValue(String(s))
		}
	case slog.KindAny:
		var text string
		switch v := a.Value.Any().(type) {
		case error:
			text = v.Error()
		case fmt.Stringer:
			text = v.String()
		default:
			return a
		}
		if red := String(text); red != text {
			a.Value = slog.StringValue(red)
		}
	}
	return a
}
