package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests in this file hold Decode to the decoder it replaced
// (refDecode, encoding/json): on every input both must succeed or fail
// alike, with the same error class, and succeed with equal Records. The
// only inputs on which they may differ are the ones Decode's documentation
// names, which the old decoder accepted and Decode rejects: data after the
// record's object, and a field given twice (see expectedDeviation).

// decodeOutcome classifies a Decode result for comparison and counting.
type decodeOutcome int

const (
	decodedOK decodeOutcome = iota
	decodedInvalid
	decodedUnknownSchema
)

func (o decodeOutcome) String() string {
	return [...]string{"success", "ErrInvalid", "ErrUnknownSchema"}[o]
}

// outcomeOf returns the class of err, failing t when err wraps neither
// sentinel or both.
func outcomeOf(t testing.TB, who string, data []byte, err error) decodeOutcome {
	t.Helper()
	invalid, unknown := errors.Is(err, ErrInvalid), errors.Is(err, ErrUnknownSchema)
	switch {
	case err == nil:
		return decodedOK
	case invalid && !unknown:
		return decodedInvalid
	case unknown && !invalid:
		return decodedUnknownSchema
	}
	t.Fatalf("%s: error wraps ErrInvalid %v and ErrUnknownSchema %v: %v\ninput %q", who, invalid, unknown, err, data)
	return 0
}

// checkDecodeMatchesReference decodes data with Decode and refDecode and
// fails t where they disagree beyond the documented deviations. It returns
// Decode's outcome and whether data has one of those deviations.
func checkDecodeMatchesReference(t testing.TB, data []byte, schemas Schemas) (decodeOutcome, bool) {
	t.Helper()
	// Decode a copy, then overwrite it: the Record must not share its bytes.
	buf := bytes.Clone(data)
	got, gotErr := Decode(buf, schemas)
	for i := range buf {
		buf[i] = '#'
	}
	want, wantErr := refDecode(data, schemas)
	gotClass := outcomeOf(t, "Decode", data, gotErr)
	wantClass := outcomeOf(t, "refDecode", data, wantErr)
	if why := expectedDeviation(data); why != "" && (why != "a payload or key name given twice" || wantClass != decodedUnknownSchema) {
		if gotClass != decodedInvalid {
			t.Fatalf("input with %s: Decode = %v (%v), want ErrInvalid\ninput %q", why, gotClass, gotErr, data)
		}
		return gotClass, true
	}
	if gotClass != wantClass {
		t.Fatalf("Decode = %v (%v), reference = %v (%v)\ninput %q", gotClass, gotErr, wantClass, wantErr, data)
	}
	if gotClass == decodedOK && !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode and the reference decode differently:\n got %+v\nwant %+v\ninput %q", got, want, data)
	}
	return gotClass, false
}

// expectedDeviation names what in data makes Decode reject a record that
// the old decoder may have accepted, "" when nothing does. It is found with
// encoding/json alone, independently of Decode.
//
// A payload or key name given twice is judged against the schema, so with
// an unknown schema Decode reports ErrUnknownSchema as the old decoder did.
func expectedDeviation(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	var first json.RawMessage
	if err := dec.Decode(&first); err != nil {
		return "" // both fail: the first value is not even JSON
	}
	if rest := bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return "data after the record"
	}
	var wide struct {
		Columns, Unchanged []json.RawMessage
		Key, Payload       map[string]json.RawMessage
	}
	if json.Unmarshal(first, &wide) == nil && max(len(wide.Columns), len(wide.Unchanged), len(wide.Key), len(wide.Payload)) > MaxColumns {
		return "more members than MaxColumns"
	}
	var labelled struct{ Columns []struct{ Labels []*string } }
	if json.Unmarshal(first, &labelled) == nil {
		total := 0
		for _, c := range labelled.Columns {
			total += len(c.Labels)
			if len(c.Labels) > MaxEnumLabels || total > MaxSchemaLabels {
				return "more enum labels than MaxEnumLabels or MaxSchemaLabels"
			}
			if slices.Contains(c.Labels, nil) {
				return "a null enum label" // encoding/json made it ""
			}
		}
	}
	inStruct, inMap := repeatedNames(first)
	switch {
	case inStruct:
		return "a field given twice"
	case inMap:
		return "a payload or key name given twice"
	}
	return ""
}

