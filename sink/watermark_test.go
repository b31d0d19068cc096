package sink

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

func TestProvesLoaded(t *testing.T) {
	copying := []kgo.RecordHeader{{Key: record.HeaderCopying, Value: []byte("1")}}
	for _, tc := range []struct {
		name    string
		op      record.Op
		headers []kgo.RecordHeader
		want    bool
	}{
		{name: "streamed change", op: record.Insert, want: true},
		{name: "streamed delete", op: record.Delete, want: true},
		{name: "copied row", op: record.Read, want: false},
		{name: "change during its table's copy", op: record.Update, headers: copying, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := provesLoaded(classify(&kgo.Record{Headers: tc.headers, Value: []byte("{}")}), &record.Record{Op: tc.op}); got != tc.want {
				t.Fatalf("provesLoaded = %v, want %v", got, tc.want)
			}
		})
	}
}

// partsAdmin answers a topic's partitions as Kafka would, or fails.
type partsAdmin struct {
	partitions int
	err        error
	asked      *int
}

func (a partsAdmin) DescribeTopicConfigs(context.Context, ...string) (kadm.ResourceConfigs, error) {
	return nil, errors.New("not asked here")
}

func (a partsAdmin) ListStartOffsets(_ context.Context, topics ...string) (kadm.ListedOffsets, error) {
	*a.asked++
	if a.err != nil {
		return nil, a.err
	}
	ps := map[int32]kadm.ListedOffset{}
	for p := range int32(a.partitions) {
		ps[p] = kadm.ListedOffset{Topic: topics[0], Partition: p}
	}
	return kadm.ListedOffsets{topics[0]: ps}, nil
}

// A mark no heartbeat gave a partition count gets its topic's: the one a
// heartbeat said before, else Kafka's, asked once; a mark's own count and
// a heartbeat's win over Kafka's.
func TestPartitionCounts(t *testing.T) {
	src := record.Source{Schema: "public", Table: "orders"}
	const topic = "wh.public.orders"
	for _, tc := range []struct {
		name  string
		admin *partsAdmin // nil: no Config.Admin
		heard int32       // a heartbeat's count seen before
		marks []int32     // the marks' own counts
		want  []int32
		asked int
	}{
		{name: "no count anywhere: Kafka's, asked once", admin: &partsAdmin{partitions: 6}, marks: []int32{0, 0}, want: []int32{6, 6}, asked: 1},
		{name: "a heartbeat said it before", admin: &partsAdmin{partitions: 8}, heard: 6, marks: []int32{0}, want: []int32{6}},
		{name: "the mark's own count", admin: &partsAdmin{partitions: 8}, marks: []int32{6}, want: []int32{6}},
		{name: "Kafka does not answer: asked once a flush", admin: &partsAdmin{err: errors.New("broker down")}, marks: []int32{0, 0}, want: []int32{0, 0}, asked: 1},
		{name: "no admin", marks: []int32{0}, want: []int32{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := 0
			s := &Sink{log: slog.New(slog.DiscardHandler), parts: map[string]int32{}, topicOf: map[record.Source]string{src: topic}}
			if tc.admin != nil {
				tc.admin.asked = &asked
				s.cfg.Admin = *tc.admin
			}
			if tc.heard > 0 {
				s.parts[topic] = tc.heard
			}
			marks := make([]Watermark, len(tc.marks))
			for i, n := range tc.marks {
				marks[i] = Watermark{Source: src, Partition: int32(i), Partitions: n}
			}
			s.partitionCounts(context.Background(), marks)
			for i, m := range marks {
				if m.Partitions != tc.want[i] {
					t.Errorf("mark %d: partitions %d, want %d", i, m.Partitions, tc.want[i])
				}
			}
			if asked != tc.asked {
				t.Errorf("Kafka asked %d times, want %d", asked, tc.asked)
			}
		})
	}
}
