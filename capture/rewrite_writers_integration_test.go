package capture

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
)

// TestIntegrationWaitForWritersTurn: a transaction that wrote to the table
// and stays open does not hold waitForWriters forever: after its turn it
// names the transaction still open, and at the next turn it waits for that
// one only, not for writers that came since, and returns once it ended.
func TestIntegrationWaitForWritersTurn(t *testing.T) {
	env := testenv.Require(t, "pg")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, env.PG)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	admin, idle, later, waiter := connect(), connect(), connect(), connect()
	table := testenv.Name("writers")
	if _, err := admin.Exec(ctx, "CREATE TABLE "+table+" (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	idleTx, err := idle.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the transaction ends before DROP TABLE.
	t.Cleanup(func() { _ = idleTx.Rollback(context.Background()) })
	if _, err := idleTx.Exec(ctx, "INSERT INTO "+table+" VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	err = waitForWriters(ctx, waiter, "public."+table, nil, 300*time.Millisecond)
	var open *writersOpenError
	if !errors.As(err, &open) || len(open.remaining) != 1 {
		t.Fatalf("waitForWriters with a transaction left open = %v, want a writersOpenError naming it", err)
	}
	// A writer that came after the listing is not waited for.
	laterTx, err := later.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = laterTx.Rollback(context.Background()) })
	if _, err := laterTx.Exec(ctx, "INSERT INTO "+table+" VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	if err := idleTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitForWriters(ctx, waiter, "public."+table, open.remaining, 30*time.Second); err != nil {
		t.Fatalf("waitForWriters for the listed transaction, which ended = %v, want nil", err)
	}
}
