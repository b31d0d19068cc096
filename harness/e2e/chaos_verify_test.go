package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/verify"
)

// divergence injects differences into ClickHouse behind walhouse's back, in
// rows of a tenant the workload never writes: a row deleted there, a value
// changed there, a row only there, a tombstone lost, a tombstone written
// there. Then, while the workload writes to every other tenant, walhouse
// verify must find exactly those rows, round after round (no false
// positive), and --repair must make them equal; the scenario's exact
// comparison of ClickHouse FINAL with PostgreSQL then follows as for every
// other. Nothing restarts a service.
func (c *chaos) divergence() {
	c.startCapture("")
	c.startSink("")
	qt, q := c.sinkTable.quoted, fmt.Sprintf("`%s`.`%s`", c.database, c.sinkTable.name)
	c.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, amount, status, qty, note, updated_at)
		SELECT 'verify', g, g * 0.5, 'v', g, 'n' || g, '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second' FROM generate_series(1, 10) g`, qt))
	c.waitCH(fmt.Sprintf("SELECT count() FROM %s FINAL WHERE tenant_id = 'verify'", q), 10)
	c.exec(fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = 'verify' AND id = 3`, qt))
	c.waitCH(fmt.Sprintf("SELECT count() FROM %s WHERE tenant_id = 'verify' AND id = 3 AND _is_deleted = 1", q), 1)

	// Before the workload holds merges: mutations need them.
	mut := ch.Settings{"mutations_sync": 2}
	lost := fmt.Sprintf("`%s`.lost_tombstone", c.database)
	c.chExec(fmt.Sprintf("CREATE TABLE %s ENGINE = Memory AS SELECT * FROM %s WHERE tenant_id = 'verify' AND id = 3 AND _is_deleted = 1", lost, q), nil)
	c.chExec(fmt.Sprintf("ALTER TABLE %s DELETE WHERE tenant_id = 'verify' AND id = 3 AND _is_deleted = 1", q), mut)
	c.chExec(fmt.Sprintf("INSERT INTO %s (tenant_id, id, status, updated_at, _version, _is_deleted) SELECT tenant_id, id, 'lost delete', updated_at, _version - 1, 0 FROM %s", q, lost), nil)
	c.chExec(fmt.Sprintf("ALTER TABLE %s DELETE WHERE tenant_id = 'verify' AND id = 1", q), mut)
	c.chExec(fmt.Sprintf("ALTER TABLE %s UPDATE status = 'tampered' WHERE tenant_id = 'verify' AND id = 2", q), mut)
	c.chExec(fmt.Sprintf("INSERT INTO %s (tenant_id, id, status, updated_at, _version, _is_deleted) VALUES ('verify', 1000, 'ghost', now64(6), 1, 0)", q), nil)
	c.chExec(fmt.Sprintf("INSERT INTO %s (tenant_id, id, updated_at, _version, _is_deleted) SELECT tenant_id, id, updated_at, _version + 1, 1 FROM %s FINAL WHERE tenant_id = 'verify' AND id = 4", q, q), nil)
	c.faults += 5
	want := []string{
		"verify/1 missing_in_clickhouse ",
		"verify/1000 only_in_clickhouse ",
		"verify/2 values_differ status",
		"verify/3 only_in_clickhouse ",
		"verify/4 deleted_in_clickhouse ",
	}

	// Paced, so that every round runs while a share of the workload writes.
	w := c.startWorkload(c.cfg.each, true)
	v, err := verify.New(c.env.PG, c.ch, verify.WithDatabase(c.database), verify.WithBucketRows(500), verify.WithLoadWait(3*time.Minute))
	if err != nil {
		c.t.Fatal(err)
	}
	src := record.Source{Schema: "public", Table: c.sinkTable.name}
	rounds := 10
	if c.cfg.quick {
		rounds = 3
	}
	var res verify.TableResult
	for round := range rounds {
		w.allow(c.cfg.each / int64(rounds))
		if res, err = v.Verify(context.Background(), src); err != nil {
			c.t.Fatalf("verify round %d: %v", round, err)
		}
		if got := found(res); !slices.Equal(got, want) {
			c.t.Fatalf("verify round %d (the workload at %d of %d changes) found\n%s\nwant\n%s", round, w.changes.Load(), w.total, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		c.t.Logf("verify round %d: %d rows, %d buckets (%d split), %d changed since, %s, workload at %d changes", round, res.RowsChecked, res.Buckets, res.SplitBuckets, res.ChangedSince, res.Duration, w.changes.Load())
	}
	if err := v.Repair(context.Background(), src, &res); err != nil {
		c.t.Fatalf("repair: %v", err)
	}
	for _, m := range res.Mismatches {
		if !m.Repaired {
			c.t.Errorf("%s/%s (%s) not repaired", m.Tenant, m.Key[0].Value, m.Kind)
		}
	}
	w.finish(c.t)
	if res, err = v.Verify(context.Background(), src); err != nil || len(res.Mismatches) != 0 {
		c.t.Fatalf("verify after the repair: %v, found %v", err, found(res))
	}
}

// waitCH waits until query's count is want.
func (c *chaos) waitCH(query string, want int64) {
	c.t.Helper()
	err := testenv.Eventually(context.Background(), 2*time.Minute, func(ctx context.Context) error {
		var n uint64
		if err := c.ch.QueryRow(ctx, query).Scan(&n); err != nil {
			return err // the sink may not have created the table yet
		}
		if int64(n) != want {
			return fmt.Errorf("%s: %d, want %d", query, n, want)
		}
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
}
