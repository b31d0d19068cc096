// Package kafkatopic creates the Kafka topics walhouse writes to, and
// accepts topics an administrator created beforehand: in clusters with
// ACLs, walhouse's user often may write to a topic but not create one, and
// the broker then refuses the creation even when the topic exists.
//
// It also owns the arithmetic of record sizes: walhouse bounds the key and
// value of each record it produces (MaxRecordBytes), and every topic that
// holds such records, every producer that writes them and every consumer
// that reads them is sized from that bound (MaxMessageBytes), so that a
// row Kafka accepts from capture can also be read and dead-lettered by the
// sink.
package kafkatopic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Admin is the part of kadm.Client that Ensure uses.
type Admin interface {
	CreateTopic(ctx context.Context, partitions int32, replicationFactor int16, configs map[string]*string, topic string) (kadm.CreateTopicResponse, error)
	ListTopics(ctx context.Context, topics ...string) (kadm.TopicDetails, error)
	DescribeTopicConfigs(ctx context.Context, topics ...string) (kadm.ResourceConfigs, error)
	AlterTopicConfigs(ctx context.Context, configs []kadm.AlterConfig, topics ...string) (kadm.AlterConfigsResponses, error)
}

// Record size limits.
const (
	// DefaultMaxRecordBytes is the default bound on the key plus value of
	// one record walhouse produces: a row with a value of tens of MiB
	// (jsonb, text, bytea; a bytea's hex text is twice its size) must pass.
	DefaultMaxRecordBytes = 64 << 20
	// MinMaxRecordBytes is the smallest bound walhouse accepts: Kafka's
	// own default message size, which snapshot row batches (128 KiB) and
	// ordinary rows fit with room to spare.
	MinMaxRecordBytes = 1 << 20
	// MaxMaxRecordBytes is the largest bound: a request of one record must
	// stay within what a broker reads (socket.request.max.bytes, an int32)
	// and PostgreSQL sends no message over 1 GiB anyway.
	MaxMaxRecordBytes = 1 << 30
	// Overhead is what a topic, a producer and a consumer allow beyond the
	// bound: the record batch and record framing, headers (a dead letter
	// adds its own, see sink.KafkaDeadLetters) and the row-batch envelope.
	Overhead = 1 << 20
	// MaxMessageBytesConfig is the topic setting Ensure sets and raises.
	MaxMessageBytesConfig = "max.message.bytes"
)

// ValidateMaxRecordBytes checks a record bound given by a user.
func ValidateMaxRecordBytes(n int) error {
	if n < MinMaxRecordBytes || n > MaxMaxRecordBytes {
		return fmt.Errorf("max record bytes %d: want %d (1 MiB) to %d (1 GiB)", n, MinMaxRecordBytes, MaxMaxRecordBytes)
	}
	return nil
}

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
