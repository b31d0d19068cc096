package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/clickhouse"
)

// defaultCleanupMinAge exceeds Kafka's default retention (7 days): no
// record older than that is left to replay.
const defaultCleanupMinAge = 8 * 24 * time.Hour

// runCleanup cleans deleted and superseded rows once (clickhouse.Cleanup).
func runCleanup(ctx context.Context, inv *cli.Invocation) error {
	fs, ep := cli.NewFlagSet("cleanup", cli.UsesClickHouse)
	minAge := fs.Duration("min-age", defaultCleanupMinAge, "clean only partitions whose newest tombstone is older than this; must exceed the retention.ms of the table topics and of the dead-letter topic, and the longest copy (docs/operations.md)")
	var tables cli.ListFlag
	fs.Var(&tables, "tables", "ClickHouse tables to clean, comma-separated (default: every table walhouse loads)")
	if err := inv.Parse(fs); err != nil {
		return err
	}
	if *minAge <= 0 {
		return cli.Usagef("--min-age %v: want a positive duration", *minAge)
	}
	conn, err := openClickHouse(ctx, ep)
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
