package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/textcut"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/sink"
)

// maxErrorHeader bounds the error text a dead letter carries: an error
// may quote a whole value (ClickHouse's exceptions do), and the dead
// letter must fit in the topic next to the original key and value, within
// Overhead.
const maxErrorHeader = 16 << 10

// DeadLetters returns the sink's sink.DeadLetters: it produces each dead
// letter to topic through cl, in the form sink.ParseDeadLetter reads (the
// original key and value, the sink.Header* headers), and waits for the
// broker's acknowledgement, so a record is committed past only once it is
// safe in the dead-letter topic.
//
// The topic and cl must hold records as large as the tables' topics do
// (create the topic with Topics(cl, maxRecordBytes), size cl with
// RecordLimitOpts): the dead letter keeps the original key and value and
// adds its headers. Should a record still be too large for it (a table
// topic whose max.message.bytes was raised past the sink's
// --max-record-bytes), the dead letter goes without its value, with
// sink.HeaderValueDropped, rather than stopping the sink.
func DeadLetters(cl *kgo.Client, topic string) sink.DeadLetters {
	return deadLetters{cl: cl, topic: topic}
}

type deadLetters struct {
	cl    *kgo.Client
	topic string
}

// Send produces l and waits for the broker's acknowledgement.
func (k deadLetters) Send(ctx context.Context, l sink.DeadLetter) error {
	r := &kgo.Record{
		Topic: k.topic,
		Key:   l.Key,
		Value: l.Value,
		Headers: []kgo.RecordHeader{
			{Key: sink.HeaderTopic, Value: []byte(l.Topic)},
			{Key: sink.HeaderPartition, Value: []byte(strconv.Itoa(int(l.Partition)))},
			{Key: sink.HeaderOffset, Value: []byte(strconv.FormatInt(l.Offset, 10))},
			{Key: sink.HeaderError, Value: []byte(textcut.Shorten(l.Err.Error(), maxErrorHeader))},
			{Key: sink.HeaderFirstSeen, Value: []byte(l.FirstSeen.Format(time.RFC3339Nano))},
			{Key: sink.HeaderAttempts, Value: []byte(strconv.Itoa(l.Attempts))},
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
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: sink.HeaderValueDropped, Value: []byte(strconv.Itoa(len(r.Value)))})
		r.Value = nil
		err = k.cl.ProduceSync(ctx, r).FirstErr()
	}
	if err != nil {
		return fmt.Errorf("produce to dead-letter topic %s: %w", k.topic, err)
	}
	return nil
}
