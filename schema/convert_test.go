package schema

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/walhouse/walhouse/record"
)

// TestParseISOTimestampMatchesTimeParse holds the fast path to the layout
// path on PostgreSQL's forms and near misses: where it reads a text, it
// reads the same instant; where the layout path fails, it reads nothing.
func TestParseISOTimestampMatchesTimeParse(t *testing.T) {
	texts := []string{
		"2024-01-15 10:00:00", "2024-01-15 10:00:00.1", "2024-01-15 10:00:00.123456", "2024-01-15 10:00:00.1234567",
		"2024-01-15 10:00:00+00", "2024-01-15 10:00:00-07", "2024-01-15 10:00:00+05:30", "2024-12-31 23:59:59.999999-09:30:15",
		"2024-02-29 00:00:00+14", "2023-02-29 00:00:00+00", "2024-04-31 00:00:00", "2024-13-01 00:00:00", "2024-00-10 00:00:00",
		"2024-01-15 24:00:00", "2024-01-15 10:60:00", "2024-01-15 10:00:61", "2024-01-15 10:00:00+24", "2024-01-15 10:00:00+0530",
		"2024-01-15 10:00:00+05:", "2024-01-15 10:00:00.", "2024-01-15 10:00:00.+00", "2024-01-15T10:00:00", "2024-01-15 10:00:00Z",
		"2024-1-15 10:00:00", "0001-01-01 00:00:00+00", "1899-12-31 23:59:59.999999+00", "2262-04-11 23:47:16.854776+00",
		"2024-01-15 10:00:00+05:30:60", "2024-01-15 10:00:00 +00", "+024-01-15 10:00:00",
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 20000 {
		s := fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d", 1+rng.IntN(9999), rng.IntN(14), rng.IntN(33), rng.IntN(26), rng.IntN(62), rng.IntN(62))
		if rng.IntN(2) == 0 {
			s += "." + fmt.Sprintf("%07d", rng.IntN(10_000_000))[:1+rng.IntN(7)]
		}
		switch rng.IntN(4) {
		case 1:
			s += fmt.Sprintf("%c%02d", "+-"[rng.IntN(2)], rng.IntN(26))
		case 2:
			s += fmt.Sprintf("%c%02d:%02d", "+-"[rng.IntN(2)], rng.IntN(26), rng.IntN(62))
		case 3:
			s += fmt.Sprintf("%c%02d:%02d:%02d", "+-"[rng.IntN(2)], rng.IntN(26), rng.IntN(62), rng.IntN(62))
		}
		texts = append(texts, s)
	}
	fast := 0
	for _, s := range texts {
		got, ok := parseISOTimestamp(s)
		want, err := parseTimestampLayout(s)
		if !ok {
			continue
		}
		fast++
		if err != nil {
			t.Errorf("%q: fast path read %v, time.Parse fails: %v", s, got, err)
		} else if c := clamp(got, minDate, maxTime); !c.Equal(want) || c.Location() != want.Location() {
			t.Errorf("%q: fast path %v, time.Parse %v", s, c, want)
		}
	}
	if fast < len(texts)/4 {
		t.Errorf("the fast path read only %d of %d texts", fast, len(texts))
	}
}

func BenchmarkParseTimestamp(b *testing.B) {
	for _, s := range []string{"2024-01-15 10:00:00.123456+00", "2024-01-15 10:00:00-07"} {
		b.Run("iso/"+s, func(b *testing.B) {
			for b.Loop() {
				if _, err := parseTimestamp(s); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("layout/"+s, func(b *testing.B) {
			for b.Loop() {
				if _, err := parseTimestampLayout(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOutOfRange is what the sink adds per value of a key date or
// timestamp (a look at the year), and what a value at the edge of the
// range costs (parsed again).
func BenchmarkOutOfRange(b *testing.B) {
	ts := Map(record.Column{Type: "timestamptz"}, false)
	for _, s := range []string{"2024-01-15 10:00:00.123456+00", "1900-01-01 00:00:00+05"} {
		b.Run(s, func(b *testing.B) {
			for b.Loop() {
				ts.OutOfRange(s)
			}
		})
	}
}

// TestConvertNaNBits: a float NaN is converted to the bits ClickHouse
// parses "nan" into (the quiet NaN without payload), in a scalar, an
// array element and a column of an insert: the read-back of unchanged
// TOAST values finds a row by its key with IN, which compares a float's
// bits, from keys the server parses from text.
func TestConvertNaNBits(t *testing.T) {
	for _, tc := range []struct {
		typ, text string
		want      uint64 // the bits of the Float64, or of the Float32
	}{
		{"float8", "NaN", 0x7ff8000000000000},
		{"float4", "NaN", 0x7fc00000},
		{"float8", "1.5", 0x3ff8000000000000},
		{"float4", "-1.5", 0xbfc00000},
	} {
		typ := Map(record.Column{Name: "k", Type: tc.typ, TypMod: -1, Key: true}, false)
		atyp := Map(record.Column{Name: "a", Type: tc.typ, Array: true, TypMod: -1}, true)
		one, err := typ.Convert(tc.text)
		if err != nil {
			t.Fatal(err)
		}
		many, err := atyp.Convert("{" + tc.text + "}")
		if err != nil {
			t.Fatal(err)
		}
		vals, ok := typ.NewValues(1)
		if !ok {
			t.Fatalf("%s: no Values", tc.typ)
		}
		if _, err := vals.Append(tc.text); err != nil {
			t.Fatal(err)
		}
		col := vals.Slice(0, 1)
		var got []uint64
		switch v := one.(type) {
		case float64:
			got = append(got, math.Float64bits(v), math.Float64bits(*many.([]*float64)[0]), math.Float64bits(col.([]float64)[0]))
		case float32:
			got = append(got, uint64(math.Float32bits(v)), uint64(math.Float32bits(*many.([]*float32)[0])), uint64(math.Float32bits(col.([]float32)[0])))
		default:
			t.Fatalf("%s: %T", tc.typ, one)
		}
		for i, g := range got {
			if g != tc.want {
				t.Errorf("%s %s (%s): bits %x, want %x", tc.typ, tc.text, []string{"scalar", "array element", "column"}[i], g, tc.want)
			}
		}
	}
}

// TestLookupText: a float key's canonical form (its bits) goes back to a
// text both databases read as the same value; other types' stay.
func TestLookupText(t *testing.T) {
	for _, tc := range []struct {
		typ, text, want string
		nan             bool
	}{
		{"float8", "4.5", "4.5", false},
		{"float8", "0.30000000000000004", "0.30000000000000004", false},
		{"float8", "5e-324", "5e-324", false},
		{"float8", "-0", "-0", false},
		{"float8", "Infinity", "Infinity", false},
		{"float8", "-Infinity", "-Infinity", false},
		{"float8", "NaN", "NaN", true},
		{"float4", "1.5", "1.5", false},
		{"float4", "1e-45", "1e-45", false},
		{"float4", "3.4028235e+38", "3.4028235e+38", false},
		{"float4", "NaN", "NaN", true},
		{"int8", "42", "42", false},
		{"text", "3fc00000", "3fc00000", false},
	} {
		typ := Map(record.Column{Name: "k", Type: tc.typ, TypMod: -1, Key: true}, false)
		canon, err := typ.CanonicalText(&tc.text)
		if err != nil {
			t.Fatal(err)
		}
		got, nan := typ.LookupText(canon)
		if got != tc.want || nan != tc.nan {
			t.Errorf("%s %s (canonical %s): %q, %v; want %q, %v", tc.typ, tc.text, canon, got, nan, tc.want, tc.nan)
		}
		if back, _ := typ.CanonicalText(&got); back != canon {
			t.Errorf("%s %s: %q reads back as %s, want %s", tc.typ, tc.text, got, back, canon)
		}
	}
}
