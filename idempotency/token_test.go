package idempotency_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/idempotency"
)

func TestParseToken(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want idempotency.Token
		bad  bool
	}{
		{in: "wh1.7713173490386696380.16384.0/1A2B3C", want: idempotency.Token{SystemID: 7713173490386696380, Database: 16384, LSN: 0x1A2B3C}},
		{in: "wh1.1.1.FFFFFFFF/FFFFFFFF", want: idempotency.Token{SystemID: 1, Database: 1, LSN: ^uint64(0)}},
		{in: "wh1.18446744073709551615.4294967295.1/0", want: idempotency.Token{SystemID: ^uint64(0), Database: ^uint32(0), LSN: 1 << 32}},
		{in: "", bad: true},
		{in: "wh2.1.1.0/1", bad: true},
		{in: "wh1.1.1", bad: true},
		{in: "wh1.1.1.0/1.2", bad: true},
		{in: "wh1.0.1.0/1", bad: true},                          // no system identifier
		{in: "wh1.1.0.0/1", bad: true},                          // no database
		{in: "wh1.1.4294967296.0/1", bad: true},                 // OID over 32 bits
		{in: "wh1.1.1.01", bad: true},                           // no slash
		{in: "wh1.1.1.100000000/0", bad: true},                  // high word over 32 bits
		{in: "wh1.-1.1.0/1", bad: true},                         // sign
		{in: "wh1.1.1.0/1 ", bad: true},                         // trailing space
		{in: "wh1.1.1.0/" + strings.Repeat("0", 64), bad: true}, // too long
	} {
		got, err := idempotency.ParseToken(tc.in)
		if tc.bad {
			if err == nil || !errors.Is(err, idempotency.ErrBadToken) {
				t.Errorf("ParseToken(%q) = %+v, %v; want ErrBadToken", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseToken(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		if again, err := idempotency.ParseToken(got.String()); err != nil || again != got {
			t.Errorf("ParseToken(%q.String() = %q) = %+v, %v; want it back", tc.in, got.String(), again, err)
		}
	}
}

func TestTokenCovers(t *testing.T) {
	a := idempotency.Token{SystemID: 7, Database: 5, LSN: 100}
	for _, tc := range []struct {
		name string
		u    idempotency.Token
		want bool
	}{
		{"same", a, true},
		{"earlier position", idempotency.Token{SystemID: 7, Database: 5, LSN: 99}, true},
		{"later position", idempotency.Token{SystemID: 7, Database: 5, LSN: 101}, false},
		{"another database", idempotency.Token{SystemID: 7, Database: 6, LSN: 1}, false},
		{"another cluster", idempotency.Token{SystemID: 8, Database: 5, LSN: 1}, false},
	} {
		if got := a.Covers(tc.u); got != tc.want {
			t.Errorf("%s: %v.Covers(%v) = %v, want %v", tc.name, a, tc.u, got, tc.want)
		}
	}
	if !(idempotency.Token{}).IsZero() || a.IsZero() || (idempotency.Token{}).String() != "" {
		t.Error("the zero Token is no token, and only it")
	}
}
