package record

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"
)

func FuzzZZReuse(f *testing.F) {
	var schemas SchemaSet
	rng := rand.New(rand.NewPCG(15, 16))
	var seeds [][]byte
	for _, r := range []*Record{sample(), benchRow(), validRandRecord(rng), validRandRecord(rng)} {
		schemas.Add(Schema{TenantColumn: r.TenantColumn, Columns: r.Columns})
		for _, version := range []int{1, 2} {
			data := AppendJSONVersion(nil, r, version)
			seeds = append(seeds, data, mutateRecord(rng, data))
		}
	}
	rows := snapshotRows(rng, 3)
	schemas.Add(Schema{TenantColumn: rows[0].TenantColumn, Columns: rows[0].Columns})
	seeds = append(seeds, encodeBatch(rows))
	for i, a := range seeds {
		f.Add(a, seeds[(i+3)%len(seeds)], uint8(i))
	}
	f.Fuzz(func(t *testing.T, a, b []byte, mode uint8) {
		var d Decoder
		ab := bytes.Clone(a)
		if mode&1 == 0 {
			d.Decode(ab, &schemas)
		} else {
			d.DecodeBatch(ab, &schemas)
		}
		for i := range ab {
			ab[i] = '#'
		}
		bb := bytes.Clone(b)
		var got, want any
		var gerr, werr error
		if mode&2 == 0 {
			got, gerr = d.Decode(bb, &schemas)
			want, werr = Decode(b, &schemas)
		} else {
			got, gerr = d.DecodeBatch(bb, &schemas)
			want, werr = DecodeBatch(b, &schemas)
		}
		for i := range bb {
			bb[i] = '#'
		}
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() || !reflect.DeepEqual(got, want) {
			t.Fatalf("reuse differs: %v / %v\n%#v\n%#v", gerr, werr, got, want)
		}
	})
}
