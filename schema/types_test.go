package schema

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
)

// TestConvertTextKeepsOutputForm checks that types stored as String keep
// PostgreSQL's output form byte for byte: capture sends every value, copied
// or streamed, in that form, so nothing is to be normalized here.
func TestConvertTextKeepsOutputForm(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := []struct {
		name string
		col  record.Column
		text string
		want any
	}{
		{"char(n) padding", record.Column{Type: "bpchar", TypMod: 8 + 4}, "ab      ", "ab      "},
		{"inet host", record.Column{Type: "inet"}, "192.168.0.1", "192.168.0.1"},
		{"inet network", record.Column{Type: "inet"}, "2001:db8::1/64", "2001:db8::1/64"},
		{"cidr", record.Column{Type: "cidr"}, "1.2.3.4/32", "1.2.3.4/32"},
		{"xml with a newline", record.Column{Type: "xml"}, "\n<a/>", "\n<a/>"},
		{"xml declaration", record.Column{Type: "xml"}, `<?xml version="1.1"?><a/>`, `<?xml version="1.1"?><a/>`},
		{"text array", record.Column{Type: "bpchar", TypMod: 4 + 4, Array: true}, `{"ab  ",NULL,"a b "}`, []*string{str("ab  "), nil, str("a b ")}},
	}
	for _, tc := range tests {
		got, err := Map(tc.col, true).Convert(tc.text)
		if err != nil {
			t.Errorf("%s: Convert(%q): %v", tc.name, tc.text, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Convert(%q) = %#v, want %#v", tc.name, tc.text, got, tc.want)
		}
	}
}

// TestConvertDecimalExact checks that a decimal holds every digit of a
// value or the value is refused; the client would drop extra fractional
// digits without a word.
func TestConvertDecimalExact(t *testing.T) {
	unconstrained := record.Column{Type: "numeric", TypMod: -1}
	d12s2 := record.Column{Type: "numeric", TypMod: numericMod(12, 2)}
	tests := []struct {
		name    string
		col     record.Column
		text    string
		want    any
		wantErr string
	}{
		{"fits", d12s2, "1234567890.12", "1234567890.12", ""},
		{"negative", d12s2, "-0.50", "-0.50", ""},
		{"zero", unconstrained, "0", "0", ""},
		{"38 and 38 digits", unconstrained, strings.Repeat("9", 38) + "." + strings.Repeat("9", 38), strings.Repeat("9", 38) + "." + strings.Repeat("9", 38), ""},
		{"trailing zeros beyond the scale", unconstrained, "1." + strings.Repeat("0", 50), "1." + strings.Repeat("0", 50), ""},
		{"leading zeros", unconstrained, "-000123.5", "-000123.5", ""},
		{"39 fractional digits", unconstrained, "0." + strings.Repeat("0", 38) + "1", nil, "39 after"},
		{"39 integer digits", unconstrained, "1" + strings.Repeat("0", 38), nil, "39 digits before"},
		{"negative, too wide", unconstrained, "-1" + strings.Repeat("0", 38) + ".5", nil, "39 digits before"},
		{"scale of a narrower decimal", d12s2, "1.234", nil, "3 after"},
		{"NaN is NULL", unconstrained, "NaN", nil, ""},
		{"Infinity is NULL", unconstrained, "Infinity", nil, ""},
		{"-Infinity is NULL", d12s2, "-Infinity", nil, ""},
		{"not a number", unconstrained, "1e5", nil, "not a decimal"},
		{"two points", unconstrained, "1.2.3", nil, "not a decimal"},
		{"a letter inside", d12s2, "12a4.5", nil, "not a decimal"},
		{"empty", unconstrained, "", nil, "not a decimal"},
		{"sign only", unconstrained, "-", nil, "not a decimal"},
	}
	for _, tc := range tests {
		got, err := Map(tc.col, true).Convert(tc.text)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: Convert(%q) = %v, %v; want an error with %q", tc.name, tc.text, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Convert(%q) = %#v, %v; want %#v", tc.name, tc.text, got, err, tc.want)
		}
	}

	str := func(s string) *string { return &s }
	got, err := Map(record.Column{Type: "numeric", TypMod: -1, Array: true}, true).Convert(`{1.5,NaN,NULL}`)
	if want := []*string{str("1.5"), nil, nil}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("numeric[] = %#v, %v; want %#v", got, err, want)
	}
	if _, err := Map(record.Column{Type: "numeric", TypMod: -1, Array: true}, true).Convert(`{1.5,0.` + strings.Repeat("1", 39) + `}`); err == nil {
		t.Error("numeric[] with an element Decimal(76, 38) cannot hold: no error")
	}
}

