package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/internal/backoff"
)

// Decoding on a standby (PostgreSQL 16+). A physical standby decodes its
// own logical slots, exports their snapshots and serves the initial copy
// like a primary, but it is read-only: it cannot create the publication,
// install the DDL event trigger or write heartbeats
// (pg_logical_emit_message). capture writes those on the primary, over a
// connection of its own (WithPrimary), and they reach the standby's slot
// through replication in WAL order, as they would on the primary. Without
// a primary connection the publication and the trigger must already exist
// and heartbeats are off (lastSyncAt then stays unknown).

// minStandbyVersion is the first server_version_num that decodes on a
// standby.
const minStandbyVersion = 160000

// replayTimeout bounds the wait for the standby to replay what capture
// wrote on the primary.
const replayTimeout = time.Minute

// site is where capture reads and where it writes: on a primary both are
// capture's catalog connection; on a standby the writes go to the primary.
// It lives for one run and is used from the run's goroutine only.
type site struct {
	standby bool
	version int  // server_version_num of the server capture reads
	trigger bool // the DDL event trigger is installed on the primary
	sysID   string
	url     string    // the primary's, on a standby; "" when not given
	primary *pgx.Conn // on a standby: nil until connected, or after it failed
	log     *slog.Logger
	warned  time.Time // when a failed write on the primary was last logged
}

// openSite learns whether cat is a standby and, for a standby with a
// primary, makes sure the publication and the DDL trigger exist there and
// have been replayed here.
func (c *Capturer) openSite(ctx context.Context, cat *pgx.Conn) (*site, error) {
	st := &site{log: c.log}
	if err := cat.QueryRow(ctx, `SELECT pg_is_in_recovery(), current_setting('server_version_num')::int, system_identifier::text FROM pg_control_system()`).
		Scan(&st.standby, &st.version, &st.sysID); err != nil {
		return nil, fmt.Errorf("ask PostgreSQL whether it is a standby: %w", err)
	}
	if err := c.cfg.checkFailover(st); err != nil {
		return nil, err
	}
	if !st.standby {
		return st, nil
	}
	if st.version < minStandbyVersion {
		return nil, fmt.Errorf("the server is a standby running PostgreSQL %d, and logical decoding on a standby needs PostgreSQL 16 or later: point --pg at the primary, or upgrade", st.version/10000)
	}
	var feedback string
	if err := cat.QueryRow(ctx, "SELECT current_setting('hot_standby_feedback')").Scan(&feedback); err != nil {
		return nil, fmt.Errorf("read hot_standby_feedback: %w", err)
	}
	if feedback != "on" {
		c.log.Warn("the standby runs with hot_standby_feedback = off: VACUUM on the primary may remove catalog rows the slot needs, which invalidates it (capture then stops and the tables must be copied again), and cancel the copy's queries",
			"hint", "ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf() on the standby")
	}
	st.url = c.cfg.primary
	if st.url == "" {
		c.log.Warn("capture reads from a standby without --primary-url: the publication and the DDL event trigger must already exist (create them on the primary), heartbeats are off (lastSyncAt stays unknown), and slot creation waits for the primary to log a standby snapshot",
			"hint", "give --primary-url, the primary's connection string")
		return st, nil
	}
	if err := st.connectPrimary(ctx); err != nil {
		return nil, err
	}
	if err := ensurePublication(ctx, st.primary, &c.cfg); err != nil {
		st.close(ctx)
		return nil, fmt.Errorf("on the primary: %w", err)
	}
	if err := installDDLTrigger(ctx, st.primary); err != nil {
		c.log.Warn("DDL event trigger not installed on the primary: renames are followed only when capture keeps up", "err", err)
	} else {
		st.trigger = true
	}
	if err := st.waitReplayed(ctx, cat); err != nil {
		st.close(ctx)
		return nil, err
	}
	c.log.Info("reading from a standby; the publication, the DDL trigger and heartbeats are written on the primary", "standby_version", st.version)
	return st, nil
}

// connectPrimary opens the connection to the primary and checks that it is
// the primary of this standby.
func (st *site) connectPrimary(ctx context.Context) error {
	conn, err := connect(ctx, st.url, connOptions{})
	if err != nil {
		return fmt.Errorf("--primary-url: %w", err)
	}
	var (
		recovering bool
		sysID      string
	)
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), system_identifier::text FROM pg_control_system()`).Scan(&recovering, &sysID); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("--primary-url: %w", err)
	}
	switch {
	case recovering:
		conn.Close(context.WithoutCancel(ctx))
		return errors.New("--primary-url names a server that is in recovery too: give the primary's connection string (or the standby's upstream)")
	case sysID != st.sysID:
		conn.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("--primary-url names another cluster (system identifier %s) than the standby's (%s): give the primary this standby replicates from", sysID, st.sysID)
	}
	st.primary = conn
	return nil
}

// waitReplayed waits until the standby cat has replayed the primary's WAL
// as of now: what capture just wrote there is then visible here.
func (st *site) waitReplayed(ctx context.Context, cat *pgx.Conn) error {
	var target string
	if err := st.primary.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&target); err != nil {
		return fmt.Errorf("read the primary's WAL position: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, replayTimeout)
	defer cancel()
	for {
		var done bool
		if err := cat.QueryRow(wctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", target).Scan(&done); err != nil {
			if wctx.Err() != nil && ctx.Err() == nil {
				break
			}
			return fmt.Errorf("read the standby's replay position: %w", err)
		}
		if done {
			return nil
		}
		if backoff.Sleep(wctx, 50*time.Millisecond) != nil {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("the standby did not replay the primary's WAL up to %s within %v: check that it streams (SELECT status FROM pg_stat_wal_receiver on the standby) and that --primary-url names its primary", target, replayTimeout)
}

// write runs fn on the connection that may write: cat on a primary (or
// without a site). On a
// standby it is the primary's, reconnected when it was lost; there a
// failure is logged (at most once a minute) and not returned, since
// nothing written there is needed to stream: a primary that is down must
// not stop capture on its standby.
func (st *site) write(ctx context.Context, cat *pgx.Conn, what string, fn func(*pgx.Conn) error) error {
	if st == nil || !st.standby {
		return fn(cat)
	}
	if st.url == "" {
		return nil
	}
	err := func() error {
		if st.primary == nil || st.primary.IsClosed() {
			if err := st.connectPrimary(ctx); err != nil {
				return err
			}
		}
		return fn(st.primary)
	}()
	if err == nil || ctx.Err() != nil {
		return nil
	}
	if st.primary != nil {
		st.primary.Close(context.WithoutCancel(ctx))
		st.primary = nil
	}
	if time.Since(st.warned) >= time.Minute {
		st.warned = time.Now()
		st.log.Warn("could not "+what+" on the primary; streaming from the standby goes on, and capture tries again", "err", err)
	}
	return nil
}

// nudge asks the primary to log a standby snapshot (PostgreSQL 16+) every
// half second until ctx ends: a logical slot created on a standby waits
// for one, which an idle primary writes only every 15 s or so.
func (st *site) nudge(ctx context.Context) {
	if st == nil || !st.standby || st.primary == nil {
		return
	}
	for {
		_, _ = st.primary.Exec(ctx, "SELECT pg_log_standby_snapshot()")
		if backoff.Sleep(ctx, 500*time.Millisecond) != nil {
			return
		}
	}
}

// close closes the primary's connection, if there is one.
func (st *site) close(ctx context.Context) {
	if st != nil && st.primary != nil {
		st.primary.Close(context.WithoutCancel(ctx))
		st.primary = nil
	}
}
