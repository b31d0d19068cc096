// Package kafkatopic creates the Kafka topics walhouse writes to, and
// accepts topics an administrator created beforehand: in clusters with
// ACLs, walhouse's user often may write to a topic but not create one, and
// the broker then refuses the creation even when the topic exists.
package kafkatopic

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Admin is the part of kadm.Client that Ensure uses.
type Admin interface {
	CreateTopic(ctx context.Context, partitions int32, replicationFactor int16, configs map[string]*string, topic string) (kadm.CreateTopicResponse, error)
	ListTopics(ctx context.Context, topics ...string) (kadm.TopicDetails, error)
}

// Ensure creates topic unless it exists. When the broker does not let this
// user create topics, an existing topic is accepted as it is; a missing one
// is an error that says how to create it.
func Ensure(ctx context.Context, adm Admin, topic string, partitions int32, replication int16, configs map[string]*string) error {
	resp, err := adm.CreateTopic(ctx, partitions, replication, configs, topic)
	if err == nil {
		err = resp.Err
	}
	switch {
	case err == nil, errors.Is(err, kerr.TopicAlreadyExists):
		return nil
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.PolicyViolation):
		td, lerr := adm.ListTopics(ctx, topic)
		if lerr == nil {
			if t, ok := td[topic]; ok && t.Err == nil {
				return nil // created by an administrator
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
