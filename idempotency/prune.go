package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/internal/backoff"
)

// Retention defaults: keys are kept DefaultRetentionDays days (the
// environment variable WALHOUSE_IDEMPOTENCY_RETENTION_DAYS in walhouse keys
// prune), deleted DefaultPruneBatch at a time, daily at DefaultPruneAt
// after midnight UTC (03:00).
const (
	DefaultRetentionDays = 30
	DefaultPruneBatch    = 1000
	DefaultPruneAt       = 3 * time.Hour
)

// pruneLock is the advisory lock that makes concurrent pruners' batches
// take turns.
const pruneLock = 0x77616c7072756e // "walprun"

// Pruner deletes keys older than the retention period from the key table,
// in bounded batches (one short transaction each, so it never holds many
// locks or a long snapshot). Its connections must be a member of
// PrunerRole (or a superuser): the retention policies let no other role
// see another tenant's key, and Prune refuses to start without them rather
// than delete nothing in silence. Several pruners may run at once, on one
// host or many: they take turns batch by batch, so no key is deleted twice
// and their counts add up. A retry that comes
// after its key was pruned runs again: the guarantees hold within the
// retention period only.
type Pruner struct {
	db       DB
	days     int
	batch    int
	at       time.Duration
	progress func(PruneProgress)
	log      *slog.Logger
	// now and sleep are the clock of Run (tests replace them).
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

// PruneOption configures a Pruner.
type PruneOption func(*Pruner)

// WithRetentionDays keeps keys this many days (default 30); at least 1.
func WithRetentionDays(days int) PruneOption { return func(p *Pruner) { p.days = days } }

// WithBatchSize deletes at most n keys per transaction (default 1,000).
func WithBatchSize(n int) PruneOption { return func(p *Pruner) { p.batch = n } }

// WithDailyAt sets when Run prunes each day, as the time after midnight
// UTC (default 3h: 03:00 UTC).
func WithDailyAt(d time.Duration) PruneOption { return func(p *Pruner) { p.at = d } }

// WithProgress calls f after every batch.
func WithProgress(f func(PruneProgress)) PruneOption { return func(p *Pruner) { p.progress = f } }

// WithLogger logs Run's prunes to l (default slog.Default()).
func WithLogger(l *slog.Logger) PruneOption { return func(p *Pruner) { p.log = l } }

// PruneProgress is the state of one prune after a batch.
type PruneProgress struct {
	Cutoff  time.Time // keys created before it are deleted
	Batches int
	Deleted int64
	Elapsed time.Duration
}

// NewPruner returns a pruner of the key table on db; it reports every
// invalid option at once.
func NewPruner(db DB, opts ...PruneOption) (*Pruner, error) {
	p := &Pruner{db: db, days: DefaultRetentionDays, batch: DefaultPruneBatch, at: DefaultPruneAt, log: slog.Default(), now: time.Now, sleep: backoff.Sleep}
	for _, o := range opts {
		o(p)
	}
	var problems []error
	if p.days < 1 {
		problems = append(problems, fmt.Errorf("retention of %d days: want at least 1 (the key table's retention policy exposes only keys older than a day)", p.days))
	}
	if p.batch < 1 {
		problems = append(problems, fmt.Errorf("batch size %d: want at least 1", p.batch))
	}
	if p.at < 0 || p.at >= 24*time.Hour {
		problems = append(problems, fmt.Errorf("daily time %s: want a time of day from 0 to 23:59 after midnight UTC", p.at))
	}
	if err := errors.Join(problems...); err != nil {
		return nil, fmt.Errorf("idempotency: %w", err)
	}
	return p, nil
}

// ErrNotPruner is returned by Prune when its role may not prune the key
// table: grant it PrunerRole.
var ErrNotPruner = errors.New("idempotency: the role may not prune the key table")

// Prune deletes every key older than the retention period, batch by batch,
// and returns how many it deleted. Keys that a concurrent pruner deletes
// first are left to it.
func (p *Pruner) Prune(ctx context.Context) (PruneProgress, error) {
	start := time.Now()
	prog := PruneProgress{Cutoff: start.Add(-time.Duration(p.days) * 24 * time.Hour).UTC()}
	if err := p.checkRole(ctx); err != nil {
		return prog, err
	}
	for {
		found, n, err := p.batchOnce(ctx, prog.Cutoff)
		if err != nil {
			return prog, err
		}
		prog.Batches++
		prog.Deleted += n
		prog.Elapsed = time.Since(start)
		if p.progress != nil {
			p.progress(prog)
		}
		// Judged by what the batch found, not what it deleted: keys
		// another pruner took first do not end this one early.
		if found < int64(p.batch) {
			return prog, nil
		}
	}
}

// checkRole makes sure the session's role may prune: without PrunerRole
// every DELETE would find nothing, and the keys would stay in silence.
func (p *Pruner) checkRole(ctx context.Context) error {
	tx, err := p.db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("idempotency: prune: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var user string
	var exists, member bool
	if err := tx.QueryRow(ctx, `SELECT current_user, r.oid IS NOT NULL, r.oid IS NOT NULL AND pg_has_role(current_user, r.oid, 'USAGE')
		FROM (SELECT) dummy LEFT JOIN pg_catalog.pg_roles r ON r.rolname = $1`, PrunerRole).Scan(&user, &exists, &member); err != nil {
		return fmt.Errorf("idempotency: prune: check the role: %w", err)
	}
	switch {
	case !exists:
		return fmt.Errorf("%w: role %s does not exist; run idempotency.Migrate as the key table's owner (it creates the role)", ErrNotPruner, PrunerRole)
	case !member:
		return fmt.Errorf("%w: role %q is not a member of %s; GRANT %s TO %q, or prune as a role that is", ErrNotPruner, user, PrunerRole, PrunerRole, user)
	}
	return nil
}

// batchOnce deletes up to p.batch keys created before cutoff in one
// transaction; it returns how many it found and how many it deleted (fewer
// when a concurrent pruner deleted some first). Concurrent pruners take
// turns batch by batch (pruneLock): without FOR UPDATE SKIP LOCKED, which
// needs the UPDATE privilege that PrunerRole has not, two DELETEs of the
// same keys could lock them in opposite orders and deadlock.
func (p *Pruner) batchOnce(ctx context.Context, cutoff time.Time) (found, deleted int64, err error) {
	tx, err := p.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, 0, fmt.Errorf("idempotency: prune: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(pruneLock)); err != nil {
		return 0, 0, fmt.Errorf("idempotency: prune: wait for another pruner's batch: %w", err)
	}
	// A statement of its own after the lock: READ COMMITTED gives it a
	// snapshot that sees the batch the other pruner just committed.
	err = tx.QueryRow(ctx, `WITH old AS (
			SELECT tenant_id, idempotency_key FROM `+KeyTable+`
			WHERE created_at < $1 ORDER BY created_at LIMIT $2),
		gone AS (
			DELETE FROM `+KeyTable+` k USING old
			WHERE k.tenant_id = old.tenant_id AND k.idempotency_key = old.idempotency_key
			RETURNING 1)
		SELECT (SELECT count(*) FROM old), (SELECT count(*) FROM gone)`, cutoff, p.batch).Scan(&found, &deleted)
	if err != nil {
		return 0, 0, fmt.Errorf("idempotency: prune keys created before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("idempotency: prune: %w", err)
	}
	return found, deleted, nil
}

// Run prunes once a day at the configured time (UTC) until ctx ends; it
// returns ErrNotPruner at once if its role may not prune. A failed prune is logged and tried again at the next day's time: what it
// left is deleted then.
func (p *Pruner) Run(ctx context.Context) error {
	// A role that may not prune is a setup error, not a failed day.
	if err := p.checkRole(ctx); err != nil {
		return err
	}
	for {
		now := p.now()
		next := NextRun(now, p.at)
		p.log.Info("idempotency keys: next prune", "at", next, "retention_days", p.days)
		if err := p.sleep(ctx, next.Sub(now)); err != nil {
			return err
		}
		prog, err := p.Prune(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			p.log.Error("idempotency keys: prune failed; the next one deletes what it left", "err", err, "deleted", prog.Deleted)
			continue
		}
		p.log.Info("idempotency keys: pruned", "deleted", prog.Deleted, "batches", prog.Batches, "created_before", prog.Cutoff, "elapsed", prog.Elapsed.Round(time.Millisecond))
	}
}

// NextRun returns the first time after now that is at after midnight UTC.
func NextRun(now time.Time, at time.Duration) time.Time {
	now = now.UTC()
	next := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC).Add(at)
	if !next.After(now) {
		next = time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC).Add(at)
	}
	return next
}
