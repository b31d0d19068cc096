package sink

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/failpoint"
	"github.com/walhouse/walhouse/record"
)

// Truncater applies a source TRUNCATE (a truncate marker, record.Truncate)
// to the destination. A Loader that also implements Truncater, as
// *clickhouse.Writer does, receives the markers; a sink whose Loader does
// not stops at the first marker rather than keep rows the source no longer
// has.
//
// The sink calls Truncate for a partition's marker after every earlier
// record of that partition was loaded (or set aside), and before any later
// one. Truncate must make every row of the table whose latest version loaded
// so far is below Truncate.LSN read as deleted, and leave rows with larger
// versions alone. It must be idempotent: a sink that crashed before
// committing the marker calls it again with the same request, and a marker
// produced twice is applied twice, at different offsets.
type Truncater interface {
	Truncate(ctx context.Context, req TruncateRequest) error
}

// TruncateRequest is one truncate marker to apply.
type TruncateRequest struct {
	Truncate record.Truncate
	// Token names the marker by its Kafka position
	// ("<topic>/<partition>/<offset>/truncate"), the same every time the
	// marker is applied; a ClickHouse loader passes it as
	// insert_deduplication_token.
	Token string
}

// ErrNoTruncater is returned when a truncate marker arrives and the Loader
// cannot apply it.
var ErrNoTruncater = errors.New("the loader cannot apply TRUNCATE")

// applyTruncate applies the marker kr, whose earlier records of the same
// partition are loaded, retrying transient failures.
func (s *Sink) applyTruncate(ctx context.Context, kr *kgo.Record, tr record.Truncate) error {
	t, ok := s.loader.(Truncater)
	if !ok {
		return fmt.Errorf("%w: %s/%d offset %d truncates %s.%s at %s; run the sink with a ClickHouse loader, or truncate the table by hand and skip the record",
			ErrNoTruncater, kr.Topic, kr.Partition, kr.Offset, tr.Source.Schema, tr.Source.Table, tr.LSN)
	}
	s.cfg.Failpoints.At(failpoint.SinkTruncating)
	req := TruncateRequest{Truncate: tr, Token: fmt.Sprintf("%s/%d/%d/truncate", kr.Topic, kr.Partition, kr.Offset)}
	table := tr.Source.Schema + "." + tr.Source.Table
	if err := s.retry(ctx, "truncate "+table, func() error { return t.Truncate(ctx, req) }); err != nil {
		return fmt.Errorf("apply the TRUNCATE of %s at %s (%s): %w", table, tr.LSN, req.Token, err)
	}
	s.m.truncates.WithLabelValues(table).Inc()
	s.log.Info("applied TRUNCATE", record.LogTable, table, record.LogLSN, tr.LSN.String(), "token", req.Token)
	s.cfg.Failpoints.At(failpoint.SinkTruncated)
	return nil
}
