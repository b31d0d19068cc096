package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/kafkatopic"
)

// StateStore keeps the progress capture needs beyond the slot's position:
// which snapshot chunks are done. Values are small JSON documents.
type StateStore interface {
	// Load returns the latest value saved under key, or nil.
	Load(ctx context.Context, key string) ([]byte, error)
	// Save stores value under key durably before returning.
	Save(ctx context.Context, key string, value []byte) error
}

// WithStateStore sets where snapshot progress is kept. Without it an
// interrupted snapshot starts over.
func WithStateStore(s StateStore) Option { return func(c *config) { c.state = s } }

// KafkaState returns a StateStore kept in a compacted Kafka topic, next to
// the data it describes. A missing topic is created with the given
// replication factor (-1: the broker's default).
func KafkaState(ctx context.Context, cl *kgo.Client, topic string, replication int16) (StateStore, error) {
	adm := kadm.NewClient(cl)
	cleanup := "compact"
	if err := kafkatopic.Ensure(ctx, adm, topic, 1, replication, map[string]*string{"cleanup.policy": &cleanup}); err != nil {
		return nil, fmt.Errorf("state topic: %w", err)
	}
	return &kafkaState{cl: cl, adm: adm, topic: topic}, nil
}

// kafkaState reads the topic once, on the first Load, and then answers from
// memory, kept current by its own Saves: one capture owns its slot's keys.
type kafkaState struct {
	cl    *kgo.Client
	adm   *kadm.Client
	topic string

	mu     sync.Mutex
	values map[string][]byte // nil until the topic was read
}

func (k *kafkaState) Save(ctx context.Context, key string, value []byte) error {
	r := &kgo.Record{Topic: k.topic, Key: []byte(key), Value: value, Partition: 0}
	if err := k.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("save %s to state topic %s: %w", key, k.topic, err)
	}
	k.mu.Lock()
	if k.values != nil {
		k.values[key] = value
	}
	k.mu.Unlock()
	return nil
}

// endOffset returns the end of the state topic's partition. A topic created
// a moment ago may not be known to every broker yet: that is retried for a
// while before it counts as an error.
func (k *kafkaState) endOffset(ctx context.Context) (kadm.ListedOffset, error) {
	deadline := time.Now().Add(15 * time.Second)
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		ends, err := k.adm.ListEndOffsets(ctx, k.topic)
		if err != nil {
			return kadm.ListedOffset{}, fmt.Errorf("read the end of state topic %s: %w", k.topic, err)
		}
		end, ok := ends.Lookup(k.topic, 0)
		if ok && end.Err == nil {
			return end, nil
		}
		if ok && !errors.Is(end.Err, kerr.UnknownTopicOrPartition) && !errors.Is(end.Err, kerr.NotLeaderForPartition) && !errors.Is(end.Err, kerr.LeaderNotAvailable) {
			return kadm.ListedOffset{}, fmt.Errorf("read the end of state topic %s: %w", k.topic, end.Err)
		}
		if time.Now().After(deadline) {
			return kadm.ListedOffset{}, fmt.Errorf("read the end of state topic %s: partition 0 is not available (%v); check the broker", k.topic, end.Err)
		}
		select {
		case <-ctx.Done():
			return kadm.ListedOffset{}, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// Load returns the last value saved under key. The first call reads the
// state topic from the start to its current end (it is compacted and small).
func (k *kafkaState) Load(ctx context.Context, key string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.values == nil {
		values, err := k.readAll(ctx)
		if err != nil {
			return nil, err
		}
		k.values = values
	}
	return k.values[key], nil
}

// readAll reads the last value of every key in the state topic.
func (k *kafkaState) readAll(ctx context.Context) (map[string][]byte, error) {
	values := map[string][]byte{}
	end, err := k.endOffset(ctx)
	if err != nil {
		return nil, err
	}
	if end.Offset == 0 {
		return values, nil
	}
	// The reader is a client of its own (consuming needs one), made from
	// the options of the client capture was given, so it connects exactly
	// as that one does: same brokers, TLS, SASL and dialer.
	opts := append(slices.Clone(k.cl.Opts()), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{k.topic: {0: kgo.NewOffset().AtStart()}}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("read state topic %s: %w", k.topic, err)
	}
	defer cl.Close()
	next := int64(0)
	for next < end.Offset {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := fs.Err0(); err != nil {
			return nil, fmt.Errorf("read state topic %s: %w", k.topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			values[string(r.Key)] = r.Value
			next = r.Offset + 1
		})
	}
	return values, nil
}
