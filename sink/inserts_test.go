package sink

import (
	"fmt"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/record"
)

// TestInsertsKeepTheirNames: a batch's inserts are named by the positions
// of their records among all of the batch's, those left out included, and
// a window (a part of the batch) loads each run's piece under the run's
// name when it holds the whole run: a retry, a part or a rebuild names
// each insert as before and carries a subset of what it carried.
func TestInsertsKeepTheirNames(t *testing.T) {
	shapes := "aabab" // the source schema of each record
	recs := make([]*record.Record, len(shapes))
	for i, s := range shapes {
		recs[i] = &record.Record{SchemaID: string(s), Values: []record.Value{{Text: fmt.Sprint(i)}}}
	}
	show := func(b Batch) string {
		var out []string
		for _, in := range b.Inserts() {
			var ids []string
			for i, x := range in.Records {
				ids = append(ids, fmt.Sprintf("%s@%d", x.Values[0].Text, in.Position(i)))
			}
			out = append(out, in.Token+"<"+strings.Join(ids, " ")+">")
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		skip     string // x: left out
		from, to int
		want     string
	}{
		{want: "t#0<0@0 1@1> t#2<2@2> t#3<3@3> t#4<4@4>"},
		{skip: "..x..", want: "t#0<0@0 1@1> t#2<> t#3<3@3> t#4<4@4>"},
		{skip: "x....", want: "t#0<1@1> t#2<2@2> t#3<3@3> t#4<4@4>"},
		{skip: "x.x.x", want: "t#0<1@1> t#2<> t#3<3@3> t#4<>"},
		{from: 0, to: 3, want: "t#0<0@0 1@1> t#2<2@2>"},
		{from: 1, to: 4, want: "t#0[1:2]<1@1> t#2<2@2> t#3<3@3>"},
		{skip: ".x...", from: 1, to: 2, want: "t#0[1:2]<>"},
	} {
		b := Batch{Records: recs, Token: "t", From: tc.from, To: tc.to}
		if tc.skip != "" {
			b.Skip = make([]bool, len(recs))
			for i, c := range tc.skip {
				b.Skip[i] = c == 'x'
			}
		}
		if got := show(b); got != tc.want {
			t.Errorf("skip %q, window [%d:%d]: inserts %s, want %s", tc.skip, tc.from, tc.to, got, tc.want)
		}
	}
	one := Batch{Records: recs[:2], Token: "t", Skip: []bool{true, false}}
	if got := show(one); got != "t<1@1>" {
		t.Errorf("a batch of one run: %s, want the batch's token alone", got)
	}
	if got := show(Batch{Records: recs[:2], Token: "t", From: 1, To: 2}); got != "t[1:2]<1@1>" {
		t.Errorf("a part of a batch of one run: %s, want the batch's token with the part's bounds", got)
	}
}
