package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sample() *Record {
	cols := []Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "note \"quoted\"\n", Type: "text", TypMod: -1, Attnum: 5},
		{Name: "tags", Type: "text", Array: true, TypMod: -1},
		{Name: "big", Type: "text", TypMod: -1},
		{Name: "status", Type: "order_status", Enum: true, TypMod: -1},
	}
	commit := time.Date(2026, 11, 23, 8, 0, 0, 123456000, time.UTC)
	return &Record{
		EventID:      EventID("sys/db", 0x16B374D848, 3, commit),
		OccurredAt:   commit,
		IngestedAt:   commit.Add(time.Second),
		TenantID:     "acme",
		TenantColumn: "tenant_id",
		Source:       Source{ID: "sys/db", Schema: "public", Table: "orders"},
		LSN:          0x16B374D000,
		CommitLSN:    0x16B374D848,
		Ordinal:      3,
		Version:      Version(0x16B374D000),
		Op:           Update,
		Columns:      cols,
		SchemaID:     SchemaID("tenant_id", cols),
		Values: []Value{
			{Text: "acme"},
			{Text: "42"},
			{Text: "line1\nline2\t\"x\" \\ \u2028 \x01 é \xff"},
			{Null: true},
			{Unchanged: true},
			{Text: "paid"},
		},
	}
}

// sampleSchemas holds sample()'s schema, as a sink's registry would.
func sampleSchemas() *SchemaSet {
	r := sample()
	var ss SchemaSet
	ss.Add(Schema{TenantColumn: r.TenantColumn, Columns: r.Columns})
	return &ss
}

func TestRoundTrip(t *testing.T) {
	for _, version := range []int{1, 2} {
		r := sample()
		data := AppendJSONVersion(nil, r, version)
		if !json.Valid(data) {
			t.Fatalf("v%d: not valid JSON: %s", version, data)
		}
		got, err := Decode(data, sampleSchemas())
		if err != nil {
			t.Fatalf("v%d: Decode: %v\n%s", version, err, data)
		}
		// Invalid UTF-8 is replaced on the wire, exactly as encoding/json does.
		want := *r
		want.Values = append([]Value(nil), r.Values...)
		want.Values[2].Text = strings.ToValidUTF8(r.Values[2].Text, "\ufffd")
		if !reflect.DeepEqual(got, &want) {
			t.Errorf("v%d: round trip differs:\n got %+v\nwant %+v", version, got, &want)
		}
	}
}

func TestDecodeVersion2NeedsItsSchema(t *testing.T) {
	data := AppendJSON(nil, sample())
	if bytes.Contains(data, []byte(`"columns"`)) {
		t.Fatalf("a version 2 record carries its columns: %s", data)
	}
	for name, schemas := range map[string]Schemas{"nil": nil, "empty": &SchemaSet{}} {
		_, err := Decode(data, schemas)
		if !errors.Is(err, ErrUnknownSchema) || errors.Is(err, ErrInvalid) {
			t.Errorf("%s schemas: Decode = %v, want ErrUnknownSchema and not ErrInvalid", name, err)
		}
	}
	// A schema registered under the id with another tenant column.
	r := sample()
	var other SchemaSet
	other.m = map[string]Schema{r.SchemaID: {Columns: r.Columns}}
	if _, err := Decode(data, &other); !errors.Is(err, ErrInvalid) {
		t.Errorf("tenant column differs from the schema's: Decode = %v, want ErrInvalid", err)
	}
	// Version 1 records need no schemas.
	if _, err := Decode(AppendJSONVersion(nil, r, 1), nil); err != nil {
		t.Errorf("version 1 without schemas: %v", err)
	}
}

func TestSchemaEntry(t *testing.T) {
	r := sample()
	s := Schema{TenantColumn: r.TenantColumn, Columns: r.Columns}
	data := s.AppendJSON(nil)
	got, err := DecodeSchema(data)
	if err != nil {
		t.Fatalf("DecodeSchema: %v\n%s", err, data)
	}
	if !reflect.DeepEqual(got, s) || got.ID() != r.SchemaID {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", got, s)
	}
	good := string(data)
	for name, bad := range map[string]string{
		"altered column": strings.Replace(good, `"status"`, `"state"`, 1),
		"altered tenant": strings.Replace(good, `"tenantColumn":"tenant_id"`, `"tenantColumn":"id"`, 1),
		"no tenant":      strings.Replace(good, `,"tenantColumn":"tenant_id"`, ``, 1),
		"format":         strings.Replace(good, `"format":1`, `"format":9`, 1),
		"unknown field":  strings.Replace(good, `{"format"`, `{"x":1,"format"`, 1),
		"no columns":     `{"format":1,"schemaId":"` + r.SchemaID + `","columns":[]}`,
		"not json":       good[:len(good)/2],
	} {
		if _, err := DecodeSchema([]byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: DecodeSchema = %v, want ErrInvalid", name, err)
		}
	}
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "a\"b\\c", "\x00\x1f\x7f", "tab\tnl\ncr\r", "é漢字🙂", "\u2028\u2029", "bad\xffutf8", "<>&"} {
		var back string
		if err := json.Unmarshal(appendJSONString(nil, s), &back); err != nil {
			t.Errorf("%q: %v", s, err)
			continue
		}
		if want := strings.ToValidUTF8(s, "\ufffd"); back != want {
			t.Errorf("%q: decoded %q, want %q", s, back, want)
		}
	}
}

