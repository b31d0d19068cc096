package record

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// snapshotRows returns n random snapshot rows of one random relation, as
// capture makes them: the shared fields equal, eventIds derived.
func snapshotRows(rng *rand.Rand, n int) []*Record {
	proto := validRandRecord(rng)
	proto.Op, proto.Version, proto.Ordinal, proto.OldKey = Read, SnapshotVersion, 0, nil
	proto.LSN = proto.CommitLSN
	if rng.IntN(3) == 0 { // a copy after a table rewrite
		proto.Version = RewriteCopyVersion(proto.LSN)
	}
	if proto.TenantColumn == "" && rng.IntN(2) == 0 {
		proto.TenantID = "tenant \"x\"\t" + proto.TenantID
	}
	table := proto.Source.Schema + "." + proto.Source.Table
	out := make([]*Record, n)
	for i := range out {
		r := *proto
		r.Values = make([]Value, len(proto.Columns))
		var keys []string
		for j, c := range proto.Columns {
			switch {
			case c.Name == r.TenantColumn && rng.IntN(2) == 0:
				r.Values[j] = Value{Text: proto.TenantID}
			case c.Name == r.TenantColumn:
				r.Values[j] = Value{Text: strings.ToValidUTF8(randString(rng), "?") + "t"}
			case c.Key:
				r.Values[j] = Value{Text: strings.ToValidUTF8(randString(rng), "?")}
			case rng.IntN(4) == 0:
				r.Values[j] = Value{Null: true}
			default:
				r.Values[j] = Value{Text: randString(rng)}
			}
			if c.Name == r.TenantColumn {
				r.TenantID = r.Values[j].Text
			}
			if c.Key {
				keys = append(keys, r.Values[j].Text)
			}
		}
		r.EventID = SnapshotEventID(r.Source.ID, r.CommitLSN, table, keys, r.OccurredAt)
		out[i] = &r
	}
	return out
}

// encodeBatch writes rows as one row batch.
func encodeBatch(rows []*Record) []byte {
	r := rows[0]
	enc := NewEncoder(r.Source, r.TenantColumn, r.Columns, r.SchemaID, 2)
	var b RowBatch
	enc.StartBatch(&b, nil, r)
	for _, row := range rows {
		enc.AddRow(&b, row.Values)
	}
	return b.Finish()
}

// TestBatchMatchesRecords holds a row batch to the records it stands for:
// each decoded row equals the same row sent as a record of its own, eventId,
// tenant and all.
func TestBatchMatchesRecords(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	var dec Decoder
	for i := 0; i < 300; i++ {
		rows := snapshotRows(rng, 1+rng.IntN(20))
		var schemas SchemaSet
		schemas.Add(Schema{TenantColumn: rows[0].TenantColumn, Columns: rows[0].Columns})
		data := encodeBatch(rows)
		got, err := dec.DecodeBatch(data, &schemas)
		if err != nil {
			t.Fatalf("DecodeBatch: %v\n%s", err, data)
		}
		if len(got) != len(rows) {
			t.Fatalf("%d rows decoded, want %d", len(got), len(rows))
		}
		for j, r := range rows {
			want, err := Decode(AppendJSON(nil, r), &schemas)
			if err != nil {
				t.Fatalf("the row as a record of its own: %v", err)
			}
			// Compared in their encoding: decoded times have zones of
			// their own.
			if g, w := AppendJSON(nil, got[j]), AppendJSON(nil, want); string(g) != string(w) {
				t.Fatalf("row %d:\n got %s\nwant %s", j, g, w)
			}
		}
		if _, err := Decode(data, &schemas); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "DecodeBatch") {
			t.Fatalf("Decode of a row batch = %v, want an error that points to DecodeBatch", err)
		}
	}
}