// The field names of the old wire struct, of Source and of Column, as
// encoding/json matched them (bytes.EqualFold is its rule).
var (
	refRecordFields = []string{"eventId", "eventType", "eventVersion", "occurredAt", "ingestedAt", "tenantId", "tenantColumn", "partitionKey", "source", "lsn", "commitLsn", "ordinal", "version", "op", "schemaId", "columns", "key", "payload", "unchanged"}
	refSourceFields = []string{"id", "schema", "table"}
	refColumnFields = []string{"name", "type", "enum", "array", "typmod", "key", "attnum", "missing", "labels"}
)

// repeatedNames reports whether the JSON value v names a field twice in
// the record, its source or a column (inStruct), or a member twice in its
// payload or key (inMap).
func repeatedNames(v []byte) (inStruct, inMap bool) {
	const (
		other = iota
		record
		source
		column
		columns
		members
	)
	dec := json.NewDecoder(bytes.NewReader(v))
	var walk func(kind int) error
	walk = func(kind int) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		delim, ok := tok.(json.Delim)
		if !ok {
			return nil
		}
		if delim == '[' {
			elem := other
			if kind == columns {
				elem = column
			}
			for dec.More() {
				if err := walk(elem); err != nil {
					return err
				}
			}
			_, err := dec.Token()
			return err
		}
		var fields, seen []string
		switch kind {
		case record:
			fields = refRecordFields
		case source:
			fields = refSourceFields
		case column:
			fields = refColumnFields
		}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			name := tok.(string)
			child := other
			switch kind {
			case record, source, column:
				for _, f := range fields {
					if !bytes.EqualFold([]byte(name), []byte(f)) {
						continue
					}
					for _, s := range seen {
						inStruct = inStruct || s == f
					}
					seen = append(seen, f)
					if kind == record {
						switch f {
						case "source":
							child = source
						case "columns":
							child = columns
						case "payload", "key":
							child = members
						}
					}
				}
			case members:
				for _, s := range seen {
					inMap = inMap || s == name
				}
				seen = append(seen, name)
			}
			if err := walk(child); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	_ = walk(record)
	return inStruct, inMap
}

// validRandRecord returns a random record that decodes: randRecord's shape
// and values, with what Validate requires put right. Names, keys and the
// tenant are made valid UTF-8, which capture's encoder keeps as it is; other
// values keep invalid UTF-8, which decodes as U+FFFD.
func validRandRecord(rng *rand.Rand) *Record {
	r := randRecord(rng)
	valid := func(s string) string {
		if s = strings.ToValidUTF8(s, "?"); s == "" {
			return "x"
		}
		return s
	}
	for i := range r.Columns {
		c := &r.Columns[i]
		c.Name, c.Type = valid(c.Name), valid(c.Type)
		if c.Missing != nil {
			m := valid(*c.Missing)
			c.Missing = &m
		}
	}
	r.Columns[rng.IntN(len(r.Columns))].Key = true
	for len(r.Values) < len(r.Columns) {
		r.Values = append(r.Values, Value{Text: randString(rng)})
	}
	if r.TenantColumn != "" {
		r.TenantColumn = r.Columns[rng.IntN(len(r.Columns))].Name
	}
	r.TenantID = valid(r.TenantID)
	for i, c := range r.Columns {
		switch {
		case c.Name == r.TenantColumn:
			r.Values[i] = Value{Text: r.TenantID}
		case c.Key:
			r.Values[i] = Value{Text: valid(r.Values[i].Text)}
		}
		if r.OldKey != nil && c.Key {
			r.OldKey[i] = Value{Text: valid(r.OldKey[i].Text)}
		}
	}
	r.Op = Op(1 + rng.IntN(4))
	if r.Op == Read {
		r.Version = SnapshotVersion
	}
	r.Source = Source{ID: valid(r.Source.ID), Schema: valid(r.Source.Schema), Table: valid(r.Source.Table)}
	r.LSN |= 1
	r.CommitLSN |= 1
	if r.LSN > r.CommitLSN { // a change precedes its commit
		r.LSN, r.CommitLSN = r.CommitLSN, r.LSN
	}
	if r.Op != Read {
		r.Version = Version(r.LSN)
	}
	// Times within the years RFC 3339 can write.
	r.OccurredAt = time.Unix(1+rng.Int64N(4e9), rng.Int64N(1e9))
	if rng.IntN(3) == 0 {
		r.OccurredAt = r.OccurredAt.In(time.FixedZone("x", (rng.IntN(48)-24)*1800))
	}
	r.IngestedAt = time.Unix(rng.Int64N(4e9), rng.Int64N(1e9))
	r.SchemaID = SchemaID(r.TenantColumn, r.Columns)
	return r
}

func TestDecodeMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	var schemas SchemaSet
	var counts [3]int
	deviations := 0
	check := func(data []byte) {
		outcome, deviates := checkDecodeMatchesReference(t, data, &schemas)
		counts[outcome]++
		if deviates {
			deviations++
		}
	}
	// Half of randomRecords, each with a few mutants: the reference decoder
	// is slow under the race detector.
	for i := 0; i < randomRecords/2; i++ {
		r := validRandRecord(rng)
		if i%5 == 0 {
			r = randRecord(rng) // mostly invalid
		}
		if rng.IntN(10) != 0 { // else its schema stays unknown
			schemas.Add(Schema{TenantColumn: r.TenantColumn, Columns: r.Columns})
		}
		data := AppendJSONVersion(nil, r, 1+rng.IntN(2))
		check(data)
		for m := 0; m < 2; m++ {
			mutated := mutateRecord(rng, data)
			check(mutated)
			if rng.IntN(2) == 0 {
				check(mutateRecord(rng, mutated))
			}
		}
	}
	t.Logf("outcomes: %d success, %d ErrInvalid (%d of them on input the old decoder may have taken), %d ErrUnknownSchema",
		counts[decodedOK], counts[decodedInvalid], deviations, counts[decodedUnknownSchema])
	// Each class must be met often, or the comparison proves little.
	for class, n := range counts {
		if n < randomRecords/20 {
			t.Errorf("only %d %v outcomes", n, decodeOutcome(class))
		}
	}
	if deviations < randomRecords/20 {
		t.Errorf("only %d inputs with data after the record or a name given twice", deviations)
	}
}

// FuzzDecodeMatchesReference holds Decode to the reference decoder on
// arbitrary bytes, starting from real records of both versions.
func FuzzDecodeMatchesReference(f *testing.F) {
	var schemas SchemaSet
	rng := rand.New(rand.NewPCG(15, 16))
	for _, r := range []*Record{sample(), benchRow(), validRandRecord(rng), validRandRecord(rng)} {
		schemas.Add(Schema{TenantColumn: r.TenantColumn, Columns: r.Columns})
		for _, version := range []int{1, 2} {
			data := AppendJSONVersion(nil, r, version)
			f.Add(data)
			f.Add(mutateRecord(rng, data))
		}
	}
	labelled := sample()
	labelled.Columns[5].Labels = []string{"new", "paid \"in full\"", "shipped"}
	schemas.Add(Schema{TenantColumn: labelled.TenantColumn, Columns: labelled.Columns})
	for _, version := range []int{1, 2} {
		f.Add(AppendJSONVersion(nil, labelled, version))
	}
	moved := sample()
	moved.OldKey = []Value{{Text: "acme"}, {Text: "41"}, {Null: true}, {Null: true}, {Null: true}, {Null: true}}
	f.Add(AppendJSON(nil, moved))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecodeMatchesReference(t, data, &schemas)
	})
}

