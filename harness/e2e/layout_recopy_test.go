package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/verify"
)

// movingLayoutTable is a table whose layout sorts by a column updates
// change (region) and partitions by another (created_at), with the
// queries that compare it through the layout.
type movingLayoutTable struct {
	name, quoted     string
	config           string // the configuration file giving the layout
	pgQuery, chQuery string
}

// newMovingLayoutTable creates and fills a movingLayoutTable of n rows.
func (p *pipeline) newMovingLayoutTable(prefix string, n int) movingLayoutTable {
	p.t.Helper()
	name, quoted := p.table(prefix, `(tenant_id text NOT NULL, id int NOT NULL, region text NOT NULL, created_at timestamptz NOT NULL, amount int, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, quoted))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, (ARRAY['eu', 'us', 'ap'])[1 + i %% 3], '2026-01-01 00:00:00+00'::timestamptz + (i %% 60) * interval '1 day', i FROM generate_series(1, %d) i`, quoted, n))
	file := filepath.Join(p.t.TempDir(), "walhouse.yaml")
	cfg := fmt.Sprintf("layout:\n  public.%s:\n    order_by: [tenant_id, region, created_at, id]\n    partition_by: toYYYYMM(created_at)\n    settings: {min_age_to_force_merge_seconds: 3600}\n", name)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return movingLayoutTable{name: name, quoted: quoted, config: file,
		pgQuery: fmt.Sprintf(`SELECT tenant_id, id::text, region, (extract(epoch FROM created_at) * 1000000)::bigint::text, coalesce(amount::text, 'NULL') FROM %s AS t ORDER BY t.tenant_id, t.id, t.region`, quoted),
		chQuery: fmt.Sprintf("SELECT tenant_id, toString(id), region, toString(toUnixTimestamp64Micro(created_at)), ifNull(toString(amount), 'NULL')"+
			" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id, region", p.database, name),
	}
}

// TestIntegrationRewriteMovesSortColumn: DDL that rewrites columns the
// layout sorts and partitions by (ALTER COLUMN ... USING upper(region),
// created_at + 40 days) moves every row to another ClickHouse position
// without a row change in the WAL. The copy after the rewrite writes each
// row at its new position at the rewrite's version, which does not replace
// the version at the old one: ReplacingMergeTree collapses by sorting key
// within a partition. Capture ends the copy with done markers, and the
// sink sweeps the table at the rewrite's position, so that the old
// positions' versions do not survive FINAL. (FINAL kept both, 115 rows for
// PostgreSQL's 55, and nothing marked the table inexact.) Rows moved and
// deleted after the rewrite stream as usual; FINAL ends equal to
// PostgreSQL, row for row.
func TestIntegrationRewriteMovesSortColumn(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	tb := p.newMovingLayoutTable("rw_move", 60)
	capture := p.runCapture(append([]string{"--config", tb.config}, p.captureArgs([]string{tb.name})...))
	sink := testenv.Start(t, "sink", walhouseBin, append([]string{"--config", tb.config}, p.sinkArgs()...)...)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	// Every row has a streamed version, above a version-0 copy.
	p.exec(fmt.Sprintf(`UPDATE %s SET amount = amount + 1000`, tb.quoted))

	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN region TYPE text USING upper(region)`, tb.quoted))
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN created_at TYPE timestamptz USING created_at + interval '40 days'`, tb.quoted))
	waitLog(t, capture, "copying it again", tb.name)
	p.exec(fmt.Sprintf(`UPDATE %s SET region = 'moved' WHERE id %% 7 = 0`, tb.quoted))
	p.exec(fmt.Sprintf(`UPDATE %s SET created_at = created_at - interval '90 days' WHERE id %% 5 = 0`, tb.quoted))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 11 = 0`, tb.quoted))
	waitLog(t, sink, "swept at the rewrite's position", tb.name)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
}

// TestIntegrationRewriteSweepAfterCrash: capture crashes once the copy
// after a rewrite of a sorting column is in Kafka and before its done
// markers are sent (failpoint capture.rewrite_copied). The saved plan keeps
// the sweep due: the next start sends the markers without copying again,
// and FINAL ends equal to PostgreSQL.
func TestIntegrationRewriteSweepAfterCrash(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	tb := p.newMovingLayoutTable("rw_crash", 30)
	args := append([]string{"--config", tb.config}, p.captureArgs([]string{tb.name})...)
	env, err := exec.LookPath("env")
	if err != nil {
		t.Fatal(err)
	}
	// The pause in each copy's chunk lets the slot confirm the rewrite's
	// notice before the crash, so that the restart does not decode it (and
	// copy) again: the saved plan alone must bring the sweep.
	const point = "capture.rewrite_copied"
	capture := killAtEnd(t, testenv.Start(t, "capture (crash)", env, append([]string{"WALHOUSE_FAILPOINTS=capture.copied=pause:3s," + point + "=crash", walhouseBin}, args...)...))
	sink := testenv.Start(t, "sink", walhouseBin, append([]string{"--config", tb.config}, p.sinkArgs()...)...)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN region TYPE text USING upper(region)`, tb.quoted))
	if err := capture.Wait(90 * time.Second); err == nil || !strings.Contains(capture.Output(), "crashing at "+point) {
		t.Fatalf("capture did not crash at %s (exit: %v):\n%s", point, err, capture.Output())
	}
	p.waitSlotReleased()
	capture = killAtEnd(t, p.runCapture(args))
	waitLog(t, capture, "sent its done markers", tb.name)
	waitLog(t, sink, "swept at the rewrite's position", tb.name)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	if strings.Contains(capture.Output(), "msg=starting") {
		t.Errorf("the restarted capture copied the table again; its copy was complete:\n%s", capture.Output())
	}
}

