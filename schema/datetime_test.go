package schema

import (
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
)

// TestDateTimePrecisionOverride: a DateTime64(P) override truncates the
// fraction to P digits (towards the earlier time, before 1970 too), its
// type reads back and reconciles with itself, a wider column covers it and
// it does not cover a wider one, and verify's canonical form of
// PostgreSQL's text is the truncated time.
func TestDateTimePrecisionOverride(t *testing.T) {
	col := record.Column{Name: "at", Type: "timestamptz"}
	for _, tc := range []struct {
		ddl, text string
		want      time.Time
	}{
		{"DateTime64(3)", "2024-01-15 10:00:00.123456+00", time.Date(2024, 1, 15, 10, 0, 0, 123000000, time.UTC)},
		{"DateTime64(0)", "2024-01-15 10:00:00.999999+00", time.Date(2024, 1, 15, 10, 0, 0, 0, time.UTC)},
		{"DateTime64(3)", "1960-06-01 00:00:00.0009+00", time.Date(1960, 6, 1, 0, 0, 0, 0, time.UTC)},
		{"DateTime64(6)", "2024-01-15 10:00:00.123456+00", time.Date(2024, 1, 15, 10, 0, 0, 123456000, time.UTC)},
		{"DateTime64(3)", "infinity", maxTime.Truncate(time.Millisecond)},
	} {
		typ, err := override(col, Map(col, true), ColumnLayout{Type: tc.ddl}, true)
		if err != nil {
			t.Fatal(err)
		}
		v, err := typ.Convert(tc.text)
		if got, _ := v.(time.Time); err != nil || !got.Equal(tc.want) {
			t.Errorf("%s %q = %v, %v; want %v", tc.ddl, tc.text, v, err, tc.want)
		}
		vals, _ := typ.NewValues(1)
		if _, err := vals.Append(tc.text); err != nil {
			t.Fatal(err)
		}
		if got := *vals.Slice(0, 1).([]*time.Time)[0]; !got.Equal(tc.want) {
			t.Errorf("%s %q: Values hold %v, want %v", tc.ddl, tc.text, got, tc.want)
		}
		text := tc.text
		canon, err := typ.CanonicalText(&text)
		if want, _ := typ.Canonical(tc.want); err != nil || canon != want {
			t.Errorf("%s %q: canonical %q, %v; want %q", tc.ddl, tc.text, canon, err, want)
		}
		back, ok := parseType(typ.DDL)
		if use, alter, err := reconcile(back, typ); !ok || err != nil || alter || use.DDL != typ.DDL {
			t.Errorf("%s: read back %+v, %v; reconcile = %s, %v, %v", typ.DDL, back, ok, use.DDL, alter, err)
		}
	}
	six, _ := parseType("Nullable(DateTime64(6, 'UTC'))")
	three, _ := parseType("Nullable(DateTime64(3, 'UTC'))")
	if !covers(six, three) || covers(three, six) {
		t.Errorf("covers(6, 3) = %v, covers(3, 6) = %v; want true, false", covers(six, three), covers(three, six))
	}
}
