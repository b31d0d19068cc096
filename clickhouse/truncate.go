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

var _ sink.Truncater = (*Writer)(nil)

// Truncate applies a source TRUNCATE at req.Truncate.LSN to its table: every
// row whose latest version is below that LSN gets a tombstone, a copy of the
// row with _version = the TRUNCATE's LSN and _is_deleted = 1, written by one
// INSERT ... SELECT that ClickHouse runs itself (see tombstones). Rows
// written after the TRUNCATE have larger versions and are not touched. A
// table that does not exist yet has no rows to remove.
//
// Tombstones rather than a lightweight DELETE, because a tombstone is a
// version like any other and ReplacingMergeTree resolves it the same way:
//   - It is correct whenever it runs and however often. It only ever beats
//     versions below the TRUNCATE, so running it twice (a sink that crashed
//     before committing the marker, a marker produced twice) or after later
//     rows were loaded changes nothing; and a copy of a pre-TRUNCATE change
//     loaded after it (Kafka redelivery, an interrupted batch that could not
//     be rebuilt exactly) still loses to it. A DELETE removes only the rows
//     present when it runs, so such a late copy would come back.
//   - It is one atomic insert, deduplicated by the marker's token, and needs
//     no mutation: lightweight deletes are mutations, asynchronous by default
//     and heavier on large tables.
//
// The cost is one tombstone row per live row until merges collapse them;
// reads with FINAL (which filter _is_deleted) see the table as PostgreSQL
// has it at once.
func (w *Writer) Truncate(ctx context.Context, req sink.TruncateRequest) error {
	tr := req.Truncate
	name := schema.TableName(tr.Source)
	exists, err := w.claim(ctx, tr.Source, name)
	if err != nil {
		return err
	}
	if !exists {
		w.log.Info("TRUNCATE of a table ClickHouse does not have yet: nothing to remove", "table", name, "lsn", tr.LSN)
		return nil
	}
	ts := tombstones{Database: w.database, Table: name, LSN: tr.LSN, CommitTime: tr.CommitTime}
	settings := ch.Settings{"insert_deduplication_token": req.Token}
	if w.placement.OnCluster() {
		// The rows of a Distributed SELECT come back from the shards in no
		// fixed order, so a repeated pass may split into other blocks under
		// the same tokens, and deduplication would drop tombstones the
		// first pass did not write. The pass needs none: it only writes
		// tombstones for rows not yet deleted at its LSN.
		settings = ch.Settings{"insert_deduplicate": 0}
	}
	ictx := ch.Context(ctx, ch.WithSettings(settings))
	if err := w.conn.Exec(ictx, ts.SQL()); err != nil {
		return fmt.Errorf("write the tombstones of the TRUNCATE of %s at %s: %w; the sink retries, and it is safe to run again", name, tr.LSN, err)
	}
	return nil
}

// tombstones is the tombstone pass of one TRUNCATE of one table.
type tombstones struct {
	Database, Table string
	LSN             record.LSN // the TRUNCATE's WAL position: the tombstones' version
	CommitTime      time.Time  // commit time of the truncating transaction: their _commit_ts
}

// SQL returns the INSERT ... SELECT that writes the tombstones. Each copies
// every column of the row it deletes (SELECT *), so:
//   - columns of non-Nullable types (key, tenant, arrays) get valid values;
//   - the PARTITION BY column keeps its value, so the tombstone lands in the
//     row's partition, where ReplacingMergeTree collapses them;
//   - it follows the table's current columns without reading them first,
//     whatever the schema evolution added.
//
// _synced_at is when the tombstone was written. The rows are read in a
// subquery because an alias in the outer REPLACE (_version, _is_deleted)
// would otherwise shadow the column of the same name in WHERE.
func (t tombstones) SQL() string {
	q := schema.QuoteIdent(t.Database) + "." + schema.QuoteIdent(t.Table)
	return fmt.Sprintf(`INSERT INTO %[1]s
SELECT * REPLACE (
    toUInt64(%[2]d) AS %[3]s,
    toUInt8(1) AS %[4]s,
    fromUnixTimestamp64Micro(toInt64(%[5]d), 'UTC') AS %[6]s,
    now64(6) AS %[7]s)
FROM (
    SELECT * FROM %[1]s FINAL
    WHERE %[3]s < %[2]d AND %[4]s = 0)`,
		q, record.Version(t.LSN), schema.QuoteIdent(schema.VersionColumn), schema.QuoteIdent(schema.DeletedColumn),
		t.CommitTime.UnixMicro(), schema.QuoteIdent(schema.CommitColumn), schema.QuoteIdent(schema.SyncedColumn))
}
