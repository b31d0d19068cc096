package sink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"
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
	// HeaderValueDropped holds the size of a value the dead-letter topic
	// could not take (see KafkaDeadLetters); the dead letter then has no
	// value and cannot be replayed.
	HeaderValueDropped = "walhouse-value-dropped"
	// A whole row batch set aside also keeps its record.HeaderRows.
)

// maxErrorHeader bounds the error text a dead letter carries: an error
// may quote a whole value (ClickHouse's exceptions do), and the dead
// letter must fit in the topic next to the original key and value, within
// kafkatopic.Overhead.
const maxErrorHeader = 16 << 10

// KafkaDeadLetters returns DeadLetters that produce to topic through cl and
// wait for the broker's acknowledgement, so a record is committed past only
// once it is safe in the dead-letter topic.
//
// The topic and cl must hold records as large as the tables' topics do
// (see package internal/kafkatopic): the dead letter keeps the original
// key and value and adds its headers. Should a record still be too large
// for it (a table topic whose max.message.bytes was raised past the
// sink's --max-record-bytes), the dead letter goes without its value,
// with HeaderValueDropped, rather than stopping the sink.
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
			{Key: HeaderError, Value: []byte(truncateUTF8(l.Err.Error(), maxErrorHeader))},
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
	err := k.cl.ProduceSync(ctx, r).FirstErr()
	if errors.Is(err, kerr.MessageTooLarge) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderValueDropped, Value: []byte(strconv.Itoa(len(r.Value)))})
		r.Value = nil
		err = k.cl.ProduceSync(ctx, r).FirstErr()
	}
	if err != nil {
		return fmt.Errorf("produce to dead-letter topic %s: %w", k.topic, err)
	}
	return nil
}

// truncateUTF8 cuts s to at most n bytes, on a character boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
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
		case HeaderValueDropped:
			l.ValueDropped, err = strconv.Atoi(v)
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
