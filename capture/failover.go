package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walhouse/walhouse/internal/backoff"
)

// Failover slots (PostgreSQL 17+). A logical slot created with failover =
// true is copied to the standbys that run sync_replication_slots = on, and
// with the primary's synchronized_standby_slots naming their physical
// slots, its walsender sends no change those standbys have not received.
// After a promotion capture reconnects (WithReconnect; a connection string
// listing both servers with target_session_attrs=read-write finds the new
// primary) and streams on from the synchronized slot's confirmed position:
// what it re-reads it produces again with the same eventIds, and nothing
// it read can be missing from the new primary.

// minFailoverVersion is the first server_version_num with failover slots.
const minFailoverVersion = 170000

// checkFailover refuses a failover slot where there can be none.
func (c *config) checkFailover(st *site) error {
	switch {
	case !c.failover:
		return nil
	case st.version < minFailoverVersion:
		return fmt.Errorf("--failover-slot needs PostgreSQL 17 or later (the server runs %d): drop the flag, and after a failover re-create the slot as docs/ha.md says", st.version/10000)
	case st.standby:
		return errors.New("--failover-slot: the server is a standby, and failover slots are created on the primary (the standby synchronizes them with sync_replication_slots = on); point --pg at the primary, or drop the flag to decode on the standby")
	}
	return nil
}

// createSlot creates the logical slot on the replication connection, with
// an exported snapshot when a copy will read it and with failover on when
// asked. On a standby it has the primary log standby snapshots meanwhile,
// without which the creation waits for the next one.
func createSlot(ctx context.Context, repl *pgconn.PgConn, cfg *config, st *site) (pglogrepl.CreateReplicationSlotResult, error) {
	nctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); st.nudge(nctx) }()
	defer func() { stop(); wg.Wait() }()
	if !cfg.failover {
		action := "NOEXPORT_SNAPSHOT"
		if cfg.snapshot {
			action = "EXPORT_SNAPSHOT"
		}
		return pglogrepl.CreateReplicationSlot(ctx, repl, cfg.slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: action})
	}
	// The option list form (PostgreSQL 15+), the only one with FAILOVER;
	// the slot name passed validate's pattern.
	snapshot := "nothing"
	if cfg.snapshot {
		snapshot = "export"
	}
	return pglogrepl.ParseCreateReplicationSlot(repl.Exec(ctx, fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (SNAPSHOT '%s', FAILOVER true)", cfg.slot, snapshot)))
}

// ensureFailover turns failover on for an existing slot when asked to, and
// warns when the primary does not hold changes back for its standbys.
func (c *Capturer) ensureFailover(ctx context.Context, conn *pgx.Conn, repl *pgconn.PgConn) error {
	if !c.cfg.failover {
		return nil
	}
	var (
		failover bool
		standbys string
	)
	if err := conn.QueryRow(ctx, `SELECT failover, current_setting('synchronized_standby_slots') FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, c.cfg.slot).Scan(&failover, &standbys); err != nil {
		return fmt.Errorf("look up replication slot %s: %w", c.cfg.slot, err)
	}
	if !failover {
		if err := repl.Exec(ctx, fmt.Sprintf("ALTER_REPLICATION_SLOT %s (FAILOVER true)", c.cfg.slot)).Close(); err != nil {
			return fmt.Errorf("turn failover on for replication slot %s: %w", c.cfg.slot, err)
		}
		c.log.Info("turned failover on for the replication slot: standbys with sync_replication_slots = on copy it from now on", "slot", c.cfg.slot)
	}
	if standbys == "" {
		c.log.Warn("the slot is a failover slot but synchronized_standby_slots is empty on the primary: capture may read changes a standby has not received yet, which a failover to it would lose from PostgreSQL but not from ClickHouse",
			"hint", "ALTER SYSTEM SET synchronized_standby_slots = '<the standbys physical slots>'; SELECT pg_reload_conf()")
	}
	return nil
}

// slotNotSynchronized says why a slot capture streamed from is missing on
// a server that may have been promoted, for the error that stops capture.
func slotNotSynchronized(slot string) string {
	return fmt.Sprintf("if this server is a standby promoted by a failover, slot %s had not been synchronized to it: "+
		"it was created without --failover-slot (PostgreSQL 17+), the standby does not run sync_replication_slots = on with hot_standby_feedback = on and a primary_slot_name, "+
		"or it had not synchronized the slot yet (SELECT slot_name, synced, temporary FROM pg_replication_slots on a standby shows it, synced and not temporary, once it has); start the new slot with --failover-slot so that the next failover keeps it", slot)
}

// reconnecting runs run, and runs it again when it lost PostgreSQL, until
// it returns for another reason or the connection stays lost for longer
// than the reconnect timeout.
func (c *Capturer) reconnecting(ctx context.Context, run func(context.Context) error) error {
	var (
		lostAt  time.Time
		attempt int
	)
	for {
		streamedBefore := c.runs.Load()
		err := run(ctx)
		if c.cfg.reconnect == 0 || ctx.Err() != nil || !connectionLost(err) {
			return err
		}
		if c.runs.Load() != streamedBefore || lostAt.IsZero() {
			// It streamed since the last loss: a new outage.
			lostAt, attempt = time.Now(), 0
		}
		if time.Since(lostAt) > c.cfg.reconnect {
			return fmt.Errorf("%w (no connection for %v, the reconnect timeout)", err, c.cfg.reconnect.Round(time.Second))
		}
		wait := backoff.Exponential(250*time.Millisecond, 5*time.Second, attempt)
		attempt++
		c.log.Warn("lost a connection; reconnecting, then streaming on from the slot's confirmed position", "err", err, "attempt", attempt, "retry_in", wait)
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// connectionLost reports an error of the connection rather than of what
// was asked on it: the server went away, refused connections while
// starting or shutting down, was not the primary target_session_attrs
// asked for, or still held the slot for the walsender of the lost session.
// A network error of Kafka's counts too: a new session re-reads from the
// slot's confirmed position, which is as safe after either.
func connectionLost(err error) bool {
	if err == nil || errors.Is(err, ErrSlotInvalidated) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08": // connection exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // admin or crash shutdown, cannot connect now
			return true
		case pgErr.Code == "55006": // object in use: the slot, by the lost session's walsender
			return true
		case pgErr.Code == "25006": // read-only transaction: a standby where a primary was expected
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		pgconn.SafeToRetry(err)
}
