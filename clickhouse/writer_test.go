package clickhouse

import (
	"fmt"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/sink"
)

// A batch's inserts are named by the positions of their records among all
// of the batch's, those left out included: a retry that leaves out more
// records (a subject erased meanwhile) names each insert as the attempt
// before it and carries a subset of what it carried, so ClickHouse drops
// an insert that landed before as a repeat without losing another record.
func TestSplitRunsKeepsTokensWhenRecordsAreLeftOut(t *testing.T) {
	shapes := "aabab" // the source schema of each record
	recs := make([]*record.Record, len(shapes))
	for i, s := range shapes {
		recs[i] = &record.Record{SchemaID: string(s), Values: []record.Value{{Text: fmt.Sprint(i)}}}
	}
	show := func(b sink.Batch) string {
		var out []string
		for _, r := range splitRuns(b) {
			var ids []string
			for i, x := range r.recs {
				ids = append(ids, fmt.Sprintf("%s@%d", x.Values[0].Text, r.position(i)))
			}
			out = append(out, r.token+"["+strings.Join(ids, " ")+"]")
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		skip string // x: left out
		want string
	}{
		{"", "t#0[0@0 1@1] t#2[2@2] t#3[3@3] t#4[4@4]"},
		{"..x..", "t#0[0@0 1@1] t#2[] t#3[3@3] t#4[4@4]"},
		{"x....", "t#0[1@1] t#2[2@2] t#3[3@3] t#4[4@4]"},
		{"x.x.x", "t#0[1@1] t#2[] t#3[3@3] t#4[]"},
	} {
		b := sink.Batch{Records: recs, Token: "t"}
		if tc.skip != "" {
			b.Skip = make([]bool, len(recs))
			for i, c := range tc.skip {
				b.Skip[i] = c == 'x'
			}
		}
		if got := show(b); got != tc.want {
			t.Errorf("skip %q: runs %s, want %s", tc.skip, got, tc.want)
		}
	}
	one := sink.Batch{Records: recs[:2], Token: "t", Skip: []bool{true, false}}
	if got := show(one); got != "t[1@1]" {
		t.Errorf("a batch of one run: %s, want the batch's token alone", got)
	}
}
