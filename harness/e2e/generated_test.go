package e2e

import (
	"fmt"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
)

// TestIntegrationGeneratedColumns captures a table with a stored generated
// column, which pgoutput does not send (before PostgreSQL 18, and walhouse
// leaves out a table whose publication sends it): the ClickHouse table has
// every other column, copied and streamed. A MATERIALIZED column an operator
// adds by hand in its place (docs/limits.md) is computed by ClickHouse and
// left alone by the sink, also across a schema change: FINAL must equal
// PostgreSQL, the generated column included.
func TestIntegrationGeneratedColumns(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	table, qt := p.table("gen", `(tenant_id text, id int, a int, g int GENERATED ALWAYS AS (a * 2) STORED, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, a) SELECT 't', i, i FROM generate_series(1, 5) i`, qt))
	capt := p.startCapture(table)
	sink := p.startSink()
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, a) SELECT 't', i, i FROM generate_series(6, 10) i`, qt))
	p.convergeWithin(time.Minute, fmt.Sprintf(`SELECT tenant_id, id::text, a::text FROM %s ORDER BY 1, 2`, qt),
		fmt.Sprintf("SELECT tenant_id, toString(id), toString(a) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY 1, 2", p.database, table), capt, sink)
	if n := p.chInt(fmt.Sprintf("SELECT count() FROM system.columns WHERE database = '%s' AND table = '%s' AND name = 'g'", p.database, table)); n != 0 {
		t.Errorf("ClickHouse has the generated column g (%d), which pgoutput does not send", n)
	}

	p.chExec(fmt.Sprintf("ALTER TABLE `%s`.`%s` ADD COLUMN g Nullable(Int32) MATERIALIZED a * 2", p.database, table), ch.Settings{})
	p.exec(fmt.Sprintf(`UPDATE %s SET a = a + 100 WHERE id %% 2 = 0`, qt))
	p.exec(`ALTER TABLE ` + qt + ` ADD COLUMN note text`)
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, a, note) SELECT 't', i, i, 'new' FROM generate_series(11, 15) i`, qt))
	p.convergeWithin(time.Minute, fmt.Sprintf(`SELECT tenant_id, id::text, a::text, g::text, coalesce(note, 'NULL') FROM %s ORDER BY 1, 2`, qt),
		fmt.Sprintf("SELECT tenant_id, toString(id), toString(a), toString(g), ifNull(note, 'NULL') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY 1, 2", p.database, table), capt, sink)
}
