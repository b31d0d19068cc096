package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/walhouse/walhouse/clickhouse"
)

// defaultCleanupMinAge exceeds Kafka's default retention (7 days): no
// record older than that is left to replay.
const defaultCleanupMinAge = 8 * 24 * time.Hour

// runCleanup cleans deleted and superseded rows once (clickhouse.Cleanup).
func runCleanup(ctx context.Context, inv *Invocation) error {
	fs, ep := NewFlagSet("cleanup", UsesClickHouse)
	minAge := fs.Duration("min-age", defaultCleanupMinAge, "clean only partitions whose newest tombstone is older than this; must exceed the retention.ms of the table topics and of the dead-letter topic, and the longest copy (docs/operations.md)")
	var tables ListFlag
	fs.Var(&tables, "tables", "ClickHouse tables to clean, comma-separated (default: every table walhouse loads)")
	if err := inv.Parse(fs); err != nil {
		return err
	}
	if *minAge <= 0 {
		return Usagef("--min-age %v: want a positive duration", *minAge)
	}
	conn, err := ep.openClickHouse(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	cleaned, err := clickhouse.Cleanup(ctx, conn, clickhouse.CleanupRequest{Database: ep.Database, Before: time.Now().Add(-*minAge), Tables: tables}, slog.Default())
	for _, c := range cleaned {
		fmt.Fprintf(inv.Stdout, "%s partition %s: %d → %d stored rows\n", c.Table, c.Partition, c.RowsBefore, c.RowsAfter)
	}
	return err
}
