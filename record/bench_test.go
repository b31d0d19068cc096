package record

import (
	"slices"
	"strconv"
	"testing"
	"time"
)

// benchRow returns a snapshot row shaped like the rows of make bench-capture.
func benchRow() *Record {
	cols := []Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "amount", Type: "numeric", TypMod: 786438, Attnum: 3},
		{Name: "note", Type: "text", TypMod: -1, Attnum: 4},
		{Name: "created_at", Type: "timestamptz", TypMod: -1, Attnum: 5},
		{Name: "attrs", Type: "jsonb", TypMod: -1, Attnum: 6},
	}
	at := time.Date(2026, 11, 23, 10, 58, 37, 123456789, time.UTC)
	src := Source{ID: "7441234567890123456/walhouse", Schema: "public", Table: "bench_1f2b30eb19"}
	r := &Record{
		OccurredAt:   at,
		IngestedAt:   at.Add(1234567 * time.Nanosecond),
		TenantID:     "tenant_17",
		TenantColumn: "tenant_id",
		Source:       src,
		LSN:          0x1A2B3C4D,
		CommitLSN:    0x1A2B3C4D,
		Version:      SnapshotVersion,
		Op:           Read,
		Columns:      cols,
		SchemaID:     SchemaID("tenant_id", cols),
		Values: []Value{
			{Text: "tenant_17"}, {Text: "123417"}, {Text: "1234.17"},
			{Text: "note 0f1e2d3c4b5a69788796a5b4c3d2e1f0"}, {Text: "2024-01-02 10:17:37+00"},
			{Text: `{"g": 123417, "ok": false, "tag": "k5"}`},
		},
	}
	r.EventID = SnapshotEventID(src.ID, r.CommitLSN, "public.bench_1f2b30eb19", []string{"tenant_17", "123417"}, at)
	return r
}

func BenchmarkAppendJSON(b *testing.B) { benchmarkAppendJSON(b, AppendJSON) }

// benchmarkAppendJSON encodes benchRow with appendJSON into a reused
// buffer.
func benchmarkAppendJSON(b *testing.B, appendJSON func([]byte, *Record) []byte) {
	r := benchRow()
	buf := appendJSON(nil, r)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = appendJSON(buf[:0], r)
	}
}

func BenchmarkAppendPartitionKey(b *testing.B) {
	r := benchRow()
	buf := r.AppendPartitionKey(nil)
	b.ReportAllocs()
	for b.Loop() {
		buf = r.AppendPartitionKey(buf[:0])
	}
}

func BenchmarkSnapshotEventID(b *testing.B) {
	r := benchRow()
	keys := []string{"tenant_17", "123417"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		keys[1] = strconv.Itoa(i)
		_ = SnapshotEventID(r.Source.ID, r.CommitLSN, "public.bench_1f2b30eb19", keys, r.OccurredAt)
	}
}

func BenchmarkEventID(b *testing.B) {
	r := benchRow()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = EventID(r.Source.ID, r.CommitLSN, uint32(i), r.OccurredAt)
	}
}

func BenchmarkValidateRow(b *testing.B) {
	r := benchRow()
	b.ReportAllocs()
	for b.Loop() {
		if err := r.ValidateRow(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncoderAppendKeyValue(b *testing.B) {
	r := benchRow()
	e := NewEncoder(r.Source, r.TenantColumn, r.Columns, r.SchemaID, EnvelopeVersion)
	buf, _, value := e.AppendKeyValue(nil, r)
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		buf, _, _ = e.AppendKeyValue(buf[:0], r)
	}
}

// BenchmarkReferenceAppendJSON is the encoder before its speed-ups, for
// comparison on the same machine in the same run.
func BenchmarkReferenceAppendJSON(b *testing.B) { benchmarkAppendJSON(b, refAppendJSON) }

// BenchmarkDecode is the sink's per-record decoding (a reused Decoder), for
// both envelope versions of the same row; the bytes per record are the
// ones on the wire.
func BenchmarkDecode(b *testing.B) {
	var d Decoder
	benchmarkDecode(b, d.Decode)
}

// BenchmarkReferenceDecode is the decoder before fastjson (encoding/json),
// for comparison on the same machine in the same run.
func BenchmarkReferenceDecode(b *testing.B) { benchmarkDecode(b, refDecode) }

// benchmarkDecode runs decode on benchRow in both envelope versions, so
// that the two decoders are measured on the same bytes.
func benchmarkDecode(b *testing.B, decode func([]byte, Schemas) (*Record, error)) {
	r := benchRow()
	var schemas SchemaSet
	schemas.Add(Schema{TenantColumn: r.TenantColumn, Columns: r.Columns})
	for _, version := range []int{1, 2} {
		b.Run("v"+strconv.Itoa(version), func(b *testing.B) {
			data := AppendJSONVersion(nil, r, version)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decode(data, &schemas); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRowBatch encodes and decodes benchRow-shaped rows in a row batch
// of 1,000 (what capture sends for a snapshot); the figures are per row, to
// set next to BenchmarkEncoderAppendKeyValue and BenchmarkDecode/v2, which
// handle the same row as a record of its own.
func BenchmarkRowBatch(b *testing.B) {
	const rows = 1000
	r := benchRow()
	e := NewEncoder(r.Source, r.TenantColumn, r.Columns, r.SchemaID, EnvelopeVersion)
	var schemas SchemaSet
	schemas.Add(e.Schema())
	values := make([][]Value, rows)
	for i := range values {
		v := slices.Clone(r.Values)
		v[1].Text = strconv.Itoa(100000 + i)
		values[i] = v
	}
	encode := func(buf []byte) []byte {
		var batch RowBatch
		e.StartBatch(&batch, buf[:0], r)
		for _, v := range values {
			e.AddRow(&batch, v)
		}
		return batch.Finish()
	}
	data := encode(nil)
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		buf := data
		for b.Loop() {
			buf = encode(buf)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
	})
	b.Run("decode", func(b *testing.B) {
		var d Decoder
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := d.DecodeBatch(data, &schemas); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
	})
}
