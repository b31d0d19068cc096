package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

var _ sink.Watermarker = (*Writer)(nil)

// MarkLoaded records load watermarks (see sink.Watermark) in
// schema.SyncTable. A mark that does not know its topic's partition count
// keeps the one recorded for the table (each row replaces the partition's
// previous one whole).
func (w *Writer) MarkLoaded(ctx context.Context, marks []sink.Watermark) error {
	if err := w.syncReady(ctx); err != nil {
		return err
	}
	batch, err := w.conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s (source_table, partition, loaded_through, lsn, updated_at, partitions)", w.placement.Qualified(schema.SyncTable)))
	if err != nil {
		return fmt.Errorf("prepare watermark insert: %w", err)
	}
	defer batch.Abort()
	now := time.Now().UTC()
	if err := w.appendMarks(batch, marks, now); err != nil {
		return err
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("insert watermarks: %w", err)
	}
	return nil
}

// syncReady makes schema.SyncTable ready (prepareSync) once.
func (w *Writer) syncReady(ctx context.Context) error {
	w.mu.Lock()
	ready := w.syncParts != nil
	w.mu.Unlock()
	if ready {
		return nil
	}
	parts, err := w.prepareSync(ctx)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.syncParts = parts
	w.mu.Unlock()
	return nil
}

// appendMarks appends one row per mark, with the partition count the mark
// or the table's earlier rows give.
func (w *Writer) appendMarks(batch driver.Batch, marks []sink.Watermark, now time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range marks {
		table := schema.TableName(m.Source)
		parts := m.Partitions
		if parts > 0 {
			w.syncParts[table] = parts
		} else {
			parts = w.syncParts[table]
		}
		if err := batch.Append(table, m.Partition, m.Through.UTC(), uint64(m.LSN), now, parts); err != nil {
			return fmt.Errorf("append watermark: %w", err)
		}
	}
	return nil
}

// prepareSync creates schema.SyncTable (schema.SyncTableStatements), or
// adds the partitions column to one an older sink created, and returns the
// partition counts it holds.
func (w *Writer) prepareSync(ctx context.Context) (map[string]int32, error) {
	for _, stmt := range schema.SyncTableStatements(w.placement) {
		if err := w.conn.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("create %s or add its partitions column: %w", schema.SyncTable, err)
		}
	}
	rows, err := w.conn.Query(ctx, fmt.Sprintf("SELECT source_table, max(partitions) FROM %s FINAL GROUP BY source_table", w.placement.Qualified(schema.SyncTable)))
	if err != nil {
		return nil, fmt.Errorf("read partition counts from %s: %w", schema.SyncTable, err)
	}
	defer rows.Close()
	parts := map[string]int32{}
	for rows.Next() {
		var (
			table string
			n     int32
		)
		if err := rows.Scan(&table, &n); err != nil {
			return nil, fmt.Errorf("read partition counts from %s: %w", schema.SyncTable, err)
		}
		if n > 0 {
			parts[table] = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read partition counts from %s: %w", schema.SyncTable, err)
	}
	return parts, nil
}
