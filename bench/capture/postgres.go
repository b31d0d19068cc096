package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/internal/pgslot"
	"github.com/walhouse/walhouse/record"
)

// createTable creates the benchmark table and its publication. The
// publication exists before any slot, so every slot can decode it.
func (b *bench) createTable(ctx context.Context) error {
	t := b.quotedTable()
	_, err := b.pg.Exec(ctx, `CREATE TABLE `+t+` (
		tenant_id  text        NOT NULL,
		id         bigint      NOT NULL,
		amount     numeric(12,2) NOT NULL,
		note       text,
		created_at timestamptz NOT NULL,
		attrs      jsonb,
		PRIMARY KEY (tenant_id, id))`)
	if err != nil {
		return fmt.Errorf("create table %s: %w", b.names.table, err)
	}
	b.undo.Push("drop table "+b.names.table, func(ctx context.Context) error {
		_, err := b.pg.Exec(ctx, "DROP TABLE IF EXISTS "+t)
		return err
	})
	pub := pgx.Identifier{b.names.publication}.Sanitize()
	if _, err := b.pg.Exec(ctx, "CREATE PUBLICATION "+pub+" FOR TABLE "+t+" WITH (publish_via_partition_root = true)"); err != nil {
		return fmt.Errorf("create publication %s: %w", b.names.publication, err)
	}
	b.undo.Push("drop publication "+b.names.publication, func(ctx context.Context) error {
		_, err := b.pg.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pub)
		return err
	})
	return nil
}

func (b *bench) quotedTable() string {
	return pgx.Identifier{"public", b.names.base}.Sanitize()
}

// backlog is what fillTable wrote to the WAL.
type backlog struct {
	lastTx  record.LSN // inside the last transaction, before its commit record
	end     record.LSN // the WAL end after the last commit
	walSize int64      // bytes of WAL from the first insert to end
	took    time.Duration
}

// fillTable inserts opts.rows rows in transactions of opts.txRows rows, with
// a mix of tenants, numerics, text, timestamps and jsonb.
//
// A reader has received everything once it confirmed a position at or past
// lastTx: only the last transaction's commit ends beyond it.
func (b *bench) fillTable(ctx context.Context) (backlog, error) {
	var bl backlog
	var start record.LSN
	if err := b.pg.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(lsnScanner{&start}); err != nil {
		return bl, fmt.Errorf("read the WAL position: %w", err)
	}
	began := time.Now()
	insert := `INSERT INTO ` + b.quotedTable() + `
		SELECT 'tenant_' || (g % 50), g, (g % 1000000) / 100.0, 'note ' || md5(g::text),
		       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',
		       jsonb_build_object('g', g, 'tag', 'k' || (g % 7), 'ok', g % 2 = 0)
		FROM generate_series($1::bigint, $2::bigint) g`
	for from := 1; from <= b.opts.rows; from += b.opts.txRows {
		to := min(from+b.opts.txRows-1, b.opts.rows)
		last := to == b.opts.rows
		err := pgx.BeginFunc(ctx, b.pg, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, insert, from, to); err != nil {
				return err
			}
			if !last {
				return nil
			}
			return tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(lsnScanner{&bl.lastTx})
		})
		if err != nil {
			return bl, fmt.Errorf("insert rows %d-%d into %s: %w", from, to, b.names.table, err)
		}
	}
	bl.took = time.Since(began)
	// The insert position, not pg_current_wal_lsn (the write position, which
	// may still be short of the last commit record).
	if err := b.pg.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(lsnScanner{&bl.end}); err != nil {
		return bl, fmt.Errorf("read the WAL position: %w", err)
	}
	bl.walSize = int64(bl.end - start)
	return bl, nil
}

// lsnScanner scans the text form of an LSN.
type lsnScanner struct{ l *record.LSN }

func (s lsnScanner) Scan(src any) error {
	str, ok := src.(string)
	if !ok {
		return fmt.Errorf("lsn: want text, got %T", src)
	}
	l, err := record.ParseLSN(str)
	*s.l = l
	return err
}

// createSlots creates a pgoutput slot for each role, all at the same
// position (the later ones are copies of the first), so every reader
// decodes exactly the same WAL.
func (b *bench) createSlots(ctx context.Context, undo *testenv.Cleanups, roles ...string) error {
	for i, role := range roles {
		name := b.names.slot(role)
		var err error
		if i == 0 {
			_, err = b.pg.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", name)
		} else {
			_, err = b.pg.Exec(ctx, "SELECT pg_copy_logical_replication_slot($1, $2)", b.names.slot(roles[0]), name)
		}
		if err != nil {
			return fmt.Errorf("create replication slot %s (are max_replication_slots used up? see pg_replication_slots): %w", name, err)
		}
		b.pushDropSlot(undo, name)
	}
	return nil
}

// pushDropSlot schedules the slot's removal on undo (pgslot.Drop waits for
// a stopped process that still holds it for a moment).
func (b *bench) pushDropSlot(undo *testenv.Cleanups, name string) {
	undo.Push("drop replication slot "+name, func(ctx context.Context) error {
		return pgslot.Drop(ctx, b.pg, name)
	})
}

// slotPosition returns the confirmed_flush_lsn of a slot and whether a
// process streams from it.
func (b *bench) slotPosition(ctx context.Context, slot string) (record.LSN, bool, error) {
	var (
		confirmed *string
		active    bool
	)
	err := b.pg.QueryRow(ctx, "SELECT confirmed_flush_lsn::text, active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&confirmed, &active)
	if err == pgx.ErrNoRows {
		return 0, false, nil
	}
	if err != nil || confirmed == nil {
		return 0, active, err
	}
	l, err := record.ParseLSN(*confirmed)
	return l, active, err
}
