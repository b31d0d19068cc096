package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/backoff"
)

// State is capture's state store (capture.StateStore) kept in a compacted
// topic (StateTopic), next to the data it describes. It reads the topic
// once, on the first Load, and then answers from memory, kept current by
// its own Saves: one capture owns its slot's keys. It is safe for
// concurrent use.
type State struct {
	cl  *kgo.Client
	out *Compacted

	mu     sync.Mutex
	values map[string][]byte // nil until the topic was read
}

// NewState returns the state store kept in topic, written through cl (the
// caller's producer, which it closes) and read through a client derived
// from it. A missing topic is created with the given replication factor
// (-1: the broker's default) and opts.
func NewState(ctx context.Context, cl *kgo.Client, topic string, replication int16, opts ...TopicOption) (*State, error) {
	out := NewCompacted(cl, topic, replication, opts...)
	if err := out.Create(ctx); err != nil {
		return nil, fmt.Errorf("state topic: %w", err)
	}
	return &State{cl: cl, out: out}, nil
}

// Save stores value under key durably before returning.
func (k *State) Save(ctx context.Context, key string, value []byte) error {
	if err := k.out.Put(ctx, key, value); err != nil {
		return fmt.Errorf("save to the state topic: %w", err)
	}
	k.mu.Lock()
	if k.values != nil {
		k.values[key] = value
	}
	k.mu.Unlock()
	return nil
}

// Load returns the last value saved under key, or nil. The first call
// reads the state topic from the start to its current end (it is compacted
// and small).
func (k *State) Load(ctx context.Context, key string) ([]byte, error) {
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
func (k *State) readAll(ctx context.Context) (map[string][]byte, error) {
	// The reader is a client of its own (consuming needs one), derived
	// from the client capture was given, so it connects exactly as that
	// one does: same brokers, TLS, SASL and dialer. It is closed once read:
	// capture reads its state only at start.
	cl, err := Derive(k.cl)
	if err != nil {
		return nil, fmt.Errorf("read state topic %s: %w", k.out.Topic(), err)
	}
	defer cl.Close()
	tail := NewTail(cl, k.out.Topic(), slog.Default().With("component", "capture"))
	values := map[string][]byte{}
	// NewState has just created the topic, which a broker may not know
	// yet: that is retried for a while before it counts as an error.
	deadline := time.Now().Add(15 * time.Second)
	for delay := backoff.ShortMin; ; delay = backoff.Next(delay, backoff.ShortMax) {
		err := tail.ReadNew(ctx, func(e Entry) { values[string(e.Key)] = e.Value })
		if err == nil {
			return values, nil
		}
		if errors.Is(err, ErrEntriesLost) {
			// Starting without them would copy tables again or forget
			// tables left out, silently: capture stops instead.
			return nil, fmt.Errorf("read state topic: %w; capture's snapshot progress and the marks of tables left out or inexact saved there may be gone. "+
				"To start again: stop capture, delete the topic %s (capture recreates it), DROP the ClickHouse tables and start capture once with --resnapshot '*'", err, k.out.Topic())
		}
		if !errors.Is(err, ErrNoTopic) || time.Now().After(deadline) {
			return nil, fmt.Errorf("read state topic: %w", err)
		}
		if serr := backoff.Sleep(ctx, delay); serr != nil {
			return nil, fmt.Errorf("read state topic: %w (last error: %v)", serr, err)
		}
	}
}
