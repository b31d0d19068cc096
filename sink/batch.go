package sink

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// Capture sends snapshot rows in row batches (see package record, "Row
// batches"): one Kafka record, many rows. The sink weighs such a record by
// its rows when it cuts batches, and gives each row a stand-in for the
// record, so that a row that can never be loaded goes to the dead letters
// alone while the others of its batch load.

// batchHeader returns the value of kr's record.HeaderRows and whether it
// has one.
func batchHeader(kr *kgo.Record) (string, bool) {
	return headers(kr)(record.HeaderRows)
}

// headers looks kr's headers up by key, the first of a key, as record's
// header parsers take them.
func headers(kr *kgo.Record) func(key string) (string, bool) {
	return func(key string) (string, bool) {
		for _, h := range kr.Headers {
			if h.Key == key {
				return string(h.Value), true
			}
		}
		return "", false
	}
}

// isBatch reports whether kr is a row batch.
func isBatch(kr *kgo.Record) bool {
	_, ok := batchHeader(kr)
	return ok && kr.Value != nil
}

// rowsIn returns the rows kr carries: its batch's count, else 1.
func rowsIn(kr *kgo.Record) int {
	if v, ok := batchHeader(kr); ok {
		return record.RowsOf(v)
	}
	return 1
}

// appendRowOrigins appends to origin a stand-in for batch kr for each of
// its n rows: its topic, partition, offset, time and headers, but no key or
// value, which the dead letters take from the row (see deadLetter).
func appendRowOrigins(origin []*kgo.Record, kr *kgo.Record, n int) []*kgo.Record {
	rows := make([]kgo.Record, n)
	for i := range rows {
		rows[i] = kgo.Record{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, Timestamp: kr.Timestamp, Headers: kr.Headers}
		origin = append(origin, &rows[i])
	}
	return origin
}

// decodeBatch decodes row batch kr with dec once its record.HeaderRows
// passed record.ParseRows, and holds the rows to that count: the sink
// weighs batches by it before decoding them.
func decodeBatch(ctx context.Context, s *Sink, kr *kgo.Record, dec *record.Decoder) ([]*record.Record, error) {
	v, _ := batchHeader(kr)
	n, err := record.ParseRows(v)
	if err != nil {
		return nil, err
	}
	rows, err := decodeWith(ctx, s, kr, dec.DecodeBatch)
	if err == nil && len(rows) != n {
		return nil, fmt.Errorf("%w: header %s says %d rows, the batch has %d", record.ErrInvalid, record.HeaderRows, n, len(rows))
	}
	return rows, err
}

// isRowOrigin reports whether kr is a row's stand-in for its batch.
func isRowOrigin(kr *kgo.Record) bool {
	_, ok := batchHeader(kr)
	return ok && kr.Value == nil
}