// TestConvertTimestampBounds checks the clamping at the bounds the client
// can write: beyond 2262-04-11 23:47:16.854775 UTC its nanosecond
// arithmetic wraps around to 1677.
func TestConvertTimestampBounds(t *testing.T) {
	ts := func(s string) time.Time { return rfc3339(t, s) }
	last := ts("2262-04-11T23:47:16.854775Z")
	tests := []struct {
		col  record.Column
		text string
		want time.Time
	}{
		{record.Column{Type: "timestamp"}, "2262-04-11 23:47:16.854775", last},
		{record.Column{Type: "timestamp"}, "2262-04-11 23:47:16.854776", last},
		{record.Column{Type: "timestamp"}, "2299-12-31 23:59:59.999999", last},
		{record.Column{Type: "timestamptz"}, "2262-04-12 00:00:00+00", last},
		{record.Column{Type: "timestamptz"}, "infinity", last},
		{record.Column{Type: "timestamptz"}, "12000-01-01 00:00:00+00", last},
		{record.Column{Type: "timestamptz"}, "2262-04-11 23:00:00-05", last},
		{record.Column{Type: "timestamptz"}, "2262-04-11 23:47:16.854775+00", last},
		{record.Column{Type: "timestamptz"}, "1900-01-01 00:00:00+00", minDate},
		{record.Column{Type: "timestamptz"}, "1899-12-31 23:59:59.999999+00", minDate},
		// A date in a column widened to a timestamp.
		{record.Column{Type: "timestamp"}, "2299-12-31", last},
		{record.Column{Type: "timestamp"}, "2024-02-29", ts("2024-02-29T00:00:00Z")},
		// Date32 reaches further.
		{record.Column{Type: "date"}, "2299-12-31", maxDate},
		{record.Column{Type: "date"}, "infinity", maxDate},
		// Years of five digits and more, which PostgreSQL accepts.
		{record.Column{Type: "date"}, "10000-01-01", maxDate},
		{record.Column{Type: "date"}, "5874897-12-31", maxDate},
		{record.Column{Type: "timestamp"}, "294276-12-31 23:59:59.999999", last},
		{record.Column{Type: "date"}, "10000-02-29", maxDate},
		{record.Column{Type: "timestamptz"}, "10000-02-29 00:00:00+00", last},
		// A date of five digits in a column widened to a timestamp.
		{record.Column{Type: "timestamp"}, "10000-01-01", last},
	}
	for _, tc := range tests {
		got, err := Map(tc.col, true).Convert(tc.text)
		if err != nil || got != tc.want {
			t.Errorf("%s %q = %v, %v; want %v", tc.col.Type, tc.text, got, err, tc.want)
		}
		// What the client computes for DateTime64 (not for Date32, which
		// it writes in days); it must not wrap around.
		if v, ok := got.(time.Time); ok && tc.col.Type != "date" && v.UnixNano()/1000 != v.UnixMicro() {
			t.Errorf("%s %q: %v overflows int64 nanoseconds", tc.col.Type, tc.text, v)
		}
	}
	if maxTime != last {
		t.Errorf("maxTime = %v, want %v", maxTime, last)
	}
}

// TestConvertRefusesTimeText checks that text which is no date or
// timestamp (records come from Kafka: untrusted) fails, so the record goes
// to the dead letters, instead of loading as a bound.
func TestConvertRefusesTimeText(t *testing.T) {
	for _, tc := range []struct{ typ, text string }{
		{"timestamptz", "yesterday"},
		{"timestamp", "12345"},
		{"timestamp", "12345-garbage"},
		{"timestamp", "20240-13-45 10:00:00"},
		{"date", "yesterday"},
		{"date", "12345-1-1x"},
	} {
		if got, err := Map(record.Column{Type: tc.typ}, true).Convert(tc.text); err == nil {
			t.Errorf("%s %q = %v, want an error", tc.typ, tc.text, got)
		}
	}
}

// TestValuesMatchConvert goes through the type table: a column's Values
// holds what Convert returns for each value, as []T or, Nullable, []*T
// with nil for NULL; a NULL a column cannot hold is left to the caller.
func TestValuesMatchConvert(t *testing.T) {
	for _, s := range scalars {
		for _, name := range s.pg {
			for _, nullable := range []bool{false, true} {
				typ := Map(record.Column{Name: "c", Type: name, TypMod: -1}, nullable)
				want, err := typ.Convert(s.example)
				if err != nil {
					t.Fatalf("%s: Convert(%q): %v", typ.DDL, s.example, err)
				}
				vals, ok := typ.NewValues(3)
				if !ok {
					t.Fatalf("%s: no Values", typ.DDL)
				}
				if held, err := vals.Append(s.example); !held || err != nil {
					t.Errorf("%s: Append(%q) = %v, %v", typ.DDL, s.example, held, err)
				}
				if held := vals.AppendNull(); held != nullable {
					t.Errorf("%s: AppendNull() = %v, want %v", typ.DDL, held, nullable)
				}
				got := reflect.ValueOf(vals.Slice(0, 1)).Index(0)
				if nullable {
					if got.IsNil() {
						t.Fatalf("%s: %q appended as NULL", typ.DDL, s.example)
					}
					got = got.Elem()
					if null := reflect.ValueOf(vals.Slice(1, 2)).Index(0); !null.IsNil() {
						t.Errorf("%s: NULL appended as %v", typ.DDL, null.Elem())
					}
				}
				if g := got.Interface(); !reflect.DeepEqual(g, want) {
					t.Errorf("%s: Values hold %#v for %q, Convert returns %#v", typ.DDL, g, s.example, want)
				}
			}
		}
	}
	for _, nullable := range []bool{false, true} {
		vals, _ := Map(record.Column{Type: "numeric", TypMod: -1}, nullable).NewValues(1)
		if held, err := vals.Append("NaN"); held != nullable || err != nil {
			t.Errorf("numeric NaN, nullable %v: Append = %v, %v; want %v (NULL)", nullable, held, err, nullable)
		}
		if _, err := vals.Append("1e5"); err == nil {
			t.Error("numeric 1e5: no error")
		}
	}
	if _, ok := Map(record.Column{Type: "int4", Array: true}, true).NewValues(1); ok {
		t.Error("an array column has Values")
	}
}
