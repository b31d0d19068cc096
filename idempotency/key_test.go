package idempotency

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestNewKeyIsV7AndParses(t *testing.T) {
	a, b := NewKey(), NewKey()
	if a == b || a.IsZero() {
		t.Fatalf("keys %s and %s", a, b)
	}
	if v := uuid.UUID(a).Version(); v != 7 {
		t.Errorf("version %d, want 7", v)
	}
	if got, err := ParseKey(a.String()); err != nil || got != a {
		t.Errorf("ParseKey(%s) = %s, %v", a, got, err)
	}
	if got, err := ParseHeader([]string{a.Header()}); err != nil || got != a {
		t.Errorf("ParseHeader(%s) = %s, %v", a.Header(), got, err)
	}
}

func TestParseHeader(t *testing.T) {
	const u = "0190a6d5-3c1e-7b4a-9f00-5a1c2e3d4f60"
	for _, tc := range []struct {
		name   string
		values []string
		ok     bool
	}{
		{"sf-string", []string{`"` + u + `"`}, true},
		{"bare uuid", []string{u}, true},
		{"upper case", []string{`"0190A6D5-3C1E-7B4A-9F00-5A1C2E3D4F60"`}, true},
		{"spaces around", []string{`  "` + u + `" `}, true},
		{"v4", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, true},
		{"none", nil, false},
		{"two headers", []string{`"` + u + `"`, `"` + u + `"`}, false},
		{"empty", []string{""}, false},
		{"empty string", []string{`""`}, false},
		{"unterminated", []string{`"` + u}, false},
		{"token", []string{"abc"}, false},
		{"integer", []string{"42"}, false},
		{"braces", []string{"{" + u + "}"}, false},
		{"urn", []string{`"urn:uuid:` + u + `"`}, false},
		{"no hyphens", []string{`"0190a6d53c1e7b4a9f005a1c2e3d4f60"`}, false},
		{"nil uuid", []string{`"00000000-0000-0000-0000-000000000000"`}, false},
		{"max uuid", []string{`"ffffffff-ffff-ffff-ffff-ffffffffffff"`}, false},
		{"not RFC variant", []string{`"0190a6d5-3c1e-7b4a-cf00-5a1c2e3d4f60"`}, false},
		{"bad hex", []string{`"0190a6d5-3c1e-7b4a-9f00-5a1c2e3d4fzz"`}, false},
		{"parameters", []string{`"` + u + `";a=1`}, true},
		{"inner list", []string{`("` + u + `")`}, false},
		{"string with escape", []string{`"` + u[:35] + `\"`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ParseHeader(tc.values)
			if tc.ok != (err == nil) {
				t.Fatalf("ParseHeader(%q) = %s, %v; want ok=%v", tc.values, k, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrMalformedKey) {
				t.Errorf("error %v is not ErrMalformedKey", err)
			}
			if err == nil && k.IsZero() {
				t.Error("zero key accepted")
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	type order struct {
		Customer string  `json:"customer"`
		Amount   float64 `json:"amount"`
	}
	fp := func(op string, v any) Fingerprint {
		t.Helper()
		f, err := FingerprintOf(op, v)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	fj := func(op, raw string) Fingerprint {
		t.Helper()
		f, err := FingerprintJSON(op, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	base := fp("create order", order{"c1", 10})
	for _, tc := range []struct {
		name string
		got  Fingerprint
		same bool
	}{
		{"same struct", fp("create order", order{"c1", 10}), true},
		{"map in another order", fp("create order", map[string]any{"amount": 10, "customer": "c1"}), true},
		{"JSON with spaces and order", fj("create order", `{ "amount" : 10.0, "customer":"c1" }`), true},
		{"JSON number spelled 1e1", fj("create order", `{"customer":"c1","amount":1e1}`), true},
		{"JSON string escaped", fj("create order", `{"customer":"\u00631","amount":10}`), true},
		{"another amount", fp("create order", order{"c1", 11}), false},
		{"another customer", fp("create order", order{"c2", 10}), false},
		{"another operation", fp("update order", order{"c1", 10}), false},
		{"operation and body split differently", FingerprintBytes("create orde", []byte(`r{"amount":10,"customer":"c1"}`)), false},
	} {
		if (tc.got == base) != tc.same {
			t.Errorf("%s: fingerprint %s vs %s, want same=%v", tc.name, tc.got, base, tc.same)
		}
	}
	if _, err := FingerprintJSON("x", []byte(`{"a":`)); err == nil {
		t.Error("invalid JSON fingerprinted")
	}
	if _, err := FingerprintOf("x", func() {}); err == nil {
		t.Error("a func fingerprinted")
	}
}

func TestNextRun(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		now  string
		at   time.Duration
		want string
	}{
		{"2026-11-24T02:59:59Z", 3 * time.Hour, "2026-11-24T03:00:00Z"},
		{"2026-11-24T03:00:00Z", 3 * time.Hour, "2026-11-25T03:00:00Z"},
		{"2026-11-24T04:00:00Z", 3 * time.Hour, "2026-11-25T03:00:00Z"},
		{"2026-12-31T23:00:00Z", 3 * time.Hour, "2027-01-01T03:00:00Z"},
		{"2026-11-24T04:00:00+02:00", 3 * time.Hour, "2026-11-24T03:00:00Z"}, // 02:00 UTC
		{"2026-11-24T10:00:00Z", 0, "2026-11-25T00:00:00Z"},
		{"2026-11-24T10:00:00Z", 23*time.Hour + 30*time.Minute, "2026-11-24T23:30:00Z"},
	} {
		got := NextRun(at(tc.now), tc.at)
		if !got.Equal(at(tc.want)) {
			t.Errorf("NextRun(%s, %s) = %s, want %s", tc.now, tc.at, got, tc.want)
		}
	}
}
