package capture

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// TopicCreator creates a Kafka topic if it does not exist and reports
// partition counts. Capture creates each table's topic before producing its
// first record, and sends heartbeats to every partition. kafka.Topics
// satisfies it.
type TopicCreator interface {
	CreateTopic(ctx context.Context, name string, partitions int32, replication int16) error
	Partitions(ctx context.Context, name string) (int32, error)
}

// Partitioner returns the partitioner capture needs: records are placed by
// the murmur2 hash of their key (Kafka's default, so other clients agree),
// except heartbeats and row batches, which go to the partition set on the
// record (a row batch holds rows whose keys hash to that partition).
// Capture's producer must use it (kafka.ProducerOpts takes it): the
// snapshot places each row batch by this same rule, so it belongs with
// capture, which decides where its records go.
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
