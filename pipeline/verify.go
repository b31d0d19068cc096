package pipeline

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

// ErrDivergence is the outcome of a one-shot verify that found rows that
// differ: the exit status says so to a CronJob.
var ErrDivergence = errors.New("PostgreSQL and ClickHouse differ")

// VerifyRun is what `walhouse verify` runs: rounds comparing PostgreSQL
// with ClickHouse FINAL, once or every Every.
type VerifyRun struct {
	// PG is the PostgreSQL connection string with its password.
	PG         string
	ClickHouse ClickHouse
	Tables     []record.Source
	// Options are the verifier's (its database and logger are set here).
	Options []verify.Option
	// Every runs a round every this long, with metrics on HTTP (0: one
	// round, ErrDivergence when rows differ).
	Every time.Duration
	HTTP  HTTP
	// Report is the file the report is written to (empty: none); Repair
	// loads the differing keys again.
	Report string
	Repair bool
}

// RunVerify runs the rounds of r until ctx ends, or one round; options
// the verifier refuses are a *SettingsError.
func RunVerify(ctx context.Context, r VerifyRun) error {
	conn, err := r.ClickHouse.Open(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	v, err := verify.New(r.PG, conn, append(r.Options, verify.WithDatabase(r.ClickHouse.Database), verify.WithLogger(slog.Default().With("component", "verify")))...)
	if err != nil {
		return &SettingsError{err}
	}
	rounds := verifyRounds{v: v, tables: r.Tables, report: r.Report, repair: r.Repair, log: clickhouse.NewVerifyLog(conn, r.ClickHouse.Database)}
	if r.Every == 0 {
		return rounds.round(ctx)
	}
	reg := prometheus.NewRegistry()
	rounds.metrics = verify.NewMetrics(reg)
	g, gctx := errgroup.WithContext(ctx)
	if r.HTTP.Addr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		g.Go(func() error { return r.HTTP.Serve(gctx, mux, "verify metrics") })
	}
	g.Go(func() error {
		for {
			if err := rounds.round(gctx); err != nil && !errors.Is(err, ErrDivergence) && gctx.Err() == nil {
				slog.Warn("verify round failed; trying again at the next", "err", err)
			}
			if err := backoff.Sleep(gctx, r.Every); err != nil {
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
// It returns ErrDivergence when rows differ after it, and an error when a
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
		return fmt.Errorf("%d rows: %w (the report %q lists them; --repair loads them again)", differ, ErrDivergence, r.report)
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
