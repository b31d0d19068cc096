package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/pipeline"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/verify"
)

// runVerify compares PostgreSQL with ClickHouse FINAL (package verify),
// once or every --every.
func runVerify(ctx context.Context, inv *cli.Invocation) error {
	fs, ep := cli.NewFlagSet("verify", cli.UsesPG|cli.UsesClickHouse)
	var tables cli.ListFlag
	fs.Var(&tables, "tables", "source tables to verify, comma-separated schema.table")
	publication := fs.String("publication", "walhouse", "the publication capture streams the tables from: a table it publishes with a row filter (PostgreSQL 15+) is compared, and repaired, through the filter; one another publication filters is an error")
	every := fs.Duration("every", 0, "run a round every this long, as a long-running process with --metrics-addr; 0: one round, exit status 1 when rows differ")
	report := fs.String("report", "", "write the report (JSON, mode 0600: it holds the differing values, which logs never do) to this file; empty: none")
	repair := fs.Bool("repair", false, "load PostgreSQL's current rows again for the differing keys, at a version that never beats a newer change, and check them again (needs --pg of the primary)")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus /metrics on this address; empty: off")
	bucketRows := fs.Int("bucket-rows", 50_000, "PostgreSQL rows per bucket of a table whose key is an integer")
	maxBucketRows := fs.Int("max-bucket-rows", 1_000_000, "most rows of one bucket (one tenant of a table whose key is not an integer); more is an error, not unbounded memory")
	maxMismatches := fs.Int("max-mismatches", 10_000, "differing rows examined and reported per table and round; suspects beyond it are counted (notExamined), not confirmed")
	rowsPerSecond := fs.Int("rows-per-second", 0, "PostgreSQL rows read per second at most; 0: no limit")
	stmtTimeout := fs.Duration("statement-timeout", time.Minute, "PostgreSQL statement_timeout of verify's queries")
	loadWait := fs.Duration("load-wait", 5*time.Minute, "how long to wait for the sink to load a table past a snapshot's WAL position")
	maxExec := fs.Duration("max-execution-time", time.Minute, "ClickHouse max_execution_time of each query")
	maxMemory := fs.Int64("max-memory-usage", 1<<30, "ClickHouse max_memory_usage of each query, in bytes")
	if err := inv.Parse(fs); err != nil {
		return err
	}
	var sources []record.Source
	for _, t := range tables {
		s, n, ok := strings.Cut(t, ".")
		if !ok || s == "" || n == "" {
			return cli.Usagef("--tables %q: want schema.table", t)
		}
		sources = append(sources, record.Source{Schema: s, Table: n})
	}
	if len(sources) == 0 {
		return cli.Usagef("--tables: name at least one schema.table")
	}
	if *every < 0 {
		return cli.Usagef("--every %v: want 0 or a positive duration", *every)
	}
	pgURL, err := ep.PGURL()
	if err != nil {
		return err
	}
	ch, err := clickHouse(ep)
	if err != nil {
		return err
	}
	err = pipeline.RunVerify(ctx, pipeline.VerifyRun{
		PG: pgURL, ClickHouse: ch, Tables: sources, Every: *every, Report: *report, Repair: *repair, HTTP: metricsHTTP(*metricsAddr),
		Options: []verify.Option{verify.WithBucketRows(*bucketRows), verify.WithMaxBucketRows(*maxBucketRows),
			verify.WithMaxMismatches(*maxMismatches), verify.WithRowsPerSecond(*rowsPerSecond), verify.WithStatementTimeout(*stmtTimeout),
			verify.WithLoadWait(*loadWait), verify.WithPublication(*publication), verify.WithClickHouseLimits(int(max(1, maxExec.Seconds())), *maxMemory)},
	})
	var se *pipeline.SettingsError
	if errors.As(err, &se) {
		return cli.Usagef("%v", se.Err)
	}
	return err
}
