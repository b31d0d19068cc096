package record

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// refParseLSN is ParseLSN before it read the usual form itself: strconv on
// each half.
func refParseLSN(s string) (LSN, bool) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, false
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, false
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, false
	}
	return LSN(h<<32 | l), true
}

// TestParseLSNMatchesStrconv holds ParseLSN to strconv on LSNs as written,
// with leading zeros, in lower case, too long, and with bytes that are not
// hex digits.
func TestParseLSNMatchesStrconv(t *testing.T) {
	inputs := []string{
		"0/0", "16/B374D848", "16/b374d848", "FFFFFFFF/FFFFFFFF", "100000000/0", "0/100000000", "000000001/1",
		"00000000000000001/00000001", "/1", "1/", "/", "1//1", "1/1/1", "+1/1", "-1/1", "0x1/1", "1_0/1", " 1/1",
		"1/1 ", "g/1", "1/G", "@/1", "`/1", "F/f", "ffffffff/ffffffff", "fffffffff/0",
	}
	rng := rand.New(rand.NewPCG(37, 38))
	const alphabet = "0123456789abcdefABCDEFgG/ x+-_"
	for range 20000 {
		l := LSN(rng.Uint64())
		inputs = append(inputs, l.String(), strings.ToLower(l.String()))
		b := make([]byte, rng.IntN(20))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		inputs = append(inputs, string(b))
	}
	for _, s := range inputs {
		got, err := ParseLSN(s)
		want, ok := refParseLSN(s)
		if (err == nil) != ok || got != want {
			t.Fatalf("ParseLSN(%q) = %v, %v; strconv reads %v, %v", s, got, err, want, ok)
		}
	}
}