// mutateRecord returns a copy of the encoded record data changed in one
// random way: bytes edited, a field deleted, repeated, retyped or renamed,
// fields reordered, white space added, strings or numbers respelt, data
// appended.
func mutateRecord(rng *rand.Rand, data []byte) []byte {
	switch rng.IntN(10) {
	case 0, 1:
		return editBytes(rng, data)
	case 2:
		return append(bytes.Clone(data), []string{" ", "\n\t", "x", "{}", " null", ",", "\x00"}[rng.IntN(7)]...)
	case 3:
		var out bytes.Buffer
		if json.Indent(&out, data, []string{"", " "}[rng.IntN(2)], []string{"", " ", "\t", "\r\n"}[rng.IntN(4)]) != nil {
			return editBytes(rng, data)
		}
		return append(out.Bytes(), []string{"", " ", "\n"}[rng.IntN(3)]...)
	case 4:
		return respellString(rng, data)
	case 5:
		return respellNumber(rng, data)
	default:
		ms, ok := splitObject(data)
		if !ok {
			return editBytes(rng, data)
		}
		// Mostly the record itself; else one of its objects.
		if i := rng.IntN(len(ms) + 1); i < len(ms) && rng.IntN(2) == 0 {
			ms[i].value = mutateNested(rng, ms[i].value)
			return joinObject(ms)
		}
		return joinObject(mutateMembers(rng, ms))
	}
}

// editBytes replaces, inserts or deletes a few bytes, mostly ones that
// mean something in JSON.
func editBytes(rng *rand.Rand, data []byte) []byte {
	const alphabet = "{}[]\":,\\ \t\n0123456789-+.eEtrufalsn/xu\x00\x1f\x7f\xff\xc3\xa9"
	b := bytes.Clone(data)
	for n := 1 + rng.IntN(3); n > 0 && len(b) > 0; n-- {
		i := rng.IntN(len(b))
		c := alphabet[rng.IntN(len(alphabet))]
		switch rng.IntN(3) {
		case 0:
			b[i] = c
		case 1:
			b = append(b[:i], append([]byte{c}, b[i:]...)...)
		default:
			b = append(b[:i], b[i+1:]...)
		}
	}
	return b
}

