package pgslot

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walhouse/walhouse/internal/backoff"
)

// Execer runs one statement; *pgx.Conn and *pgxpool.Pool are Execers.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Timeout is how long Drop waits for a walsender to let go of the slot.
const Timeout = 30 * time.Second

// Drop drops slot, ending the walsender that holds it if there is one and
// retrying until it is gone or Timeout passes. A slot that does not exist
// is not an error.
func Drop(ctx context.Context, pg Execer, slot string) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	err := backoff.Poll(ctx, func(ctx context.Context) error {
		_, _ = pg.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", slot)
		_, err := pg.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
		return err
	})
	if err != nil {
		return fmt.Errorf("drop replication slot %s within %v: %w; drop it with SELECT pg_drop_replication_slot('%s')", slot, Timeout, err, slot)
	}
	return nil
}
