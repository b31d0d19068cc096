package sink

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestTruncateUTF8(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 16, "short"},
		{"exactly", 7, "exactly"},
		{"abcdef", 3, "abc…"},
		{"aé", 2, "a…"}, // é is 2 bytes: never cut in half
		{strings.Repeat("€", 10), 7, "€€…"},
	} {
		got := truncateUTF8(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("truncateUTF8(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestParseDeadLetterValueDropped reads a dead letter that went without
// its value.
func TestParseDeadLetterValueDropped(t *testing.T) {
	l, err := ParseDeadLetter(&kgo.Record{Key: []byte("k"), Headers: []kgo.RecordHeader{
		{Key: HeaderTopic, Value: []byte("wh.public.t")},
		{Key: HeaderError, Value: []byte("too large")},
		{Key: HeaderValueDropped, Value: []byte("70000000")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if l.ValueDropped != 70000000 || l.Value != nil || l.Topic != "wh.public.t" {
		t.Errorf("parsed %+v, want topic wh.public.t, no value and ValueDropped 70000000", l)
	}
}
