package schema

import (
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/walhouse/walhouse/record"
)

// TestCanonical checks that PostgreSQL's text of a value, converted as the
// sink converts it, has the canonical form of the value the ClickHouse
// client scans back, and that values that differ have different forms.
func TestCanonical(t *testing.T) {
	str := func(s string) *string { return &s }
	i32 := func(v int32) *int32 { return &v }
	cases := []struct {
		name  string
		col   record.Column
		ddl   string
		pg    *string // PostgreSQL's text; nil for NULL
		ch    any     // what the client scans
		equal bool
		lossy bool
	}{
		{"numeric trailing zeros", record.Column{Type: "numeric", TypMod: (12<<16 | 3) + 4}, "Nullable(Decimal(12, 3))", str("1.500"), decimal.New(15, -1), true, false},
		{"numeric other", record.Column{Type: "numeric", TypMod: (12<<16 | 3) + 4}, "Nullable(Decimal(12, 3))", str("1.501"), decimal.New(15, -1), false, false},
		{"numeric NaN is NULL", record.Column{Type: "numeric", TypMod: -1}, "Nullable(Decimal(76, 38))", str("NaN"), (*decimal.Decimal)(nil), true, true},
		{"negative zero numeric", record.Column{Type: "numeric", TypMod: -1}, "Nullable(Decimal(76, 38))", str("-0.000"), decimal.Zero, true, false},
		{"NULL is not empty", record.Column{Type: "text"}, "Nullable(String)", nil, "", false, false},
		{"empty text", record.Column{Type: "text"}, "Nullable(String)", str(""), str(""), true, false},
		{"bytea", record.Column{Type: "bytea"}, "Nullable(String)", str(`\x00ff`), "\x00\xff", true, false},
		{"bytea text is not its bytes", record.Column{Type: "text"}, "Nullable(String)", str(`\x00ff`), "\x00\xff", false, false},
		{"float8 bits", record.Column{Type: "float8"}, "Nullable(Float64)", str("0.30000000000000004"), 0.30000000000000004, true, false},
		{"float8 negative zero", record.Column{Type: "float8"}, "Nullable(Float64)", str("-0"), 0.0, false, false},
		{"float8 NaN", record.Column{Type: "float8"}, "Nullable(Float64)", str("NaN"), math.NaN(), true, false},
		{"float4", record.Column{Type: "float4"}, "Nullable(Float32)", str("0.1"), float32(0.1), true, false},
		{"timestamptz", record.Column{Type: "timestamptz"}, "Nullable(DateTime64(6, 'UTC'))", str("2024-02-29 12:34:56.123456+05:30"),
			time.Date(2024, 2, 29, 7, 4, 56, 123456000, time.UTC), true, false},
		{"timestamp microsecond", record.Column{Type: "timestamp"}, "Nullable(DateTime64(6, 'UTC'))", str("2024-02-29 12:34:56.123456"),
			time.Date(2024, 2, 29, 12, 34, 56, 123457000, time.UTC), false, false},
		{"timestamp infinity clamped", record.Column{Type: "timestamp"}, "Nullable(DateTime64(6, 'UTC'))", str("infinity"), maxTime, true, true},
		{"date clamped", record.Column{Type: "date"}, "Nullable(Date32)", str("3000-01-01"), maxDate, true, true},
		{"date", record.Column{Type: "date"}, "Nullable(Date32)", str("2024-02-29"), time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), true, false},
		{"uuid", record.Column{Type: "uuid"}, "Nullable(UUID)", str("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), uuid.MustParse("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"), true, false},
		{"bool", record.Column{Type: "bool"}, "Nullable(Bool)", str("t"), true, true, false},
		{"int widened", record.Column{Type: "int4"}, "Nullable(Int64)", str("42"), int64(42), true, false},
		{"array", record.Column{Type: "int4", Array: true}, "Array(Nullable(Int32))", str("{1,NULL,3}"), []*int32{i32(1), nil, i32(3)}, true, false},
		{"array flattened", record.Column{Type: "int4", Array: true}, "Array(Nullable(Int32))", str("{{1,2},{3,4}}"), []*int32{i32(1), i32(2), i32(3), i32(4)}, true, true},
		{"array NULL is empty", record.Column{Type: "int4", Array: true}, "Array(Nullable(Int32))", nil, []*int32{}, true, false},
		{"array element NULL is not missing", record.Column{Type: "int4", Array: true}, "Array(Nullable(Int32))", str("{1,NULL}"), []*int32{i32(1)}, false, false},
		{"text array separators", record.Column{Type: "text", Array: true}, "Array(Nullable(String))", str(`{"a,b"}`), []*string{str("a"), str("b")}, false, false},
		{"interval text", record.Column{Type: "interval"}, "Nullable(String)", str("1 day 02:00:00"), str("1 day 02:00:00"), true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			typ, ok := LoadedType(c.col, c.ddl)
			if !ok {
				t.Fatalf("LoadedType(%+v, %s) not ok", c.col, c.ddl)
			}
			pg, err := typ.CanonicalText(c.pg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := typ.Canonical(c.ch)
			if err != nil {
				t.Fatal(err)
			}
			if (pg == got) != c.equal {
				t.Errorf("PostgreSQL %q → %q, ClickHouse %v → %q; want equal %v", deref(c.pg), pg, c.ch, got, c.equal)
			}
			if c.pg != nil && typ.Lossy(*c.pg) != c.lossy {
				t.Errorf("Lossy(%q) = %v, want %v", *c.pg, !c.lossy, c.lossy)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestCanonicalTextFast checks that the shortcut CanonicalText takes for
// common texts gives what the general way (Convert, then Canonical) gives,
// and declines what it does not handle.
func TestCanonicalTextFast(t *testing.T) {
	cases := []struct {
		col   record.Column
		texts []string
	}{
		{record.Column{Type: "text"}, []string{"", "a", "0", " x ", "\x00"}},
		{record.Column{Type: "int2"}, []string{"0", "-1", "32767", "-32768", "32768", "+1", "01", "-0", "x", ""}},
		{record.Column{Type: "int4"}, []string{"0", "2147483647", "-2147483648", "2147483648", "007"}},
		{record.Column{Type: "int8"}, []string{"0", "-9223372036854775808", "9223372036854775807", "9223372036854775808", " 1"}},
		{record.Column{Type: "numeric", TypMod: 12<<16 | 2 + 4}, []string{
			"0", "0.00", "-0.00", "-0", "1.50", "-1.50", "10.00", "100", "0.05", "-0.10", "1234567890.12",
			"12345678901.00", "1.234", "00.1", "01", ".5", "5.", "+1", "NaN", "Infinity", "1e3", "",
		}},
		{record.Column{Type: "timestamptz"}, []string{
			"2026-01-01 00:00:01+00", "2026-01-01 00:00:01.5+00", "2026-01-01 00:00:01.123456+00", "2026-01-01 00:00:01.000010+00",
			"2026-01-01 00:00:01.1234567+00", "2026-01-01 00:00:01.+00", "2026-01-01 00:00:01+05:30", "2026-01-01 00:00:01-01",
			"2024-02-29 23:59:59+00", "2023-02-29 00:00:00+00", "2026-04-31 00:00:00+00", "2026-13-01 00:00:00+00",
			"1900-01-01 00:00:00+00", "1901-01-01 00:00:00+00", "2261-12-31 23:59:59.999999+00", "2262-04-11 23:47:16.854775+00",
			"9999-12-31 00:00:00+00", "0001-01-01 00:00:00+00 BC", "infinity", "-infinity", "2026-01-01 24:00:00+00", "2026-01-01",
		}},
		{record.Column{Type: "timestamp"}, []string{"2026-01-01 00:00:01", "2026-01-01 00:00:01.25", "2026-01-01T00:00:01", "2026-1-01 00:00:01"}},
		{record.Column{Type: "numeric"}, []string{"123456789012345678", "1234567890123456789", "0.000000000000000001", "-99.990"}},
	}
	for _, c := range cases {
		typ := Map(c.col, true)
		fast := 0
		for _, text := range c.texts {
			want, wantErr := func() (string, error) {
				v, err := typ.Convert(text)
				if err != nil {
					return "", err
				}
				return typ.Canonical(v)
			}()
			got, ok := typ.canonicalTextFast(text)
			if !ok {
				continue
			}
			fast++
			switch {
			case wantErr != nil:
				t.Errorf("%s %q: fast form %q, the general way fails: %v", typ.DDL, text, got, wantErr)
			case got != want:
				t.Errorf("%s %q: fast form %q, general %q", typ.DDL, text, got, want)
			}
		}
		if fast == 0 {
			t.Errorf("%s: no text took the shortcut", typ.DDL)
		}
	}
}
