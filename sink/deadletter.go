package sink

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// Headers the sink puts on a dead-lettered record (record.HeaderDL*). The
// record's key and value are the original ones, so a replay produces
// exactly what failed.
const (
	HeaderTopic     = record.HeaderDLTopic
	HeaderPartition = record.HeaderDLPartition
	HeaderOffset    = record.HeaderDLOffset
	HeaderError     = record.HeaderDLError
	HeaderFirstSeen = record.HeaderDLFirstSeen
	HeaderAttempts  = record.HeaderDLAttempts
	// A whole row batch set aside also keeps its record.HeaderRows.
)

// KafkaDeadLetters returns DeadLetters that produce to topic through cl and
// wait for the broker's acknowledgement, so a record is committed past only
// once it is safe in the dead-letter topic.
func KafkaDeadLetters(cl *kgo.Client, topic string) DeadLetters {
	return kafkaDeadLetters{cl: cl, topic: topic}
}

type kafkaDeadLetters struct {
	cl    *kgo.Client
	topic string
}

func (k kafkaDeadLetters) Send(ctx context.Context, l DeadLetter) error {
	r := &kgo.Record{
		Topic: k.topic,
		Key:   l.Key,
		Value: l.Value,
		Headers: []kgo.RecordHeader{
			{Key: HeaderTopic, Value: []byte(l.Topic)},
			{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(l.Partition)))},
			{Key: HeaderOffset, Value: []byte(strconv.FormatInt(l.Offset, 10))},
			{Key: HeaderError, Value: []byte(l.Err.Error())},
			{Key: HeaderFirstSeen, Value: []byte(l.FirstSeen.Format(time.RFC3339Nano))},
			{Key: HeaderAttempts, Value: []byte(strconv.Itoa(l.Attempts))},
		},
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: record.HeaderDLOrigin, Value: []byte("sink")})
	if l.Reason != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: record.HeaderDLReason, Value: []byte(l.Reason)})
	}
	if l.Rows > 0 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: record.HeaderRows, Value: []byte(strconv.Itoa(l.Rows))})
	}
	if err := k.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("produce to dead-letter topic %s: %w", k.topic, err)
	}
	return nil
}

// ParseDeadLetter reads the metadata of a record from the dead-letter topic.
func ParseDeadLetter(r *kgo.Record) (DeadLetter, error) {
	l := DeadLetter{Key: r.Key, Value: r.Value}
	var errText string
	for _, h := range r.Headers {
		v := string(h.Value)
		var err error
		switch h.Key {
		case HeaderTopic:
			l.Topic = v
		case HeaderPartition:
			var p int
			p, err = strconv.Atoi(v)
			l.Partition = int32(p)
		case HeaderOffset:
			l.Offset, err = strconv.ParseInt(v, 10, 64)
		case HeaderError:
			errText = v
		case HeaderFirstSeen:
			l.FirstSeen, err = time.Parse(time.RFC3339Nano, v)
		case HeaderAttempts:
			l.Attempts, err = strconv.Atoi(v)
		case record.HeaderRows:
			l.Rows = record.RowsOf(v)
		case record.HeaderDLOrigin:
			l.Origin = v
		case record.HeaderDLReason:
			l.Reason = v
		case record.HeaderDLTable:
			l.Table = v
		case record.HeaderDLPrimaryKey:
			l.PrimaryKey = v
		case record.HeaderDLCommitLSN:
			l.CommitLSN, err = record.ParseLSN(v)
		}
		if err != nil {
			return l, fmt.Errorf("dead letter at offset %d: header %s: %w", r.Offset, h.Key, err)
		}
	}
	if l.Origin == "" {
		l.Origin = "sink" // written before walhouse named the origin
	}
	if l.Topic == "" {
		return l, fmt.Errorf("record at offset %d has no %s header: not written by walhouse sink", r.Offset, HeaderTopic)
	}
	l.Err = deadLetterError(errText)
	return l, nil
}

type deadLetterError string

func (e deadLetterError) Error() string { return string(e) }
