package capture_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/harness/testenv"
)

// TestIntegrationStartWithEveryTableLeftOut: once the slot exists, a
// restart does not fail on tables capture cannot capture, even when that is
// every table: it streams (the slot keeps moving) with them left out, and
// Stats says which and why. Here the captured table lost its primary key
// and a table without one joined the publication while capture was
// stopped; each is left out at its first change.
func TestIntegrationStartWithEveryTableLeftOut(t *testing.T) {
	env, pg := connectPG(t)
	ctx := context.Background()
	table := createTable(t, pg, "losekey", `(tenant_id text, id int, CONSTRAINT losekey_pk PRIMARY KEY (tenant_id, id))`)
	joined := createTable(t, pg, "nokey", `(tenant_id text, id int)`)
	slot, pub, prefix := freshSlot(t, pg, "wh")
	opts := []capture.Option{capture.WithSlot(slot), capture.WithPublication(pub), capture.WithTables(table), capture.WithHeartbeatInterval(200 * time.Millisecond)}
	stop := run(t, env, prefix, opts...)
	stop()

	for _, q := range []string{
		fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT losekey_pk`, table),
		fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, pgx.Identifier{pub}.Sanitize(), joined),
	} {
		if _, err := pg.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	c, stop := start(t, env, prefix, opts...)
	defer stop()
	// The slot moves on past WAL written after the start.
	var after string
	if _, err := pg.Exec(ctx, fmt.Sprintf(`INSERT INTO %s VALUES ('t', 1)`, joined)); err != nil {
		t.Fatal(err)
	}
	if err := pg.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s VALUES ('t', 1) RETURNING pg_current_wal_insert_lsn()::text`, table)).Scan(&after); err != nil {
		t.Fatal(err)
	}
	waitConfirmed(t, pg, slot, after)
	// Each is left out at its first Relation message (or the copy a
	// table new to the stream gets), not at the start: the key a table has
	// now says nothing of the WAL before.
	var names []string
	for _, r := range c.Stats().Refused {
		if !slices.Equal(r.Reasons, []string{"no_primary_key"}) {
			t.Errorf("%s left out for %q, want no_primary_key", r.Table, r.Reasons)
		}
		names = append(names, r.Table)
	}
	if want := []string{"public." + table, "public." + joined}; !slices.Equal(names, want) {
		t.Errorf("tables left out: %q, want %q", names, want)
	}
}

// TestIntegrationArrayKeyLeftOut: a table keyed by an array that joins
// the publication is left out (invalid_columns), and capture goes on past
// its changes and streams the other table: its ClickHouse table could
// never be created, which stalled the sink. (At a first start, which has
// no slot yet, capture refuses to start instead, naming the fix.)
func TestIntegrationArrayKeyLeftOut(t *testing.T) {
	env, pg := connectPG(t)
	ctx := context.Background()
	plain := createTable(t, pg, "arrayplain", `(tenant_id text, id int, ids int[], PRIMARY KEY (tenant_id, id))`)
	keyed := createTable(t, pg, "arraykey", `(tenant_id text, ids int[], PRIMARY KEY (tenant_id, ids))`)
	slot, pub, prefix := freshSlot(t, pg, "wh")
	opts := []capture.Option{capture.WithSlot(slot), capture.WithPublication(pub), capture.WithTables(plain), capture.WithHeartbeatInterval(200 * time.Millisecond)}
	stop := run(t, env, prefix, opts...)
	stop()
	if _, err := pg.Exec(ctx, fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, pgx.Identifier{pub}.Sanitize(), keyed)); err != nil {
		t.Fatal(err)
	}
	c, stop := start(t, env, prefix, opts...)
	defer stop()
	var after string
	if _, err := pg.Exec(ctx, fmt.Sprintf(`INSERT INTO %s VALUES ('t', '{1,2}')`, keyed)); err != nil {
		t.Fatal(err)
	}
	if err := pg.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s VALUES ('t', 1, '{1,2}') RETURNING pg_current_wal_insert_lsn()::text`, plain)).Scan(&after); err != nil {
		t.Fatal(err)
	}
	waitConfirmed(t, pg, slot, after)
	refused := c.Stats().Refused
	if len(refused) != 1 || refused[0].Table != "public."+keyed || !slices.Equal(refused[0].Reasons, []string{"invalid_columns"}) {
		t.Errorf("tables left out: %+v, want public.%s for invalid_columns", refused, keyed)
	}
}

// waitConfirmed waits until slot confirmed WAL position lsn: capture went
// on past what was written before it.
func waitConfirmed(t *testing.T, pg *pgx.Conn, slot, lsn string) {
	t.Helper()
	err := testenv.Eventually(context.Background(), 30*time.Second, func(ctx context.Context) error {
		var passed bool
		err := pg.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2", lsn, slot).Scan(&passed)
		if err != nil || !passed {
			return fmt.Errorf("confirmed_flush_lsn not past %s yet (%v)", lsn, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
