package erasure

import (
	"context"
	"fmt"

	"github.com/walhouse/walhouse/schema"
)

// The erasure tables, in the replicated database. Their names start with
// _walhouse, which no source table's ClickHouse table can have
// (schema.TableName), and the query API never lists them.
const (
	// LedgerTable holds one row per erased subject and table.
	LedgerTable = "_walhouse_erasures"
	// ManifestTable holds the signed manifest of every erasure, and a row
	// for its start (and failure): the durable audit record.
	ManifestTable = "_walhouse_erasure_manifests"
)

// ledgerDDL and manifestDDL create the two tables. Plain MergeTree: rows
// are only appended, never replaced; both stay small (one row per erased
// subject and table).
func ledgerDDL(database string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s
(
    source_schema String,
    source_table String,
    column String,
    subject_hash FixedString(64),
    as_of_lsn UInt64,
    key_id String,
    erasure_id String,
    recorded_at DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = MergeTree
ORDER BY (source_schema, source_table, column, subject_hash)`, schema.QuoteIdent(database), schema.QuoteIdent(LedgerTable))
}

func manifestDDL(database string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s
(
    erasure_id String,
    tenant String,
    verified UInt8,
    finished_at DateTime64(6, 'UTC'),
    manifest String,
    state String DEFAULT 'finished',
    error String DEFAULT ''
)
ENGINE = MergeTree
ORDER BY (tenant, finished_at, erasure_id)`, schema.QuoteIdent(database), schema.QuoteIdent(ManifestTable))
}

// ensureTables creates the database's erasure tables if missing.
func ensureTables(ctx context.Context, conn Conn, database string) error {
	for _, ddl := range []string{
		"CREATE DATABASE IF NOT EXISTS " + schema.QuoteIdent(database),
		ledgerDDL(database), manifestDDL(database), readersDDL(database),
		// Tables made before erasures ran detached (every row then a
		// finished erasure's manifest).
		fmt.Sprintf("ALTER TABLE %s.%s ADD COLUMN IF NOT EXISTS state String DEFAULT 'finished', ADD COLUMN IF NOT EXISTS error String DEFAULT ''",
			schema.QuoteIdent(database), schema.QuoteIdent(ManifestTable)),
	} {
		if err := conn.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("create the erasure tables in %s: %w", database, err)
		}
	}
	return nil
}