func TestEncodingIsDeterministic(t *testing.T) {
	a := string(AppendJSON(nil, sample()))
	for i := 0; i < 20; i++ {
		if b := string(AppendJSON(nil, sample())); a != b {
			t.Fatalf("two encodings of one record differ:\n%s\n%s", a, b)
		}
	}
}

func TestEventID(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 678e6, time.UTC)
	id := EventID("src", 100, 0, at)
	if again := EventID("src", 100, 0, at); again != id {
		t.Errorf("EventID is not deterministic: %s vs %s", id, again)
	}
	ts, err := ParseEventID(id)
	if err != nil {
		t.Fatalf("ParseEventID(%s): %v", id, err)
	}
	if !ts.Equal(at.Truncate(time.Millisecond)) {
		t.Errorf("timestamp %v, want %v", ts, at.Truncate(time.Millisecond))
	}
	distinct := map[string]bool{id: true}
	for _, other := range []string{
		EventID("src2", 100, 0, at),
		EventID("src", 101, 0, at),
		EventID("src", 100, 1, at),
		// Two captures of one database, each with its own tables, both
		// number a transaction's changes from 0.
		EventID(ChangeSource("src", "public", "orders"), 100, 0, at),
		EventID(ChangeSource("src", "public", "invoices"), 100, 0, at),
		// Dots in names: schema "a.b", table "c" is not schema "a", table "b.c".
		EventID(ChangeSource("src", "a.b", "c"), 100, 0, at),
		EventID(ChangeSource("src", "a", "b.c"), 100, 0, at),
	} {
		if distinct[other] {
			t.Errorf("collision: %s", other)
		}
		distinct[other] = true
	}
	if later := EventID("src", 100, 0, at.Add(time.Millisecond)); later <= id {
		t.Errorf("ids do not sort by time: %s <= %s", later, id)
	}
}

func TestParseEventIDRejects(t *testing.T) {
	for _, s := range []string{"", "not-a-uuid", "01890a5d-ac96-474f-8f1f-6dc1e0ae5b5c" /* v4 */, "01890a5d-ac96-774f-cf1f-6dc1e0ae5b5c" /* bad variant */, "01890a5d-ac96-774f-8f1f-6dc1e0ae5b5g"} {
		if _, err := ParseEventID(s); err == nil {
			t.Errorf("ParseEventID(%q) succeeded", s)
		}
	}
}