// TestIntegrationRejoinMovesSortColumnVerified: a table whose layout sorts
// and partitions by columns updates change leaves the publication; while
// it is out, rows move (region, created_at) and are deleted; it joins again
// and is copied. The copy's rows have version 0 and cannot remove what
// ClickHouse holds (docs/limits.md), so FINAL keeps each moved row at its
// old position beside the copy at the new one, and the deleted rows: the
// table is marked inexact (walhouse_capture_tables_inexact), never silently
// wrong. walhouse verify must report exactly those rows, reading through
// the layout: also a row whose newest version is right and an older one
// stays at another position (injected here, as a rewrite left it before
// its copy was swept), which verify's check by key used to dismiss.
// --repair must then make FINAL equal PostgreSQL: it used to write
// PostgreSQL's row at its position only, leave the stale ones, and call
// them repaired. Changes after that stream as usual.
func TestIntegrationRejoinMovesSortColumnVerified(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	tb := p.newMovingLayoutTable("rj_move", 60)
	metrics := testenv.FreeAddr(t)
	capture := p.runCapture(append([]string{"--config", tb.config}, p.captureArgs([]string{tb.name}, "--metrics-addr", metrics)...))
	sink := testenv.Start(t, "sink", walhouseBin, append([]string{"--config", tb.config}, p.sinkArgs()...)...)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	pub := pgx.Identifier{p.pub}.Sanitize()
	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s DROP TABLE %s`, pub, tb.quoted))
	waitLog(t, capture, "table left the publication", tb.name)
	p.exec(fmt.Sprintf(`UPDATE %s SET region = 'moved' WHERE id IN (3, 6)`, tb.quoted))
	p.exec(fmt.Sprintf(`UPDATE %s SET created_at = created_at + interval '40 days' WHERE id IN (5, 6)`, tb.quoted))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id IN (11, 22)`, tb.quoted))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 5000, 'eu', '2026-02-01 00:00:00+00', 1)`, tb.quoted))
	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, pub, tb.quoted))
	p.waitCount(fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 AND id = 5000", p.database, tb.name), 1, "inserted while out")
	waitMetric(t, metrics, inexactSeries(tb.name), 1, capture)
	// Streamed after the rejoin: a move with its delete of the old position.
	p.exec(fmt.Sprintf(`UPDATE %s SET region = 'again' WHERE id IN (4, 8)`, tb.quoted))
	p.waitCount(fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 AND region = 'again'", p.database, tb.name), 2, "moved after the rejoin")
	// A stale older version at another position of a row whose newest
	// version (streamed, above 0) is right.
	q := "`" + p.database + "`.`" + tb.name + "`"
	p.chExec(fmt.Sprintf("INSERT INTO %s SELECT * REPLACE ('stale' AS region, _version - 1 AS _version) FROM %s FINAL WHERE id = 8", q, q), nil)

	v, err := verify.New(p.env.PG, p.ch, verify.WithDatabase(p.database), verify.WithBucketRows(20), verify.WithLoadWait(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	src := record.Source{Schema: "public", Table: tb.name}
	res, err := v.Verify(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"t0/22 only_in_clickhouse ",
		"t0/6 values_differ region,created_at",
		"t0/8 values_differ region",
		"t1/11 only_in_clickhouse ",
		"t1/3 values_differ region",
		"t1/5 values_differ created_at",
	}
	if got := found(res); !slices.Equal(got, want) {
		t.Fatalf("verify found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := v.Repair(context.Background(), src, &res); err != nil {
		t.Fatal(err)
	}
	for _, m := range res.Mismatches {
		if !m.Repaired {
			t.Errorf("%s/%s %s not repaired", m.Tenant, m.Key[0].Value, m.Kind)
		}
	}
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	p.exec(fmt.Sprintf(`UPDATE %s SET region = 'later', created_at = created_at - interval '20 days' WHERE id %% 4 = 1`, tb.quoted))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 9 = 0`, tb.quoted))
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
}
