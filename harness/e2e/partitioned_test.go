package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A partitioned table is captured as one table, under its root's name: the
// snapshot copies every partition's rows, and changes to any partition, an
// update that moves a row to another partition included, reach the one
// ClickHouse table. ClickHouse equals PostgreSQL after the snapshot and
// after the changes.
func TestIntegrationPartitionedTable(t *testing.T) {
	p := newPipeline(t)
	name, qt := p.table("parted", `(tenant_id text NOT NULL, id bigint NOT NULL, note text, PRIMARY KEY (tenant_id, id)) PARTITION BY RANGE (id)`)
	part := func(suffix string) string { return pgx.Identifier{name + "_" + suffix}.Sanitize() }
	p.exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM (0) TO (1000)`, part("low"), qt))
	// A sub-partitioned partition: its leaves are what the snapshot reads.
	p.exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM (1000) TO (100000) PARTITION BY LIST (tenant_id)`, part("high"), qt))
	p.exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES IN ('acme')`, part("high_acme"), part("high")))
	p.exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s DEFAULT`, part("high_other"), part("high")))
	p.exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s DEFAULT`, part("rest"), qt))
	// Rows in every partition before capture starts: the snapshot's.
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT t, g, 'before ' || g FROM generate_series(1, 3000, 7) g, (VALUES ('acme'), ('globex')) AS v(t)`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('acme', 500000, 'in the default partition')`, qt))

	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(note, '<null>') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(note, '<null>') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY 1, id", p.database, name)

	// One-page chunks: several per leaf, read in parallel.
	capture := killAtEnd(t, p.runCapture(p.captureArgs([]string{name}, "--snapshot-chunk-pages", "1", "--snapshot-workers", "3")))
	sink := p.sink()
	p.converge(pgQuery, chQuery, capture, sink)
	if !regexp.MustCompile(`msg=complete .*rows=859`).MatchString(capture.Output()) {
		t.Errorf("the snapshot did not report 859 rows:\n%s", capture.Output())
	}
	st, err := p.snapshotState(context.Background(), sinkTable{name: name})
	if err != nil || st == nil || st.Chunks < 8 {
		// Four leaves of a few pages each, in one-page chunks.
		t.Errorf("snapshot plan %+v (%v), want the leaves split into at least 8 chunks", st, err)
	}
	if strings.Contains(capture.Output(), "joined the stream") {
		t.Errorf("a partition was taken for a table of its own:\n%s", capture.Output())
	}

	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT t, g, 'streamed ' || g FROM generate_series(3001, 3100) g, (VALUES ('acme'), ('globex')) AS v(t)`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 'acme', g, 'low, streamed' FROM generate_series(2, 50, 7) g`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET note = note || ' (updated)' WHERE id %% 5 = 1`, qt))
	// Moves rows from the low partition to the high one: a key change.
	p.exec(fmt.Sprintf(`UPDATE %s SET id = id + 200000 WHERE id < 100 AND tenant_id = 'globex'`, qt))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 11 = 3`, qt))
	p.converge(pgQuery, chQuery, capture, sink)

	// A table filled on its own, then attached: ATTACH PARTITION writes no
	// row changes, so its rows can only reach ClickHouse by a copy.
	p.exec(fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`, part("attached"), qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT t, g, 'attached ' || g FROM generate_series(1000000, 1000400) g, (VALUES ('acme'), ('globex')) AS v(t)`, part("attached")))
	p.exec(fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (1000000) TO (2000000)`, qt, part("attached")))
	p.exec(fmt.Sprintf(`UPDATE %s SET note = note || ' (changed after the attach)' WHERE id %% 10 = 0 AND id >= 1000000`, qt))
	p.converge(pgQuery, chQuery, capture, sink)
	if !strings.Contains(capture.Output(), "partition attached") {
		t.Errorf("capture did not log the attached partition:\n%s", capture.Output())
	}

	// One ClickHouse table, named after the root; none for the partitions.
	for _, suffix := range []string{"low", "high", "high_acme", "high_other", "rest", "attached"} {
		if n := p.chInt(fmt.Sprintf("SELECT count() FROM system.tables WHERE database = '%s' AND name = '%s'", p.database, name+"_"+suffix)); n != 0 {
			t.Errorf("ClickHouse has a table for partition %s_%s", name, suffix)
		}
	}
	if strings.Contains(capture.Output(), "level=ERROR") {
		t.Errorf("capture logged errors:\n%s", capture.Output())
	}
}

// A publication made by hand without publish_via_partition_root sends a
// partitioned table's partitions as tables of their own. Capture must
// accept the table named with --tables (it is in the publication, though
// pg_publication_tables lists only its partitions), say in a warning what
// that publication does and how to change it, and capture the partitions
// as it warned: ClickHouse gets one table per partition.
func TestIntegrationPartitionsPublishedAsTables(t *testing.T) {
	p := newPipeline(t)
	name, qt := p.table("leafpub", `(tenant_id text NOT NULL, id bigint NOT NULL, PRIMARY KEY (tenant_id, id)) PARTITION BY RANGE (id)`)
	p.exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM (0) TO (100)`, pgx.Identifier{name + "_a"}.Sanitize(), qt))
	p.exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM (100) TO (200)`, pgx.Identifier{name + "_b"}.Sanitize(), qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 'acme', g FROM generate_series(1, 150) g`, qt))
	p.exec(fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s`, pgx.Identifier{p.pub}.Sanitize(), qt))

	capture := killAtEnd(t, p.runCapture(p.captureArgs([]string{name})))
	waitLog(t, capture, "publish_via_partition_root", name+"_a", name+"_b")
	sink := p.sink()
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text FROM %s WHERE id >= 100 ORDER BY 1, 2`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY 1, 2", p.database, name+"_b")
	p.converge(pgQuery, chQuery, capture, sink)
}

// A partition attached while capture is stopped brings rows the WAL never
// carried, and capture cannot have watched the attach: at its next start it
// must find the leaf missing from the leaves its snapshot plan saved, and
// copy it.
func TestIntegrationPartitionAttachedWhileStopped(t *testing.T) {
	p := newPipeline(t)
	name, qt := p.table("attoff", `(tenant_id text NOT NULL, id bigint NOT NULL, note text, PRIMARY KEY (tenant_id, id)) PARTITION BY RANGE (id)`)
	part := func(suffix string) string { return pgx.Identifier{name + "_" + suffix}.Sanitize() }
	// Made on its own and attached later: the root's drop may not take it along.
	t.Cleanup(func() { _, _ = p.pg.Exec(context.Background(), "DROP TABLE IF EXISTS "+part("later")) })
	p.exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM (0) TO (1000)`, part("first"), qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 'acme', g, 'first ' || g FROM generate_series(1, 500) g`, qt))
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(note, '<null>') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(note, '<null>') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY 1, id", p.database, name)

	capture := p.runCapture(p.captureArgs([]string{name}))
	sink := killAtEnd(t, p.sink())
	p.converge(pgQuery, chQuery, capture, sink)
	capture.Stop()

	p.exec(fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`, part("later"), qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT t, g, 'later ' || g FROM generate_series(1000, 1300) g, (VALUES ('acme'), ('globex')) AS v(t)`, part("later")))
	p.exec(fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (1000) TO (2000)`, qt, part("later")))

	capture = killAtEnd(t, p.runCapture(p.captureArgs([]string{name})))
	p.converge(pgQuery, chQuery, capture, sink)
	if !strings.Contains(capture.Output(), "partition attached") {
		t.Errorf("capture did not log the partition attached while it was stopped:\n%s", capture.Output())
	}
}
