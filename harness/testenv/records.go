package testenv

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/kafka"
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
	return &Records{reader: registry.NewReader(cl, kafka.SchemasTopic(prefix), slog.New(slog.DiscardHandler))}
}

// DecodeAll decodes one Kafka record: a row batch (record.HeaderRows) into
// its rows, any other record into itself.
func (rs *Records) DecodeAll(ctx context.Context, kr *kgo.Record) ([]*record.Record, error) {
	for _, h := range kr.Headers {
		if h.Key != record.HeaderRows {
			continue
		}
		out, err := record.DecodeBatch(kr.Value, rs.reader)
		if !errors.Is(err, record.ErrUnknownSchema) {
			return out, err
		}
		if err := rs.reader.Refresh(ctx); err != nil {
			return nil, err
		}
		return record.DecodeBatch(kr.Value, rs.reader)
	}
	r, err := rs.Decode(ctx, kr.Value)
	if err != nil {
		return nil, err
	}
	return []*record.Record{r}, nil
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
