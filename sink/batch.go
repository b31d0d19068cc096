package sink

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// Capture sends snapshot rows in row batches (see package record, "Row
// batches"): one Kafka record, many rows. The sink weighs such a record by
// its rows when it cuts batches (item.rows), and gives each row a stand-in
// for the record, so that a row that can never be loaded goes to the dead
// letters alone while the others of its batch load.

// appendRowOrigins appends to origin a stand-in for batch kr for each of
// its n rows: its topic, partition, offset and time, but no key or value,
// which the dead letters take from the row (see deadRow).
func appendRowOrigins(origin []*kgo.Record, kr *kgo.Record, n int) []*kgo.Record {
	rows := make([]kgo.Record, n)
	for i := range rows {
		rows[i] = kgo.Record{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, Timestamp: kr.Timestamp}
		origin = append(origin, &rows[i])
	}
	return origin
}

// isRowOrigin reports whether kr, an origin of a batch's record, is a
// row's stand-in for its row batch: only those have no value (a change
// without one never decodes).
func isRowOrigin(kr *kgo.Record) bool { return kr.Value == nil }

// decodeBatch decodes row batch it, whose record.HeaderRows passed
// record.ParseRows (it.err() is nil), with dec, and holds the rows to that
// count: the sink weighs batches by it before decoding them.
func decodeBatch(ctx context.Context, s *Sink, it item, dec *record.Decoder) ([]*record.Record, error) {
	rows, err := decodeWith(ctx, s, it.Record, dec.DecodeBatch)
	if err == nil && len(rows) != int(it.rows) {
		return nil, fmt.Errorf("%w: header %s says %d rows, the batch has %d", record.ErrInvalid, record.HeaderRows, it.rows, len(rows))
	}
	return rows, err
}