// trickyJSONStrings are string bodies, as written in JSON, that exercise
// unescaping: every escape, surrogates valid and not, raw invalid UTF-8,
// control characters and invalid escapes.
var trickyJSONStrings = []string{
	``, `x`, `\"`, `\\`, `\/`, `\b\f\n\r\t`, `\u0041`, `\u00e9\u00E9`, `\u0000`, `\u001f`, `\u2028`,
	`\ud83d\ude42`, `\uD83D\uDE42`, `\ud800`, `\udc00`, `\ud800x`, `\ud800\u0041`, `\ud800\ud800`, `\udc00\ud800`,
	`\ud800\udc00\udc00`, `\ud83d\u`, `\u12`, `\uzzzz`, `\x`, `\'`, `\`, "\xff", "\xc3", "\xed\xa0\x80", "a\xffb\xfe",
	"\x01", "\t", "\x7f", "é漢🙂", `\ufffd`, "\xef\xbf\xbd",
}

// respellString replaces the body of a random string in data with a tricky
// one, or appends one to it.
func respellString(rng *rand.Rand, data []byte) []byte {
	var quotes []int
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			quotes = append(quotes, i)
		}
	}
	if len(quotes) < 2 {
		return editBytes(rng, data)
	}
	k := rng.IntN(len(quotes)/2) * 2
	start, end := quotes[k]+1, quotes[k+1]
	body := trickyJSONStrings[rng.IntN(len(trickyJSONStrings))]
	if rng.IntN(2) == 0 {
		start = end // append to the string instead
	}
	return append(append(bytes.Clone(data[:start]), body...), data[end:]...)
}

// trickyNumbers are numbers and other values put where numbers are.
var trickyNumbers = []string{
	"0", "1", "2", "3", "-0", "-1", "01", "+1", "1.0", "1e0", "1E0", "2.5", "1e400", "-", "NaN", "nan", "Infinity", "inf",
	"4294967295", "4294967296", "18446744073709551615", "18446744073709551616", "9223372036854775807", "9223372036854775808",
	"-9223372036854775808", "-9223372036854775809", "32767", "32768", "-32769", "2147483648", "-2147483649",
	`"1"`, "null", "true", "[]", "{}", "1.2.3", "0x10",
}

// respellNumber replaces a random run of digits in data with another
// number or value.
func respellNumber(rng *rand.Rand, data []byte) []byte {
	var runs [][2]int
	for i := 0; i < len(data); {
		if data[i] >= '0' && data[i] <= '9' && (i == 0 || data[i-1] == ':' || data[i-1] == ' ') {
			j := i
			for j < len(data) && data[j] >= '0' && data[j] <= '9' {
				j++
			}
			runs = append(runs, [2]int{i, j})
			i = j
			continue
		}
		i++
	}
	if len(runs) == 0 {
		return editBytes(rng, data)
	}
	run := runs[rng.IntN(len(runs))]
	return append(append(bytes.Clone(data[:run[0]]), trickyNumbers[rng.IntN(len(trickyNumbers))]...), data[run[1]:]...)
}

// jsonMember is one member of a JSON object: its name as written (quoted)
// and its value as written.
type jsonMember struct {
	name  []byte
	value []byte
}

// splitObject returns the members of the JSON object data in order, false
// when data is not one.
func splitObject(data []byte) ([]jsonMember, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var ms []jsonMember
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, false
		}
		ms = append(ms, jsonMember{name: appendJSONString(nil, tok.(string)), value: value})
	}
	return ms, true
}

// joinObject writes members as a JSON object.
func joinObject(ms []jsonMember) []byte {
	b := []byte{'{'}
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(b, m.name...), ':'), m.value...)
	}
	return append(b, '}')
}

// otherValues are values of every JSON type, put in place of a field's.
var otherValues = []string{
	`null`, `true`, `false`, `0`, `1`, `-1`, `1.5`, `""`, `"x"`, `"0/1"`, `"c"`, `"2026-01-01T00:00:00Z"`,
	`"2026-01-01T00:00:00\u005a"`, `[]`, `[null]`, `["x"]`, `[{}]`, `{}`, `{"a":null}`, `{"a":"b"}`, `{"id":"x"}`, `"\ud800"`,
}

// mutateMembers changes the members of an object in one random way.
func mutateMembers(rng *rand.Rand, ms []jsonMember) []jsonMember {
	if len(ms) == 0 {
		return append(ms, jsonMember{name: []byte(`"extra"`), value: []byte(`1`)})
	}
	i := rng.IntN(len(ms))
	switch rng.IntN(7) {
	case 0: // delete
		return append(ms[:i], ms[i+1:]...)
	case 1: // give twice, with the same or another value
		dup := ms[i]
		if rng.IntN(2) == 0 {
			dup.value = []byte(otherValues[rng.IntN(len(otherValues))])
		}
		j := rng.IntN(len(ms) + 1)
		return append(ms[:j], append([]jsonMember{dup}, ms[j:]...)...)
	case 2: // retype
		ms[i].value = []byte(otherValues[rng.IntN(len(otherValues))])
	case 3: // reorder
		rng.Shuffle(len(ms), func(a, b int) { ms[a], ms[b] = ms[b], ms[a] })
	case 4: // rename as encoding/json would still match, or not
		ms[i].name = respellName(rng, ms[i].name)
	case 5: // an unknown field
		j := rng.IntN(len(ms) + 1)
		return append(ms[:j], append([]jsonMember{{name: []byte(`"extra"`), value: []byte(otherValues[rng.IntN(len(otherValues))])}}, ms[j:]...)...)
	default: // a value of a copied record's other field
		ms[i].value = ms[rng.IntN(len(ms))].value
	}
	return ms
}

// respellName changes the quoted name in ways encoding/json matches
// (other case, U+017F for s, U+212A for k, escapes) and ways it does not.
func respellName(rng *rand.Rand, quoted []byte) []byte {
	var name string
	if json.Unmarshal(quoted, &name) != nil || name == "" {
		return quoted
	}
	switch rng.IntN(6) {
	case 0:
		name = strings.ToUpper(name)
	case 1:
		name = strings.ReplaceAll(strings.ReplaceAll(name, "s", "ſ"), "k", "\u212a")
	case 2:
		i := rng.IntN(len(name))
		return fmt.Appendf(nil, `"%s\u%04x%s"`, name[:i], name[i], name[i+1:]) // escaped, possibly badly
	case 3:
		name += "\u0131" // dotless i: folds to nothing ASCII
	case 4:
		return append(append([]byte(`"`), name...), `\ud800"`...)
	default:
		name = strings.ToLower(name)
	}
	return appendJSONString(nil, name)
}

// mutateNested changes the object or array of objects value (source,
// payload, key, columns) in one random way; other values it edits.
func mutateNested(rng *rand.Rand, value []byte) []byte {
	if ms, ok := splitObject(value); ok {
		return joinObject(mutateMembers(rng, ms))
	}
	var items []json.RawMessage
	if json.Unmarshal(value, &items) == nil && len(items) > 0 {
		i := rng.IntN(len(items))
		if ms, ok := splitObject(items[i]); ok {
			items[i] = joinObject(mutateMembers(rng, ms))
		} else {
			items[i] = []byte(otherValues[rng.IntN(len(otherValues))])
		}
		return append(append([]byte{'['}, bytes.Join(rawItems(items), []byte{','})...), ']')
	}
	return editBytes(rng, value)
}

// rawItems converts items for bytes.Join.
func rawItems(items []json.RawMessage) [][]byte {
	out := make([][]byte, len(items))
	for i, it := range items {
		out[i] = it
	}
	return out
}

// TestDecodeStrings pins how payload strings are unescaped: as
// encoding/json did, including U+FFFD for invalid UTF-8 and for surrogate
// escapes that are not a valid pair, one per bad byte or escape.
func TestDecodeStrings(t *testing.T) {
	for _, tc := range []struct{ wire, want string }{
		{`plain`, "plain"},
		{`\"\\\/\b\f\n\r\t`, "\"\\/\b\f\n\r\t"},
		{`\u00e9\u00E9\u0000`, "éé\x00"},
		{`\ud83d\ude42`, "🙂"},
		{`\ud800`, "\ufffd"},
		{`\udc00\ud800`, "\ufffd\ufffd"},
		{`\ud800\u0041`, "\ufffdA"},
		{`\ud800\ud83d\ude42`, "\ufffd🙂"},
		{"a\xffb", "a\ufffdb"},
		{"\xed\xa0\x80", "\ufffd\ufffd\ufffd"},
		{"\xc3", "\ufffd"},
		{"é漢🙂\x7f", "é漢🙂\x7f"},
	} {
		r := sample()
		data := strings.Replace(string(AppendJSON(nil, r)), `"status":"paid"`, `"status":"`+tc.wire+`"`, 1)
		got, err := Decode([]byte(data), sampleSchemas())
		if err != nil {
			t.Errorf("%q: %v", tc.wire, err)
			continue
		}
		if got.Values[5].Text != tc.want {
			t.Errorf("%q decoded as %q, want %q", tc.wire, got.Values[5].Text, tc.want)
		}
		checkDecodeMatchesReference(t, []byte(data), sampleSchemas())
	}
}

