package sink

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// TestCutKeepsOneRowsPairTogether: a chunk ends at MaxBatchRecords, except
// that it never separates two consecutive changes of one row (a layout's
// move: the delete at the old position, then the row), and it takes at
// most one record more for that.
func TestCutKeepsOneRowsPairTogether(t *testing.T) {
	for name, tc := range map[string]struct {
		keys []string
		max  int
		want []int // chunk lengths
	}{
		"distinct rows":          {[]string{"a", "b", "c", "d", "e"}, 2, []int{2, 2, 1}},
		"a pair at the boundary": {[]string{"a", "b", "b", "c", "d"}, 2, []int{3, 2}},
		"a pair inside":          {[]string{"a", "a", "b", "c"}, 2, []int{2, 2}},
		"one row many times":     {[]string{"a", "a", "a", "a", "a"}, 2, []int{3, 2}},
		"no key":                 {[]string{"", "", "", ""}, 2, []int{2, 2}},
	} {
		t.Run(name, func(t *testing.T) {
			s := &Sink{cfg: Config{MaxBatchRecords: tc.max}, intents: map[tp][]intentEnd{}}
			var recs []item
			for i, k := range tc.keys {
				recs = append(recs, classify(&kgo.Record{Topic: "t", Offset: int64(i), Key: []byte(k), Value: []byte("{}")}))
			}
			var got []int
			for _, c := range s.cut(tp{"t", 0}, recs) {
				c := c.items
				got = append(got, len(c))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("chunks of %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSinkHoldsTheLastRecordOfAFullPoll: a poll that returned as many
// records as asked for may end between a row's delete and its re-insert,
// so each partition's last record waits for the next poll's records.
func TestSinkHoldsTheLastRecordOfAFullPoll(t *testing.T) {
	l := &fakeLoader{}
	fc := runScript(t, Config{MaxBatchRecords: 3}, nil, l, recs("a", 0, 0, 2), recs("a", 0, 3, 3))
	wantBatches(t, l.batches, "a/0/0-1 n=2", "a/0/2-3 n=2")
	wantCommits(t, fc, "a/0@2 ", "a/0@4 ")
}

// TestSinkHoldsARowsPairAtTheEndOfAFullPoll: when a full poll ends with
// both records of one row's pair, both wait: flushing the first alone
// would split them.
func TestSinkHoldsARowsPairAtTheEndOfAFullPoll(t *testing.T) {
	l := &fakeLoader{}
	first := recs("a", 0, 0, 2)
	first[1].Key, first[2].Key = []byte(`["t","7"]`), []byte(`["t","7"]`)
	fc := runScript(t, Config{MaxBatchRecords: 3}, nil, l, first, recs("a", 0, 3, 3), recs("a", 0, 4, 4))
	// The second poll is full too (one record asked for): 3 waits again.
	wantBatches(t, l.batches, "a/0/0-0 n=1", "a/0/1-2 n=2", "a/0/3-4 n=2")
	wantCommits(t, fc, "a/0@1 ", "a/0@3 ", "a/0@5 ")
}

// TestSinkLoadsHeldRecordsWhenNothingFollows: records held at the end of
// a full poll load at the next poll even when it brings nothing (the
// poll's wait, pairWait, ran out).
func TestSinkLoadsHeldRecordsWhenNothingFollows(t *testing.T) {
	l := &fakeLoader{}
	fc := runScript(t, Config{MaxBatchRecords: 3}, nil, l, recs("a", 0, 0, 2), nil)
	wantBatches(t, l.batches, "a/0/0-1 n=2", "a/0/2-2 n=1")
	wantCommits(t, fc, "a/0@2 ", "a/0@3 ")
}

// TestSinkHoldsNothingOfAPartitionAFullPollDidNotReach: a record held at
// the end of one full poll loads with the next full poll that brings
// records of other partitions only: busy partitions never hold a quiet
// one's last record.
func TestSinkHoldsNothingOfAPartitionAFullPollDidNotReach(t *testing.T) {
	l := &fakeLoader{}
	// The second poll is full (two asked for) and brings partition 1 only.
	fc := runScript(t, Config{MaxBatchRecords: 3}, nil, l, recs("a", 0, 0, 2), recs("a", 1, 0, 1), nil)
	wantBatches(t, l.batches, "a/0/0-1 n=2", "a/0/2-2 n=1", "a/1/0-0 n=1", "a/1/1-1 n=1")
	wantCommits(t, fc, "a/0@2 ", "a/0@3 ", "a/1@1 ", "a/1@2 ")
}

// TestSinkHoldsAMoveUntilItsRow: a delete capture marked as the first half
// of a move (record.HeaderMove) waits for the row that follows it even when
// Kafka has nothing after it yet (capture's producer may send the two in
// separate requests), and the two load together.
func TestSinkHoldsAMoveUntilItsRow(t *testing.T) {
	pair := recs("a", 0, 0, 2)
	pair[1].Key, pair[2].Key = []byte(`["t","7"]`), []byte(`["t","7"]`)
	pair[1].Headers = append(pair[1].Headers, kgo.RecordHeader{Key: record.HeaderMove, Value: []byte("1")})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := &fakeConsumer{
		// The first poll, not full, ends with the delete, nothing after it
		// in Kafka yet; a poll of another partition comes first, then the
		// row.
		polls:  [][]*kgo.Record{pair[:2], recs("a", 1, 0, 9), pair[2:]},
		cancel: cancel,
	}
	l := &fakeLoader{}
	s, err := New(fc, fakeOffsets{}, l, Config{Group: "g", MaxBatchRecords: 10, RetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond, Schemas: testSchemas()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	wantBatches(t, l.batches, "a/0/0-0 n=1", "a/1/0-9 n=10", "a/0/1-2 n=2")
	wantCommits(t, fc, "a/0@1 ", "a/0@3 ")
}
