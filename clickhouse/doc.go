// Package clickhouse loads change batches into ClickHouse tables. It owns
// the connection (Open: native protocol for servers, HTTP for the embedded
// engine), the execution of what package schema plans, and the inserts.
//
// Data enters as sink.Batch (records decoded by the sink, one batch per
// Load). For each new record shape, Writer creates the table schema
// describes (Table.CreateDDL), reads its columns from system.columns, asks
// schema for the evolution plan (schema.PlanEvolution) and runs its
// statements; an incompatible change becomes a sink.TableError that stops
// that table only. It builds no DDL for the tables of source tables, only
// for its own bookkeeping (the owner comment, owner.go); it writes the
// sync watermark table (watermark.go) and verify's rounds (verifylog.go),
// whose shape and DDL are schema's (schema.SyncTable, schema.VerifyTable),
// so that the query API reads them without this package. Rows leave as one INSERT block per run of records
// of one shape, with a deterministic insert_deduplication_token, built
// column by column: each column's values converted by schema.Type into one
// typed slice for the client (columns.go). Unchanged TOAST values are read
// back from the table first (toast.go), and a truncate is written as
// tombstones (truncate.go).
//
// On a cluster (OpenCluster, OnCluster) the same code runs on the
// Distributed tables: inserts and reads go through them with the session
// settings of ClusterSettings (synchronous distributed inserts that carry
// the deduplication token to each shard), and the DDL schema plans runs
// ON CLUSTER.
//
// Writer implements sink.Loader.
package clickhouse