// TestDecodeRejects lists what Decode rejects, with the old decoder's
// verdict on it: the same, except where noted.
func TestDecodeRejects(t *testing.T) {
	good := string(AppendJSON(nil, sample()))
	replace := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("%q is not in the sample record", old)
		}
		return strings.Replace(good, old, new, 1)
	}
	for _, tc := range []struct {
		name, data  string
		oldAccepted bool // the old decoder took it: a documented deviation
	}{
		{"data after the object", good + `{}`, true},
		{"garbage after the object", good + `x`, true},
		{"field twice", replace(`"op":"u"`, `"op":"u","op":"u"`), true},
		{"field twice in another case", replace(`"op":"u"`, `"op":"u","OP":"u"`), true},
		{"source field twice", replace(`"table":"orders"`, `"table":"orders","table":"orders"`), true},
		{"payload name twice", replace(`"status":"paid"`, `"status":"paid","status":"paid"`), true},
		{"unknown field", replace(`{"eventId"`, `{"extra":1,"eventId"`), false},
		{"unknown source field", replace(`"table":"orders"`, `"table":"orders","db":"x"`), false},
		{"number for a string", replace(`"op":"u"`, `"op":1`), false},
		{"string for a number", replace(`"ordinal":3`, `"ordinal":"3"`), false},
		{"float ordinal", replace(`"ordinal":3`, `"ordinal":3.0`), false},
		{"exponent ordinal", replace(`"ordinal":3`, `"ordinal":3e0`), false},
		{"negative zero ordinal", replace(`"ordinal":3`, `"ordinal":-0`), false},
		{"leading zero", replace(`"ordinal":3`, `"ordinal":03`), false},
		{"ordinal overflow", replace(`"ordinal":3`, `"ordinal":4294967296`), false},
		{"version overflow", replace(fmt.Sprintf(`"version":%d`, sample().Version), `"version":18446744073709551616`), false},
		{"negative version", replace(fmt.Sprintf(`"version":%d`, sample().Version), `"version":-1`), false},
		{"null in unchanged", replace(`"unchanged":["big"]`, `"unchanged":["big",null]`), false},
		{"NaN", replace(`"ordinal":3`, `"ordinal":NaN`), false},
		{"float eventVersion", replace(`"eventVersion":2`, `"eventVersion":2.0`), false},
		{"number in payload", replace(`"status":"paid"`, `"status":1`), false},
		{"object in payload", replace(`"status":"paid"`, `"status":{}`), false},
		{"control character", replace(`"status":"paid"`, "\"status\":\"pa\x01id\""), false},
		{"bad escape", replace(`"status":"paid"`, `"status":"pa\id"`), false},
		{"bad escape in a payload name", replace(`"status":"paid"`, `"st\atus":"paid"`), false},
		{"escaped time", replace(`456Z"`, `456\u005a"`), false},
		{"time not RFC 3339", replace(`"occurredAt":"2026-11-23T08:00:00.123456Z"`, `"occurredAt":"2026-11-23 08:00:00Z"`), false},
		{"array record", `[` + good + `]`, false},
		{"empty", ``, false},
	} {
		_, err := Decode([]byte(tc.data), sampleSchemas())
		if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrUnknownSchema) {
			t.Errorf("%s: Decode = %v, want ErrInvalid", tc.name, err)
		}
		_, refErr := refDecode([]byte(tc.data), sampleSchemas())
		if oldAccepted := refErr == nil; oldAccepted != tc.oldAccepted {
			t.Errorf("%s: the old decoder accepted it: %v, listed as %v (%v)", tc.name, oldAccepted, tc.oldAccepted, refErr)
		}
		if !tc.oldAccepted {
			checkDecodeMatchesReference(t, []byte(tc.data), sampleSchemas())
		}
	}
}

