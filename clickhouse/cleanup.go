package clickhouse

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/walhouse/walhouse/schema"
)

// CleanupRequest says which partitions Cleanup may clean.
type CleanupRequest struct {
	Database string
	// Before is the horizon: a partition is cleaned only when its newest
	// tombstone was loaded (_synced_at) before it. Records older than the
	// horizon must never be loaded again (docs/operations.md, "Deleted
	// rows"): the command sets it to now − --cleanup-min-age.
	Before time.Time
	// Tables limits the cleanup to these ClickHouse tables (default: every
	// walhouse table of Database).
	Tables []string
}

// CleanedPartition is one partition Cleanup cleaned.
type CleanedPartition struct {
	Table, Partition string
	// Rows are the stored rows (without FINAL) before and after.
	RowsBefore, RowsAfter uint64
}

// Cleanup removes the tombstones and superseded versions of the partitions
// whose newest tombstone is older than req.Before, with OPTIMIZE … FINAL
// CLEANUP: one merge of all the partition's parts, which keeps the newest
// version of each row and drops the rows whose newest version is a
// tombstone. FINAL reads the same before and after; reads get cheaper.
//
// It is safe only when no version older than such a tombstone can be
// loaded afterwards: a row whose tombstone is gone would come back with
// that version. Partitions with a newer tombstone are left alone, so a
// table partitioned by month (--partition-by) has its old months cleaned
// while the current one changes; an unpartitioned table is one partition.
func Cleanup(ctx context.Context, conn driver.Conn, req CleanupRequest, log *slog.Logger) ([]CleanedPartition, error) {
	if log == nil {
		log = slog.Default()
	}
	tables := req.Tables
	if len(tables) == 0 {
		var err error
		if tables, err = walhouseTables(ctx, conn, req.Database); err != nil {
			return nil, err
		}
	}
	var out []CleanedPartition
	for _, t := range tables {
		qname := schema.QuoteIdent(req.Database) + "." + schema.QuoteIdent(t)
		parts, err := cleanablePartitions(ctx, conn, qname, req.Before)
		if err != nil {
			return out, err
		}
		if len(parts) == 0 {
			continue
		}
		// CLEANUP is refused unless the table allows it; the setting
		// changes nothing else, and tables walhouse creates do not set it
		// so that no merge cleans on its own.
		if err := conn.Exec(ctx, "ALTER TABLE "+qname+" MODIFY SETTING allow_experimental_replacing_merge_with_cleanup = 1"); err != nil {
			return out, fmt.Errorf("allow cleanup merges on %s: %w", qname, err)
		}
		for _, p := range parts {
			before, err := storedRows(ctx, conn, qname, p)
			if err != nil {
				return out, err
			}
			stmt := fmt.Sprintf("OPTIMIZE TABLE %s PARTITION ID %s FINAL CLEANUP", qname, schema.QuoteString(p))
			if err := conn.Exec(ch.Context(ctx, ch.WithSettings(ch.Settings{"optimize_throw_if_noop": 0})), stmt); err != nil {
				return out, fmt.Errorf("clean partition %s of %s: %w", p, qname, err)
			}
			after, err := storedRows(ctx, conn, qname, p)
			if err != nil {
				return out, err
			}
			out = append(out, CleanedPartition{Table: t, Partition: p, RowsBefore: before, RowsAfter: after})
			log.Info("cleaned deleted and superseded rows", "table", qname, "partition", p, "rows_before", before, "rows_after", after)
		}
	}
	return out, nil
}

// walhouseTables lists the tables of database that walhouse loads: those
// with the _is_deleted column, except its own.
func walhouseTables(ctx context.Context, conn driver.Conn, database string) ([]string, error) {
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"db": schema.EscapeParam(database), "col": schema.DeletedColumn}))
	out, err := queryStrings(qctx, conn, `SELECT t.name FROM system.tables AS t INNER JOIN system.columns AS c ON c.database = t.database AND c.table = t.name
WHERE t.database = {db:String} AND t.engine = 'ReplacingMergeTree' AND NOT startsWith(t.name, '_walhouse') AND c.name = {col:String} ORDER BY t.name`)
	if err != nil {
		return nil, fmt.Errorf("list the tables of %s: %w", database, err)
	}
	return out, nil
}

// cleanablePartitions returns the partitions of qname that hold
// tombstones, all loaded before the horizon.
func cleanablePartitions(ctx context.Context, conn driver.Conn, qname string, before time.Time) ([]string, error) {
	q := fmt.Sprintf("SELECT _partition_id FROM %s WHERE %s = 1 GROUP BY _partition_id HAVING max(%s) < {before:DateTime64(6, 'UTC')} ORDER BY _partition_id",
		qname, schema.QuoteIdent(schema.DeletedColumn), schema.QuoteIdent(schema.SyncedColumn))
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"before": before.UTC().Format("2006-01-02 15:04:05.000000")}))
	out, err := queryStrings(qctx, conn, q)
	if err != nil {
		return nil, fmt.Errorf("find the partitions of %s to clean: %w", qname, err)
	}
	return out, nil
}

// queryStrings runs q, which selects one String column, and returns its
// values in order.
func queryStrings(ctx context.Context, conn driver.Conn, q string) ([]string, error) {
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func storedRows(ctx context.Context, conn driver.Conn, qname, partition string) (uint64, error) {
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"p": schema.EscapeParam(partition)}))
	var n uint64
	if err := conn.QueryRow(qctx, "SELECT count() FROM "+qname+" WHERE _partition_id = {p:String}").Scan(&n); err != nil {
		return 0, fmt.Errorf("count the rows of partition %s of %s: %w", partition, qname, err)
	}
	return n, nil
}
