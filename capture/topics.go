package capture

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TopicCreator creates a Kafka topic if it does not exist. Capture calls it
// for each table before producing the table's first record.
type TopicCreator interface {
	CreateTopic(ctx context.Context, name string, partitions int32, replication int16) error
}

// WithTopicCreator makes capture create missing topics through tc. Without
// it, topics must exist (or the broker must create them on first use).
func WithTopicCreator(tc TopicCreator) Option { return func(c *config) { c.topics = tc } }

// KafkaTopics returns a TopicCreator that uses the Kafka admin API of cl.
func KafkaTopics(cl *kgo.Client) TopicCreator { return kafkaTopics{adm: kadm.NewClient(cl)} }

type kafkaTopics struct{ adm *kadm.Client }

func (k kafkaTopics) CreateTopic(ctx context.Context, name string, partitions int32, replication int16) error {
	resp, err := k.adm.CreateTopic(ctx, partitions, replication, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create Kafka topic %s (%d partitions, replication %d): %w", name, partitions, replication, err)
	}
	return nil
}
