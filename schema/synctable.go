package schema

import "fmt"

// SyncTable is the table, in walhouse's database, that records how far
// each partition of each replicated table is loaded. The sink writes it
// (package clickhouse); the query API derives meta.lastSyncAt from it: for
// a table, the minimum of loaded_through over its partitions, known only
// once every partition of its topic has a row.
const SyncTable = "_walhouse_sync"

// SyncTableDDL returns the CREATE TABLE statement of SyncTable in database
// on one server (SyncTableStatements has those of a cluster). Each row
// says: every change committed at or before loaded_through that routes to
// this Kafka partition of this table is loaded (capture's heartbeats
// advance idle partitions). source_table is the ClickHouse table name
// (TableName). partitions is the partition count of the table's topic as
// capture's heartbeats last said (0: not known yet), so that a partition
// with no row yet (one still loading a copy, say) is known to be missing
// rather than taken as not existing.
func SyncTableDDL(database string) string {
	return syncTableDDL(Placement{Database: database})
}

func syncTableDDL(p Placement) string {
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

// SyncTableStatements returns the statements that create SyncTable where
// p says. On one server they also bring a table an older sink created up
// to date (the partitions column; no older sink used a cluster). On a
// cluster, its Distributed table is sharded by source table, so that all
// the rows of a partition meet on one shard and FINAL per shard is FINAL.
func SyncTableStatements(p Placement) []string {
	if !p.OnCluster() {
		return []string{syncTableDDL(p), fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS partitions Int32 DEFAULT 0", p.Qualified(SyncTable))}
	}
	return []string{syncTableDDL(p), p.DistributedDDL(SyncTable, "cityHash64(source_table)", "")}
}
