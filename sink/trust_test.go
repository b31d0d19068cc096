package sink

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

func TestTopicSource(t *testing.T) {
	s := &Sink{cfg: Config{TopicPrefix: "wh"}}
	tests := []struct {
		name      string
		topic     string
		qualified string // as the header says it
		want      record.Source
		bad       bool
	}{
		{"plain", "wh.public.orders", "public.orders", record.Source{Schema: "public", Table: "orders"}, false},
		{"dot in the table", record.TopicName("wh", "s", "a.b"), "s.a.b", record.Source{Schema: "s", Table: "a.b"}, false},
		{"dot in the schema", record.TopicName("wh", "s.a", "b"), "s.a.b", record.Source{Schema: "s.a", Table: "b"}, false},
		{"another table's topic", "wh.public.orders", "public.customers", record.Source{}, true},
		{"another pipeline's topic", "other.public.orders", "public.orders", record.Source{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			schema, table, _ := strings.Cut(tc.qualified, ".") // as ParseHeartbeat splits it
			got, err := s.topicSource(tc.topic, record.Source{Schema: schema, Table: table})
			if tc.bad {
				if !errors.Is(err, record.ErrInvalid) {
					t.Fatalf("topicSource = %+v, %v; want ErrInvalid", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("topicSource = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// heartbeatRec is a heartbeat of public.<table> on topic.
func heartbeatRec(topic, table string, offset int64, at time.Time) *kgo.Record {
	return &kgo.Record{Topic: topic, Offset: offset, Headers: []kgo.RecordHeader{
		{Key: record.HeaderHeartbeat, Value: []byte(at.Format(time.RFC3339Nano))},
		{Key: record.HeaderLSN, Value: []byte("0/1000")},
		{Key: record.HeaderTable, Value: []byte("public." + table)},
	}}
}

// TestSinkRefusesRecordsOfAnotherTopic: a record, heartbeat or truncate
// marker that names a table other than its topic's goes to the dead
// letters, and the records of the topic's own table load.
func TestSinkRefusesRecordsOfAnotherTopic(t *testing.T) {
	topic := record.TopicName("wh", "public", "a")
	var poll []*kgo.Record
	for o := int64(0); o < 3; o++ {
		r := rec("a", 0, o)
		r.Topic = topic
		poll = append(poll, r)
	}
	intruder := rec("b", 0, 3) // table public.b on a's topic
	intruder.Topic = topic
	beat := heartbeatRec(topic, "b", 4, time.Now())
	future := heartbeatRec(topic, "a", 5, time.Now().Add(time.Hour))
	truncate := heartbeatRec(topic, "b", 6, time.Now())
	truncate.Headers = append(truncate.Headers, kgo.RecordHeader{Key: record.HeaderTruncate, Value: []byte(time.Now().Format(time.RFC3339Nano))})
	poll = append(poll, intruder, beat, future, truncate)
	l := &fakeLoader{}
	dead := &fakeDead{}
	runScript(t, Config{DeadLetters: dead, TopicPrefix: "wh"}, nil, l, poll)
	var got []string
	for _, d := range dead.got {
		if !errors.Is(d.Err, record.ErrInvalid) {
			t.Errorf("dead letter at %d: %v, want ErrInvalid", d.Offset, d.Err)
		}
		got = append(got, fmt.Sprint(d.Offset))
	}
	if fmt.Sprint(got) != "[3 4 5 6]" {
		t.Fatalf("dead letters at %v, want [3 4 5 6]: %+v", got, dead.got)
	}
	if want := fmt.Sprintf("[%s/0/0-5 n=3]", topic); fmt.Sprint(l.batches) != want {
		t.Errorf("batches %v, want %v", l.batches, want)
	}
}
