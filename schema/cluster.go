package schema

import (
	"fmt"
	"strings"
)

// Placement says where walhouse keeps its tables: every table in Database
// on the one server it is connected to, or, with a Cluster, a table of
// each name on every host of a ClickHouse cluster (remote_servers):
//
//   - the rows are stored in a Replicated*MergeTree table in
//     LocalDatabase(Database) on each host, replicated within its shard
//     through ClickHouse Keeper (ReplicaPath);
//   - a Distributed table of the same name in Database spans the shards;
//     inserts and reads go through it, so the name every reader uses
//     (database.table) is the same on one server and on a cluster.
//
// Rows are sharded by a deterministic hash of their tenant
// (ShardingKey): every version of a row has the tenant of its key, so
// every version of a row lives on one shard, and FINAL computed on each
// shard alone is FINAL over the whole table.
//
// DDL runs ON CLUSTER: on the local tables first, then on the Distributed
// table, so the Distributed table never has a column its local tables
// lack.
type Placement struct {
	Database string
	// Cluster names the cluster in the servers' remote_servers; empty: one
	// server.
	Cluster string
}

// LocalSuffix ends the name of the database that holds the local tables
// of a cluster: the local tables of walhouse.orders are walhouse_local.orders.
const LocalSuffix = "_local"

// ReplicatedDeduplicationWindow is how many recent inserts' deduplication
// tokens each replicated table keeps in Keeper (MergeTree setting
// replicated_deduplication_window; ClickHouse's default is 1,000 in recent
// releases, 100 in older ones). A sink that crashed between an insert and
// its offset commit repeats the insert once it or another sink of its
// group takes the partition over; the tokens of every insert made to the
// table meanwhile (by all partitions, all tables' sinks sharing it) must
// fit in the window, as non_replicated_deduplication_window does on one
// server.
const ReplicatedDeduplicationWindow = 10000

// OnCluster reports whether the tables are on a cluster.
func (p Placement) OnCluster() bool { return p.Cluster != "" }

// LocalDatabase returns the database of the tables that store the rows:
// Database on one server, Database + LocalSuffix on a cluster.
func (p Placement) LocalDatabase() string {
	if p.OnCluster() {
		return LocalDatabase(p.Database)
	}
	return p.Database
}

// LocalDatabase returns the database of a cluster's local tables whose
// Distributed tables are in database.
func LocalDatabase(database string) string { return database + LocalSuffix }

// Qualified returns the quoted name readers and inserts use: the table on
// one server, its Distributed table on a cluster.
func (p Placement) Qualified(table string) string {
	return QuoteIdent(p.Database) + "." + QuoteIdent(table)
}

// Local returns the quoted name of the table that stores the rows (on a
// cluster, the local table on each host).
func (p Placement) Local(table string) string {
	return QuoteIdent(p.LocalDatabase()) + "." + QuoteIdent(table)
}

// onCluster returns the ON CLUSTER clause, with its leading space, or "".
func (p Placement) onCluster() string {
	if !p.OnCluster() {
		return ""
	}
	return " ON CLUSTER " + QuoteIdent(p.Cluster)
}

// CreateLocal returns the start of the CREATE TABLE statement of the table
// that stores the rows: "CREATE TABLE IF NOT EXISTS db.table", with ON
// CLUSTER on a cluster. The caller adds the columns and the Engine.
func (p Placement) CreateLocal(table string) string {
	return "CREATE TABLE IF NOT EXISTS " + p.Local(table) + p.onCluster()
}

// CreateDatabases returns the statements that create walhouse's databases.
func (p Placement) CreateDatabases() []string {
	out := []string{"CREATE DATABASE IF NOT EXISTS " + QuoteIdent(p.Database) + p.onCluster()}
	if p.OnCluster() {
		out = append(out, "CREATE DATABASE IF NOT EXISTS "+QuoteIdent(p.LocalDatabase())+p.onCluster())
	}
	return out
}

