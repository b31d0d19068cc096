package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The topics of a pipeline, all named from its --topic-prefix, so capture,
// the sink, dlq and serve meet on them without another setting. A table's
// own topic is record.TopicName(prefix, schema, table): its name is part of
// the records' contract, so it lives with them.

// StateTopic returns the compacted topic where capture keeps its snapshot
// progress: "<prefix>-state".
func StateTopic(prefix string) string { return prefix + "-state" }

// SchemasTopic returns the schema registry's compacted topic:
// "<prefix>-schemas" (see package registry).
func SchemasTopic(prefix string) string { return prefix + "-schemas" }

// DeadLetterTopic returns the topic of records that can never be loaded,
// which capture and the sink both write to: "<prefix>-dlq".
func DeadLetterTopic(prefix string) string { return prefix + "-dlq" }

// Admin is the part of kadm.Client that Ensure uses (an interface so the
// decisions of Ensure are unit-tested without a broker).
type Admin interface {
	CreateTopic(ctx context.Context, partitions int32, replicationFactor int16, configs map[string]*string, topic string) (kadm.CreateTopicResponse, error)
	ListTopics(ctx context.Context, topics ...string) (kadm.TopicDetails, error)
	DescribeTopicConfigs(ctx context.Context, topics ...string) (kadm.ResourceConfigs, error)
	AlterTopicConfigs(ctx context.Context, configs []kadm.AlterConfig, topics ...string) (kadm.AlterConfigsResponses, error)
}

// Topic sizes beyond the record bound (record.DefaultMaxBytes,
// record.ValidateMaxBytes).
const (
	// Overhead is what a topic, a producer and a consumer allow beyond the
	// bound: the record batch and record framing, headers (a dead letter
	// adds its own, see DeadLetters) and the row-batch envelope.
	Overhead = 1 << 20
	// MaxMessageBytesConfig is the topic setting Ensure sets and raises.
	MaxMessageBytesConfig = "max.message.bytes"
)

// MaxMessageBytes returns the max.message.bytes of a topic that holds
// records of up to maxRecordBytes of key and value; producers use it as
// their batch limit. Kafka checks it on the compressed batch, and the
// client sends a batch uncompressed when compression does not shrink it,
// so the uncompressed bound is enough.
func MaxMessageBytes(maxRecordBytes int) int { return maxRecordBytes + Overhead }

// Configs returns the topic configuration of a topic that holds records of
// up to maxRecordBytes, with extra settings added.
func Configs(maxRecordBytes int, extra map[string]*string) map[string]*string {
	out := map[string]*string{}
	for k, v := range extra {
		out[k] = v
	}
	v := strconv.Itoa(MaxMessageBytes(maxRecordBytes))
	out[MaxMessageBytesConfig] = &v
	return out
}

// compacted is the configuration of walhouse's own key-value topics
// (state, schema registry): only the latest value of each key matters.
func compacted() map[string]*string {
	policy := "compact"
	return map[string]*string{"cleanup.policy": &policy}
}

// Ensure creates topic unless it exists. When the broker does not let this
// user create topics, an existing topic is accepted as it is; a missing one
// is an error that says how to create it.
//
// configs apply to a new topic only, except max.message.bytes, which is a
// lower bound: an existing topic whose limit is smaller (Kafka's 1 MB
// default, as walhouse versions before the record bound created it) is
// raised, and when that is refused, the error says what to run.
func Ensure(ctx context.Context, adm Admin, topic string, partitions int32, replication int16, configs map[string]*string) error {
	resp, err := adm.CreateTopic(ctx, partitions, replication, configs, topic)
	if err == nil {
		err = resp.Err
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.TopicAlreadyExists):
		return raiseMaxMessageBytes(ctx, adm, topic, configs[MaxMessageBytesConfig])
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.PolicyViolation):
		td, lerr := adm.ListTopics(ctx, topic)
		if lerr == nil {
			if t, ok := td[topic]; ok && t.Err == nil {
				// created by an administrator
				return raiseMaxMessageBytes(ctx, adm, topic, configs[MaxMessageBytesConfig])
			}
		}
		return fmt.Errorf("create Kafka topic %s: %w; this user may not create it and it does not exist: create it (%s) or grant CREATE on it", topic, err, describe(partitions, replication, configs))
	default:
		return fmt.Errorf("create Kafka topic %s (%s): %w", topic, describe(partitions, replication, configs), err)
	}
}

