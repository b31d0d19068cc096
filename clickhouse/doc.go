// Package clickhouse loads change batches into ClickHouse tables: it opens
// the connection (native protocol for servers, HTTP for the embedded
// engine), creates and evolves the ReplacingMergeTree tables that package
// schema describes, and inserts each batch as one block with a deterministic
// insert_deduplication_token.
//
// Writer implements sink.Loader.
package clickhouse
