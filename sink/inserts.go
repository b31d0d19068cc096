package sink

import (
	"fmt"
	"slices"

	"github.com/walhouse/walhouse/record"
)

// Insert is one insert of a batch, as a loader sends it: records of one
// source schema, the name ClickHouse deduplicates it by, and where its
// records are in the batch.
type Insert struct {
	// Records are the records to insert; empty when Skip leaves out every
	// one (the loader then sends nothing).
	Records []*record.Record
	// Token names the insert (insert_deduplication_token).
	Token string
	// Start is the position in the batch of the insert's first record.
	Start int
	pos   []int // position of each of Records in the batch; nil: Start+i
}

// Position returns the position in the batch of Records[i], for the
// RecordError that names it.
func (in Insert) Position(i int) int {
	if in.pos != nil {
		return in.pos[i]
	}
	return in.Start + i
}

// Inserts cuts b into its inserts: runs of records of equal source schema
// (a table's shape may change within a batch), named by the batch's token
// and the position of the run's first record (the batch's token alone
// when it is one run). Runs and names are derived from all of Records,
// whatever Skip leaves out and whatever window From and To give: a record
// left out only leaves its insert, and a window loads the piece of each
// run inside it, under the run's name when it holds the whole run and
// under the run's name with the piece's bounds otherwise. So every retry,
// every part and every rebuild of the batch after a crash names each
// insert as before and carries a subset of what it carried: ClickHouse
// drops an insert that landed before as a repeat, and no other record goes
// with it.
func (b Batch) Inserts() []Insert {
	var out []Insert
	start := 0
	for i := 1; i <= len(b.Records); i++ {
		if i < len(b.Records) && b.Records[i].SchemaID == b.Records[start].SchemaID {
			continue
		}
		token := b.Token
		if start > 0 || i < len(b.Records) {
			token = fmt.Sprintf("%s#%d", b.Token, start)
		}
		if from, to := max(start, b.From), min(i, b.End()); from < to {
			if from != start || to != i {
				token = fmt.Sprintf("%s[%d:%d]", token, from, to)
			}
			recs, pos := b.Loadable(from, to)
			out = append(out, Insert{Records: recs, Token: token, Start: from, pos: pos})
		}
		start = i
	}
	return out
}

// Loadable returns the records of Records[from:to] that Skip does not
// mark, and, when it marks any there, the position in Records of each
// returned record (nil when none is left out: the i-th is at from+i).
func (b Batch) Loadable(from, to int) (recs []*record.Record, positions []int) {
	if b.Skip == nil || !slices.Contains(b.Skip[from:to], true) {
		return b.Records[from:to], nil
	}
	for i := from; i < to; i++ {
		if !b.Skip[i] {
			recs = append(recs, b.Records[i])
			positions = append(positions, i)
		}
	}
	return recs, positions
}
