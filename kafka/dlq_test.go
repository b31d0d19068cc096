package kafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestReplayTarget(t *testing.T) {
	for _, tc := range []struct {
		prefix, topic string
		ok            bool
	}{
		{"walhouse", "walhouse.public.orders", true},
		{"walhouse", "walhouse.public.orders_archive-3f2a9c1d0e7b", true},
		{"walhouse", "walhouse-schemas", false},
		{"walhouse", "walhouse-state", false},
		{"walhouse", "other.public.orders", false},
		{"walhouse", "walhouse.", false},
		{"walhouse", "walhousex.public.orders", false},
		// Nested pipelines' own topics: the registry, the state and the
		// dead letters of the pipeline "walhouse.x" (or "walhouse.a.b").
		{"walhouse", "walhouse.x-schemas", false},
		{"walhouse", "walhouse.x-state", false},
		{"walhouse", "walhouse.x-dlq", false},
		{"walhouse", "walhouse.a.b-schemas", false},
	} {
		err := replayTarget(tc.prefix, tc.topic)
		if (err == nil) != tc.ok {
			t.Errorf("replayTarget(%q, %q) = %v, want ok=%v", tc.prefix, tc.topic, err, tc.ok)
		}
	}
}

// polls is a fetchPoller that answers each poll with the next of its
// fetches, then with nothing.
type polls struct{ answers []kgo.Fetches }

func (p *polls) PollFetches(context.Context) kgo.Fetches {
	if len(p.answers) == 0 {
		return nil
	}
	f := p.answers[0]
	p.answers = p.answers[1:]
	return f
}

func fetchOf(topic string, part int32, offsets ...int64) kgo.Fetches {
	fp := kgo.FetchPartition{Partition: part}
	for _, o := range offsets {
		fp.Records = append(fp.Records, &kgo.Record{Topic: topic, Partition: part, Offset: o})
	}
	return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: topic, Partitions: []kgo.FetchPartition{fp}}}}}
}

// TestReadToEnd: an empty poll is no end (a group still joining answers
// so); reading goes on to the end offsets taken at the start, and fails,
// naming what is left, when polls keep coming back empty.
func TestReadToEnd(t *testing.T) {
	const topic = "walhouse-dlq"
	sp := dlqSpan{from: map[int32]int64{0: 0, 1: 5}, end: map[int32]int64{0: 3, 1: 6}}
	cl := &polls{answers: []kgo.Fetches{nil, nil, fetchOf(topic, 0, 0, 1), nil, fetchOf(topic, 1, 5), fetchOf(topic, 0, 2)}}
	var read []int64
	err := readToEnd(context.Background(), cl, topic, sp, time.Millisecond, func(r *kgo.Record) error {
		read = append(read, r.Offset)
		return nil
	})
	if err != nil || len(read) != 4 {
		t.Fatalf("read offsets %v, %v; want all 4 records despite the empty polls", read, err)
	}

	cl = &polls{answers: []kgo.Fetches{fetchOf(topic, 0, 0)}}
	err = readToEnd(context.Background(), cl, topic, sp, time.Millisecond, func(*kgo.Record) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "partition 0 at offset 1 of 3") || !strings.Contains(err.Error(), "partition 1 at offset 5 of 6") {
		t.Errorf("polls that stay empty: %v; want an error naming the partitions left", err)
	}

	// Nothing to read (a group already at the end): no poll at all.
	cl = &polls{}
	if err := readToEnd(context.Background(), cl, topic, dlqSpan{from: map[int32]int64{0: 3}, end: map[int32]int64{0: 3}}, time.Millisecond, nil); err != nil {
		t.Errorf("a span already read: %v", err)
	}
}
