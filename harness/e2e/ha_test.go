package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
)

// The tests of docs/ha.md, on the primary/standby pair of
// deploy/local/ha.sh (make test-ha starts it; without it they skip).

// haPipeline returns a pipeline whose PostgreSQL is the pair's primary. Its
// cleanup, registered before the pipeline's own and so run after them,
// puts the pair back as ha.sh makes it (after a failover the old primary
// comes back and the standby is copied afresh) and drops there what the
// test left: the slot, the publication, the tables.
func haPipeline(t *testing.T, ha testenv.HA) *pipeline {
	t.Helper()
	env := testenv.Require(t, "pg", "kafka", "clickhouse")
	var p *pipeline
	t.Cleanup(func() {
		ctx := context.Background()
		p.pg.Close(ctx) // the new primary's after a failover (failover)
		ha.Run(t, "start")
		conn, err := pgx.Connect(ctx, ha.Primary)
		if err != nil {
			t.Errorf("connect to the restored primary: %v", err)
			return
		}
		defer conn.Close(ctx)
		if err := testenv.DropSlot(ctx, conn, p.slot); err != nil {
			t.Errorf("drop slot %s on the restored primary: %v", p.slot, err)
		}
		_, _ = conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{p.pub}.Sanitize())
	})
	env.PG = ha.Primary
	p = newPipelineAt(t, env)
	p.dropTopicsAtEnd()
	return p
}

// connectHA connects to one server of the pair for the rest of the test.
func connectHA(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// fillSinkTable inserts n rows of both tenants with ids from 800,001,
// clear of the writer's (startWriter): what capture's initial copy reads.
func (p *pipeline) fillSinkTable(tb sinkTable, n int) {
	p.t.Helper()
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, amount, status, qty, note, updated_at)
		SELECT t, g, g * 0.5, 'copied', g %% 100, CASE WHEN g %% 7 = 0 THEN NULL ELSE 'row ' || g END,
		       '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second'
		FROM generate_series(800001, 800000 + $1) g, (VALUES ('acme'), ('globex')) AS v(t)`, tb.quoted), n)
}

// copiedRows returns how many rows capture copied into topic (version 0):
// each copy of the table adds every row again.
func (p *pipeline) copiedRows(topic string) int {
	p.t.Helper()
	n := 0
	for _, r := range p.topicRows(topic) {
		if r.Version == 0 {
			n++
		}
	}
	return n
}

// TestIntegrationHAStandbyDecoding runs capture on the physical standby
// (PostgreSQL 16+) while a writer changes the primary: the slot is the
// standby's, the initial copy reads the standby's exported snapshot, the
// publication and the heartbeats go through --primary-url. ClickHouse
// FINAL must equal PostgreSQL exactly, and lastSyncAt must pass the end of
// the writes, which only heartbeats written on the primary after them can
// do.
func TestIntegrationHAStandbyDecoding(t *testing.T) {
	ha := testenv.RequireHA(t, 16)
	p := haPipeline(t, ha)
	standby := connectHA(t, ha.Standby)
	t.Cleanup(func() {
		if err := testenv.DropSlot(context.Background(), standby, p.slot); err != nil {
			t.Errorf("drop slot %s on the standby: %v", p.slot, err)
		}
	})
	tb := p.newSinkTable()
	const copied = 5000
	p.fillSinkTable(tb, copied)
	sink := p.startSink()
	capture := testenv.Start(t, "capture", walhouseBin, p.captureArgs([]string{tb.name}, "--pg", ha.Standby, "--primary-url", ha.Primary)...)
	waitLog(t, capture, "msg=streaming")
	waitLog(t, capture, "reading from a standby")

	ctx := context.Background()
	var onStandby, onPrimary bool
	if err := standby.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND slot_type = 'logical')", p.slot).Scan(&onStandby); err != nil {
		t.Fatal(err)
	}
	if err := p.pg.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", p.slot).Scan(&onPrimary); err != nil {
		t.Fatal(err)
	}
	if !onStandby || onPrimary {
		t.Fatalf("slot %s: on the standby %v, on the primary %v; want the standby's only", p.slot, onStandby, onPrimary)
	}

	w := p.startWriter(tb)
	w.waitOps(t, 150)
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	if n := p.copiedRows(tb.topic); n != 2*copied {
		t.Errorf("capture copied %d rows from the standby's snapshot, want %d", n, 2*copied)
	}

	// lastSyncAt (the minimum over the 3 partitions) passes the end of the
	// writes only through heartbeats written after them.
	q := fmt.Sprintf("SELECT count(), min(loaded_through) FROM `%s`._walhouse_sync FINAL WHERE source_table = {t:String}", p.database)
	err := testenv.Eventually(ctx, 60*time.Second, func(ctx context.Context) error {
		if err := exited(capture, sink); err != nil {
			return err
		}
		var (
			n  uint64
			at time.Time
		)
		if err := p.ch.QueryRow(ch.Context(ctx, ch.WithParameters(ch.Parameters{"t": tb.name})), q).Scan(&n, &at); err != nil {
			return err
		}
		if n < 3 || !at.After(stopped) {
			return fmt.Errorf("%d of 3 partitions recorded, lastSyncAt %v, writes ended %v", n, at, stopped)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("heartbeats through the primary did not reach the sink: %v\n%s", err, capture.Output())
	}
}

// haCapture starts capture on the pair through ha.Either (whichever is the
// primary), reconnecting for up to two minutes, and waits until it streams.
func (p *pipeline) haCapture(ha testenv.HA, table string, extra ...string) *testenv.Proc {
	p.t.Helper()
	args := p.captureArgs([]string{table}, append([]string{"--pg", ha.Either, "--reconnect-timeout", "2m"}, extra...)...)
	capture := testenv.Start(p.t, "capture", walhouseBin, args...)
	waitLog(p.t, capture, "msg=streaming")
	return capture
}

// failover kills the primary with SIGKILL while a transaction is open on
// it, promotes the standby and makes the pipeline's PostgreSQL the new
// primary.
func (p *pipeline) failover(ha testenv.HA, tb sinkTable) {
	p.t.Helper()
	ctx := context.Background()
	open, err := p.pg.Begin(ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := open.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (tenant_id, id, status, updated_at)
		SELECT 'acme', g, 'never committed', now() FROM generate_series(2000001, 2000500) g`, tb.quoted)); err != nil {
		p.t.Fatal(err)
	}
	ha.Run(p.t, "kill-primary")
	ha.Run(p.t, "promote")
	// Closed by haPipeline's cleanup, after the pipeline's used it.
	if p.pg, err = pgx.Connect(ctx, ha.Standby); err != nil {
		p.t.Fatalf("connect to the new primary: %v", err)
	}
	p.env.PG = ha.Standby
}