// TestDecodeAccepts lists what Decode accepts as encoding/json did,
// though capture never writes it.
func TestDecodeAccepts(t *testing.T) {
	good := string(AppendJSON(nil, sample()))
	var out bytes.Buffer
	if err := json.Indent(&out, []byte(good), " ", "\t"); err != nil {
		t.Fatal(err)
	}
	indented := out.String()
	replace := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("%q is not in the sample record", old)
		}
		return strings.Replace(good, old, new, 1)
	}
	for name, data := range map[string]string{
		"white space":               " \t\n" + indented + "\r\n",
		"names in other case":       replace(`"eventId"`, `"EVENTID"`),
		"long s for s":              replace(`"schemaId"`, `"ſchemaId"`),
		"Kelvin sign for k":         replace(`"partitionKey"`, "\"partition\u212aey\""),
		"escaped name":              replace(`"eventId"`, `"event\u0049d"`),
		"escaped source name":       replace(`"table"`, `"t\u0061ble"`),
		"escaped payload name":      replace(`"status"`, `"st\u0061tus"`),
		"null optional fields":      replace(`"payload"`, `"key":null,"columns":null,"payload"`),
		"a name twice in unchanged": replace(`"unchanged":["big"]`, `"unchanged":["big","big"]`),
		"escaped slash in lsn":      replace(`"lsn":"16/B374D000"`, `"lsn":"16\/B374D000"`),
		"time with offset":          replace(`"occurredAt":"2026-11-23T08:00:00.123456Z"`, `"occurredAt":"2026-11-23T10:00:00.123456+02:00"`),
		"reordered":                 replace(`{"eventId"`, `{"unchanged":["big"],"eventId"`),
	} {
		if name == "reordered" {
			data = strings.Replace(data, `,"unchanged":["big"]}`, `}`, 1)
		}
		if _, err := Decode([]byte(data), sampleSchemas()); err != nil {
			t.Errorf("%s: %v\n%s", name, err, data)
		}
		checkDecodeMatchesReference(t, []byte(data), sampleSchemas())
	}
}