func TestLSN(t *testing.T) {
	for _, tc := range []struct {
		s string
		l LSN
	}{{"0/0", 0}, {"16/B374D848", 0x16B374D848}, {"FFFFFFFF/FFFFFFFF", ^LSN(0)}} {
		got, err := ParseLSN(tc.s)
		if err != nil || got != tc.l {
			t.Errorf("ParseLSN(%q) = %v, %v; want %v", tc.s, got, err, tc.l)
		}
		if tc.l.String() != tc.s || string(appendLSN(nil, tc.l)) != tc.s {
			t.Errorf("format %d = %q / %q, want %q", uint64(tc.l), tc.l.String(), appendLSN(nil, tc.l), tc.s)
		}
	}
	for _, s := range []string{"", "16", "x/1", "1/100000000"} {
		if _, err := ParseLSN(s); err == nil {
			t.Errorf("ParseLSN(%q) succeeded", s)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(r *Record)
		want   string
	}{
		{"ok", func(r *Record) {}, ""},
		{"bad event id", func(r *Record) { r.EventID = "x" }, "eventId"},
		{"empty tenant is a tenant", func(r *Record) { r.TenantID, r.Values[0] = "", Value{Text: ""} }, ""},
		{"null tenant", func(r *Record) { r.TenantID, r.Values[0] = "", Value{Null: true} }, "does not match tenant column"},
		{"change after its commit", func(r *Record) { r.LSN, r.Version = r.CommitLSN+1, Version(r.CommitLSN+1) }, "after commitLsn"},
		{"version not the change's position", func(r *Record) { r.Version++ }, "not the change's WAL position"},
		{"a move's delete one below its position", func(r *Record) { r.Op, r.Version = Delete, MoveVersion(r.LSN) }, ""},
		{"an update one below its position", func(r *Record) { r.Op, r.Version = Update, MoveVersion(r.LSN) }, "not the change's WAL position"},
		{"a delete two below its position", func(r *Record) { r.Op, r.Version = Delete, MoveVersion(r.LSN)-1 }, "not the change's WAL position"},
		{"snapshot row with a version", func(r *Record) { r.Op, r.Version = Read, 7 }, "copied row has version"},
		{"rewrite copy row at its lsn", func(r *Record) { r.Op, r.LSN = Read, r.CommitLSN; r.Version = RewriteCopyVersion(r.LSN) }, ""},
		{"rewrite copy row at another lsn", func(r *Record) { r.Op, r.LSN = Read, r.CommitLSN; r.Version = RewriteCopyVersion(r.LSN) + 1 }, "copied row has version"},
		{"snapshot row", func(r *Record) { r.Op, r.Version, r.LSN = Read, SnapshotVersion, r.CommitLSN }, ""},
		{"bad op", func(r *Record) { r.Op = 9 }, "op"},
		{"no key column", func(r *Record) {
			for i := range r.Columns {
				r.Columns[i].Key = false
			}
		}, "primary key"},
		{"values misaligned", func(r *Record) { r.Values = r.Values[1:] }, "5 values for 6 columns"},
		{"null key value", func(r *Record) { r.Values[1] = Value{Null: true} }, "key column \"id\""},
		{"null and unchanged", func(r *Record) { r.Values[4].Null = true }, "both"},
		{"tenant mismatch", func(r *Record) { r.TenantID = "other" }, "does not match tenant column"},
		{"duplicate column", func(r *Record) { r.Columns = append(r.Columns, r.Columns[0]) }, "twice"},
		{"no lsn", func(r *Record) { r.LSN = 0 }, "lsn"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := sample()
			tc.mutate(r)
			err := r.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate = %v, want an ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

func TestDecodeRejectsTampering(t *testing.T) {
	for _, version := range []int{1, 2} {
		good := string(AppendJSONVersion(nil, sample(), version))
		cases := map[string]string{
			"version":    strings.Replace(good, fmt.Sprintf(`"eventVersion":%d`, version), `"eventVersion":3`, 1),
			"event type": strings.Replace(good, `.updated"`, `.deleted"`, 1),
			"unknown":    strings.Replace(good, `{"eventId"`, `{"extra":1,"eventId"`, 1),
			"truncated":  good[:len(good)/2],
			"missing":    strings.Replace(good, `"status":"paid"`, `"statuz":"paid"`, 1),
			"partition":  strings.Replace(good, `"partitionKey":"[`, `"partitionKey":"[\"x\",`, 1),
		}
		if version == 1 {
			cases["schema id"] = strings.Replace(good, `"schemaId":"`, `"schemaId":"0`, 1)
			cases["as version 2"] = strings.Replace(good, `"eventVersion":1`, `"eventVersion":2`, 1)
		} else {
			cases["as version 1"] = strings.Replace(good, `"eventVersion":2`, `"eventVersion":1`, 1)
			cases["no schema id"] = strings.Replace(good, `"schemaId":"`, `"schemaIdx":"`, 1)
			cases["columns too"] = strings.Replace(good, `,"payload":`, `,"columns":[],"payload":`, 1)
		}
		for name, bad := range cases {
			if _, err := Decode([]byte(bad), sampleSchemas()); !errors.Is(err, ErrInvalid) {
				t.Errorf("v%d %s: Decode = %v, want ErrInvalid", version, name, err)
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(AppendJSON(nil, sample()))
	f.Add(AppendJSONVersion(nil, sample(), 1))
	f.Add([]byte(`{}`))
	schemas := sampleSchemas()
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Decode(data, schemas)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode to something that decodes equal.
		// A version 1 record may carry columns the set does not hold.
		again, err := Decode(AppendJSONVersion(nil, r, 1), schemas)
		if err != nil {
			t.Fatalf("re-encoding a decoded record fails: %v", err)
		}
		if again.EventID != r.EventID || again.Version != r.Version {
			t.Fatalf("re-encoded record differs")
		}
	})
}

func TestPayloadHash(t *testing.T) {
	a, b := sample(), sample()
	b.IngestedAt = b.IngestedAt.Add(time.Hour) // re-captured later
	if PayloadHash(a) != PayloadHash(b) {
		t.Error("hash depends on ingestedAt")
	}
	b.Values[5].Text = "refunded"
	if PayloadHash(a) == PayloadHash(b) {
		t.Error("hash ignores a changed value")
	}
	c := sample()
	c.Values[3] = Value{Text: ""} // empty string is not NULL
	if PayloadHash(a) == PayloadHash(c) {
		t.Error("hash confuses NULL and empty")
	}
}
