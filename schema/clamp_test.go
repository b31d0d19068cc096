package schema

import (
	"strings"
	"testing"

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
