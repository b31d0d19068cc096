package capture_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/harness/testenv"
)

// slotEnv is a captured table whose slot a test is about to lose.
type slotEnv struct {
	env                      testenv.Env
	pg                       *pgx.Conn
	table, slot, pub, prefix string
	state                    *memState
}

// newSlotEnv creates a table, captures it once (the slot is created and the
// snapshot saved in the returned state) and stops capture again.
func newSlotEnv(t *testing.T) *slotEnv {
	t.Helper()
	env, pg := connectPG(t)
	e := &slotEnv{env: env, pg: pg, table: testenv.Name("lost"), slot: testenv.Name("slot"), pub: testenv.Name("pub"), prefix: testenv.Name("lost"),
		state: &memState{m: map[string][]byte{}}}
	e.exec(t, fmt.Sprintf("CREATE TABLE %s (tenant_id text, id int, v text, PRIMARY KEY (tenant_id, id))", e.table))
	dropAfter(t, pg, []string{e.slot}, e.pub, e.table)
	e.exec(t, fmt.Sprintf("INSERT INTO %s SELECT 't1', g, 'v' FROM generate_series(1, 10) g", e.table))
	stop := run(t, env, e.prefix, e.opts()...)
	consume(t, env, e.prefix+".public."+e.table, 10)
	stop()
	return e
}

func (e *slotEnv) opts(more ...capture.Option) []capture.Option {
	return append([]capture.Option{capture.WithSlot(e.slot), capture.WithPublication(e.pub), capture.WithTables(e.table),
		capture.WithStateStore(e.state), capture.WithStatusInterval(200 * time.Millisecond)}, more...)
}

