package schema

import (
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
)

// TestDecimalClamp: under on_overflow clamp a value beyond a Decimal
// override's range (and an infinity) becomes the bound of its sign, and
// Clamped says so; a value within range with more decimals than the scale
// still fails: a clamp never rounds. Under dead_letter both fail.
func TestDecimalClamp(t *testing.T) {
	col := record.Column{Name: "a", Type: "numeric"}
	typ := func(ddl, policy string) Type {
		t.Helper()
		ty, err := override(col, Map(col, true), ColumnLayout{Type: ddl, OnOverflow: policy}, true)
		if err != nil {
			t.Fatal(err)
		}
		return ty
	}
	for _, tc := range []struct {
		ddl, policy, text string
		want              string // the converted text, or part of the error
		clamped           bool
	}{
		{"Decimal(6, 2)", "clamp", "1234.5", "1234.5", false},
		{"Decimal(6, 2)", "clamp", "9999.99", "9999.99", false},
		{"Decimal(6, 2)", "clamp", "10000", "9999.99", true},
		{"Decimal(6, 2)", "clamp", "-123456789.123", "-9999.99", true}, // beyond the range: its extra decimals go with it
		{"Decimal(6, 2)", "clamp", "00001234.50", "00001234.50", false},
		{"Decimal(6, 2)", "clamp", "Infinity", "9999.99", true},
		{"Decimal(6, 2)", "clamp", "-Infinity", "-9999.99", true},
		{"Decimal(6, 2)", "clamp", "1.234", "never rounds decimals", false},
		{"Decimal(4, 4)", "clamp", "-3", "-0.9999", true},
		{"Decimal(3, 0)", "clamp", "1000", "999", true},
		{"Decimal(6, 2)", "dead_letter", "10000", "Decimal(6, 2) holds at most 4 and 2", false},
		{"Decimal(6, 2)", "", "1.234", "holds at most 4 and 2", false},
		{"Decimal(6, 2)", "", "Infinity", "<nil>", false}, // NULL, as without an override
	} {
		ty := typ(tc.ddl, tc.policy)
		v, err := ty.Convert(tc.text)
		got := "<nil>"
		if err != nil {
			got = err.Error()
		} else if v != nil {
			got = v.(string)
		}
		if err != nil && !strings.Contains(got, tc.want) || err == nil && got != tc.want {
			t.Errorf("%s %s %q: got %q, want %q", tc.ddl, tc.policy, tc.text, got, tc.want)
		}
		if c := ty.Clamped(tc.text); c != tc.clamped {
			t.Errorf("%s %s %q: Clamped = %v, want %v", tc.ddl, tc.policy, tc.text, c, tc.clamped)
		}
	}
	if Map(col, true).Clamped("1e400") {
		t.Error("a column without an override reports a clamp")
	}
}

// TestOutOfRange: a date or timestamp that Convert stores as the bound of
// ClickHouse's range, not as itself, is reported, exactly at the bounds
// (a value equal to a bound is stored as itself); nothing else is. Every
// value reported converts to a bound, and every value within the range
// converts to itself.
func TestOutOfRange(t *testing.T) {
	date := Map(record.Column{Type: "date"}, false)
	ts := Map(record.Column{Type: "timestamptz"}, false)
	dates := Map(record.Column{Type: "date", Array: true}, false)
	stamps := Map(record.Column{Type: "timestamptz", Array: true}, false)
	for _, tc := range []struct {
		typ  Type
		text string
		want bool
	}{
		{date, "2024-02-29", false},
		{date, "1900-01-01", false},
		{date, "2299-12-31", false},
		{date, "1899-12-31", true},
		{date, "1800-01-01", true},
		{date, "2300-01-01", true},
		{date, "0044-03-15", true},
		{date, "0044-03-15 BC", true},
		{date, "1950-03-15 BC", true},
		{date, "infinity", true},
		{date, "-infinity", true},
		{date, "12000-01-01", true},
		{date, "not a date", false}, // Convert refuses it
		{ts, "2024-01-15 10:00:00.123456+05:30", false},
		{ts, "1900-01-01 00:00:00+00", false},
		{ts, "1900-01-01 00:00:00-05", false},
		{ts, "1900-01-01 00:00:00+05", true}, // 1899-12-31 19:00 UTC
		{ts, "1899-12-31 23:59:59.999999+00", true},
		{ts, "2262-04-11 23:47:16.854775+00", false}, // maxTime
		{ts, "2262-04-11 23:47:16.854776+00", true},
		{ts, "2262-04-11 23:50:00+00", true},
		{ts, "2262-04-12 00:00:00+00", true},
		{ts, "2299-12-31 00:00:00+00", true},
		{ts, "12000-01-01 00:00:00+00", true},
		{ts, "infinity", true},
		{ts, "-infinity", true},
		{ts, "0044-03-15 10:00:00+00 BC", true},
		{ts, "1850-01-01", true}, // a date, in a column widened to a timestamp
		{ts, "1950-01-01", false},
		// Arrays: any element beyond the range, nested arrays and
		// quoted or NULL elements included.
		{dates, "{1800-01-01}", true},
		{dates, "{2024-01-01,1900-01-01,2299-12-31}", false},
		{dates, "{2024-01-01,NULL,infinity}", true},
		{dates, "{{2024-01-01,2024-01-02},{2024-01-03,2300-01-01}}", true},
		{dates, "{{2024-01-01,2024-01-02},{2024-01-03,2024-01-04}}", false},
		{dates, "[0:1]={2024-01-01,-infinity}", true},
		{dates, "{}", false},
		{dates, "{NULL}", false},
		{stamps, `{"2024-01-15 10:00:00+00","1899-12-31 23:59:59.999999+00"}`, true},
		{stamps, `{"2024-01-15 10:00:00+00","2262-04-11 23:47:16.854775+00"}`, false},
		{stamps, `{"2262-04-12 00:00:00+00"}`, true},
		{stamps, `{"0044-03-15 10:00:00+00 BC"}`, true},
		{dates, "not an array", false}, // Convert refuses it
		{Map(record.Column{Type: "text"}, false), "1800-01-01", false},
		{Map(record.Column{Type: "numeric"}, false), "Infinity", false},
	} {
		got := tc.typ.OutOfRange(tc.text)
		if got != tc.want {
			t.Errorf("%s OutOfRange(%q) = %v, want %v", tc.typ.DDL, tc.text, got, tc.want)
		}
		if !tc.typ.Ranged() {
			continue
		}
		v, err := tc.typ.Convert(tc.text)
		if err != nil {
			if got {
				t.Errorf("%s %q: out of range, yet Convert refuses it: %v", tc.typ.DDL, tc.text, err)
			}
			continue
		}
		var ats []time.Time
		switch x := v.(type) {
		case time.Time:
			ats = []time.Time{x}
		case []*time.Time:
			for _, e := range x {
				if e != nil {
					ats = append(ats, *e)
				}
			}
		default:
			t.Fatalf("%s %q: converts to %T", tc.typ.DDL, tc.text, v)
		}
		bound := false
		for _, at := range ats {
			if at.Equal(minDate) || at.Equal(maxDate) || at.Equal(maxTime) {
				bound = true
				if !got && !strings.Contains(tc.text, at.Format("2006-01-02")) {
					t.Errorf("%s %q: within range, yet converts to the bound %v", tc.typ.DDL, tc.text, at)
				}
			}
		}
		if got && !bound {
			t.Errorf("%s %q: out of range, yet converts to %v, no bound", tc.typ.DDL, tc.text, ats)
		}
	}
}