func TestDecodeBatchRejects(t *testing.T) {
	rows := snapshotRows(rand.New(rand.NewPCG(23, 24)), 3)
	for rows[0].TenantColumn == "" {
		rows = snapshotRows(rand.New(rand.NewPCG(uint64(len(rows[0].Columns)), 25)), 3)
	}
	var schemas SchemaSet
	schemas.Add(Schema{TenantColumn: rows[0].TenantColumn, Columns: rows[0].Columns})
	good := string(encodeBatch(rows))
	replace := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("%q is not in the batch %s", old, good)
		}
		return strings.Replace(good, old, new, 1)
	}
	width := len(rows[0].Columns)
	for _, tc := range []struct{ name, data string }{
		{"a single record", string(AppendJSON(nil, rows[0]))},
		{"no rows", replace(`"rows":[`, `"rows":[[],`)},
		{"empty rows", good[:strings.Index(good, `"rows":[`)] + `"rows":[]}`},
		{"rows null", good[:strings.Index(good, `"rows":[`)] + `"rows":null}`},
		{"rows an object", good[:strings.Index(good, `"rows":[`)] + `"rows":{}}`},
		{"a row too short", replace(`"rows":[[`, `"rows":[[null],[`)},
		{"a number in a row", replace(`"rows":[[`, `"rows":[[`+strings.Repeat(`1,`, width-1)+`1],[`)},
		{"a row that is a string", replace(`"rows":[[`, `"rows":["x",[`)},
		{"an eventId", replace(`{"eventType"`, `{"eventId":"`+rows[0].EventID+`","eventType"`)},
		{"a payload", replace(`"rows":`, `"payload":{},"rows":`)},
		{"a tenantId next to a tenant column", replace(`"eventVersion":2,`, `"eventVersion":2,"tenantId":"x",`)},
		{"version 1", replace(`"eventVersion":2,`, `"eventVersion":1,`)},
		{"an update", replace(`"op":"r"`, `"op":"u"`)},
		{"an ordinal", replace(`"ordinal":0`, `"ordinal":1`)},
		{"a version", replace(`"version":0`, `"version":7`)},
		{"eventType of another table", replace(`.snapshotted"`, `x.snapshotted"`)},
		{"data after the object", good + "{}"},
		{"a bad escape", replace(`"rows":[[`, `"rows":[["\q",`)},
	} {
		_, err := DecodeBatch([]byte(tc.data), &schemas)
		if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrUnknownSchema) {
			t.Errorf("%s: DecodeBatch = %v, want ErrInvalid", tc.name, err)
		}
	}
	if _, err := DecodeBatch([]byte(good), &SchemaSet{}); !errors.Is(err, ErrUnknownSchema) {
		t.Errorf("unknown schema: DecodeBatch = %v, want ErrUnknownSchema", err)
	}
}

// TestDecodeBatchShortRowsAllocateLittle: a batch of many empty rows
// against a wide schema (hostile: records come from Kafka) is refused
// before the decoder allocates for rows × columns values, which would be
// thousands of times the batch's own size.
func TestDecodeBatchShortRowsAllocateLittle(t *testing.T) {
	rows := snapshotRows(rand.New(rand.NewPCG(23, 24)), 1)
	proto := rows[0]
	for i := len(proto.Columns); i < 1600; i++ {
		proto.Columns = append(proto.Columns, Column{Name: "c" + strconv.Itoa(i), Type: "text", TypMod: -1, Attnum: int16(i + 1)})
		proto.Values = append(proto.Values, Value{Null: true})
	}
	var schemas SchemaSet
	schema := Schema{TenantColumn: proto.TenantColumn, Columns: proto.Columns}
	schemas.Add(schema)
	proto.SchemaID = schema.ID()
	good := string(encodeBatch([]*Record{proto}))
	i := strings.Index(good, `"rows":[`)
	data := []byte(good[:i] + `"rows":[` + strings.Repeat("[],", 100_000) + `[]]}`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := DecodeBatch(data, &schemas)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("DecodeBatch = %v, want ErrInvalid", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 50*uint64(len(data)) {
		t.Errorf("refusing a %d-byte batch allocated %d bytes", len(data), got)
	}
}

// TestBatchDefaultTenant: a table without a tenant column sends its
// configured tenant once, in the batch, and every row gets it.
func TestBatchDefaultTenant(t *testing.T) {
	r := benchRow()
	r.TenantColumn, r.TenantID = "", "fixed \"tenant\""
	r.SchemaID = SchemaID("", r.Columns)
	r.EventID = SnapshotEventID(r.Source.ID, r.CommitLSN, r.Source.Schema+"."+r.Source.Table, []string{r.Values[0].Text, r.Values[1].Text}, r.OccurredAt)
	var schemas SchemaSet
	schemas.Add(Schema{Columns: r.Columns})
	got, err := DecodeBatch(encodeBatch([]*Record{r, r}), &schemas)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Decode(AppendJSON(nil, r), &schemas)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(AppendJSON(nil, got[1])) != string(AppendJSON(nil, want)) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

// FuzzDecodeBatch feeds arbitrary bytes to DecodeBatch: it must not panic,
// and what it accepts must come out the same when encoded again.
func FuzzDecodeBatch(f *testing.F) {
	var schemas SchemaSet
	rng := rand.New(rand.NewPCG(26, 27))
	for i := 0; i < 4; i++ {
		rows := snapshotRows(rng, 1+i)
		schemas.Add(Schema{TenantColumn: rows[0].TenantColumn, Columns: rows[0].Columns})
		data := encodeBatch(rows)
		f.Add(data)
		f.Add(mutateRecord(rng, data))
	}
	f.Add([]byte(`{"rows":[[]]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeBatch(data, &schemas)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnknownSchema) {
				t.Fatalf("error wraps neither ErrInvalid nor ErrUnknownSchema: %v", err)
			}
			return
		}
		again, err := DecodeBatch(encodeBatch(got), &schemas)
		if err != nil {
			t.Fatalf("accepted %q, but not its encoding again: %v", data, err)
		}
		if len(again) != len(got) {
			t.Fatalf("accepted %q as %d rows, its encoding again as %d", data, len(got), len(again))
		}
		for i := range got {
			if g, a := AppendJSON(nil, got[i]), AppendJSON(nil, again[i]); string(g) != string(a) {
				t.Fatalf("accepted %q with row %d\n%s\nbut its encoding again as\n%s", data, i, g, a)
			}
		}
	})
}
