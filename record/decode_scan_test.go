package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The tests in this file pin what the decoder's own scanner (decode_json*.go)
// treats specially, against the reference decoder where there is one: cut
// records, nesting, numbers, escaped names, white space and what is not,
// the fast paths for strings and times, and dropped buffers.

// TestDecodeTruncated cuts valid records and a row batch at every byte of
// their object: each cut must fail with ErrInvalid, never panic, and agree with the
// reference decoder.
func TestDecodeTruncated(t *testing.T) {
	schemas := sampleSchemas()
	bench := benchRow()
	schemas.Add(Schema{TenantColumn: bench.TenantColumn, Columns: bench.Columns})
	var records [][]byte
	for _, r := range []*Record{sample(), bench} {
		records = append(records, AppendJSONVersion(nil, r, 1), AppendJSONVersion(nil, r, 2))
	}
	var out bytes.Buffer
	if err := json.Indent(&out, records[1], "\r", "\t"); err != nil {
		t.Fatal(err)
	}
	records = append(records, append(out.Bytes(), " \n"...))
	for _, data := range records {
		if _, err := Decode(data, schemas); err != nil {
			t.Fatalf("the whole record: %v\n%s", err, data)
		}
		// Cut anywhere before its closing brace; the white space after
		// it may go.
		for i := range bytes.LastIndexByte(data, '}') {
			cut := data[:i]
			if _, err := Decode(cut, schemas); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrUnknownSchema) {
				t.Fatalf("cut at %d: Decode = %v, want ErrInvalid\n%q", i, err, cut)
			}
			checkDecodeMatchesReference(t, cut, schemas)
		}
	}

	rows := snapshotRows(rand.New(rand.NewPCG(31, 32)), 3)
	var batchSchemas SchemaSet
	batchSchemas.Add(Schema{TenantColumn: rows[0].TenantColumn, Columns: rows[0].Columns})
	batch := encodeBatch(rows)
	if _, err := DecodeBatch(batch, &batchSchemas); err != nil {
		t.Fatalf("the whole batch: %v", err)
	}
	for i := range batch {
		if _, err := DecodeBatch(batch[:i], &batchSchemas); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrUnknownSchema) {
			t.Fatalf("batch cut at %d: DecodeBatch = %v, want ErrInvalid\n%q", i, err, batch[:i])
		}
	}
}

