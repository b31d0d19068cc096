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

// SyncTable is the table, in the Writer's database, that records how far
// each partition of each replicated table is loaded. The query API derives
// meta.lastSyncAt from it: for a table, the minimum of loaded_through over
// its partitions, known only once every partition of its topic has a row.
const SyncTable = "_walhouse_sync"

// SyncTableDDL returns the CREATE TABLE statement of SyncTable in database
// on one server (syncTableStatements has those of a cluster). Each row
// says: every change committed at or before loaded_through that routes to
// this Kafka partition of this table is loaded (capture's heartbeats
// advance idle partitions). source_table is the ClickHouse table name
// (schema.TableName). partitions is the partition count of the table's
// topic as capture's heartbeats last said (0: not known yet), so that a
// partition with no row yet (one still loading a copy, say) is known to be
// missing rather than taken as not existing.
func SyncTableDDL(database string) string {
	return syncTableDDL(schema.Placement{Database: database})
}

func syncTableDDL(p schema.Placement) string {
	return p.CreateLocal(SyncTable) + `
(
    source_table   String,
    partition      Int32,
    loaded_through DateTime64(6, 'UTC'),
    lsn            UInt64,
    updated_at     DateTime64(6, 'UTC'),
    partitions     Int32 DEFAULT 0
)
` + p.Engine(SyncTable, "updated_at") + `
ORDER BY (source_table, partition)`
}

// syncTableStatements returns the statements that create SyncTable where
// p says. On one server they also bring a table an older sink created up
// to date (the partitions column; no older sink used a cluster). On a
// cluster, its Distributed table is sharded by source table, so that all
// the rows of a partition meet on one shard and FINAL per shard is FINAL.
func syncTableStatements(p schema.Placement) []string {
	if !p.OnCluster() {
		return []string{syncTableDDL(p), fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS partitions Int32 DEFAULT 0", p.Qualified(SyncTable))}
	}
	return []string{syncTableDDL(p), p.DistributedDDL(SyncTable, "cityHash64(source_table)", "")}
}

// MarkLoaded records load watermarks (see sink.Watermark). A mark that
// does not know its topic's partition count keeps the one recorded for the
// table (each row replaces the partition's previous one whole).
func (w *Writer) MarkLoaded(ctx context.Context, marks []sink.Watermark) error {
	if err := w.syncReady(ctx); err != nil {
		return err
	}
	batch, err := w.conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s (source_table, partition, loaded_through, lsn, updated_at, partitions)", w.placement.Qualified(SyncTable)))
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

// syncReady makes SyncTable ready (prepareSync) once.
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

// prepareSync creates SyncTable, or adds the partitions column to one an
// older sink created, and returns the partition counts it holds.
func (w *Writer) prepareSync(ctx context.Context) (map[string]int32, error) {
	for _, stmt := range syncTableStatements(w.placement) {
		if err := w.conn.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("create %s or add its partitions column: %w", SyncTable, err)
		}
	}
	rows, err := w.conn.Query(ctx, fmt.Sprintf("SELECT source_table, max(partitions) FROM %s FINAL GROUP BY source_table", w.placement.Qualified(SyncTable)))
	if err != nil {
		return nil, fmt.Errorf("read partition counts from %s: %w", SyncTable, err)
	}
	defer rows.Close()
	parts := map[string]int32{}
	for rows.Next() {
		var (
			table string
			n     int32
		)
		if err := rows.Scan(&table, &n); err != nil {
			return nil, fmt.Errorf("read partition counts from %s: %w", SyncTable, err)
		}
		if n > 0 {
			parts[table] = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read partition counts from %s: %w", SyncTable, err)
	}
	return parts, nil
}
