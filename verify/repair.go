package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// ErrStandby is returned by Repair on a standby: the repair's version is
// the primary's WAL insert position.
var ErrStandby = errors.New("repair needs the primary (--pg of the primary, not a standby)")

// Repair writes, for each mismatch of res, PostgreSQL's current row (a
// tombstone when PostgreSQL has none) into ClickHouse, converted as the
// sink converts it, at a version that never beats a newer change, then
// checks those keys again and marks the ones that now agree (Repaired).
//
// The version is one below repair's position L, the primary's WAL insert
// position read before anything else. Every transaction that had written
// WAL before L is waited for (those in progress at a snapshot taken after
// L), so the rows then read show every change below L; a change they do
// not show is above L, and beats the repaired row when the sink loads it.
// The wrong row in ClickHouse is older than the verify snapshot, so below
// L: the repaired row beats it. A repair never overwrites a newer change,
// and it writes nothing to PostgreSQL.
//
// The repaired row lands at PostgreSQL's position in the sorting key and
// partition. Where a layout sorts or partitions by a column the key does
// not hold, the wrong row may be at another position, which the repaired
// row does not replace; so every row FINAL shows of a repaired key first
// gets a tombstone, a copy of it at one below the repaired row's version
// (tombstones).
func (v *Verifier) Repair(ctx context.Context, src record.Source, res *TableResult) error {
	if len(res.Mismatches) == 0 {
		return nil
	}
	conn, err := v.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	t, err := v.describe(ctx, conn, src)
	if err != nil {
		return err
	}
	if t.synthetic {
		return fmt.Errorf("repair %s: its tenant column %s is walhouse's, not PostgreSQL's; load the table again with capture's --resnapshot", res.Table, t.tenant.ch)
	}
	at, err := v.repairPosition(ctx, conn)
	if err != nil {
		return fmt.Errorf("repair %s: %w", res.Table, err)
	}
	version := uint64(at) - 1
	for _, m := range res.Mismatches {
		if m.Version >= version-1 {
			return fmt.Errorf("repair %s: ClickHouse's row %s has version %d, not below the repair's %d; nothing written (load the table again with capture's --resnapshot)",
				res.Table, strings.Join(m.keys, "/"), m.Version, version)
		}
	}
	q := make([]string, 0)
	for _, c := range t.all() {
		q = append(q, schema.QuoteIdent(c.ch))
	}
	q = append(q, schema.VersionColumn, schema.DeletedColumn, schema.CommitColumn)
	token := fmt.Sprintf("walhouse-verify-repair/%s/%s", t.chName, at)
	ictx := ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplication_token": token}))
	batch, err := v.ch.PrepareBatch(ictx, fmt.Sprintf("INSERT INTO %s.%s (%s)", schema.QuoteIdent(v.cfg.database), schema.QuoteIdent(t.chName), strings.Join(q, ", ")))
	if err != nil {
		return fmt.Errorf("repair %s: prepare the insert: %w", res.Table, err)
	}
	defer batch.Abort()
	now := time.Now().UTC()
	pc := conn.PgConn()
	skipped := 0
	var repaired [][]string
	for _, m := range res.Mismatches {
		if col, ok := t.keyOutOfRange(m.keys); ok {
			// Written, the row would sit at the range's bound, the row of
			// every key beyond it (the sink dead-letters such changes).
			v.cfg.log.Warn("not repaired: a key date or timestamp beyond the range ClickHouse holds; change the key in PostgreSQL", "table", res.Table, "key", strings.Join(m.keys, "/"), "column", col)
			skipped++
			continue
		}
		repaired = append(repaired, m.keys)
		pw, pargs, _, _ := t.keyWhere(m.keys)
		rows, err := t.pgRows(ctx, pc, pw, pargs, 1, true, nil)
		if err != nil {
			return fmt.Errorf("repair %s: %w", res.Table, err)
		}
		vals, err := t.repairValues(m.keys, rows)
		if err != nil {
			return fmt.Errorf("repair %s, key %s: %w", res.Table, strings.Join(m.keys, "/"), err)
		}
		deleted := uint8(0)
		if len(rows) == 0 {
			deleted = 1
		}
		if err := batch.Append(append(vals, version, deleted, now)...); err != nil {
			return fmt.Errorf("repair %s, key %s: %w", res.Table, strings.Join(m.keys, "/"), err)
		}
	}
	if skipped == len(res.Mismatches) {
		return nil
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("repair %s: insert %d rows: %w", res.Table, len(res.Mismatches)-skipped, err)
	}
	// After the rows, so that a repair cut short between the two never
	// leaves a key deleted; the repaired rows get tombstones one version
	// below them too, which hide nothing.
	if err := v.tombstones(ctx, t, repaired, version-1); err != nil {
		return fmt.Errorf("repair %s: %w", res.Table, err)
	}
	v.cfg.log.Info("repaired rows written", "table", res.Table, "rows", len(res.Mismatches)-skipped, "version", version)
	return v.inSnapshot(ctx, t, func(snap *snapshot) error {
		keys := make([][]string, len(res.Mismatches))
		for i, m := range res.Mismatches {
			keys[i] = m.keys
		}
		pgs, chs, err := v.lookup(ctx, t, snap, keys)
		if err != nil {
			return err
		}
		for i := range res.Mismatches {
			res.Mismatches[i].Repaired = same(pgs[i], chs[i])
		}
		return nil
	})
}