func (e *slotEnv) exec(t *testing.T, q string) {
	t.Helper()
	if _, err := e.pg.Exec(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// runOnce runs a Capturer until it returns by itself or timeout passes (an
// error of its own is what the tests expect; streaming would run forever).
func (e *slotEnv) runOnce(t *testing.T, timeout time.Duration, opts ...capture.Option) error {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.env.Kafka), kgo.RecordPartitioner(capture.Partitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c, err := capture.New(e.env.PG, cl, append(withKafka(cl, e.prefix), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = c.Run(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("capture kept running for %v: %w", timeout, err)
	}
	return err
}

func (e *slotEnv) slotExists(t *testing.T) bool {
	t.Helper()
	var n int
	if err := e.pg.QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// invalidate makes PostgreSQL remove WAL the (inactive) slot still needs,
// as a slot left behind for too long under max_slot_wal_keep_size is. The
// setting is server-wide, so it is lowered only while this runs, and reset
// in a cleanup too in case the test dies half-way.
func (e *slotEnv) invalidate(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	reset := func() error {
		if _, err := e.pg.Exec(ctx, "ALTER SYSTEM RESET max_slot_wal_keep_size"); err != nil {
			return err
		}
		_, err := e.pg.Exec(ctx, "SELECT pg_reload_conf()")
		return err
	}
	t.Cleanup(func() {
		if err := reset(); err != nil {
			t.Errorf("reset max_slot_wal_keep_size: %v", err)
		}
	})
	// Other tests' captures share the server: let their slots catch up (or
	// finish) first, so that only an idle slot can fall behind.
	_ = testenv.Eventually(ctx, 2*time.Minute, func(ctx context.Context) error {
		var busy int
		err := e.pg.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE active AND pg_current_wal_insert_lsn() - restart_lsn > 512 * 1024").Scan(&busy)
		if err == nil && busy > 0 {
			err = fmt.Errorf("%d active slots are behind", busy)
		}
		return err
	})
	e.exec(t, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
	e.exec(t, "SELECT pg_reload_conf()")
	scratch := testenv.Name("walfill")
	e.exec(t, fmt.Sprintf("CREATE TABLE %s (n int)", scratch))
	defer func() { _, _ = e.pg.Exec(ctx, "DROP TABLE IF EXISTS "+scratch) }()
	err := testenv.Eventually(ctx, 60*time.Second, func(ctx context.Context) error {
		// Each switch after a write starts a new 16 MB segment, far past
		// the 1 MB the slot may hold; the checkpoint removes the old ones.
		for range 3 {
			if _, err := e.pg.Exec(ctx, fmt.Sprintf("INSERT INTO %s VALUES (1)", scratch)); err != nil {
				return err
			}
			if _, err := e.pg.Exec(ctx, "SELECT pg_switch_wal()"); err != nil {
				return err
			}
		}
		if _, err := e.pg.Exec(ctx, "CHECKPOINT"); err != nil {
			return err
		}
		var status *string
		if err := e.pg.QueryRow(ctx, "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&status); err != nil {
			return err
		}
		if status == nil || *status != "lost" {
			return fmt.Errorf("slot %s has wal_status %v", e.slot, status)
		}
		return nil
	})
	if rerr := reset(); rerr != nil {
		t.Errorf("reset max_slot_wal_keep_size: %v", rerr)
	}
	if err != nil {
		t.Fatalf("invalidate slot %s: %v", e.slot, err)
	}
}

// TestIntegrationSlotInvalidated: a slot PostgreSQL invalidated must stop
// capture with ErrSlotInvalidated and the way to recover, never stream on
// from a position whose WAL is gone, and `walhouse capture` must exit with
// that message and a failure status.
func TestIntegrationSlotInvalidated(t *testing.T) {
	e := newSlotEnv(t)
	e.invalidate(t)

	err := e.runOnce(t, 60*time.Second, e.opts()...)
	if !errors.Is(err, capture.ErrSlotInvalidated) {
		t.Fatalf("Run on an invalidated slot: err = %v, want ErrSlotInvalidated", err)
	}
	for _, want := range []string{e.slot, "wal_status=lost", "pg_drop_replication_slot('" + e.slot + "')"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if !e.slotExists(t) {
		t.Error("capture dropped the invalidated slot itself; the operator must decide")
	}

	bin, err := testenv.BuildBinary(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.Start(t, "capture", bin, "capture", "--pg", e.env.PG, "--kafka", e.env.Kafka,
		"--slot", e.slot, "--publication", e.pub, "--tables", e.table, "--topic-prefix", e.prefix)
	err = p.Wait(60 * time.Second)
	var exit interface{ ExitCode() int }
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("walhouse capture on an invalidated slot: %v, want exit status 1\n%s", err, p.Output())
	}
	if out := p.Output(); !strings.Contains(out, "walhouse capture: replication slot was invalidated: slot "+e.slot) {
		t.Errorf("walhouse capture output does not explain the invalidation:\n%s", out)
	}
}

// TestIntegrationSlotDroppedWithSavedState: a slot dropped after capture
// streamed from it loses the changes made in between, like an invalidated
// one. With slot creation disabled, capture must say the slot is missing
// and stop.
func TestIntegrationSlotDroppedWithSavedState(t *testing.T) {
	e := newSlotEnv(t)
	ctx := context.Background()
	if err := testenv.DropSlot(ctx, e.pg, e.slot); err != nil {
		t.Fatal(err)
	}
	// Changes nobody captures: they are lost to ClickHouse.
	e.exec(t, fmt.Sprintf("DELETE FROM %s WHERE id = 3", e.table))

	err := e.runOnce(t, 60*time.Second, e.opts(capture.WithoutSlotCreation())...)
	if err == nil || !strings.Contains(err.Error(), "replication slot "+e.slot+" does not exist") {
		t.Fatalf("Run without slot creation on a dropped slot: err = %v, want a missing-slot error", err)
	}
	if e.slotExists(t) {
		t.Fatal("capture created the slot although slot creation is disabled")
	}

	t.Run("creation allowed", func(t *testing.T) {
		// Saved progress shows the slot was streamed from: recreating it
		// silently would leave ClickHouse with rows deleted meanwhile (a
		// snapshot has version 0 and cannot remove or override them).
		err := e.runOnce(t, 60*time.Second, e.opts()...)
		if !errors.Is(err, capture.ErrSlotInvalidated) || !strings.Contains(err.Error(), "--resnapshot") {
			t.Fatalf("Run on a dropped slot with saved progress: err = %v, want ErrSlotInvalidated naming --resnapshot", err)
		}
		if e.slotExists(t) {
			t.Fatal("capture recreated a dropped slot although it had streamed from it")
		}
		// The documented recovery: resnapshot the tables (after dropping
		// their ClickHouse tables) from a new slot.
		stop := run(t, e.env, e.prefix, e.opts(capture.WithResnapshot(e.table))...)
		defer stop()
		if !e.slotExists(t) {
			t.Fatal("capture --resnapshot did not create a new slot")
		}
	})
}
