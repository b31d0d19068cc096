package schema

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// TestDecimalString checks the fast decimal form against d.String(), the
// form it replaces, on chosen and random coefficients and exponents.
func TestDecimalString(t *testing.T) {
	check := func(d decimal.Decimal) {
		t.Helper()
		if got, want := decimalString(d), d.String(); got != want {
			t.Errorf("decimalString(%d × 10^%d) = %q, want %q", d.CoefficientInt64(), d.Exponent(), got, want)
		}
	}
	for _, s := range []string{"0", "0.00", "-0.50", "1.50", "100", "100.000", "0.001", "-0.001", "123456789012345678", "-123456789012345678",
		"0.123456789012345678", "1234567890123456789", "99999999999999999999.5", "1e5", "1.5e-40", "-9223372036854775808", "9223372036854775807",
		"0.000000000000000000000000000000000001", "12345.6789000"} {
		d, err := decimal.NewFromString(s)
		if err != nil {
			t.Fatal(err)
		}
		check(d)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		c := r.Int64() >> r.IntN(64)
		if r.IntN(2) == 0 {
			c = -c
		}
		check(decimal.New(c, -int32(r.IntN(45))))
	}
}

// TestFormatDateTime checks the fast time forms against time.Format, the
// forms they replace, on chosen and random times and zones.
func TestFormatDateTime(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("+05:30", 5*3600+1800), time.FixedZone("-14", -14*3600)}
	check := func(tm time.Time) {
		t.Helper()
		if got, want := formatDateTime(tm), tm.UTC().Format("2006-01-02 15:04:05.000000"); got != want {
			t.Errorf("formatDateTime(%v) = %q, want %q", tm, got, want)
		}
		if got, want := formatDate(tm), tm.Format("2006-01-02"); got != want {
			t.Errorf("formatDate(%v) = %q, want %q", tm, got, want)
		}
	}
	for _, tm := range []time.Time{minDate, maxDate, maxTime, {}, time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 2, 29, 23, 59, 59, 999999999, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999000, zones[2])} {
		check(tm)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 100_000 {
		check(time.Unix(r.Int64N(400*365*86400)-70*365*86400, r.Int64N(1e9)).In(zones[r.IntN(len(zones))]))
	}
}

// TestWithinDateRange checks that the values Lossy skips parsing are never
// clamped, and that it does parse those that may be.
func TestWithinDateRange(t *testing.T) {
	ts := Type{kind: kDateTime}
	for text, want := range map[string]bool{
		"2026-01-01 00:00:01+00": true, "1901-01-01 00:00:00-14": true, "2261-12-31 23:59:59+14": true,
		"1900-01-01 00:00:00+05": false, "2262-04-12 00:00:00+00": false, "infinity": false, "0044-03-15 BC": false, "12026-01-01": false, "": false,
	} {
		if got := withinDateRange(text); got != want {
			t.Errorf("withinDateRange(%q) = %v, want %v", text, got, want)
		}
		if !withinDateRange(text) {
			continue
		}
		v, err := ts.Convert(text)
		if tm, ok := v.(time.Time); err != nil || !ok || tm.Equal(minDate) || tm.Equal(maxDate) || tm.Equal(maxTime) {
			t.Errorf("%q is not parsed by Lossy, yet converts to %v (%v), a bound", text, v, err)
		}
	}
}
