package testenv

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/registry"
)

// Records decodes the records of one pipeline's topics as the sink does:
// a version 2 record finds its schema in the pipeline's registry, which is
// read again when a record refers to a schema not seen yet.
type Records struct {
	reader *registry.Reader
}

// NewRecords returns a decoder for the pipeline with the given topic
// prefix; its Kafka client is closed when the test ends.
func NewRecords(t testing.TB, env Env, prefix string) *Records {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(env.Kafka, ",")...))
	if err != nil {
		t.Fatalf("kafka client for the schema registry: %v", err)
	}
	t.Cleanup(cl.Close)
	return &Records{reader: registry.NewReader(cl, registry.Topic(prefix), slog.New(slog.DiscardHandler))}
}

// Decode decodes one record value.
func (rs *Records) Decode(ctx context.Context, value []byte) (*record.Record, error) {
	r, err := record.Decode(value, rs.reader)
	if !errors.Is(err, record.ErrUnknownSchema) {
		return r, err
	}
	if err := rs.reader.Refresh(ctx); err != nil {
		return nil, err
	}
	return record.Decode(value, rs.reader)
}
