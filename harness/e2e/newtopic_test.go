package e2e

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
)

// seriesForcedRefreshes counts the sink's metadata refreshes forced by a
// new schema registry entry.
const seriesForcedRefreshes = "walhouse_sink_metadata_refreshes_forced_total"

// TestIntegrationJoiningTableForcesSinkRefresh: walhouse sink follows the
// schema registry, so a table that joins while everything runs, with
// columns of its own, makes capture register a schema after creating the
// table's topic, and the sink force its metadata refresh for it, and the
// table's rows reach ClickHouse. The sink's 1 s periodic refresh would
// find the topic too: the test observes the mechanism (the counter of
// forced refreshes), never the time it took.
func TestIntegrationJoiningTableForcesSinkRefresh(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	first, qf := p.table("first", `(tenant_id text, id int, v int, PRIMARY KEY (tenant_id, id))`)
	joined, qj := p.table("joined", `(tenant_id text, id int, note text, PRIMARY KEY (tenant_id, id))`)
	metrics := testenv.FreeAddr(t)
	capture := p.runCapture(p.captureArgs([]string{first}))
	sink := p.startSink("--dedup-addr", "off", "--metrics-addr", metrics)

	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t1', 1, 1)`, qf))
	p.converge(fmt.Sprintf(`SELECT tenant_id, id::text, v::text FROM %s ORDER BY 1, 2`, qf),
		fmt.Sprintf("SELECT tenant_id, toString(id), toString(v) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY 1, id", p.database, first), capture, sink)
	// The first table's schema is the registry's one entry: one refresh,
	// whenever the watch read it.
	if got := waitMetric(t, metrics, seriesForcedRefreshes, 1, capture, sink); got != 1 {
		t.Fatalf("%s = %v with one registry entry, want 1", seriesForcedRefreshes, got)
	}

	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, pgx.Identifier{p.pub}.Sanitize(), qj))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t1', 1, 'first row')`, qj))
	p.converge(fmt.Sprintf(`SELECT tenant_id, id::text, note FROM %s ORDER BY 1, 2`, qj),
		fmt.Sprintf("SELECT tenant_id, toString(id), note FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY 1, id", p.database, joined), capture, sink)
	waitMetric(t, metrics, seriesForcedRefreshes, 2, capture, sink)
}