// TestDecodeOddInputs holds Decode to the reference decoder on input the
// scanner reads in a way of its own: nesting where the record has none,
// numbers that are huge or not integers, names with escapes, white space
// and what only looks like it, literals cut short, and times the fast path
// leaves to time.Time.UnmarshalJSON. want is Decode's outcome.
func TestDecodeOddInputs(t *testing.T) {
	good := string(AppendJSON(nil, sample()))
	goodV1 := string(AppendJSONVersion(nil, sample(), 1))
	replace := func(in, old, new string) string {
		if !strings.Contains(in, old) {
			t.Fatalf("%q is not in the record", old)
		}
		return strings.Replace(in, old, new, 1)
	}
	const deep = 100000
	nested := strings.Repeat("[", deep) + strings.Repeat("]", deep)
	nestedObjects := strings.Repeat(`{"a":`, deep) + "null" + strings.Repeat("}", deep)
	for _, tc := range []struct {
		name, data string
		want       decodeOutcome
	}{
		// Nesting: the scanner never descends into what the record has no
		// room for, however deep.
		{"deep arrays in a payload value", replace(good, `"status":"paid"`, `"status":`+nested), decodedInvalid},
		{"deep objects in a payload value", replace(good, `"status":"paid"`, `"status":`+nestedObjects), decodedInvalid},
		{"deep arrays in an unknown field", replace(good, `{"eventId"`, `{"x":`+nested+`,"eventId"`), decodedInvalid},
		{"deep arrays for a string", replace(good, `"op":"u"`, `"op":`+nested), decodedInvalid},
		{"deep arrays in unchanged", replace(good, `"unchanged":["big"]`, `"unchanged":[`+nested+`]`), decodedInvalid},
		{"deep arrays in columns", replace(goodV1, `"columns":[`, `"columns":[`+nested+`,`), decodedInvalid},
		{"deep arrays for the record", nested, decodedInvalid},
		{"unclosed arrays", strings.Repeat("[", deep), decodedInvalid},
		{"deep arrays after the record", good + nested, decodedInvalid},

		// Numbers.
		{"huge ordinal", replace(good, `"ordinal":3`, `"ordinal":1`+strings.Repeat("0", 10000)), decodedInvalid},
		{"huge exponent", replace(good, `"ordinal":3`, `"ordinal":1e999999999`), decodedInvalid},
		{"ordinal with a plus", replace(good, `"ordinal":3`, `"ordinal":+3`), decodedInvalid},
		{"ordinal that is a minus", replace(good, `"ordinal":3`, `"ordinal":-`), decodedInvalid},
		{"ordinal 3.", replace(good, `"ordinal":3`, `"ordinal":3.`), decodedInvalid},
		{"ordinal .3", replace(good, `"ordinal":3`, `"ordinal":.3`), decodedInvalid},
		{"ordinal 3 then a letter", replace(good, `"ordinal":3`, `"ordinal":3x`), decodedInvalid},
		{"ordinal 3 then a string", replace(good, `"ordinal":3`, `"ordinal":3"x"`), decodedInvalid},
		{"ordinal Infinity", replace(good, `"ordinal":3`, `"ordinal":Infinity`), decodedInvalid},
		{"ordinal null", replace(good, `"ordinal":3`, `"ordinal":null`), decodedOK},
		{"version 2^64-1", replace(good, fmt.Sprintf(`"version":%d`, sample().Version), `"version":18446744073709551615`), decodedInvalid},
		{"eventVersion -0", replace(good, `"eventVersion":2`, `"eventVersion":-0`), decodedInvalid},
		{"eventVersion 2 with white space", replace(good, `"eventVersion":2`, "\"eventVersion\" \t:\r\n2 \n"), decodedOK},
		{"typmod -2^31", replace(goodV1, `"typmod":-1`, `"typmod":-2147483648`), decodedInvalid},
		{"typmod -2^31-1", replace(goodV1, `"typmod":-1`, `"typmod":-2147483649`), decodedInvalid},
		{"attnum 2^15", replace(goodV1, `"attnum":2`, `"attnum":32768`), decodedInvalid},
		{"attnum -2^15", replace(goodV1, `"attnum":2`, `"attnum":-32768`), decodedInvalid},

		// Names.
		{"escaped record name", replace(good, `"eventId"`, `"\u0065ventI\u0064"`), decodedOK},
		{"escaped slash in a name", replace(good, `"eventId"`, `"event\/Id"`), decodedInvalid},
		{"escaped source name", replace(good, `"schema"`, `"sch\u0065ma"`), decodedOK},
		{"escaped column name", replace(goodV1, `"typmod"`, `"TYP\u006dOD"`), decodedOK},
		{"escaped payload name", replace(good, `"status":"paid"`, `"\u0073tatus":"paid"`), decodedOK},
		{"payload name with an escaped quote", replace(good, `"note \"quoted\"\n":`, `"note \u0022quoted\u0022\u000a":`), decodedOK},
		{"payload name with a lone surrogate", replace(good, `"status":"paid"`, `"status\ud800":"paid"`), decodedInvalid},
		{"payload name with invalid UTF-8", replace(good, `"status":"paid"`, "\"status\xff\":\"paid\""), decodedInvalid},
		{"name with a lone surrogate", replace(good, `"eventId"`, `"eventId\udc00"`), decodedInvalid},
		{"name with a raw tab", replace(good, `"eventId"`, "\"event\tId\""), decodedInvalid},
		{"name with a bad escape", replace(good, `"eventId"`, `"event\Id"`), decodedInvalid},
		{"name cut in an escape", replace(good, `"eventId"`, `"eventId\u00`), decodedInvalid},
		{"name without its colon", replace(good, `"eventId":`, `"eventId" `), decodedInvalid},
		{"name that is a number", replace(good, `"eventId"`, `1`), decodedInvalid},
		{"name in single quotes", replace(good, `"eventId"`, `'eventId'`), decodedInvalid},
		{"Kelvin sign in a column name", replace(goodV1, `"key":true`, "\"\u212aey\":true"), decodedOK},
		{"name a prefix of the next field's", replace(good, `"eventId"`, `"event"`), decodedInvalid},
		{"name longer than the field's", replace(good, `"eventId"`, `"eventIdx"`), decodedInvalid},

		// White space and what is not.
		{"byte order mark", "\xef\xbb\xbf" + good, decodedInvalid},
		{"form feed before", "\f" + good, decodedInvalid},
		{"vertical tab after", good + "\v", decodedInvalid},
		{"no-break space after", good + "\u00a0", decodedInvalid},
		{"NUL after", good + "\x00", decodedInvalid},
		{"NUL before", "\x00" + good, decodedInvalid},
		{"white space after a comma", replace(good, `,"op"`, ", \n\t\r\"op\""), decodedOK},
		{"white space in an empty object", replace(good, `"source":{`, `"key":{ }, "source":{`), decodedInvalid}, // no key columns
		{"white space in an empty array", replace(good, `"unchanged":["big"]`, `"unchanged":[ ],"key":null`), decodedInvalid},
		{"white space only", " \t\r\n", decodedInvalid},
		{"comma before the first field", replace(good, `{"eventId"`, `{,"eventId"`), decodedInvalid},
		{"comma after the last field", replace(good, `["big"]}`, `["big"],}`), decodedInvalid},
		{"comma in an empty array", replace(good, `"unchanged":["big"]`, `"unchanged":[,]`), decodedInvalid},
		{"comma after the last element", replace(good, `"unchanged":["big"]`, `"unchanged":["big",]`), decodedInvalid},
		{"two commas", replace(good, `,"op"`, `,,"op"`), decodedInvalid},
		{"colon for a comma", replace(good, `,"op"`, `:"op"`), decodedInvalid},
		{"record not closed", strings.TrimSuffix(good, "}"), decodedInvalid},
		{"record closed twice", good + "}", decodedInvalid},
		{"payload closed by a bracket", replace(good, `"paid"}`, `"paid"]`), decodedInvalid},

		// Literals.
		{"null cut short", replace(good, `"tags":null`, `"tags":nul`), decodedInvalid},
		{"null in capitals", replace(good, `"op":"u"`, `"op":NULL`), decodedInvalid},
		{"null with a tail", replace(goodV1, `"key":true`, `"key":nullx`), decodedInvalid},
		{"true with a tail", replace(goodV1, `"key":true`, `"key":truex`), decodedInvalid},
		{"true cut short", replace(goodV1, `"key":true`, `"key":tru`), decodedInvalid},
		{"false for true", replace(goodV1, `"key":true,"attnum":2`, `"key":false,"attnum":2`), decodedInvalid},
		{"null for a bool", replace(goodV1, `"enum":true`, `"enum":null`), decodedInvalid},
		{"string for a bool", replace(goodV1, `"enum":true`, `"enum":"true"`), decodedInvalid},

		// Strings.
		{"string with escapes late", replace(good, `"status":"paid"`, `"status":"`+strings.Repeat("p", 100)+`\u00e9\""`), decodedOK},
		{"string with invalid UTF-8 late", replace(good, `"status":"paid"`, "\"status\":\""+strings.Repeat("p", 100)+"\xff\""), decodedOK},
		{"string with a raw DEL", replace(good, `"status":"paid"`, "\"status\":\"\x7f\""), decodedOK},
		{"string with a raw newline", replace(good, `"status":"paid"`, "\"status\":\"pa\nid\""), decodedInvalid},
		{"string not closed", strings.TrimSuffix(good, `"paid"}`) + `"paid`, decodedInvalid},
		{"escaped lsn", replace(good, `"lsn":"16/B374D000"`, `"lsn":"16\u002fB374D000"`), decodedOK},
		{"lsn null", replace(good, `"lsn":"16/B374D000"`, `"lsn":null`), decodedInvalid},
		{"escaped partition key", replace(good, `"partitionKey":"[\"acme\",`, `"partitionKey":"\u005b\u0022acme\u0022,`), decodedOK},

		// Times.
		{"time in a leap year", replace(good, `2026-11-23T08:00:00.123456Z`, `2024-02-29T08:00:00.123456Z`), decodedOK},
		{"February 29 of a common year", replace(good, `2026-11-23T08:00:00.123456Z`, `2026-02-29T08:00:00Z`), decodedInvalid},
		{"April 31", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"2026-04-31T08:00:01Z"`), decodedInvalid},
		{"December 31", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"2026-12-31T23:59:59.999999999Z"`), decodedOK},
		{"hour 24", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"2026-11-23T24:00:00Z"`), decodedInvalid},
		{"leap second", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"2016-12-31T23:59:60Z"`), decodedInvalid},
		{"ten digits of fraction", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"2026-11-23T08:00:01.1234567891Z"`), decodedOK},
		{"fraction without digits", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"2026-11-23T08:00:01.Z"`), decodedInvalid},
		{"fraction after a comma", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"2026-11-23T08:00:01,5Z"`), decodedOK},
		{"lower-case z", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"2026-11-23T08:00:01z"`), decodedInvalid},
		{"lower-case t", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"2026-11-23t08:00:01Z"`), decodedInvalid},
		{"offset", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"2026-11-23T10:00:01+02:00"`), decodedOK},
		{"one-digit hour", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"2026-11-23T8:00:01Z"`), decodedOK},
		{"year 0", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"0000-01-01T00:00:00Z"`), decodedOK},
		{"sign in the year", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"+026-11-23T08:00:01Z"`), decodedInvalid},
		{"escaped time", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"2026-11-23T08:00:01.123456\u005a"`), decodedInvalid},
		{"time with invalid UTF-8", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, "\"ingestedAt\":\"2026-11-23T08:00:01.123456Z\xff\""), decodedInvalid},
		{"time not closed", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":"2026-11-23T08:00:01.123456Z`), decodedInvalid},
		{"time null", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":null`), decodedOK},
		{"time a number", replace(good, `"ingestedAt":"2026-11-23T08:00:01.123456Z"`, `"ingestedAt":20261123`), decodedInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := checkDecodeMatchesReference(t, []byte(tc.data), sampleSchemas())
			if got != tc.want {
				_, err := Decode([]byte(tc.data), sampleSchemas())
				t.Errorf("Decode = %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}

// TestPlainEnd compares plainEnd, which looks at 8 bytes at a time, with a
// byte-by-byte scan at every position of strings that put a byte to stop
// at in every place of a word, after every kind of byte.
func TestPlainEnd(t *testing.T) {
	stops := []byte{'"', '\\', 0x00, 0x1f, 0x80, 0xff, 0xc3}
	plain := []byte{' ', '!', '#', '[', ']', 0x7f, 'a', '0', 0x21, 0x5d, 0x5b}
	want := func(s []byte, i int) int {
		for i < len(s) && s[i] >= 0x20 && s[i] < 0x80 && s[i] != '"' && s[i] != '\\' {
			i++
		}
		return i
	}
	rng := rand.New(rand.NewPCG(33, 34))
	for range 20000 {
		s := make([]byte, rng.IntN(40))
		for i := range s {
			switch rng.IntN(8) {
			case 0:
				s[i] = stops[rng.IntN(len(stops))]
			case 1:
				s[i] = byte(rng.IntN(256))
			default:
				s[i] = plain[rng.IntN(len(plain))]
			}
		}
		for i := 0; i <= len(s); i++ {
			if got, w := plainEnd(s, i), want(s, i); got != w {
				t.Fatalf("plainEnd(%q, %d) = %d, want %d", s, i, got, w)
			}
		}
	}
}

// TestParseTimeZ holds the fast path for times to time.Time.UnmarshalJSON:
// whatever it takes must come out identical, and it must take capture's
// form of days of every year from 0 to 9999 and of random instants.
func TestParseTimeZ(t *testing.T) {
	check := func(text string, mustTake bool) {
		t.Helper()
		got, ok := parseTimeZ([]byte(text))
		var want time.Time
		err := want.UnmarshalJSON([]byte(`"` + text + `"`))
		switch {
		case ok && err != nil:
			t.Fatalf("%s: the fast path takes it, UnmarshalJSON fails: %v", text, err)
		case ok && !reflect.DeepEqual(got, want):
			t.Fatalf("%s: the fast path reads %#v, UnmarshalJSON %#v", text, got, want)
		case !ok && mustTake:
			t.Fatalf("%s: the fast path leaves it to UnmarshalJSON", text)
		}
	}
	// Every day of 1900 to 2100, and the days around the ends of February
	// and of the year in every year.
	for day := time.Date(1900, 1, 1, 23, 59, 59, 0, time.UTC); day.Year() <= 2100; day = day.AddDate(0, 0, 1) {
		check(day.Format(time.RFC3339Nano), true)
	}
	for year := range 10000 {
		for _, day := range []time.Time{
			time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(year, 2, 28, 1, 2, 3, 4, time.UTC),
			time.Date(year, 3, 1, 0, 0, 0, 0, time.UTC).Add(-time.Nanosecond), time.Date(year, 3, 1, 0, 0, 0, 0, time.UTC),
			time.Date(year, 12, 31, 23, 59, 59, 999999999, time.UTC),
		} {
			check(day.Format(time.RFC3339Nano), true)
		}
	}
	rng := rand.New(rand.NewPCG(35, 36))
	for range 30000 {
		at := time.Unix(rng.Int64N(253402300800+62135596800)-62135596800, rng.Int64N(1e9)).UTC()
		check(at.Format(time.RFC3339Nano), true)
		text := []byte(at.Format(time.RFC3339Nano))
		// Respelt in one place, with a digit, a sign or a letter: whatever
		// the fast path still takes must be right.
		text[rng.IntN(len(text))] = "0123456789:-+.TZtz "[rng.IntN(19)]
		check(string(text), false)
	}
	for _, text := range []string{
		"2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z", "2100-02-29T00:00:00Z", "2000-02-29T00:00:00Z",
		"2026-04-31T00:00:00Z", "2026-00-10T00:00:00Z", "2026-13-10T00:00:00Z", "2026-01-00T00:00:00Z",
		"2026-01-01T24:00:00Z", "2026-01-01T23:60:00Z", "2026-01-01T23:59:60Z", "2026-01-01T23:59:59.Z",
		"2026-01-01T23:59:59.0Z", "2026-01-01T23:59:59.1234567890Z", "2026-01-01T23:59:59,5Z",
		"2026-01-01T23:59:59z", "2026-01-01t23:59:59Z", "2026-01-01T23:59:59+00:00", "2026-01-01T23:59:59",
		"2026-01-01T23:59:5Z", "2026-1-01T23:59:59Z", "-026-01-01T23:59:59Z", "2026-01-01T23:59:59.1a3Z",
		"2026/01/01T23:59:59Z", "2026-01-01T23-59-59Z", "", "Z",
	} {
		check(text, false)
	}
}

// TestDecoderDropsBuffers: a record larger than maxKeptRecord leaves the
// Decoder without the buffers it grew, and the next record decodes as
// before.
func TestDecoderDropsBuffers(t *testing.T) {
	r := sample()
	r.Values[2].Text = strings.Repeat("x", maxKeptRecord)
	big := AppendJSON(nil, r)
	small := AppendJSON(nil, sample())
	var d Decoder
	for _, decode := range []func([]byte, Schemas) (*Record, error){d.Decode, func(data []byte, s Schemas) (*Record, error) {
		_, err := d.DecodeBatch(data, s)
		return nil, err
	}} {
		if _, err := d.Decode(small, sampleSchemas()); err != nil {
			t.Fatal(err)
		}
		if cap(d.d.keep) == 0 {
			t.Fatal("a small record left no buffer to keep")
		}
		_, _ = decode(big, sampleSchemas())
		if cap(d.d.keep) != 0 || cap(d.d.names) != 0 || cap(d.d.payload) != 0 {
			t.Fatalf("buffers kept after a record of %d bytes: keep %d, names %d, payload %d", len(big), cap(d.d.keep), cap(d.d.names), cap(d.d.payload))
		}
		got, err := d.Decode(small, sampleSchemas())
		if err != nil || !reflect.DeepEqual(got, mustDecode(t, small)) {
			t.Fatalf("after a big record: %v, %v", got, err)
		}
	}
}

func mustDecode(t *testing.T, data []byte) *Record {
	t.Helper()
	r, err := Decode(data, sampleSchemas())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReadIntegers holds readInt and readUint to what encoding/json did
// for an integer field (strconv on a JSON integer), at the edges of each
// size and for numbers and other values of every kind.
func TestReadIntegers(t *testing.T) {
	tokens := append([]string{}, trickyNumbers...)
	for _, bits := range []int{16, 32, 64} {
		for _, n := range []uint64{1<<(bits-1) - 1, 1 << (bits - 1), 1<<(bits-1) + 1, 1<<bits - 1} {
			tokens = append(tokens, fmt.Sprint(n), "-"+fmt.Sprint(n), fmt.Sprint(n+1), fmt.Sprint(n)+"0")
		}
	}
	tokens = append(tokens, "9999999999999999999", "10000000000000000000", "-9999999999999999999", "00", "-00", "-", "", "0.5", "1e3", "12a")
	signed := integerReader[int64]{"readInt", true, (*scanner).readInt, strconv.ParseInt}
	unsigned := integerReader[uint64]{"readUint", false, (*scanner).readUint, strconv.ParseUint}
	for _, tok := range tokens {
		for _, bits := range []int{16, 32, 64} {
			signed.check(t, tok, bits)
			unsigned.check(t, tok, bits)
		}
	}
}

// integerReader is readInt or readUint with the strconv function
// encoding/json read the same integers with.
type integerReader[T int64 | uint64] struct {
	name   string
	signed bool
	read   func(s *scanner, bits int, field string) (T, error)
	parse  func(s string, base, bits int) (T, error)
}

// check reads tok, followed by what follows a number in a record, as an
// integer of bits, and compares it with strconv on a JSON integer (null:
// 0); a token the scanner took only part of fails at what follows it.
func (r integerReader[T]) check(t *testing.T, tok string, bits int) {
	t.Helper()
	s := scanner{data: []byte(tok + "}")}
	got, err := r.read(&s, bits, "n")
	if err == nil && s.peek() != '}' {
		err = s.syntaxError("'}'")
	}
	want, wantErr := r.parse(tok, 10, bits)
	if tok == "null" {
		want, wantErr = 0, nil
	} else if !isJSONInteger([]byte(tok), r.signed) && wantErr == nil {
		wantErr = errors.New("not a JSON integer")
	}
	if (err == nil) != (wantErr == nil) || err == nil && got != want {
		t.Errorf("%s(%q, %d) = %d, %v; want %d, %v", r.name, tok, bits, got, err, want, wantErr)
	}
}
