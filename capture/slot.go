package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walhouse/walhouse/record"
)

// resyncAdvice says how to recover from a slot whose changes are lost.
func resyncAdvice(slot string) string {
	return fmt.Sprintf("changes were lost, so the tables must be copied again: let the sink load what is in Kafka, stop it, drop the source's ClickHouse tables, "+
		"run SELECT pg_drop_replication_slot('%s') if the slot still exists, then start capture with --resnapshot '*' and the sink", slot)
}

// checkDroppedSlot refuses to recreate a slot that capture streamed from
// before (its saved snapshot progress says so): the changes made while it
// was missing are lost, and a new slot's copy cannot repair ClickHouse
// (copied rows have version 0, below the rows it has, and rows deleted
// meanwhile would stay). Tables named with --resnapshot are being copied
// again deliberately.
func (c *Capturer) checkDroppedSlot(ctx context.Context, conn *pgx.Conn, tables []string) error {
	cfg := &c.cfg
	if cfg.state == nil || cfg.resnapshotAll || !cfg.createSlot {
		return nil
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1)", cfg.slot).Scan(&exists); err != nil {
		return fmt.Errorf("look up replication slot %s: %w", cfg.slot, err)
	}
	if exists {
		return nil
	}
	var streamed []string
	for _, t := range tables {
		if cfg.resnapshot[t] {
			continue
		}
		raw, err := cfg.state.Load(ctx, stateKey(cfg.slot, t))
		if err != nil {
			return err
		}
		if raw != nil {
			streamed = append(streamed, t)
		}
	}
	if len(streamed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: slot %s is gone, but capture streamed %s from it before (saved progress in the state topic); %s; %s",
		ErrSlotInvalidated, cfg.slot, strings.Join(streamed, ", "), slotNotSynchronized(cfg.slot), resyncAdvice(cfg.slot))
}

// ensureSlot returns the position to stream from, creating the slot if it
// is missing and allowed to; a new slot also returns its exported snapshot.
func ensureSlot(ctx context.Context, conn *pgx.Conn, repl *pgconn.PgConn, cfg *config, st *site) (start record.LSN, snapshot string, created bool, err error) {
	var (
		plugin, slotType, db string
		confirmed            *string
		walStatus            *string
	)
	err = conn.QueryRow(ctx, `
		SELECT plugin, slot_type, database, confirmed_flush_lsn::text, wal_status
		FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, cfg.slot).Scan(&plugin, &slotType, &db, &confirmed, &walStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		if !cfg.createSlot {
			return 0, "", false, fmt.Errorf("replication slot %s does not exist and slot creation is disabled: create it with SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", cfg.slot, cfg.slot)
		}
		res, err := createSlot(ctx, repl, cfg, st)
		if err != nil {
			return 0, "", false, fmt.Errorf("create replication slot %s: %w (is max_replication_slots reached? does the user have REPLICATION?)", cfg.slot, err)
		}
		lsn, err := record.ParseLSN(res.ConsistentPoint)
		if err != nil {
			return 0, "", false, fmt.Errorf("create replication slot %s: %w", cfg.slot, err)
		}
		slog.Default().Info("created replication slot", "component", "capture", "slot", cfg.slot, "consistent_point", lsn)
		return lsn, res.SnapshotName, true, nil
	}
	if err != nil {
		return 0, "", false, fmt.Errorf("look up replication slot %s: %w", cfg.slot, err)
	}
	if slotType != "logical" || plugin != "pgoutput" {
		return 0, "", false, fmt.Errorf("replication slot %s is a %s slot with plugin %q, not a logical pgoutput slot: choose another --slot name", cfg.slot, slotType, plugin)
	}
	if walStatus != nil && *walStatus == "lost" {
		return 0, "", false, fmt.Errorf("%w: slot %s has wal_status=lost; %s", ErrSlotInvalidated, cfg.slot, resyncAdvice(cfg.slot))
	}
	if confirmed == nil {
		return 0, "", false, fmt.Errorf("replication slot %s has no confirmed position yet; is another walhouse creating it?", cfg.slot)
	}
	start, err = record.ParseLSN(*confirmed)
	return start, "", false, err
}
