package capture

import (
	"encoding/json"
	"testing"
)

func TestChunkQuery(t *testing.T) {
	const cols = `"a", "b"`
	plain := &snapshotPlan{Table: "public.t", ChunkPages: 10, Chunks: 3}
	parted := &snapshotPlan{Table: "public.p", ChunkPages: 10, Chunks: 5, Parts: []partPlan{
		{Schema: "public", Name: "p_low", Pages: 25, First: 0, Chunks: 3},
		{Schema: "odd schema", Name: `p"x`, Pages: 0, First: 3, Chunks: 1},
		{Schema: "public", Name: "p_remote", First: 4, Chunks: 1, Whole: true},
	}}
	for _, tc := range []struct {
		name  string
		p     *snapshotPlan
		chunk int
		want  string
	}{
		{"one chunk", &snapshotPlan{Table: "public.t", ChunkPages: 10, Chunks: 1}, 0, `SELECT "a", "b" FROM "public"."t"`},
		{"first", plain, 0, `SELECT "a", "b" FROM ONLY "public"."t" WHERE ctid >= '(0,0)'::tid AND ctid < '(10,0)'::tid`},
		{"middle", plain, 1, `SELECT "a", "b" FROM ONLY "public"."t" WHERE ctid >= '(10,0)'::tid AND ctid < '(20,0)'::tid`},
		{"last is open-ended", plain, 2, `SELECT "a", "b" FROM ONLY "public"."t" WHERE ctid >= '(20,0)'::tid`},
		{"leaf, first chunk", parted, 0, `SELECT "a", "b" FROM ONLY "public"."p_low" WHERE ctid >= '(0,0)'::tid AND ctid < '(10,0)'::tid`},
		{"leaf, last chunk", parted, 2, `SELECT "a", "b" FROM ONLY "public"."p_low" WHERE ctid >= '(20,0)'::tid`},
		{"leaf in one chunk, quoted", parted, 3, `SELECT "a", "b" FROM ONLY "odd schema"."p""x"`},
		{"leaf without a heap", parted, 4, `SELECT "a", "b" FROM ONLY "public"."p_remote"`},
		// A plan saved before partitions were split reads the root once.
		{"old plan of a partitioned table", &snapshotPlan{Table: "public.p", ChunkPages: 10, Chunks: 1}, 0, `SELECT "a", "b" FROM "public"."p"`},
	} {
		if got := tc.p.chunkQuery(tc.chunk, cols, ""); got != tc.want {
			t.Errorf("%s: chunk %d\n got %s\nwant %s", tc.name, tc.chunk, got, tc.want)
		}
	}
	// A publication's row filter restricts every chunk, in parentheses:
	// it may be an OR.
	const filter = "(region = 'eu'::text) OR (id > 10)"
	for _, tc := range []struct {
		name  string
		p     *snapshotPlan
		chunk int
		want  string
	}{
		{"one chunk", &snapshotPlan{Table: "public.t", ChunkPages: 10, Chunks: 1}, 0, `SELECT "a", "b" FROM "public"."t" WHERE ((region = 'eu'::text) OR (id > 10))`},
		{"middle", plain, 1, `SELECT "a", "b" FROM ONLY "public"."t" WHERE ctid >= '(10,0)'::tid AND ctid < '(20,0)'::tid AND ((region = 'eu'::text) OR (id > 10))`},
		{"last", plain, 2, `SELECT "a", "b" FROM ONLY "public"."t" WHERE ctid >= '(20,0)'::tid AND ((region = 'eu'::text) OR (id > 10))`},
		{"leaf in one chunk", parted, 3, `SELECT "a", "b" FROM ONLY "odd schema"."p""x" WHERE ((region = 'eu'::text) OR (id > 10))`},
		{"leaf chunk", parted, 0, `SELECT "a", "b" FROM ONLY "public"."p_low" WHERE ctid >= '(0,0)'::tid AND ctid < '(10,0)'::tid AND ((region = 'eu'::text) OR (id > 10))`},
	} {
		if got := tc.p.chunkQuery(tc.chunk, cols, filter); got != tc.want {
			t.Errorf("filtered, %s: chunk %d\n got %s\nwant %s", tc.name, tc.chunk, got, tc.want)
		}
	}
}

// A plan survives its trip through the state topic, partitions included.
func TestSnapshotPlanRoundTrip(t *testing.T) {
	p := &snapshotPlan{Table: "public.p", ChunkPages: 10, Chunks: 4, Done: []int{1}, Parts: []partPlan{
		{Schema: "public", Name: "a", Pages: 12, First: 0, Chunks: 2},
		{Schema: "public", Name: "b", Pages: 3, First: 2, Chunks: 1},
		{Schema: "public", Name: "f", First: 3, Chunks: 1, Whole: true},
	}}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var q snapshotPlan
	if err := json.Unmarshal(raw, &q); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < p.Chunks; i++ {
		if a, b := p.chunkQuery(i, "x", ""), q.chunkQuery(i, "x", ""); a != b {
			t.Errorf("chunk %d: %s after the round trip, %s before", i, b, a)
		}
	}
	if got := q.pending(); len(got) != 3 || got[0] != 0 || got[1] != 2 {
		t.Errorf("pending %v, want [0 2 3]", got)
	}
}

func TestChunksOf(t *testing.T) {
	for _, tc := range []struct {
		pages, per int64
		want       int
	}{{0, 10, 1}, {1, 10, 1}, {10, 10, 1}, {11, 10, 2}, {4096 * 3, 4096, 3}} {
		if got := chunksOf(tc.pages, tc.per); got != tc.want {
			t.Errorf("chunksOf(%d, %d) = %d, want %d", tc.pages, tc.per, got, tc.want)
		}
	}
}
