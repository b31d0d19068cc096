package record

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current encoder")

// trickyStrings are values that exercise every branch of the JSON string
// escaper, at positions that the word-at-a-time scan treats differently
// (start, middle, end of an 8-byte word, and strings shorter than a word).
var trickyStrings = []string{
	"", "a", "plain ascii text", "1234567", "12345678", "123456789",
	`"`, `\`, "\x00", "\x1f", "\x7f", "\t\n\r\b\f", "a\"b\\c",
	"é", "漢字", "🙂", "\u2028", "\u2029", "x\u2028y\u2029z", "\xff", "bad\xffutf8", "\xe2\x80", "\xed\xa0\x80",
	"<>&", "0123456\"", "01234567\\89", "abcdefg\x01hijklmno", "abcdefghijklmno\u00e9", "{\"g\": 1, \"ok\": true, \"tag\": \"k1\"}",
	strings.Repeat("long text without escapes ", 20), strings.Repeat("x", 63) + "\n", strings.Repeat("é", 33),
}

// randString returns a string of random length from a mix of bytes that
// need escaping, multi-byte runes, invalid UTF-8 and plain ASCII.
func randString(rng *rand.Rand) string {
	if rng.IntN(3) == 0 {
		return trickyStrings[rng.IntN(len(trickyStrings))]
	}
	n := rng.IntN(40)
	var b strings.Builder
	for i := 0; i < n; i++ {
		switch rng.IntN(12) {
		case 0:
			b.WriteByte(byte(rng.IntN(0x20)))
		case 1:
			b.WriteString([]string{`"`, `\`, "\u2028", "\u2029", "é", "漢", "🙂", "\x7f"}[rng.IntN(8)])
		case 2:
			b.WriteByte(byte(0x80 + rng.IntN(0x80))) // likely invalid UTF-8
		default:
			b.WriteByte(byte(0x20 + rng.IntN(0x5f)))
		}
	}
	return b.String()
}

// randTime covers years before 1000 and after 9999, sub-second digits with
// trailing zeros, and zones other than UTC.
func randTime(rng *rand.Rand) time.Time {
	var t time.Time
	switch rng.IntN(6) {
	case 0:
		t = time.Unix(rng.Int64N(1<<40)-1<<39, rng.Int64N(1e9)) // years -15000 to 19000
	case 1:
		t = time.Unix(rng.Int64N(4e9), 0)
	case 2:
		t = time.Unix(rng.Int64N(4e9), rng.Int64N(1000)*1e6)
	default:
		t = time.Unix(rng.Int64N(4e9), rng.Int64N(1e9))
	}
	if rng.IntN(3) == 0 {
		t = t.In(time.FixedZone("x", (rng.IntN(48)-24)*1800))
	}
	return t
}

// randRecord returns a record with a random shape and random values. It
// need not be valid: the encoders must agree on anything.
func randRecord(rng *rand.Rand) *Record {
	cols := make([]Column, 1+rng.IntN(8))
	for i := range cols {
		cols[i] = Column{
			Name: fmt.Sprintf("c%d_%s", i, randString(rng)), Type: randString(rng),
			Enum: rng.IntN(4) == 0, Array: rng.IntN(4) == 0, TypMod: int32(rng.IntN(100000)) - 1,
			Key: rng.IntN(3) == 0, Attnum: int16(rng.IntN(40)),
		}
		if rng.IntN(5) == 0 {
			m := randString(rng)
			cols[i].Missing = &m
		}
	}
	vals := func() []Value {
		vs := make([]Value, len(cols))
		for i := range vs {
			switch rng.IntN(8) {
			case 0:
				vs[i].Null = true
			case 1:
				vs[i].Unchanged = true
			default:
				vs[i].Text = randString(rng)
			}
		}
		return vs
	}
	r := &Record{
		EventID:    EventID(randString(rng), LSN(rng.Uint64()), rng.Uint32(), randTime(rng)),
		OccurredAt: randTime(rng),
		IngestedAt: randTime(rng),
		TenantID:   randString(rng),
		Source:     Source{ID: randString(rng), Schema: randString(rng), Table: randString(rng)},
		LSN:        LSN(rng.Uint64()),
		CommitLSN:  LSN(rng.Uint64() >> rng.IntN(64)),
		Ordinal:    rng.Uint32() >> rng.IntN(32),
		Version:    rng.Uint64() >> rng.IntN(64),
		Op:         Op(rng.IntN(6)),
		Columns:    cols,
		SchemaID:   randString(rng),
		Values:     vals(),
	}
	if rng.IntN(2) == 0 {
		r.TenantColumn = cols[rng.IntN(len(cols))].Name
	}
	if rng.IntN(4) == 0 {
		r.OldKey = vals()
	}
	if rng.IntN(10) == 0 {
		r.Values = r.Values[:rng.IntN(len(r.Values)+1)] // misaligned: encoders must still agree
	}
	return r
}