// describe says how a topic should be created, for error messages.
func describe(partitions int32, replication int16, configs map[string]*string) string {
	parts := []string{fmt.Sprintf("%d partitions", partitions)}
	if replication > 0 {
		parts = append(parts, fmt.Sprintf("replication factor %d", replication))
	}
	for k, v := range configs {
		if v != nil {
			parts = append(parts, k+"="+*v)
		}
	}
	return strings.Join(parts, ", ")
}

// raiseMaxMessageBytes makes an existing topic's max.message.bytes at least
// want (nil: nothing asked).
func raiseMaxMessageBytes(ctx context.Context, adm Admin, topic string, want *string) error {
	if want == nil {
		return nil
	}
	need, err := strconv.Atoi(*want)
	if err != nil {
		return fmt.Errorf("topic %s: %s=%q is not a number of bytes", topic, MaxMessageBytesConfig, *want)
	}
	advice := fmt.Sprintf("kafka-configs.sh --bootstrap-server <broker> --alter --entity-type topics --entity-name %s --add-config %s=%d", topic, MaxMessageBytesConfig, need)
	have, err := maxMessageBytes(ctx, adm, topic)
	if err != nil {
		// Without DESCRIBE_CONFIGS walhouse cannot tell; ordinary records
		// still flow, and the broker refuses only records over its limit.
		slog.Default().Warn("cannot read a topic's max.message.bytes: records larger than it will be refused; make sure it holds them",
			"topic", topic, "err", err, "want", need, "run", advice)
		return nil
	}
	if have >= need {
		return nil
	}
	resps, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: MaxMessageBytesConfig, Value: want}}, topic)
	if err == nil {
		var r kadm.AlterConfigsResponse
		if r, err = resps.On(topic, nil); err == nil {
			err = r.Err
		}
	}
	if err != nil {
		return fmt.Errorf("topic %s holds records up to %s=%d, walhouse needs %d for its record bound, and raising it failed: %w; run `%s` (or grant ALTER_CONFIGS on the topic), or lower --max-record-bytes to at most %d",
			topic, MaxMessageBytesConfig, have, need, err, advice, max(have-Overhead, 0))
	}
	slog.Default().Info("raised the topic's max.message.bytes to the record bound", "topic", topic, "from", have, "to", need)
	return nil
}

// maxMessageBytes reads the limit in force for topic: its own setting or
// the broker's message.max.bytes.
func maxMessageBytes(ctx context.Context, adm Admin, topic string) (int, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, err
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return 0, err
	}
	for _, c := range rc.Configs {
		if c.Key == MaxMessageBytesConfig {
			return strconv.Atoi(c.MaybeValue())
		}
	}
	return 0, fmt.Errorf("the broker did not report %s", MaxMessageBytesConfig)
}

// Topics creates the tables' topics and reports their partition counts,
// through the admin API of cl: it is capture's capture.TopicCreator. Its
// topics hold records of up to maxRecordBytes: a new topic gets the
// max.message.bytes that takes, an existing one with a lower limit is
// raised to it. The sink's dead-letter topic is made the same way (see
// DeadLetters). opts add settings of new topics (MinInsyncReplicas).
func Topics(cl *kgo.Client, maxRecordBytes int, opts ...TopicOption) *TopicCreator {
	return &TopicCreator{adm: kadm.NewClient(cl), configs: applyTopicOptions(Configs(maxRecordBytes, nil), opts)}
}

// TopicCreator creates topics sized for the record bound; see Topics. It is
// safe for concurrent use.
type TopicCreator struct {
	adm     *kadm.Client
	configs map[string]*string
}

// CreateTopic creates the topic with the given partitions and replication
// factor (-1: the broker's default) unless it exists; see Ensure.
func (k *TopicCreator) CreateTopic(ctx context.Context, name string, partitions int32, replication int16) error {
	return Ensure(ctx, k.adm, name, partitions, replication, k.configs)
}

// Partitions returns the partition count of the topic.
func (k *TopicCreator) Partitions(ctx context.Context, name string) (int32, error) {
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
