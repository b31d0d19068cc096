// Package schema decides how PostgreSQL relations are stored in ClickHouse.
// It is pure: it builds values and SQL text from typed inputs and talks to
// no server; package clickhouse executes what it builds.
//
// It owns:
//   - the type table (scalars in types.go): every PostgreSQL type walhouse
//     maps, its ClickHouse type, the conversion of PostgreSQL's text output
//     to the Go values clickhouse-go appends (Type.Convert, and for a whole
//     column of an insert Type.NewValues), and which
//     column types widen to which. To add a PostgreSQL type, follow the
//     comment on that table;
//   - the ReplacingMergeTree table of a source table (NewTable, CreateDDL),
//     its name (TableName) and identifier quoting (QuoteIdent);
//   - where tables live (Placement): one server, or a ClickHouse cluster
//     with replicated local tables and a Distributed table sharded by
//     tenant (DistributedDDL, ReplicaPath, ShardingKey), every DDL ON
//     CLUSTER;
//   - the tables walhouse keeps for itself: SyncTable (the load
//     watermarks that meta.lastSyncAt is read from) and VerifyTable
//     (verify's rounds), their names and DDL, so that clickhouse writes
//     them and query reads them without either importing the other;
//   - schema evolution (PlanEvolution): the diff between a ClickHouse
//     table as it is and a record's columns, as a Plan of typed changes
//     with their statements, or an *IncompatibleError naming the column and
//     the fix;
//   - the one reader of ClickHouse's catalog (ReadTableInfo, ReadColumns,
//     ReadDatabaseColumns: system.tables and system.columns), which the
//     loader, the query API, erasure and verify share.
//
// Data enters as record.Source and record.Column (the shape capture put
// in each record), PostgreSQL text values, and ExistingColumn (the
// ClickHouse table as system.columns shows it, read here). It
// leaves as Table and its DDL, Plan and its statements, and converted
// values, all consumed by package clickhouse; query uses TableName,
// QuoteIdent, the names of the columns walhouse adds and of its own tables.
package schema
