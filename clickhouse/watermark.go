package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

var _ sink.Watermarker = (*Writer)(nil)

// SyncTable is the table, in the Writer's database, that records how far
// each partition of each replicated table is loaded. The query API derives
// meta.lastSyncAt from it: for a table, the minimum of loaded_through over
// its partitions.
const SyncTable = "_walhouse_sync"

// SyncTableDDL returns the CREATE TABLE statement of SyncTable in database.
// Each row says: every change committed at or before loaded_through that
// routes to this Kafka partition of this table is loaded (capture's
// heartbeats advance idle partitions). source_table is the ClickHouse table
// name (schema.TableName).
func SyncTableDDL(database string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s
(
    source_table   String,
    partition      Int32,
    loaded_through DateTime64(6, 'UTC'),
    lsn            UInt64,
    updated_at     DateTime64(6, 'UTC')
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY (source_table, partition)`, schema.QuoteIdent(database), schema.QuoteIdent(SyncTable))
}

// MarkLoaded records load watermarks (see sink.Watermark).
func (w *Writer) MarkLoaded(ctx context.Context, marks []sink.Watermark) error {
	w.mu.Lock()
	ready := w.syncReady
	w.mu.Unlock()
	if !ready {
		if err := w.conn.Exec(ctx, SyncTableDDL(w.database)); err != nil {
			return fmt.Errorf("create %s: %w", SyncTable, err)
		}
		w.mu.Lock()
		w.syncReady = true
		w.mu.Unlock()
	}
	batch, err := w.conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.%s (source_table, partition, loaded_through, lsn, updated_at)", schema.QuoteIdent(w.database), schema.QuoteIdent(SyncTable)))
	if err != nil {
		return fmt.Errorf("prepare watermark insert: %w", err)
	}
	defer batch.Abort()
	now := time.Now().UTC()
	for _, m := range marks {
		if err := batch.Append(schema.TableName(m.Source), m.Partition, m.Through.UTC(), uint64(m.LSN), now); err != nil {
			return fmt.Errorf("append watermark: %w", err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("insert watermarks: %w", err)
	}
	return nil
}