// randomRecords is how many random records the comparisons try: enough to
// meet every branch many times, few enough for the race detector.
const randomRecords = 4000

func TestAppendJSONMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < randomRecords; i++ {
		r := randRecord(rng)
		want := refAppendJSON(nil, r)
		if got := AppendJSONVersion(nil, r, 1); !bytes.Equal(got, want) {
			t.Fatalf("record %d: AppendJSONVersion 1 differs from the reference\n got %s\nwant %s", i, got, want)
		}
		if got, want := AppendJSON(nil, r), refV2(want); !bytes.Equal(got, want) {
			t.Fatalf("record %d: AppendJSON differs from the reference version 2\n got %s\nwant %s", i, got, want)
		}
		if got, want := r.AppendPartitionKey([]byte("prefix")), refAppendPartitionKey(r, []byte("prefix")); !bytes.Equal(got, want) {
			t.Fatalf("record %d: AppendPartitionKey = %s, want %s", i, got, want)
		}
	}
}

func TestAppendJSONStringBodyMatchesReference(t *testing.T) {
	check := func(s string) {
		t.Helper()
		if got, want := appendJSONStringBody([]byte("x"), s), refAppendJSONStringBody([]byte("x"), s); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %q, want %q", s, got, want)
		}
	}
	for _, s := range trickyStrings {
		check(s)
		// Every alignment of every tricky byte within a word.
		for pad := 0; pad < 9; pad++ {
			check(strings.Repeat("p", pad) + s)
			check(s + strings.Repeat("p", pad))
			check(strings.Repeat("p", pad) + s + strings.Repeat("q", 17-pad))
		}
	}
	for b := 0; b < 256; b++ {
		for pad := 0; pad < 17; pad++ {
			check(strings.Repeat("a", pad) + string([]byte{byte(b)}) + strings.Repeat("z", 16-pad))
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 20000; i++ {
		check(randString(rng) + randString(rng))
	}
}

func TestEventIDsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 5000; i++ {
		src, lsn, ord, at := randString(rng), LSN(rng.Uint64()), rng.Uint32(), randTime(rng)
		if i%7 == 0 {
			src = strings.Repeat(src+"/", 40) // longer than any stack buffer
		}
		if got, want := EventID(src, lsn, ord, at), refEventID(src, lsn, ord, at); got != want {
			t.Fatalf("EventID(%q, %v, %d, %v) = %s, want %s", src, lsn, ord, at, got, want)
		}
		keys := make([]string, rng.IntN(4))
		for k := range keys {
			keys[k] = randString(rng)
		}
		if i%11 == 0 {
			keys = append(keys, strings.Repeat("k", 300))
		}
		table := randString(rng)
		if got, want := SnapshotEventID(src, lsn, table, keys, at), refSnapshotEventID(src, lsn, table, keys, at); got != want {
			t.Fatalf("SnapshotEventID(%q, %v, %q, %q) = %s, want %s", src, lsn, table, keys, got, want)
		}
	}
}

// TestEnvelopeGolden pins the exact bytes of version 1 and version 2
// records and of a registry entry, so that no speed-up can change what
// consumers receive.
func TestEnvelopeGolden(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) { testEnvelopeGolden(t, version) })
	}
}

func testEnvelopeGolden(t *testing.T, version int) {
	var out bytes.Buffer
	add := func(name string, r *Record) {
		fmt.Fprintf(&out, "# %s\nkey %s\n%s\n", name, r.AppendPartitionKey(nil), AppendJSONVersion(nil, r, version))
	}
	add("update with an unchanged TOAST value", sample())
	del := sample()
	del.Op, del.OldKey = Delete, nil
	add("delete", del)
	moved := sample()
	moved.OldKey = []Value{{Text: "acme"}, {Text: "41"}, {Null: true}, {Null: true}, {Null: true}, {Null: true}}
	add("update that changed the key", moved)
	snap := sample()
	at := time.Date(2026, 11, 23, 7, 59, 0, 0, time.UTC)
	snap.Op, snap.Version, snap.LSN, snap.CommitLSN, snap.Ordinal, snap.OccurredAt = Read, SnapshotVersion, 0x16B0000028, 0x16B0000028, 0, at
	snap.Values[4] = Value{Text: strings.Repeat("x", 40)}
	snap.EventID = SnapshotEventID(snap.Source.ID, snap.LSN, "public.orders", []string{"acme", "42"}, at)
	add("snapshot row", snap)
	fmt.Fprintf(&out, "# event ids\n%s\n%s\n", EventID("sys/db", 0x16B374D848, 3, at), SnapshotEventID("sys/db", 0x16B374D848, "public.orders", []string{"acme", "4\"2"}, at))
	if version == 2 {
		r := sample()
		fmt.Fprintf(&out, "# schema registry entry\nkey %s\n%s\n", r.SchemaID, Schema{TenantColumn: r.TenantColumn, Columns: r.Columns}.AppendJSON(nil))
	}

	path := filepath.Join("testdata", fmt.Sprintf("envelope_v%d.golden", version))
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestEnvelopeGolden -update ./record to create it)", err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("the encoding changed; version %d records must stay byte-identical\n got:\n%s\nwant:\n%s", version, out.Bytes(), want)
	}
}

func TestEncoderMatchesAppendJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < randomRecords; i++ {
		r := randRecord(rng)
		version := 1 + i%2
		e := NewEncoder(r.Source, r.TenantColumn, r.Columns, r.SchemaID, version)
		other := randRecord(rng) // another relation: encoded without the speed-up, but right
		for _, rec := range []*Record{r, other} {
			want := refAppendJSON(nil, rec)
			if version == 2 {
				want = refV2(want)
			}
			if got := e.AppendJSON([]byte("prefix")[6:], rec); !bytes.Equal(got, want) {
				t.Fatalf("record %d: Encoder.AppendJSON differs\n got %s\nwant %s", i, got, want)
			}
			// A small buffer makes dst move while the key is copied from it.
			buf, key, value := e.AppendKeyValue(make([]byte, 3, 3+rng.IntN(40)), rec)
			if wantKey := refAppendPartitionKey(rec, nil); !bytes.Equal(key, wantKey) || !bytes.Equal(value, want) {
				t.Fatalf("record %d: AppendKeyValue = %s, %s\nwant %s, %s", i, key, value, wantKey, want)
			}
			if len(buf) != 3+len(key)+len(value) {
				t.Fatalf("record %d: AppendKeyValue returned a buffer of %d bytes for %d+%d", i, len(buf), len(key), len(value))
			}
		}
	}
}

func TestEncoderFits(t *testing.T) {
	r := sample()
	e := NewEncoder(r.Source, r.TenantColumn, r.Columns, r.SchemaID, EnvelopeVersion)
	copied := *r
	copied.Columns = append([]Column(nil), r.Columns...)
	for _, tc := range []struct {
		name string
		r    *Record
		fits bool
	}{
		{"same relation", r, true},
		{"equal columns in another slice", &copied, false},
		{"fewer columns", &Record{Source: r.Source, TenantColumn: r.TenantColumn, SchemaID: r.SchemaID, Columns: r.Columns[:2]}, false},
		{"other table", &Record{Source: Source{ID: "sys/db", Schema: "public", Table: "x"}, TenantColumn: r.TenantColumn, SchemaID: r.SchemaID, Columns: r.Columns}, false},
		{"other tenant column", &Record{Source: r.Source, SchemaID: r.SchemaID, Columns: r.Columns}, false},
		{"other schema id", &Record{Source: r.Source, TenantColumn: r.TenantColumn, SchemaID: "x", Columns: r.Columns}, false},
	} {
		if got := e.fits(tc.r); got != tc.fits {
			t.Errorf("%s: fits = %v, want %v", tc.name, got, tc.fits)
		}
	}
}

func TestParseEventIDMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const chars = "0123456789abcdefABCDEF-gx7 "
	for i := 0; i < 50000; i++ {
		s := EventID(randString(rng), LSN(rng.Uint64()), rng.Uint32(), randTime(rng))
		if i%3 == 0 {
			s = strings.ToUpper(s)
		}
		for m := rng.IntN(3); m > 0; m-- { // mutate a character or two
			j := rng.IntN(len(s))
			s = s[:j] + string(chars[rng.IntN(len(chars))]) + s[j+1:]
		}
		got, gotErr := ParseEventID(s)
		want, wantErr := refParseEventID(s)
		if !got.Equal(want) || (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
			t.Fatalf("ParseEventID(%q) = %v, %v; want %v, %v", s, got, gotErr, want, wantErr)
		}
	}
}

func TestSchemaIDMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for i := 0; i < randomRecords; i++ {
		r := randRecord(rng)
		if got, want := SchemaID(r.TenantColumn, r.Columns), refSchemaID(r.TenantColumn, r.Columns); got != want {
			t.Fatalf("record %d: SchemaID = %s, want %s (columns %+v)", i, got, want, r.Columns)
		}
	}
}
