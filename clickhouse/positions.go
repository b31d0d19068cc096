package clickhouse

import (
	"context"
	"fmt"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

var _ sink.Positions = (*Writer)(nil)

// LoadedPosition returns the newest WAL position a sink recorded as loaded
// from partition of src's topic (schema.SyncTable's lsn) and the time the
// partition is loaded through; a zero LSN when nothing is recorded. The
// sink bounds later positions of the partition from there
// (sink.Positions).
func (w *Writer) LoadedPosition(ctx context.Context, src record.Source, partition int32) (record.LSN, time.Time, error) {
	if err := w.syncReady(ctx); err != nil {
		return 0, time.Time{}, err
	}
	q := fmt.Sprintf("SELECT lsn, loaded_through FROM %s FINAL WHERE source_table = {table:String} AND partition = {partition:Int32}", w.placement.Qualified(schema.SyncTable))
	rows, err := w.conn.Query(ctx, q, ch.Named("table", schema.TableName(src)), ch.Named("partition", partition))
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("read the loaded position of %s.%s partition %d: %w", src.Schema, src.Table, partition, err)
	}
	defer rows.Close()
	var (
		lsn     record.LSN
		through time.Time
	)
	for rows.Next() { // one row after FINAL; on a cluster, the newest of the shards'
		var (
			l uint64
			t time.Time
		)
		if err := rows.Scan(&l, &t); err != nil {
			return 0, time.Time{}, fmt.Errorf("read the loaded position of %s.%s partition %d: %w", src.Schema, src.Table, partition, err)
		}
		if record.LSN(l) > lsn {
			lsn, through = record.LSN(l), t
		}
	}
	if err := rows.Err(); err != nil {
		return 0, time.Time{}, fmt.Errorf("read the loaded position of %s.%s partition %d: %w", src.Schema, src.Table, partition, err)
	}
	return lsn, through, nil
}
