package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/sink"
)

// DeadLetters returns the sink's sink.DeadLetters: it produces each dead
// letter to topic through cl, as record.DeadLetter's Headers encode it,
// and waits for the broker's acknowledgement, so a record is committed
// past only once it is safe in the dead-letter topic.
//
// The topic and cl must hold records as large as the tables' topics do
// (create the topic with Topics(cl, maxRecordBytes), size cl with
// RecordLimitOpts): the dead letter keeps the original key and value and
// adds its headers. Should a record still be too large for it (a table
// topic whose max.message.bytes was raised past the sink's
// --max-record-bytes), the dead letter goes without its value
// (record.DeadLetter.WithoutValue) rather than stopping the sink.
func DeadLetters(cl *kgo.Client, topic string) sink.DeadLetters {
	return deadLetters{cl: cl, topic: topic}
}

type deadLetters struct {
	cl    *kgo.Client
	topic string
}

// Send produces l and waits for the broker's acknowledgement.
func (k deadLetters) Send(ctx context.Context, l record.DeadLetter) error {
	err := k.cl.ProduceSync(ctx, DeadLetterRecord(k.topic, l)).FirstErr()
	if errors.Is(err, kerr.MessageTooLarge) {
		err = k.cl.ProduceSync(ctx, DeadLetterRecord(k.topic, l.WithoutValue())).FirstErr()
	}
	if err != nil {
		return fmt.Errorf("produce to dead-letter topic %s: %w", k.topic, err)
	}
	return nil
}

// DeadLetterRecord returns the Kafka record of dead letter l in topic.
func DeadLetterRecord(topic string, l record.DeadLetter) *kgo.Record {
	r := &kgo.Record{Topic: topic, Key: l.Key, Value: l.Value}
	for _, h := range l.Headers() {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
	}
	return r
}

// ParseDeadLetter reads a record of the dead-letter topic
// (record.ParseDeadLetter).
func ParseDeadLetter(r *kgo.Record) (record.DeadLetter, error) {
	hs := make([]record.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = record.Header{Key: h.Key, Value: string(h.Value)}
	}
	l, err := record.ParseDeadLetter(r.Key, r.Value, hs)
	if err != nil {
		return l, fmt.Errorf("dead letter at offset %d: %w", r.Offset, err)
	}
	return l, nil
}
