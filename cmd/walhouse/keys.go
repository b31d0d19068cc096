package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/idempotency"
)

// runKeys runs the subcommands of walhouse keys; prune deletes Layer 1's
// expired idempotency keys, once or daily.
func runKeys(ctx context.Context, inv *cli.Invocation) error {
	sub := inv.Subcommand()
	fs, ep := cli.NewFlagSet("keys", cli.UsesPG)
	days := fs.Int("retention-days", idempotency.DefaultRetentionDays, "delete the keys created more than this many days ago; at least 1")
	batch := fs.Int("batch-size", idempotency.DefaultPruneBatch, "keys deleted per transaction")
	daily := fs.Bool("daily", false, "keep running and prune every day at --daily-at, instead of once now")
	at := fs.String("daily-at", "03:00", "time of day of the daily prune, HH:MM in UTC")
	if err := inv.Parse(fs); err != nil {
		return err
	}
	if sub != "prune" {
		return cli.Usagef("want a subcommand: prune (delete the idempotency keys older than --retention-days from %s)", idempotency.KeyTable)
	}
	tod, err := parseTimeOfDay(*at)
	if err != nil {
		return cli.Usagef("--daily-at: %v", err)
	}
	pool, err := openPG(ctx, ep, ep.PG)
	if err != nil {
		return err
	}
	defer pool.Close()
	lastPrint := time.Now()
	p, err := idempotency.NewPruner(pool, idempotency.WithRetentionDays(*days), idempotency.WithBatchSize(*batch), idempotency.WithDailyAt(tod),
		idempotency.WithProgress(func(pp idempotency.PruneProgress) {
			if time.Since(lastPrint) >= time.Second {
				fmt.Fprintf(inv.Stdout, "  %d keys deleted in %d batches (%.1fs)\n", pp.Deleted, pp.Batches, pp.Elapsed.Seconds())
				lastPrint = time.Now()
			}
		}))
	if err != nil {
		return cli.Usagef("%v", err)
	}
	if *daily {
		fmt.Fprintf(inv.Stdout, "pruning %s every day at %s UTC (keys older than %d days), next at %s\n", idempotency.KeyTable, *at, *days, idempotency.NextRun(time.Now(), tod).Format(time.RFC3339))
		return explainMissingTable(p.Run(ctx))
	}
	fmt.Fprintf(inv.Stdout, "pruning %s: keys older than %d days, %d per batch\n", idempotency.KeyTable, *days, *batch)
	prog, err := p.Prune(ctx)
	if err != nil {
		return explainMissingTable(fmt.Errorf("after deleting %d keys: %w", prog.Deleted, err))
	}
	fmt.Fprintf(inv.Stdout, "deleted %d keys created before %s in %d batches (%.1fs)\n", prog.Deleted, prog.Cutoff.Format(time.RFC3339), prog.Batches, prog.Elapsed.Seconds())
	return nil
}

// explainMissingTable says what a missing key table means.
func explainMissingTable(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return fmt.Errorf("%s does not exist in this database: point --pg at the application's database (its key table is made by idempotency.Migrate): %w", idempotency.KeyTable, err)
	}
	return err
}

// parseTimeOfDay parses "HH:MM" into the time after midnight.
func parseTimeOfDay(s string) (time.Duration, error) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		return 0, fmt.Errorf("%q: want HH:MM in UTC, e.g. 03:00", s)
	}
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute, nil
}
