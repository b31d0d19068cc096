package capture

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/kafkatopic"
	"github.com/walhouse/walhouse/record"
)

// TopicCreator creates a Kafka topic if it does not exist and reports
// partition counts. Capture creates each table's topic before producing its
// first record, and sends heartbeats to every partition.
type TopicCreator interface {
	CreateTopic(ctx context.Context, name string, partitions int32, replication int16) error
	Partitions(ctx context.Context, name string) (int32, error)
}

// WithTopicCreator makes capture create missing topics through tc. Without
// it, topics must exist (or the broker must create them on first use).
func WithTopicCreator(tc TopicCreator) Option { return func(c *config) { c.topics = tc } }

// KafkaTopics returns a TopicCreator that uses the Kafka admin API of cl.
// Its topics hold records of up to maxRecordBytes (see WithMaxRecordBytes):
// a new topic gets the max.message.bytes that takes, an existing one with
// a lower limit is raised to it.
func KafkaTopics(cl *kgo.Client, maxRecordBytes int) TopicCreator {
	return kafkaTopics{adm: kadm.NewClient(cl), configs: kafkatopic.Configs(maxRecordBytes, nil)}
}

type kafkaTopics struct {
	adm     *kadm.Client
	configs map[string]*string
}

func (k kafkaTopics) CreateTopic(ctx context.Context, name string, partitions int32, replication int16) error {
	return kafkatopic.Ensure(ctx, k.adm, name, partitions, replication, k.configs)
}

func (k kafkaTopics) Partitions(ctx context.Context, name string) (int32, error) {
	td, err := k.adm.ListTopics(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("describe Kafka topic %s: %w", name, err)
	}
	t, ok := td[name]
	if !ok || t.Err != nil {
		return 0, fmt.Errorf("describe Kafka topic %s: %v", name, t.Err)
	}
	return int32(len(t.Partitions)), nil
}

// Partitioner returns the partitioner capture needs: records are placed by
// the murmur2 hash of their key (Kafka's default, so other clients agree),
// except heartbeats and row batches, which go to the partition set on the
// record (a row batch holds rows whose keys hash to that partition).
func Partitioner() kgo.Partitioner { return partitioner{kgo.StickyKeyPartitioner(nil)} }

type partitioner struct{ keyed kgo.Partitioner }

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return topicPartitioner{p.keyed.ForTopic(topic)}
}

type topicPartitioner struct{ keyed kgo.TopicPartitioner }

func (t topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return r.Key == nil || t.keyed.RequiresConsistency(r)
}

func (t topicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Key == nil && len(r.Headers) > 0 && (r.Headers[0].Key == record.HeaderHeartbeat || r.Headers[0].Key == record.HeaderRows) {
		return int(r.Partition) % n
	}
	return t.keyed.Partition(r, n)
}