// TestDecodeConcurrently decodes from many goroutines at once, each with a
// Decoder of its own that it reuses and through Decode, so that go test
// -race sees anything they share, and a reused Decoder is checked against
// fresh ones.
func TestDecodeConcurrently(t *testing.T) {
	schemas := sampleSchemas()
	rng := rand.New(rand.NewPCG(17, 18))
	inputs := [][]byte{AppendJSON(nil, sample()), AppendJSONVersion(nil, sample(), 1)}
	for range 30 {
		inputs = append(inputs, mutateRecord(rng, inputs[rng.IntN(2)]))
	}
	want := make([]*Record, len(inputs))
	wantErr := make([]error, len(inputs))
	for i, in := range inputs {
		want[i], wantErr[i] = Decode(in, schemas)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			var d Decoder
			for n := range 200 {
				i := (g + n) % len(inputs)
				decode := d.Decode
				if n%3 == 0 {
					decode = Decode
				}
				got, err := decode(inputs[i], schemas)
				if (err == nil) != (wantErr[i] == nil) || !reflect.DeepEqual(got, want[i]) {
					t.Errorf("input %d decodes differently when shared: %v, %v", i, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestDecodeWideRecord compares the decoders on relations wider than
// columnLookup scans, with members in column order (with unchanged
// columns left out) and shuffled.
func TestDecodeWideRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	var schemas SchemaSet
	for _, n := range []int{9, 63, 64, 65, 200} {
		r := validRandRecord(rng)
		r.Columns = r.Columns[:0]
		r.Values = r.Values[:0]
		for i := range n {
			r.Columns = append(r.Columns, Column{Name: fmt.Sprintf("col_%d", i), Type: "text", TypMod: -1, Key: i == 1 || i == n-1})
			v := Value{Text: randString(rng)}
			switch {
			case r.Columns[i].Key: // valid UTF-8, or the partition key cannot match
				v.Text = strings.ToValidUTF8(v.Text, "?")
			case rng.IntN(5) == 0:
				v = Value{Unchanged: true}
			case rng.IntN(5) == 0:
				v = Value{Null: true}
			}
			r.Values = append(r.Values, v)
		}
		r.TenantColumn, r.TenantID = "col_1", r.Values[1].Text
		r.SchemaID = SchemaID(r.TenantColumn, r.Columns)
		r.OldKey = nil
		if rng.IntN(2) == 0 {
			r.OldKey = make([]Value, n)
			for i, c := range r.Columns {
				r.OldKey[i] = Value{Null: !c.Key, Text: map[bool]string{true: "old"}[c.Key]}
			}
		}
		schemas.Add(Schema{TenantColumn: r.TenantColumn, Columns: r.Columns})
		for _, version := range []int{1, 2} {
			data := AppendJSONVersion(nil, r, version)
			if outcome, _ := checkDecodeMatchesReference(t, data, &schemas); outcome != decodedOK {
				t.Fatalf("%d columns, version %d: %v", n, version, outcome)
			}
			ms, _ := splitObject(data)
			for i := range ms {
				if name := string(ms[i].name); name == `"payload"` || name == `"key"` {
					members, _ := splitObject(ms[i].value)
					rng.Shuffle(len(members), func(a, b int) { members[a], members[b] = members[b], members[a] })
					ms[i].value = joinObject(members)
				}
			}
			if outcome, _ := checkDecodeMatchesReference(t, joinObject(ms), &schemas); outcome != decodedOK {
				t.Fatalf("%d columns, version %d, shuffled: %v", n, version, outcome)
			}
		}
	}
}