// TestIntegrationHAFailover streams a mixed workload from the primary
// through a failover slot (PostgreSQL 17+), kills the primary with SIGKILL
// right after a 4,000-row transaction committed and while another is open,
// and promotes the standby. capture must reconnect to the new primary and
// stream on from the synchronized slot: the same slot (not created again),
// no second copy, and ClickHouse FINAL equal to the new primary row for
// row, with the changes made after the failover.
func TestIntegrationHAFailover(t *testing.T) {
	ha := testenv.RequireHA(t, 17)
	p := haPipeline(t, ha)
	tb := p.newSinkTable()
	const copied = 2000
	p.fillSinkTable(tb, copied)
	sink := p.startSink()
	capture := p.haCapture(ha, tb.name, "--failover-slot")
	w := p.startWriter(tb)
	w.waitOps(t, 100)

	// The standby has the slot once it is synchronized and persisted.
	standby := connectHA(t, ha.Standby)
	err := testenv.Eventually(context.Background(), 90*time.Second, func(ctx context.Context) error {
		var synced bool
		err := standby.QueryRow(ctx, "SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = $1", p.slot).Scan(&synced)
		if err != nil || !synced {
			return fmt.Errorf("slot %s not synchronized to the standby yet (%v)", p.slot, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	w.waitOps(t, 50)
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, amount, status, qty, note, updated_at)
		SELECT t, g, g, 'big', 1, NULL, '2026-01-01 00:00:00+00'::timestamptz FROM generate_series(1000001, 1002000) g, (VALUES ('acme'), ('globex')) AS v(t)`, tb.quoted))
	p.failover(ha, tb)
	_ = w.stop() // its connection died with the primary

	// capture finds the new primary and streams on.
	err = testenv.Eventually(context.Background(), 120*time.Second, func(context.Context) error {
		if err := exited(capture); err != nil {
			return err
		}
		if n := strings.Count(capture.Output(), "msg=streaming"); n < 2 {
			return fmt.Errorf("capture streamed %d times", n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("capture did not stream again after the failover: %v\n%s", err, capture.Output())
	}
	// Changes on the new primary: updates of copied and streamed rows,
	// deletes, new rows.
	p.exec(fmt.Sprintf(`UPDATE %s SET status = 'after failover', qty = qty + 1 WHERE id %% 13 = 0`, tb.quoted))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 17 = 0`, tb.quoted))
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, status, updated_at)
		SELECT t, g, 'new primary', '2026-03-01 00:00:00+00' FROM generate_series(3000001, 3000300) g, (VALUES ('acme'), ('globex')) AS v(t)`, tb.quoted))
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	out := capture.Output()
	if n := strings.Count(out, "msg=\"created replication slot\""); n != 1 {
		t.Errorf("capture created the slot %d times, want once (before the failover)", n)
	}
	if n := p.copiedRows(tb.topic); n != 2*copied {
		t.Errorf("Kafka holds %d copied rows, want %d: the table was copied again after the failover", n, 2*copied)
	}
	records, distinct := p.redeliveries(tb.topic)
	t.Logf("Kafka holds %d row changes, %d distinct eventIds: %d read again from the synchronized slot", records, distinct, records-distinct)
}

// TestIntegrationHAFailoverUnsyncedSlot is the unhappy path: the slot was
// not created with --failover-slot, so the promoted standby does not have
// it. capture must stop, after reconnecting, with an error that says why
// and how to recover, rather than create a new slot and miss changes.
func TestIntegrationHAFailoverUnsyncedSlot(t *testing.T) {
	ha := testenv.RequireHA(t, 17)
	p := haPipeline(t, ha)
	tb := p.newSinkTable()
	p.fillSinkTable(tb, 100)
	capture := p.haCapture(ha, tb.name)
	p.exec(fmt.Sprintf(`UPDATE %s SET status = 'before failover' WHERE id <= 800010`, tb.quoted))
	p.failover(ha, tb)

	err := capture.Wait(120 * time.Second)
	if done, _ := capture.Exited(); !done || err == nil {
		t.Fatalf("capture did not stop with an error after the failover (%v):\n%s", err, capture.Output())
	}
	out := capture.Output()
	t.Logf("capture stopped with: %v\n%s", err, out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	for _, want := range []string{"msg=\"lost a connection; reconnecting", "slot " + p.slot + " is gone", "had not been synchronized", "--failover-slot", "--resnapshot"} {
		if !strings.Contains(out, want) {
			t.Errorf("capture's log lacks %q:\n%s", want, out)
		}
	}
	var exists bool
	if err := p.pg.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", p.slot).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("capture created slot %s on the new primary", p.slot)
	}
}