// ReplicaPath returns the Keeper path of the replicated table: one per
// shard ({shard} is the macro each host defines), the database and table
// in it, escaped as ClickHouse escapes file names (ASCII letters, digits
// and '_' as they are, every other byte as %XX), so no name can add a path
// level, meet another table's path or hold a macro.
//
//	/clickhouse/tables/{shard}/walhouse_local/orders
func (p Placement) ReplicaPath(table string) string {
	return "/clickhouse/tables/{shard}/" + escapeName(p.LocalDatabase()) + "/" + escapeName(table)
}

// replicaName is the replica's name in the table's Keeper path: the macro
// each host defines.
const replicaName = "{replica}"

// Engine returns the ENGINE clause of a ReplacingMergeTree table with args
// (the version and is_deleted columns), and its SETTINGS clause: a
// ReplicatedReplacingMergeTree on a cluster, each with a deduplication
// window large enough for the sink's retries.
func (p Placement) Engine(table string, args ...string) string {
	if !p.OnCluster() {
		return fmt.Sprintf("ENGINE = ReplacingMergeTree(%s)", strings.Join(args, ", "))
	}
	args = append([]string{QuoteString(p.ReplicaPath(table)), QuoteString(replicaName)}, args...)
	return fmt.Sprintf("ENGINE = ReplicatedReplacingMergeTree(%s)", strings.Join(args, ", "))
}

// dedupSetting is the SETTINGS clause that keeps a window of recent insert
// tokens.
func (p Placement) dedupSetting() string {
	if p.OnCluster() {
		return fmt.Sprintf("SETTINGS replicated_deduplication_window = %d", ReplicatedDeduplicationWindow)
	}
	return "SETTINGS non_replicated_deduplication_window = 10000"
}

// ShardingKey returns the Distributed table's sharding expression for a
// tenant column: cityHash64 of its text, so the shard of a tenant depends
// on its value alone (not on the column's type, which may widen, e.g.
// int4 to int8) and equal tenants always meet on one shard.
func ShardingKey(tenantColumn string) string {
	return "cityHash64(toString(" + QuoteIdent(tenantColumn) + "))"
}

// DistributedDDL returns the CREATE TABLE statement of the Distributed
// table over the local tables of table, sharded by shardingKey, or "" on
// one server. Its columns are the local table's (AS), and it carries
// comment.
func (p Placement) DistributedDDL(table, shardingKey, comment string) string {
	if !p.OnCluster() {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s%s AS %s\n", p.Qualified(table), p.onCluster(), p.Local(table))
	fmt.Fprintf(&b, "ENGINE = Distributed(%s, %s, %s, %s)", QuoteString(p.Cluster), QuoteString(p.LocalDatabase()), QuoteString(table), shardingKey)
	if comment != "" {
		b.WriteString("\nCOMMENT " + QuoteString(comment))
	}
	return b.String()
}

// Alter returns the statements that apply one ALTER TABLE action (e.g.
// "ADD COLUMN ...") to table: on one server, the one statement; on a
// cluster, ON CLUSTER on the local tables, then on the Distributed table,
// whose columns follow its local tables'.
func (p Placement) Alter(table, action string) []string {
	out := []string{fmt.Sprintf("ALTER TABLE %s%s %s", p.Local(table), p.onCluster(), action)}
	if p.OnCluster() {
		out = append(out, fmt.Sprintf("ALTER TABLE %s%s %s", p.Qualified(table), p.onCluster(), action))
	}
	return out
}

// Drop returns the statements an operator runs to drop table: on a
// cluster the Distributed table first, then the local tables, SYNC so that
// their Keeper paths are free for the table created again.
func (p Placement) Drop(table string) []string {
	if !p.OnCluster() {
		return []string{"DROP TABLE " + p.Qualified(table)}
	}
	return []string{
		fmt.Sprintf("DROP TABLE %s%s SYNC", p.Qualified(table), p.onCluster()),
		fmt.Sprintf("DROP TABLE %s%s SYNC", p.Local(table), p.onCluster()),
	}
}

// escapeName escapes a name for a Keeper path as ClickHouse's
// escapeForFileName does.
func escapeName(name string) string {
	var b strings.Builder
	for _, c := range []byte(name) {
		if plainByte(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
