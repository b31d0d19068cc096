package record

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

func TestZZBatchAlloc(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := validRandRecord(rng)
	r.TenantColumn = ""
	r.TenantID = "t"
	var cols []Column
	for i := 0; i < 1600; i++ {
		cols = append(cols, Column{Name: fmt.Sprintf("c%d", i), Type: "text", TypMod: -1, Key: i == 0, Attnum: int16(i + 1)})
	}
	r.Columns = cols
	r.SchemaID = SchemaID("", cols)
	r.Op, r.Version, r.Ordinal, r.OldKey = Read, SnapshotVersion, 0, nil
	r.LSN = r.CommitLSN
	r.Values = make([]Value, len(cols))
	r.EventID = SnapshotEventID(r.Source.ID, r.CommitLSN, r.Source.Schema+"."+r.Source.Table, []string{""}, r.OccurredAt)
	data := encodeBatch([]*Record{r})
	var schemas SchemaSet
	schemas.Add(Schema{Columns: cols})
	if _, err := DecodeBatch(data, &schemas); err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte(`"rows":[`))
	if i < 0 {
		t.Fatalf("%s", data[:200])
	}
	j := i + len(`"rows":[`)
	end := bytes.LastIndex(data, []byte("]"))
	var b bytes.Buffer
	b.Write(data[:j])
	n := 300000
	for k := 0; k < n; k++ {
		if k > 0 {
			b.WriteByte(',')
		}
		b.WriteString("[]")
	}
	b.Write(data[end:])
	hostile := b.Bytes()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	_, err := DecodeBatch(hostile, &schemas)
	runtime.ReadMemStats(&m1)
	t.Logf("input %d bytes, err %v, allocated %d MB", len(hostile), err, (m1.TotalAlloc-m0.TotalAlloc)>>20)
}