// tombstones writes, for every row FINAL shows of keys, a copy of it at
// version with _is_deleted = 1: the copy keeps the row's sorting and
// partition columns, so it replaces the row at its own position, whichever
// that is. It is idempotent (the same tombstones at the same version), so
// it needs no deduplication.
func (v *Verifier) tombstones(ctx context.Context, t *table, keys [][]string, version uint64) error {
	q := schema.QuoteIdent(v.cfg.database) + "." + schema.QuoteIdent(t.chName)
	for from := 0; from < len(keys); from += lookupBatch {
		_, _, cw, params := t.keysWhere(keys[from:min(from+lookupBatch, len(keys))])
		sql := fmt.Sprintf(`INSERT INTO %[1]s
SELECT * REPLACE (toUInt64(%[2]d) AS %[3]s, toUInt8(1) AS %[4]s, now64(6) AS %[5]s)
FROM (SELECT * FROM %[1]s FINAL WHERE %[4]s = 0 AND %[6]s)`,
			q, version, schema.QuoteIdent(schema.VersionColumn), schema.QuoteIdent(schema.DeletedColumn), schema.QuoteIdent(schema.SyncedColumn), cw)
		ictx := ch.Context(ctx, ch.WithParameters(params), ch.WithSettings(ch.Settings{"insert_deduplicate": 0}))
		if err := v.ch.Exec(ictx, sql); err != nil {
			return fmt.Errorf("write tombstones for the rows ClickHouse shows of the keys to repair: %w", err)
		}
	}
	return nil
}

// keyOutOfRange reports the first key column whose value ClickHouse
// stores as its range's bound (schema.Type.OutOfRange).
func (t *table) keyOutOfRange(keys []string) (string, bool) {
	for i, c := range t.keyColumns() {
		if i < len(keys) && c.typ.Ranged() && c.typ.OutOfRange(keys[i]) {
			return c.pg, true
		}
	}
	return "", false
}

// repairValues converts a key's PostgreSQL row (none: a tombstone of the
// key) as the sink does, for the insert's columns before walhouse's own.
func (t *table) repairValues(keys []string, rows []row) ([]any, error) {
	cols := t.all()
	out := make([]any, len(cols))
	for i, c := range cols {
		var text *string
		switch {
		case len(rows) > 0:
			text = rows[0].display[i]
		case i < len(keys):
			text = &keys[i] // a key's canonical text converts to its value
		}
		if text == nil {
			out[i] = c.typ.Null()
			continue
		}
		val, err := c.typ.Convert(*text)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.pg, err)
		}
		out[i] = val
	}
	return out, nil
}

// repairPosition reads the primary's WAL insert position, then waits for
// every transaction in progress at a snapshot taken after it, so that
// everything written below the position is committed or aborted.
func (v *Verifier) repairPosition(ctx context.Context, conn *pgx.Conn) (record.LSN, error) {
	var (
		standby bool
		lsn     string
	)
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), pg_current_wal_insert_lsn()::text").Scan(&standby, &lsn); err != nil {
		var standbyErr error
		if conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby) == nil && standby {
			standbyErr = ErrStandby
		}
		return 0, errors.Join(standbyErr, fmt.Errorf("read the WAL insert position: %w", err))
	}
	at, err := record.ParseLSN(lsn)
	if err != nil {
		return 0, err
	}
	var xip []string
	if err := conn.QueryRow(ctx, "SELECT coalesce(array_agg(x::text), '{}') FROM pg_snapshot_xip(pg_current_snapshot()) x").Scan(&xip); err != nil {
		return 0, fmt.Errorf("list the transactions in progress: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, v.cfg.loadWait)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for len(xip) > 0 {
		var open []string
		err := conn.QueryRow(wctx, "SELECT coalesce(array_agg(x), '{}') FROM unnest($1::text[]) x WHERE pg_xact_status(x::xid8) = 'in progress'", xip).Scan(&open)
		if err != nil {
			return 0, fmt.Errorf("wait for the transactions in progress at %s (%d of them, still open after %s: end them, or repair later): %w", at, len(xip), v.cfg.loadWait, err)
		}
		if xip = open; len(xip) == 0 {
			break
		}
		select {
		case <-wctx.Done():
			return 0, fmt.Errorf("%d transactions in progress at %s are still open after %s: end them, or repair later: %w", len(xip), at, v.cfg.loadWait, wctx.Err())
		case <-tick.C:
		}
	}
	return at, nil
}
