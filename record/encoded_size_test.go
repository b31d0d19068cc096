package record

import (
	"strings"
	"testing"
)

// Texts that exercise every branch of the escaping: plain, quotes and
// backslashes, short escapes, control characters, invalid UTF-8, U+2028,
// multibyte runes, and lengths around the 8-byte words.
var sizeTexts = []string{
	"", "a", "acme", "12345678", "123456789", `"`, `\`, "\n\r\t", "\x00\x01\x1f", "\xff", "\xe2\x80", "\u2028\u2029",
	"é ü 日本", `plain then "quoted" and \back\slash`, strings.Repeat("\x01", 17), strings.Repeat("ab\"", 9),
	"line1\nline2\t\"x\" \\ \u2028 \x01 é \xff", strings.Repeat("x", 1000) + "\x02",
}

// TestKeyValueSizeMatchesEncoding checks that the sizes computed without
// encoding are those of the encodings, for every text in every place a
// value or a tenant is written, in both envelope versions, with and
// without the relation's Encoder.
func TestKeyValueSizeMatchesEncoding(t *testing.T) {
	for _, text := range sizeTexts {
		for _, place := range []string{"tenant", "key", "payload", "oldkey"} {
			r := sample()
			switch place {
			case "tenant":
				r.TenantID, r.Values[0] = text, Value{Text: text}
			case "key":
				r.Values[1] = Value{Text: text}
			case "payload":
				r.Values[2] = Value{Text: text}
			case "oldkey":
				r.OldKey = []Value{{Text: "acme"}, {Text: text}, {Null: true}, {Null: true}, {Unchanged: true}, {Text: text}}
			}
			checkSizes(t, place+" "+strings.ToValidUTF8(text, "?"), r)
		}
	}
	r := sample()
	r.Values[1] = Value{Null: true}
	r.OldKey = []Value{{Text: "acme"}, {Unchanged: true}}
	checkSizes(t, "null key, short old key", r)
}

func checkSizes(t *testing.T, name string, r *Record) {
	t.Helper()
	for _, version := range []int{1, 2} {
		e := NewEncoder(r.Source, r.TenantColumn, r.Columns, r.SchemaID, version)
		_, key, value := e.AppendKeyValue(nil, r)
		if got, want := e.KeyValueSize(r), len(key)+len(value); got != want {
			t.Errorf("%s, version %d: KeyValueSize = %d, want %d", name, version, got, want)
		}
		if got, want := JSONSize(r, version), len(AppendJSONVersion(nil, r, version)); got != want {
			t.Errorf("%s, version %d: JSONSize = %d, want %d", name, version, got, want)
		}
		other := NewEncoder(r.Source, "", nil, "", version) // not r's relation
		_, key, value = other.AppendKeyValue(nil, r)
		if got, want := other.KeyValueSize(r), len(key)+len(value); got != want {
			t.Errorf("%s, version %d, another relation's encoder: KeyValueSize = %d, want %d", name, version, got, want)
		}
	}
}

// TestRowSizeMatchesAddRow checks RowSize against the bytes AddRow writes.
func TestRowSizeMatchesAddRow(t *testing.T) {
	r := sample()
	e := NewEncoder(r.Source, r.TenantColumn, r.Columns, r.SchemaID, 2)
	for _, text := range sizeTexts {
		for _, vals := range [][]Value{{{Text: text}}, {{Null: true}, {Text: text}, {Text: text + "x"}}, {}} {
			var b RowBatch
			e.StartBatch(&b, nil, r)
			before := b.Size()
			e.AddRow(&b, vals)
			if got, want := RowSize(vals), b.Size()-before; got != want {
				t.Errorf("RowSize(%+v) = %d, AddRow wrote %d", vals, got, want)
			}
		}
	}
}

// FuzzKeyValueSize checks the computed sizes against the encodings for
// any text as key, payload and tenant.
func FuzzKeyValueSize(f *testing.F) {
	for _, s := range sizeTexts {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, key, text string) {
		r := sample()
		r.TenantID, r.Values[0] = text, Value{Text: text}
		r.Values[1], r.Values[2] = Value{Text: key}, Value{Text: text}
		r.OldKey = []Value{{Text: text}, {Text: key}}
		checkSizes(t, "fuzz", r)
		if got, want := RowSize(r.Values[:3]), 2+2+len(appendJSONString(nil, key))+2*len(appendJSONString(nil, text)); got != want {
			t.Errorf("RowSize = %d, want %d", got, want)
		}
	})
}
