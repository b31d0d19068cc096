package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/internal/backoff"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/verify"
)

// errDivergence is the outcome of a one-shot verify that found rows that
// differ: the exit status says so to a CronJob.
var errDivergence = errors.New("PostgreSQL and ClickHouse differ")

// runVerify compares PostgreSQL with ClickHouse FINAL (package verify),
// once or every --every.
func runVerify(ctx context.Context, inv *invocation) error {
	fs, ep := newFlagSet("verify", usesPG|usesClickHouse)
	var tables listFlag
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
	if err := inv.parse(fs); err != nil {
		return err
	}
	var sources []record.Source
	for _, t := range tables {
		s, n, ok := strings.Cut(t, ".")
		if !ok || s == "" || n == "" {
			return usageErrorf("--tables %q: want schema.table", t)
		}
		sources = append(sources, record.Source{Schema: s, Table: n})
	}
	if len(sources) == 0 {
		return usageErrorf("--tables: name at least one schema.table")
	}
	if *every < 0 {
		return usageErrorf("--every %v: want 0 or a positive duration", *every)
	}
	pgURL, err := ep.pgURL()
	if err != nil {
		return err
	}
	conn, err := ep.openClickHouse(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	v, err := verify.New(pgURL, conn, verify.WithDatabase(ep.database), verify.WithBucketRows(*bucketRows), verify.WithMaxBucketRows(*maxBucketRows),
		verify.WithMaxMismatches(*maxMismatches), verify.WithRowsPerSecond(*rowsPerSecond), verify.WithStatementTimeout(*stmtTimeout),
		verify.WithLoadWait(*loadWait), verify.WithPublication(*publication), verify.WithClickHouseLimits(int(max(1, maxExec.Seconds())), *maxMemory), verify.WithLogger(slog.Default().With("component", "verify")))
	if err != nil {
		return usageErrorf("%v", err)
	}
	r := verifyRounds{v: v, tables: sources, report: *report, repair: *repair, log: clickhouse.NewVerifyLog(conn, ep.database)}
	if *every == 0 {
		return r.round(ctx)
	}
	reg := prometheus.NewRegistry()
	r.metrics = verify.NewMetrics(reg)
	g, gctx := errgroup.WithContext(ctx)
	if *metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		g.Go(func() error { return metricsHTTP(*metricsAddr).Serve(gctx, mux, "verify metrics") })
	}
	g.Go(func() error {
		for {
			if err := r.round(gctx); err != nil && !errors.Is(err, errDivergence) && gctx.Err() == nil {
				slog.Warn("verify round failed; trying again at the next", "err", err)
			}
			if err := backoff.Sleep(gctx, *every); err != nil {
				return err
			}
		}
	})
	return g.Wait()
}

// verifyRounds runs rounds over the tables.
type verifyRounds struct {
	v       *verify.Verifier
	tables  []record.Source
	report  string
	repair  bool
	metrics *verify.Metrics // nil: one round, no metrics
	// log records each table's round in ClickHouse for serve's status
	// page (schema.VerifyTable).
	log *clickhouse.VerifyLog
}

// round verifies every table (and repairs, with --repair), writes the
// report, records each table's counts in ClickHouse and logs counts only.
// It returns errDivergence when rows differ after it, and an error when a
// table could not be verified or its round not recorded.
func (r *verifyRounds) round(ctx context.Context) error {
	rep := verify.Report{Started: time.Now().UTC()}
	differ := 0
	var rounds []clickhouse.VerifyRound
	for _, src := range r.tables {
		name := src.Schema + "." + src.Table
		res, err := r.v.Verify(ctx, src)
		if err == nil && r.repair && len(res.Mismatches) > 0 {
			err = r.v.Repair(ctx, src, &res)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			slog.Error("table not verified", "table", name, "err", err)
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", name, err))
			r.metrics.Failed(name)
			chTable := res.ClickHouse
			if chTable == "" {
				chTable = schema.TableName(src)
			}
			rounds = append(rounds, clickhouse.VerifyRound{Table: chTable, Outcome: schema.VerifyFailed,
				FinishedAt: time.Now().UTC(), Error: err.Error()})
			continue
		}
		round := verifiedRound(res)
		differ += int(round.MismatchedRows)
		rep.Tables = append(rep.Tables, res)
		r.metrics.Observe(res)
		rounds = append(rounds, round)
	}
	rep.Finished = time.Now().UTC()
	if r.report != "" {
		if err := verify.WriteReport(r.report, rep); err != nil {
			return err
		}
	}
	var recordErr error
	if r.log != nil {
		if recordErr = r.log.Record(ctx, rounds...); recordErr != nil {
			slog.Error("verify round not recorded for the status page", "err", recordErr)
		}
	}
	slog.Info("verify round done", "tables", len(rep.Tables), "failed", len(rep.Errors), "rows_differ", differ, "report", r.report)
	switch {
	case recordErr != nil:
		return recordErr
	case len(rep.Errors) > 0:
		return fmt.Errorf("%d of %d tables not verified: %s", len(rep.Errors), len(r.tables), strings.Join(rep.Errors, "; "))
	case differ > 0:
		return fmt.Errorf("%d rows: %w (the report %q lists them; --repair loads them again)", differ, errDivergence, r.report)
	}
	return nil
}

// verifiedRound is what the status page shows of a verified table: counts
// and positions, never keys or values.
func verifiedRound(res verify.TableResult) clickhouse.VerifyRound {
	out := clickhouse.VerifyRound{Table: res.ClickHouse, Outcome: schema.Verified, FinishedAt: res.VerifiedAt,
		SnapshotLSN: uint64(res.Snapshot), Standby: res.Standby, RowsChecked: res.RowsChecked,
		NotExamined: res.NotExamined, ChangedSince: res.ChangedSince}
	for _, m := range res.Mismatches {
		if m.Repaired {
			out.RepairedRows++
		} else {
			out.MismatchedRows++
		}
	}
	return out
}
